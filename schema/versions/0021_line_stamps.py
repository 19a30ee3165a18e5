"""A line's label is stamped with the line: `line_stamps`, written by a trigger on `lines`.

A line's label was rebuilt at spell time from a history of the switches keyed by line ids
(`switch_log`, 0017). Ids lied: SQLite gave a deleted line's id again (the newest line deleted,
or a whole chat), PostgreSQL hands ids out in another order than commits, and the history held
only the changes its triggers saw (an `INSERT OR REPLACE INTO users`, an `UPDATE` of a mute's
key columns). Now the transaction that stores a line stamps it, for each persona member of the
room, with what decides its label then (docs/design.md §12):

- `readable`: the line may reach that persona's model — no kit mounted, a human speaker a
  member who lets the persona remember them (memory on, not muting it), and for a persona's
  line, every line its model had in view (the room's previous `echo_reach.lines` lines)
  readable for this persona too: a persona's line carries what its persona heard;
- `heard`: the room's human members then (JSON ids), whatever their switches;
- `label`: of them, those who let the persona remember them (JSON ids; NULL: public, a
  dispatch), for a persona's line met with the labels of the lines it had in view.

A trigger reads the committed state its transaction sees; a switch, a join or a leave later
never changes a stored stamp. Lines' ids are never given again on SQLite (AUTOINCREMENT: the
table is rebuilt). `switch_log` and its triggers are retired: nothing reads them.

`spell_views`: the rows each model call of a spell was shown, noted before the call, so the
commit meets its label with their audiences as they are at the commit (a row deleted or
narrowed while the spell ran narrows what it writes).

Lines stored before are stamped here with the switches as they are now (members who had joined
before each line, `since_line`), the same reading 0017 made for a store without history.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07
"""

import importlib.util
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

ECHO_REACH_LINES = 20  # the default of MW_ECHO_REACH_LINES; `store.init_db` writes the setting


def _uid(member: str) -> str:
    return f"CAST(substr({member}, 3) AS INTEGER)"


def _allows(user: str, persona: str) -> str:
    """SQL: the human `user` (an id expression) lets `persona` remember them now."""
    return (
        f"EXISTS (SELECT 1 FROM users u WHERE u.id = {user} AND u.memory_on = 1) "
        f"AND NOT EXISTS (SELECT 1 FROM persona_memory_mute x "
        f"WHERE x.user_id = {user} AND x.persona = {persona})"
    )


def _ids(sqlite: bool, query: str) -> str:
    """SQL: a JSON list (text) of the ids `query` selects as `uid`, ascending, without spaces
    ("[17,42]")."""
    if sqlite:
        return f"(SELECT json_group_array(uid) FROM ({query} ORDER BY uid))"
    return (
        "(SELECT '[' || coalesce(string_agg(uid::text, ',' ORDER BY uid), '') || ']' "
        f"FROM ({query}) q)"
    )


def _in_view(sqlite: bool, line: str, room: str, since: bool) -> tuple[str, str]:
    """SQL: the lines a persona's line had in view (the room's previous `echo_reach.lines`
    lines), and per persona what the echo rule reads of their stamps: how many are readable
    for it, how many have a label (not public) and those labels run together (",17,42,|,42,"),
    so a human in every one of them is found by counting, once per line rather than once per
    human."""
    before = "<" if since or sqlite else "<>"  # PostgreSQL: a later id may commit first
    lines = (
        f"SELECT v.id FROM lines v WHERE v.room_id = {room} AND v.id {before} {line} "
        "ORDER BY v.id DESC LIMIT (SELECT lines FROM echo_reach WHERE id = 1)"
    )
    segment = "',' || substr(s.label, 2, length(s.label) - 2) || ','"
    joined = f"group_concat({segment}, '|')" if sqlite else f"string_agg({segment}, '|')"
    per_persona = (
        f"SELECT s.persona, sum(s.readable) AS readable_n, count(s.label) AS labelled_n, "
        f"{joined} AS labels "
        f"FROM ({lines}) w JOIN line_stamps s ON s.room_id = {room} AND s.line_id = w.id "
        "GROUP BY s.persona"
    )
    return lines, per_persona


