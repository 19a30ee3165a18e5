"""The daily caps (docs/design.md §2.1) read today's rows only.

`ix_persona_memory_created` (persona, created): each spell counts what its persona wrote today
(`memories.written_since`, in the extract and again in the commit). Without it that count read
every row the persona ever wrote — a cost per spell that grew with the store.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_persona_memory_created", "persona_memory", ["persona", "created"])


def downgrade() -> None:
    op.drop_index("ix_persona_memory_created", table_name="persona_memory")
