"""The New's records: the leak exam's verdicts, and the human's switch for groups.

- `exam_verdicts`: one per persona model each `memory-worker exam` measured. With
  `MW_MEMORY_SCOPE=follow` every process starts only on a passing one for the tail rule, the
  prompts and the models in force (`memory_worker.core.verdict`).
- `persona_memory_stays_private (user_id, persona)`: the human turned off "bring up what I
  told you privately when I'm in a group" for this persona: their one-to-one rows stay in
  their private chats, whatever the deployment's scope.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "persona_memory_stays_private",
        sa.Column("user_id", sa.Integer, nullable=False),
        sa.Column("persona", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("user_id", "persona"),
    )
    op.create_table(
        "exam_verdicts",
        sa.Column("id", sa.Integer, sa.Identity(), primary_key=True),
        sa.Column("created", sa.Text, nullable=False),
        sa.Column("model", sa.Text, nullable=False),
        sa.Column("passed", sa.Integer, nullable=False),
        sa.Column("record", sa.Text, nullable=False),
        sqlite_autoincrement=True,
    )


def downgrade() -> None:
    op.drop_table("exam_verdicts")
    op.drop_table("persona_memory_stays_private")
