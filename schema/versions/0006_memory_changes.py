"""A change log per persona: which row each version of its counter changed.

0002's triggers bump a persona's counter once per row written; the reader then knew *that*
its cached columns were stale, not *which* rows, and re-read every open row of the persona
(a second at 100,000 rows). Now each bump also logs (persona, version, row id), so a reader
behind by a few versions reads just those rows (read_cache.py). Each version has exactly one
entry, so a reader can tell a complete stretch of the log from a pruned one by counting:
(since, upto] is complete when it holds upto - since entries.

The log keeps the last CHANGES_KEPT versions of each persona — the trigger prunes as it
writes, so no job has to — and a reader further behind reads everything, as before.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

CHANGES_KEPT = 1024  # ours: versions of each persona kept; a reader further behind reads all

SQLITE_BUMP_AND_LOG = f"""
    INSERT INTO persona_memory_versions (persona, version) VALUES ({{who}}.persona, 1)
    ON CONFLICT (persona) DO UPDATE SET version = version + 1;
    INSERT INTO persona_memory_changes (persona, version, row_id)
    SELECT persona, version, {{who}}.id FROM persona_memory_versions
    WHERE persona = {{who}}.persona;
    DELETE FROM persona_memory_changes WHERE persona = {{who}}.persona AND version <=
    (SELECT version FROM persona_memory_versions WHERE persona = {{who}}.persona)
    - {CHANGES_KEPT};
"""

SQLITE_BUMP = """
    INSERT INTO persona_memory_versions (persona, version) VALUES ({who}.persona, 1)
    ON CONFLICT (persona) DO UPDATE SET version = version + 1;
"""

POSTGRES_BUMP_AND_LOG = f"""
CREATE OR REPLACE FUNCTION persona_memory_bump() RETURNS trigger AS $$
DECLARE
    v integer;
BEGIN
    IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND OLD.persona IS DISTINCT FROM NEW.persona) THEN
        INSERT INTO persona_memory_versions (persona, version) VALUES (OLD.persona, 1)
        ON CONFLICT (persona) DO UPDATE SET version = persona_memory_versions.version + 1
        RETURNING version INTO v;
        INSERT INTO persona_memory_changes (persona, version, row_id) VALUES (OLD.persona, v, OLD.id);
        DELETE FROM persona_memory_changes
        WHERE persona = OLD.persona AND version <= v - {CHANGES_KEPT};
    END IF;
    IF TG_OP <> 'DELETE' THEN
        INSERT INTO persona_memory_versions (persona, version) VALUES (NEW.persona, 1)
        ON CONFLICT (persona) DO UPDATE SET version = persona_memory_versions.version + 1
        RETURNING version INTO v;
        INSERT INTO persona_memory_changes (persona, version, row_id) VALUES (NEW.persona, v, NEW.id);
        DELETE FROM persona_memory_changes
        WHERE persona = NEW.persona AND version <= v - {CHANGES_KEPT};
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql
"""

POSTGRES_BUMP = """
CREATE OR REPLACE FUNCTION persona_memory_bump() RETURNS trigger AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        INSERT INTO persona_memory_versions (persona, version) VALUES (OLD.persona, 1)
        ON CONFLICT (persona) DO UPDATE SET version = persona_memory_versions.version + 1;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        INSERT INTO persona_memory_versions (persona, version) VALUES (NEW.persona, 1)
        ON CONFLICT (persona) DO UPDATE SET version = persona_memory_versions.version + 1;
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql
"""


# (trigger, event, the rows it bumps, when): an update within one persona — a touch, a close —
# now bumps once, not twice, so the log's 1,024 versions reach twice as far back.
SQLITE_TRIGGERS = (
    ("insert", "INSERT", ["NEW"], ""),
    ("update", "UPDATE", ["NEW"], "WHEN OLD.persona = NEW.persona"),
    ("move", "UPDATE", ["OLD", "NEW"], "WHEN OLD.persona IS NOT NEW.persona"),
    ("delete", "DELETE", ["OLD"], ""),
)
SQLITE_TRIGGERS_0002 = (
    ("insert", "INSERT", ["NEW"], ""),
    ("update", "UPDATE", ["OLD", "NEW"], ""),
    ("delete", "DELETE", ["OLD"], ""),
)


def _sqlite_triggers(bump: str, triggers: tuple[tuple[str, str, list[str], str], ...]) -> None:
    for name in ("insert", "update", "move", "delete"):
        op.execute(f"DROP TRIGGER IF EXISTS persona_memory_bump_{name}")
    for name, event, who, when in triggers:
        body = "".join(bump.format(who=w) for w in who)
        op.execute(
            f"CREATE TRIGGER persona_memory_bump_{name} AFTER {event} "
            f"ON persona_memory FOR EACH ROW {when} BEGIN {body} END"
        )


def upgrade() -> None:
    op.create_table(
        "persona_memory_changes",
        sa.Column("persona", sa.Text, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("row_id", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint("persona", "version"),
    )
    if op.get_bind().dialect.name == "sqlite":
        _sqlite_triggers(SQLITE_BUMP_AND_LOG, SQLITE_TRIGGERS)
    else:
        op.execute(POSTGRES_BUMP_AND_LOG)  # the trigger of 0002 calls it by name


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _sqlite_triggers(SQLITE_BUMP, SQLITE_TRIGGERS_0002)
    else:
        op.execute(POSTGRES_BUMP)
    op.drop_table("persona_memory_changes")
