"""A pack holds which rows were formed one-to-one: the packs made before it are dropped.

A human may keep what they told a persona in private out of their groups (the "stays private"
switch, under the group scope). The reader's audience index now leaves those rows out before it
ranks, not only at the gate after it — or a group's block came out short by the rows the gate
dropped. It needs one more column a row (`alone`), which a pack made before lacks; packs are a
cache of the store, so the next open packs again.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06
"""

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("DELETE FROM persona_read_packs")


def downgrade() -> None:
    op.execute("DELETE FROM persona_read_packs")  # the older reader cannot read the new packs
