"""The daily caps read today's rows about the spell's people only.

0007's `ix_persona_memory_created` (persona, created) let a spell count the rows its persona
wrote today, but all of them: a persona that talked to a thousand people today read every one
of their rows twice a spell. `memories.written_since` now asks only for the caps the spell can
meet (its present humans' and the world's), and `ix_persona_memory_day` (persona, subject,
counterpart, created) makes each of its two branches a range.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03
"""

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_persona_memory_day", "persona_memory", ["persona", "subject", "counterpart", "created"]
    )
    op.drop_index("ix_persona_memory_created", table_name="persona_memory")


def downgrade() -> None:
    op.create_index("ix_persona_memory_created", "persona_memory", ["persona", "created"])
    op.drop_index("ix_persona_memory_day", table_name="persona_memory")
