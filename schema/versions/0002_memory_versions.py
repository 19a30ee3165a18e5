"""A version counter per persona, bumped by triggers on every write to persona_memory.

The reader keeps each persona's ranking columns in memory and asks this one small row whether
they are still true (read_cache.py). Triggers, not application code, bump it, so no writer —
ours, an operator's SQL, a future tool — can change a persona's rows unseen.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

SQLITE_BUMP = """
    INSERT INTO persona_memory_versions (persona, version) VALUES ({who}.persona, 1)
    ON CONFLICT (persona) DO UPDATE SET version = version + 1;
"""

POSTGRES_FUNCTION = """
CREATE OR REPLACE FUNCTION persona_memory_bump() RETURNS trigger AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        INSERT INTO persona_memory_versions (persona, version) VALUES (OLD.persona, 1)
        ON CONFLICT (persona) DO UPDATE SET version = persona_memory_versions.version + 1;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        INSERT INTO persona_memory_versions (persona, version) VALUES (NEW.persona, 1)
        ON CONFLICT (persona) DO UPDATE SET version = persona_memory_versions.version + 1;
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql
"""


def upgrade() -> None:
    op.create_table(
        "persona_memory_versions",
        sa.Column("persona", sa.Text, primary_key=True),
        sa.Column("version", sa.Integer, nullable=False),
    )
    if op.get_bind().dialect.name == "sqlite":
        for event, who in (("INSERT", ["NEW"]), ("UPDATE", ["OLD", "NEW"]), ("DELETE", ["OLD"])):
            body = "".join(SQLITE_BUMP.format(who=w) for w in who)
            op.execute(
                f"CREATE TRIGGER persona_memory_bump_{event.lower()} AFTER {event} "
                f"ON persona_memory FOR EACH ROW BEGIN {body} END"
            )
    else:
        op.execute(POSTGRES_FUNCTION)
        op.execute(
            "CREATE TRIGGER persona_memory_bump AFTER INSERT OR UPDATE OR DELETE "
            "ON persona_memory FOR EACH ROW EXECUTE FUNCTION persona_memory_bump()"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for event in ("insert", "update", "delete"):
            op.execute(f"DROP TRIGGER IF EXISTS persona_memory_bump_{event}")
    else:
        op.execute("DROP TRIGGER IF EXISTS persona_memory_bump ON persona_memory")
        op.execute("DROP FUNCTION IF EXISTS persona_memory_bump()")
    op.drop_table("persona_memory_versions")
