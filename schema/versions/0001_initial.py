"""The first schema: the tables of docs/design.md §1, the app-side contract, the worker's
bookkeeping.

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("memory_note", sa.Text, nullable=True),
        sa.Column("memory_on", sa.Integer, nullable=False, server_default="1"),
    )
    op.create_table(
        "personas",
        sa.Column("slug", sa.Text, primary_key=True),
        sa.Column("name", sa.Text, nullable=False),
    )
    op.create_table(
        "rooms",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("incognito", sa.Integer, nullable=False, server_default="0"),
        sa.Column("kit_mounted", sa.Integer, nullable=False, server_default="0"),
        sa.Column("archived", sa.Integer, nullable=False, server_default="0"),
        sa.Column("topic", sa.Text, nullable=True),
        sa.Column("topic_embedding", sa.LargeBinary, nullable=True),
        sa.Column("created", sa.Text, nullable=False),
    )
    op.create_table(
        "room_members",
        sa.Column(
            "room_id", sa.Text, sa.ForeignKey("rooms.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("member", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("room_id", "member"),
    )
    op.create_table(
        "lines",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "room_id", sa.Text, sa.ForeignKey("rooms.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("speaker", sa.Text, nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("created", sa.Text, nullable=False),
    )
    op.create_index("ix_lines_room_id_id", "lines", ["room_id", "id"])
    op.create_table(
        "notices",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("user_id", sa.Integer, nullable=False),
        sa.Column("persona", sa.Text, nullable=False),
        sa.Column("room_id", sa.Text, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("row_ids", sa.Text, nullable=False),
        sa.Column("spell_key", sa.Text, nullable=False),
        sa.Column("created", sa.Text, nullable=False),
        sa.Column("undone", sa.Integer, nullable=False, server_default="0"),
        sa.UniqueConstraint("spell_key", "user_id", name="uq_notices_spell_user"),
    )
    op.create_index("ix_notices_user_id", "notices", ["user_id"])
    op.create_table(
        "persona_memory",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("persona", sa.Text, nullable=False),
        sa.Column("subject", sa.Text, nullable=False),
        sa.Column("counterpart", sa.Text, nullable=True),
        sa.Column("witnessed", sa.Text, nullable=False),
        sa.Column("room_id", sa.Text, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("importance", sa.Integer, nullable=False),
        sa.Column("valid_from", sa.Text, nullable=True),
        sa.Column("valid_to", sa.Text, nullable=True),
        sa.Column("closed_by", sa.Integer, nullable=True),
        sa.Column("evidence", sa.Text, nullable=False),
        sa.Column("created", sa.Text, nullable=False),
        sa.Column("last_recalled", sa.Text, nullable=True),
        sa.Column("recall_count", sa.Integer, nullable=False, server_default="0"),
        sa.Column("embedding", sa.LargeBinary, nullable=True),
    )
    op.create_index(
        "ix_persona_memory_open", "persona_memory", ["persona", "valid_to", "subject"]
    )
    op.create_index("ix_persona_memory_subject", "persona_memory", ["subject"])
    op.create_table(
        "persona_memory_mute",
        sa.Column("user_id", sa.Integer, nullable=False),
        sa.Column("persona", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("user_id", "persona"),
    )
    op.create_table(
        "cursors",
        sa.Column("persona", sa.Text, nullable=False),
        sa.Column("room_id", sa.Text, nullable=False),
        sa.Column("last_line_id", sa.Integer, nullable=False),
        sa.Column("updated", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("persona", "room_id"),
    )
    op.create_table(
        "spells",
        sa.Column("persona", sa.Text, nullable=False),
        sa.Column("room_id", sa.Text, nullable=False),
        sa.Column("last_line_id", sa.Integer, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("row_ids", sa.Text, nullable=False, server_default="[]"),
        sa.Column("tokens_in", sa.Integer, nullable=False, server_default="0"),
        sa.Column("tokens_out", sa.Integer, nullable=False, server_default="0"),
        sa.Column("created", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("persona", "room_id", "last_line_id"),
    )
    op.create_index("ix_spells_status", "spells", ["status"])


def downgrade() -> None:
    for name in (
        "spells",
        "cursors",
        "persona_memory_mute",
        "persona_memory",
        "notices",
        "lines",
        "room_members",
        "rooms",
        "personas",
        "users",
    ):
        op.drop_table(name)