def stamp_select(sqlite: bool, *, echo: bool, since: bool = False) -> str:
    """The stamps of one line for each persona member of its room: a trigger's `NEW` line,
    or with `since` one of the lines stored before this migration (bound as `:line`, `:room`,
    `:speaker`), for which only the members who had joined before it count (a trigger's line
    is newer than every member).

    `echo`: for a persona's line (the echo rule: the stamps of the lines in view count too);
    else for a human's line or a dispatch.
    """
    line, room, speaker = ("NEW.id", "NEW.room_id", "NEW.speaker")
    if since:
        line, room, speaker = (":line", ":room", ":speaker")
    persona = "p.member"
    joined = f" AND h.since_line < {line}" if since else ""
    humans = (
        f"SELECT {_uid('h.member')} AS uid FROM room_members h "
        f"WHERE h.room_id = {room} AND h.member LIKE 'u:%'{joined}"
    )
    allowing = f"{humans} AND {_allows(_uid('h.member'), persona)}"
    by_persona = f"{speaker} NOT LIKE 'u:%' AND {speaker} NOT LIKE 'dispatch:%'"
    kit = f"(SELECT kit_mounted FROM rooms WHERE id = {room}) <> 0"
    source = "room_members p"
    if echo:  # every line in view readable for the persona (one without its stamp is not)
        lines, per_persona = _in_view(sqlite, line, room, since)
        source += f" LEFT JOIN ({per_persona}) e ON e.persona = p.member"
        readable = (
            f"CASE WHEN {kit} THEN 0 WHEN coalesce(e.readable_n, 0) < "
            f"(SELECT count(*) FROM ({lines}) n) THEN 0 ELSE 1 END"
        )
        needle = f"',' || CAST(a.uid AS TEXT) || ','"
        found = f"(length(e.labels) - length(replace(e.labels, {needle}, ''))) / length({needle})"
        label = _ids(
            sqlite,
            f"SELECT a.uid FROM ({allowing}) a "
            f"WHERE coalesce(e.labelled_n, 0) = 0 OR {found} = e.labelled_n",
        )
        which = by_persona
    else:
        speaker_allows = (
            f"EXISTS (SELECT 1 FROM room_members h WHERE h.room_id = {room} "
            f"AND h.member = {speaker}{joined}) AND {_allows(_uid(speaker), persona)}"
        )
        readable = (
            f"CASE WHEN {kit} THEN 0 "
            f"WHEN {speaker} LIKE 'u:%' AND NOT ({speaker_allows}) THEN 0 ELSE 1 END"
        )
        label = (
            f"CASE WHEN {speaker} LIKE 'dispatch:%' THEN NULL "
            f"ELSE {_ids(sqlite, allowing)} END"
        )
        which = f"NOT ({by_persona})"
    persona_joined = f" AND p.since_line < {line}" if since else ""
    return (
        f"SELECT {persona}, {room}, {line}, {readable}, {_ids(sqlite, humans)}, {label} "
        f"FROM {source} WHERE p.room_id = {room} AND p.member NOT LIKE 'u:%'"
        f"{persona_joined} AND {which}"
    )


INSERT = "INSERT INTO line_stamps (persona, room_id, line_id, readable, heard, label) "


def _trigger(sqlite: bool) -> None:
    body = "".join(INSERT + stamp_select(sqlite, echo=echo) + "; " for echo in (False, True))
    if sqlite:
        op.execute(f"CREATE TRIGGER line_stamp AFTER INSERT ON lines FOR EACH ROW BEGIN {body} END")
        return
    op.execute(
        "CREATE OR REPLACE FUNCTION line_stamp() RETURNS trigger AS $$ "
        f"BEGIN {body} RETURN NULL; END $$ LANGUAGE plpgsql"
    )
    op.execute(
        "CREATE TRIGGER line_stamp AFTER INSERT ON lines FOR EACH ROW EXECUTE FUNCTION line_stamp()"
    )


def _backfill(sqlite: bool) -> None:
    """Stamp the lines stored before, oldest first (a persona's line reads the stamps of the
    lines before it)."""
    bind = op.get_bind()
    found = bind.execute(sa.text("SELECT id, room_id, speaker FROM lines ORDER BY id")).all()
    each = [sa.text(INSERT + stamp_select(sqlite, echo=e, since=True)) for e in (False, True)]
    for line_id, room_id, speaker in found:
        for one in each:
            bind.execute(one, {"line": int(line_id), "room": room_id, "speaker": speaker})


def _switch_log() -> object:
    """Migration 0017, for the downgrade."""
    path = Path(__file__).with_name("0017_switch_log.py")
    spec = importlib.util.spec_from_file_location("switch_log_0017", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for name, table, *_ in _switch_log().TRIGGERS:  # type: ignore[attr-defined]
        if sqlite:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
        else:
            op.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")
            op.execute(f"DROP FUNCTION IF EXISTS {name}()")
    op.drop_table("switch_log")
    if sqlite:  # ids never given again: rebuilt with AUTOINCREMENT, the sequence at the max id
        with op.batch_alter_table(
            "lines", recreate="always", table_kwargs={"sqlite_autoincrement": True}
        ):
            pass
    op.create_table(
        "echo_reach",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("lines", sa.Integer, nullable=False),
    )
    op.execute(f"INSERT INTO echo_reach (id, lines) VALUES (1, {ECHO_REACH_LINES})")
    op.create_table(
        "line_stamps",
        sa.Column("persona", sa.Text, nullable=False),
        sa.Column("room_id", sa.Text, nullable=False),
        sa.Column(
            "line_id", sa.Integer, sa.ForeignKey("lines.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("readable", sa.Integer, nullable=False),
        sa.Column("heard", sa.Text, nullable=False),
        sa.Column("label", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint("persona", "room_id", "line_id"),
    )
    op.create_index("ix_line_stamps_line_id", "line_stamps", ["line_id"])
    op.create_table(
        "spell_views",
        sa.Column("persona", sa.Text, nullable=False),
        sa.Column("room_id", sa.Text, nullable=False),
        sa.Column("after_line", sa.Integer, nullable=False),
        sa.Column("row_id", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint("persona", "room_id", "after_line", "row_id"),
    )
    _backfill(sqlite)
    _trigger(sqlite)


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    if sqlite:
        op.execute("DROP TRIGGER IF EXISTS line_stamp")
    else:
        op.execute("DROP TRIGGER IF EXISTS line_stamp ON lines")
        op.execute("DROP FUNCTION IF EXISTS line_stamp()")
    op.drop_table("spell_views")
    op.drop_index("ix_line_stamps_line_id", table_name="line_stamps")
    op.drop_table("line_stamps")
    op.drop_table("echo_reach")
    _switch_log().upgrade()  # type: ignore[attr-defined]
