"""Each row a spell's calls were shown says whether the router was shown it.

`spell_views.by_router`: 1 for the rows the route step showed the router (its numbered
neighbours), 0 for those only the extraction saw. The commit lets a spell UPDATE or CLOSE only
a row its router was shown — the store's note, written by the step before its call, never the
queue message's word. Before this, any open row of the router's view of the same concern
passed, so a message changed on its way could close a row the model never saw.

The views already noted are spells in flight across the upgrade: they are marked as the
router's, so those spells commit as they would have before (no narrower, no wider).

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "spell_views",
        sa.Column("by_router", sa.Integer, nullable=False, server_default=sa.text("0")),
    )
    op.execute("UPDATE spell_views SET by_router = 1")


def downgrade() -> None:
    op.execute("ALTER TABLE spell_views DROP COLUMN by_router")
