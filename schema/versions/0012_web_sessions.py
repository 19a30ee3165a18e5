"""Server-side sessions for the human's page: sign-out ends every copy of the cookie.

Before this the signed cookie was the session: a copy taken before sign-out still worked
after it. Now the cookie names a row here, and sign-out, "sign out everywhere", expiry and a
new MW_WEB_SECRET end the row (`memory_worker.storage.web_sessions`).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "web_sessions",
        sa.Column("id_hash", sa.Text, primary_key=True),
        sa.Column("user_id", sa.Integer, nullable=False),
        sa.Column("csrf", sa.Text, nullable=False),
        sa.Column("secret_tag", sa.Text, nullable=False),
        sa.Column("created", sa.Integer, nullable=False),
        sa.Column("expires", sa.Integer, nullable=False),
    )
    op.create_index("ix_web_sessions_user_id", "web_sessions", ["user_id"])


def downgrade() -> None:
    op.drop_index("ix_web_sessions_user_id", table_name="web_sessions")
    op.drop_table("web_sessions")
