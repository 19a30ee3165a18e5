"""A parked spell's reason no longer quotes the model's answer.

Before this, a malformed answer's reason ended "; answer: " and up to 300 characters of the
answer, which may repeat what someone said; `spells.reason` is kept and shown to operators and
a human's delete never reached it. New reasons say what failed in the schema's words only
(`core.model_interfaces.describe_invalid`); this cuts the quote off the reasons already stored.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

QUOTE = "; answer: "  # how the old message began its quote (models/gemini.py before 0008)


def upgrade() -> None:
    spells = sa.table(
        "spells",
        sa.column("persona", sa.Text),
        sa.column("room_id", sa.Text),
        sa.column("last_line_id", sa.Integer),
        sa.column("reason", sa.Text),
    )
    conn = op.get_bind()
    quoted = conn.execute(
        sa.select(spells.c.persona, spells.c.room_id, spells.c.last_line_id, spells.c.reason).where(
            spells.c.reason.contains(QUOTE, autoescape=True)
        )
    ).all()
    for persona, room_id, last_line_id, reason in quoted:
        conn.execute(
            spells.update()
            .where(
                spells.c.persona == persona,
                spells.c.room_id == room_id,
                spells.c.last_line_id == last_line_id,
            )
            .values(reason=reason.split(QUOTE, 1)[0] + "; the answer is not kept")
        )


def downgrade() -> None:
    pass  # what was cut is gone, on purpose
