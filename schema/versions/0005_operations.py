"""Operations (docs/design.md §10.1, §10.3, §10.10): the toast outbox, a cheap frequent sweep,
lines in commit order.

- `notices.delivered`: a toast is written with its rows in the commit's transaction and marked
  delivered once `notify_toast` handed it to the app's channel; the sweep finds the rest
  through a partial index. Notices from before this revision count as delivered.
- `ix_lines_created`: the frequent sweep looks at recent lines only.
- PostgreSQL: a line takes its id under a per-room lock held to the end of its transaction
  (a BEFORE INSERT trigger draws it from the sequence; the column has no default), so ids within a room are handed out in commit order and a spell
  that sees line N sees every earlier line of the room. Without it, a line inserted by a
  transaction still open when a later line commits would sit below a cursor that already
  passed it, never to be mined. SQLite serialises writers, so it needs nothing.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

PG_LINE_ORDER = """
CREATE OR REPLACE FUNCTION mw_lines_in_commit_order() RETURNS trigger AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('mw:lines:' || NEW.room_id));
    IF NEW.id IS NULL THEN
        NEW.id := nextval(pg_get_serial_sequence('lines', 'id'));
    END IF;
    RETURN NEW;
END
$$ LANGUAGE plpgsql
"""


def upgrade() -> None:
    with op.batch_alter_table("notices") as batch:
        batch.add_column(sa.Column("delivered", sa.Integer, nullable=False, server_default="0"))
    op.execute("UPDATE notices SET delivered = 1")
    op.create_index(
        "ix_notices_undelivered",
        "notices",
        ["created"],
        sqlite_where=sa.text("delivered = 0"),
        postgresql_where=sa.text("delivered = 0"),
    )
    op.create_index("ix_lines_created", "lines", ["created"])
    if op.get_bind().dialect.name == "postgresql":
        # The id is drawn in the trigger, after the lock, not by the column's default before it.
        op.execute("ALTER TABLE lines ALTER COLUMN id DROP DEFAULT")
        op.execute(PG_LINE_ORDER)
        op.execute(
            "CREATE TRIGGER lines_in_commit_order BEFORE INSERT ON lines "
            "FOR EACH ROW EXECUTE FUNCTION mw_lines_in_commit_order()"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS lines_in_commit_order ON lines")
        op.execute("DROP FUNCTION IF EXISTS mw_lines_in_commit_order()")
        op.execute(
            "ALTER TABLE lines ALTER COLUMN id "
            "SET DEFAULT nextval(pg_get_serial_sequence('lines', 'id'))"
        )
    op.drop_index("ix_lines_created", "lines")
    op.drop_index("ix_notices_undelivered", "notices")
    with op.batch_alter_table("notices") as batch:
        batch.drop_column("delivered")
