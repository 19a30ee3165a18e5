"""The store knows its embedder: name and dimension, and a re-embedding under way.

Vectors from two models cannot be compared, so a store records the one that made its vectors
and refuses another until `memory-worker reembed` has re-embedded every row and room topic.
A store migrated with rows already in it records its embedder at the next write (the first
embedder to write claims it).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "store_embedder",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("dims", sa.Integer, nullable=False),
        sa.Column("pending_name", sa.Text, nullable=True),
        sa.Column("pending_dims", sa.Integer, nullable=True),
        sa.Column("after_row_id", sa.Integer, nullable=False, server_default="0"),
        sa.Column("after_room_id", sa.Text, nullable=False, server_default=""),
    )


def downgrade() -> None:
    op.drop_table("store_embedder")
