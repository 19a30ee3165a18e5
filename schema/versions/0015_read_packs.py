"""A room open's ranking columns, packed per persona: a cold open reads one row, not every row.

A process that does not hold a persona (its first open, after the LRU let it go, every
process after a deploy) used to read every row the room's audience may see to rank them: as
long as a bare SELECT of those rows, and with a topic every one of their embeddings too. Now
the reader keeps, per persona, its ranking columns as of one version in one blob
(`persona_read_packs`), and for each room topic it ranked against the cosine of every row, as
of a version of its own (`persona_read_topics`). A cold open reads them and re-reads only the rows the change log
names since; the reader's background threads write them (memory_worker.storage.read_packs),
the write path never does.

No text and no embedding is packed: ids, whom a row concerns, kind, importance, when last
recalled, length, and per topic one number a row. A delete still reaches them at once: the
trigger drops the persona's packs with the row, and the next open packs again.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

SQLITE_DROP_ON_DELETE = """
CREATE TRIGGER persona_read_packs_drop AFTER DELETE ON persona_memory FOR EACH ROW BEGIN
    DELETE FROM persona_read_packs WHERE persona = OLD.persona;
    DELETE FROM persona_read_topics WHERE persona = OLD.persona;
END
"""

POSTGRES_DROP_FUNCTION = """
CREATE OR REPLACE FUNCTION persona_read_packs_drop() RETURNS trigger AS $$
BEGIN
    DELETE FROM persona_read_packs WHERE persona = OLD.persona;
    DELETE FROM persona_read_topics WHERE persona = OLD.persona;
    RETURN NULL;
END $$ LANGUAGE plpgsql
"""


def upgrade() -> None:
    op.create_table(
        "persona_read_packs",
        sa.Column("persona", sa.Text, primary_key=True),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("stamp", sa.BigInteger, nullable=True),
        sa.Column("rows", sa.Integer, nullable=False),
        sa.Column("columns", sa.LargeBinary, nullable=False),
    )
    op.create_table(
        "persona_read_topics",
        sa.Column("persona", sa.Text, nullable=False),
        sa.Column("topic", sa.Text, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("stamp", sa.BigInteger, nullable=True),
        sa.Column("ids", sa.LargeBinary, nullable=False),
        sa.Column("cosines", sa.LargeBinary, nullable=False),
        sa.PrimaryKeyConstraint("persona", "topic"),
    )
    if op.get_bind().dialect.name == "sqlite":
        op.execute(SQLITE_DROP_ON_DELETE)
    else:
        op.execute(POSTGRES_DROP_FUNCTION)
        op.execute(
            "CREATE TRIGGER persona_read_packs_drop AFTER DELETE ON persona_memory "
            "FOR EACH ROW EXECUTE FUNCTION persona_read_packs_drop()"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS persona_read_packs_drop")
    else:
        op.execute("DROP TRIGGER IF EXISTS persona_read_packs_drop ON persona_memory")
        op.execute("DROP FUNCTION IF EXISTS persona_read_packs_drop()")
    op.drop_table("persona_read_topics")
    op.drop_table("persona_read_packs")
