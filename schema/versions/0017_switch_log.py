"""Every switch a line is judged by keeps its history: `switch_log`, written by triggers.

A spell used to read the switches (memory on, a mute, a mounted kit) when it ran, not when its
lines were said: a line said with memory off was noted once the switch flipped back, and a
listener who had memory off was its witness once she turned it on. Now each change is logged
with the store's last line id at the time (`after_line`: it holds for the lines after it) and
the value it changed from, so a line is judged with the switches of its own time
(`memory_worker.core.labels`). Triggers write the log, so every writer of the app's tables —
`controls`, the app's own SQL — keeps it.

A store migrated with switches already off has no history for them: they count as they are
now for every earlier line, the same reading the code made before.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

LAST_LINE = "(SELECT coalesce(max(id), 0) FROM lines)"

# (trigger, table, event, when, the row logged: switch, user_id, persona, room_id, was, now)
TRIGGERS = (
    (
        "switch_log_memory_on",
        "users",
        "UPDATE OF memory_on",
        "OLD.memory_on <> NEW.memory_on",
        ("'memory_on'", "NEW.id", "NULL", "NULL", "OLD.memory_on", "NEW.memory_on"),
    ),
    (
        "switch_log_mute",
        "persona_memory_mute",
        "INSERT",
        "",
        ("'mute'", "NEW.user_id", "NEW.persona", "NULL", "0", "1"),
    ),
    (
        "switch_log_unmute",
        "persona_memory_mute",
        "DELETE",
        "",
        ("'mute'", "OLD.user_id", "OLD.persona", "NULL", "1", "0"),
    ),
    (
        "switch_log_kit",
        "rooms",
        "UPDATE OF kit_mounted",
        "OLD.kit_mounted <> NEW.kit_mounted",
        ("'kit'", "NULL", "NULL", "NEW.id", "OLD.kit_mounted", "NEW.kit_mounted"),
    ),
)


def _insert(values: tuple[str, ...]) -> str:
    return (
        "INSERT INTO switch_log (switch, user_id, persona, room_id, was, now, after_line) "
        f"VALUES ({', '.join(values)}, {LAST_LINE});"
    )


def upgrade() -> None:
    op.create_table(
        "switch_log",
        sa.Column("id", sa.Integer, sa.Identity(), primary_key=True),
        sa.Column("switch", sa.Text, nullable=False),
        sa.Column("user_id", sa.Integer, nullable=True),
        sa.Column("persona", sa.Text, nullable=True),
        sa.Column("room_id", sa.Text, nullable=True),
        sa.Column("was", sa.Integer, nullable=False),
        sa.Column("now", sa.Integer, nullable=False),
        sa.Column("after_line", sa.Integer, nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_switch_log_user", "switch_log", ["user_id"])
    op.create_index("ix_switch_log_room", "switch_log", ["room_id"])
    sqlite = op.get_bind().dialect.name == "sqlite"
    for name, table, event, when, values in TRIGGERS:
        if sqlite:
            where = f"WHEN {when} " if when else ""
            op.execute(
                f"CREATE TRIGGER {name} AFTER {event} ON {table} FOR EACH ROW {where}"
                f"BEGIN {_insert(values)} END"
            )
        else:
            op.execute(
                f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger AS $$ "
                f"BEGIN {_insert(values)} RETURN NULL; END $$ LANGUAGE plpgsql"
            )
            where = f"WHEN ({when}) " if when else ""
            op.execute(
                f"CREATE TRIGGER {name} AFTER {event} ON {table} FOR EACH ROW {where}"
                f"EXECUTE FUNCTION {name}()"
            )


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for name, table, *_ in TRIGGERS:
        if sqlite:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
        else:
            op.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")
            op.execute(f"DROP FUNCTION IF EXISTS {name}()")
    op.drop_table("switch_log")
