"""The page's counts and meter are kept by triggers: `persona_memory_counts`.

The human's page shows, per persona, how many of the rows about them are open and closed and
the characters of the open ones (the meter). It counted them on every page view, reading every
row about the human: 119 ms of a 138 ms first page at 100k rows (benchmarks/page_path.py). Now
each insert, close, reopen, edit and delete of a row, and each change of a world row's
audience (`memory_audience`), adds or takes its share from one counter per (whom it concerns,
persona), so the page reads a few counters.

A row concerns `ref` as `memory_worker.storage.memories.about_user` says: its subject, or a
`self` row's counterpart, or for a `world` row each human of its audience. A delete is counted
BEFORE the row goes, while its audience is still there (the audience's own rows leave with it
by ON DELETE CASCADE, after it is gone: their trigger then finds no row and counts nothing).
Counters are never deleted; the page shows those with a row.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

TABLE = "persona_memory_counts"


def _whom(r: str) -> str:
    """The refs a row `r` (NEW, OLD, or a table alias) concerns, as one-column rows `ref`."""
    return (
        f"SELECT CASE WHEN {r}.subject = 'self' THEN {r}.counterpart "
        f"WHEN {r}.subject = 'world' THEN NULL ELSE {r}.subject END AS ref "
        f"UNION ALL SELECT 'u:' || CAST(a.user_id AS TEXT) FROM memory_audience a "
        f"WHERE {r}.subject = 'world' AND a.row_id = {r}.id"
    )


def _shares(r: str, sign: str) -> list[str]:
    """The (open, closed, chars) a row `r` adds (sign '+') or takes ('-')."""
    is_open = f"{r}.valid_to IS NULL"
    return [
        f"{sign}(CASE WHEN {is_open} THEN 1 ELSE 0 END)",
        f"{sign}(CASE WHEN {is_open} THEN 0 ELSE 1 END)",
        f"{sign}(CASE WHEN {is_open} THEN length({r}.text) ELSE 0 END)",
    ]


UPSERT = (
    f" ON CONFLICT (ref, persona) DO UPDATE SET "
    f"open_rows = {TABLE}.open_rows + excluded.open_rows, "
    f"closed_rows = {TABLE}.closed_rows + excluded.closed_rows, "
    f"open_chars = {TABLE}.open_chars + excluded.open_chars;"
)
INTO = f"INSERT INTO {TABLE} (ref, persona, open_rows, closed_rows, open_chars) "


def _count_row(r: str, sign: str) -> str:
    """One row's share, added to or taken from its counters."""
    return (
        f"{INTO}SELECT w.ref, {r}.persona, {', '.join(_shares(r, sign))} FROM ({_whom(r)}) w "
        f"WHERE w.ref IS NOT NULL{UPSERT}"
    )


def _count_audience(a: str, sign: str) -> str:
    """A world row's share for one human joining (`a` NEW) or leaving (OLD) its audience."""
    return (
        f"{INTO}SELECT 'u:' || CAST({a}.user_id AS TEXT), m.persona, {', '.join(_shares('m', sign))} "
        f"FROM persona_memory m WHERE m.id = {a}.row_id AND m.subject = 'world'{UPSERT}"
    )


ROW_COLUMNS = "persona, subject, counterpart, text, valid_to"

# (trigger, table, timing and event, its statements)
TRIGGERS = (
    ("persona_memory_counts_insert", "persona_memory", "AFTER INSERT", _count_row("NEW", "+")),
    (
        "persona_memory_counts_update",
        "persona_memory",
        f"AFTER UPDATE OF {ROW_COLUMNS}",
        _count_row("OLD", "-") + " " + _count_row("NEW", "+"),
    ),
    ("persona_memory_counts_delete", "persona_memory", "BEFORE DELETE", _count_row("OLD", "-")),
    (
        "memory_audience_counts_insert",
        "memory_audience",
        "AFTER INSERT",
        _count_audience("NEW", "+"),
    ),
    (
        "memory_audience_counts_delete",
        "memory_audience",
        "AFTER DELETE",
        _count_audience("OLD", "-"),
    ),
)

# Every row's share at once: what the triggers keep, for the rows already stored.
RECOUNT = (
    f"{INTO}SELECT w.ref, w.persona, {', '.join(f'sum({x})' for x in _shares('w', '+'))} FROM ("
    f"SELECT CASE WHEN m.subject = 'self' THEN m.counterpart "
    f"WHEN m.subject = 'world' THEN NULL ELSE m.subject END AS ref, m.persona, m.valid_to, m.text "
    f"FROM persona_memory m UNION ALL "
    f"SELECT 'u:' || CAST(a.user_id AS TEXT), m.persona, m.valid_to, m.text "
    f"FROM memory_audience a JOIN persona_memory m ON m.id = a.row_id WHERE m.subject = 'world'"
    f") w WHERE w.ref IS NOT NULL GROUP BY w.ref, w.persona"
)


# PostgreSQL, the delete's count: every other write takes the persona's version row (its bump
# fires first: AFTER triggers run by name) before a counter; a BEFORE DELETE runs before the
# bump, so it takes the version row itself first, or a delete and a commit of one persona could
# each hold what the other waits for.
LOCK_VERSION_FIRST = (
    "PERFORM 1 FROM persona_memory_versions WHERE persona = OLD.persona FOR UPDATE; "
)


def upgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column("ref", sa.Text, nullable=False),
        sa.Column("persona", sa.Text, nullable=False),
        sa.Column("open_rows", sa.Integer, nullable=False),
        sa.Column("closed_rows", sa.Integer, nullable=False),
        sa.Column("open_chars", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("ref", "persona"),
    )
    op.execute(RECOUNT)
    sqlite = op.get_bind().dialect.name == "sqlite"
    for name, table, event, body in TRIGGERS:
        if sqlite:
            op.execute(f"CREATE TRIGGER {name} {event} ON {table} FOR EACH ROW BEGIN {body} END")
        else:
            before = event.startswith("BEFORE")
            op.execute(
                f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger AS $$ "
                f"BEGIN {LOCK_VERSION_FIRST if before else ''}{body} "
                f"RETURN {'OLD' if before else 'NULL'}; END $$ LANGUAGE plpgsql"
            )
            op.execute(
                f"CREATE TRIGGER {name} {event} ON {table} FOR EACH ROW EXECUTE FUNCTION {name}()"
            )


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for name, table, *_ in TRIGGERS:
        if sqlite:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
        else:
            op.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")
            op.execute(f"DROP FUNCTION IF EXISTS {name}()")
    op.drop_table(TABLE)
