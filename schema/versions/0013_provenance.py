"""Provenance decides who may know: a row's audience from who witnessed its evidence.

- `room_members.since_line`: the room's last line id when the member joined. A member
  witnessed the lines after it, never those before; founding members (0) witnessed all.
- `memory_audience` replaces `memory_sources`: a world row's audience (`private_to`), one row
  per human, found by user. Before, a world row was on the pages of the humans whose lines it
  cited, and public once the router said a second human had confirmed it.
- `user_name_parts`: every distinctive part of each display name, folded once
  (`memory_worker.core.names`), so a text is checked against every human the store knows.

Rows written before: a world row's audience becomes the humans who were in its room when it
formed (`witnessed`), or the narrower `private_to` it already had. No line was a dispatch
before this, so no world row stays public: a row the old rules made public on a model's word
goes back to the people who heard it.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04
"""

import json

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    from memory_worker.core.names import name_parts

    op.add_column(
        "room_members",
        sa.Column("since_line", sa.Integer, nullable=False, server_default="0"),
    )
    op.create_table(
        "memory_audience",
        sa.Column(
            "row_id",
            sa.Integer,
            sa.ForeignKey("persona_memory.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("user_id", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint("row_id", "user_id"),
    )
    op.create_index("ix_memory_audience_user_id", "memory_audience", ["user_id"])
    op.create_table(
        "user_name_parts",
        sa.Column("part", sa.Text, nullable=False),
        sa.Column("user_id", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint("part", "user_id"),
    )
    op.create_index("ix_user_name_parts_user_id", "user_name_parts", ["user_id"])

    bind = op.get_bind()
    parts = [
        {"part": part, "user_id": int(uid)}
        for uid, name in bind.execute(sa.text("SELECT id, name FROM users"))
        for part in name_parts(name or "")
    ]
    if parts:
        bind.execute(
            sa.text("INSERT INTO user_name_parts (part, user_id) VALUES (:part, :user_id)"), parts
        )
    world = bind.execute(
        sa.text("SELECT id, witnessed, private_to FROM persona_memory WHERE subject = 'world'")
    ).all()
    for row_id, witnessed, private_to in world:
        held = json.loads(private_to) if private_to is not None else json.loads(witnessed or "[]")
        audience = sorted({int(u) for u in held})
        bind.execute(
            sa.text("UPDATE persona_memory SET private_to = :p WHERE id = :i"),
            {"p": json.dumps(audience), "i": row_id},
        )
        for uid in audience:
            bind.execute(
                sa.text("INSERT INTO memory_audience (row_id, user_id) VALUES (:r, :u)"),
                {"r": row_id, "u": uid},
            )
    op.drop_index("ix_memory_sources_user_id", table_name="memory_sources")
    op.drop_table("memory_sources")


def downgrade() -> None:
    op.create_table(
        "memory_sources",
        sa.Column(
            "row_id",
            sa.Integer,
            sa.ForeignKey("persona_memory.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("user_id", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint("row_id", "user_id"),
    )
    op.create_index("ix_memory_sources_user_id", "memory_sources", ["user_id"])
    op.execute("INSERT INTO memory_sources (row_id, user_id) SELECT row_id, user_id FROM memory_audience")
    op.drop_index("ix_user_name_parts_user_id", table_name="user_name_parts")
    op.drop_table("user_name_parts")
    op.drop_index("ix_memory_audience_user_id", table_name="memory_audience")
    op.drop_table("memory_audience")
    # Plain DROP COLUMN (SQLite ≥ 3.35), as 0010: batch mode would rebuild without triggers.
    op.execute("ALTER TABLE room_members DROP COLUMN since_line")
