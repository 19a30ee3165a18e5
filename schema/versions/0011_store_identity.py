"""A store has an identity, and every version of a persona's rows a random stamp.

The reader's cache (read_cache.py) trusted a persona's counter: same number, same rows. A
store restored from a backup, or dropped and migrated again in place, counts again from its
own history, and the same number then names other rows — a row about Cara read under Dan's
header. So:

- `store_identity`: one row, a random id written when the store is made (this migration runs
  once per store: `init-db` on a new file or schema). A restore of a backup carries it; a
  store made anew gets another. The reader drops what it holds of a store whose id changed.
- `persona_memory_versions.stamp`: each bump of the counter also writes a random stamp, and
  the change log's row of that version carries the same stamp. A cached entry is fresh only
  when (version, stamp) both match; patching from the log first checks that the log's stamp
  at the held version is the held one. A restore of the same store whose counters are above,
  equal to or below the process's then never matches by chance.

The triggers are 0006's with the stamp added.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04
"""

import importlib.util
import uuid
from pathlib import Path
from types import ModuleType

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def _revision_0006() -> ModuleType:
    """0006's triggers, which this revision rewrites and its downgrade puts back."""
    path = Path(__file__).with_name("0006_memory_changes.py")
    spec = importlib.util.spec_from_file_location("mw_schema_0006", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


R0006 = _revision_0006()
CHANGES_KEPT = R0006.CHANGES_KEPT

SQLITE_BUMP_AND_LOG = f"""
    INSERT INTO persona_memory_versions (persona, version, stamp)
    VALUES ({{who}}.persona, 1, random())
    ON CONFLICT (persona) DO UPDATE SET version = version + 1, stamp = excluded.stamp;
    INSERT INTO persona_memory_changes (persona, version, row_id, stamp)
    SELECT persona, version, {{who}}.id, stamp FROM persona_memory_versions
    WHERE persona = {{who}}.persona;
    DELETE FROM persona_memory_changes WHERE persona = {{who}}.persona AND version <=
    (SELECT version FROM persona_memory_versions WHERE persona = {{who}}.persona)
    - {CHANGES_KEPT};
"""

# 53 random bits: all a double from random() holds.
POSTGRES_STAMP = "floor(random() * 9007199254740992)::bigint"

POSTGRES_BUMP_AND_LOG_BODY = f"""
        INSERT INTO persona_memory_versions AS pv (persona, version, stamp)
        VALUES ({{who}}.persona, 1, {POSTGRES_STAMP})
        ON CONFLICT (persona) DO UPDATE SET version = pv.version + 1, stamp = excluded.stamp
        RETURNING version, stamp INTO v, s;
        INSERT INTO persona_memory_changes (persona, version, row_id, stamp)
        VALUES ({{who}}.persona, v, {{who}}.id, s);
        DELETE FROM persona_memory_changes
        WHERE persona = {{who}}.persona AND version <= v - {CHANGES_KEPT};
"""

POSTGRES_BUMP_AND_LOG = f"""
CREATE OR REPLACE FUNCTION persona_memory_bump() RETURNS trigger AS $$
DECLARE
    v integer;
    s bigint;
BEGIN
    IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND OLD.persona IS DISTINCT FROM NEW.persona) THEN
{POSTGRES_BUMP_AND_LOG_BODY.format(who="OLD")}
    END IF;
    IF TG_OP <> 'DELETE' THEN
{POSTGRES_BUMP_AND_LOG_BODY.format(who="NEW")}
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql
"""


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    stamp = "random()" if sqlite else POSTGRES_STAMP
    op.create_table(
        "store_identity",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("store_id", sa.Text, nullable=False),
    )
    op.execute(
        sa.text("INSERT INTO store_identity (id, store_id) VALUES (1, :sid)").bindparams(
            sid=uuid.uuid4().hex
        )
    )
    for table in ("persona_memory_versions", "persona_memory_changes"):
        op.add_column(table, sa.Column("stamp", sa.BigInteger, nullable=True))
    # Rows from before: a stamp each, the log's row of a persona's current version the same.
    op.execute(f"UPDATE persona_memory_versions SET stamp = {stamp}")
    op.execute(
        "UPDATE persona_memory_changes SET stamp = (SELECT v.stamp FROM persona_memory_versions v"
        " WHERE v.persona = persona_memory_changes.persona"
        " AND v.version = persona_memory_changes.version)"
    )
    op.execute(f"UPDATE persona_memory_changes SET stamp = {stamp} WHERE stamp IS NULL")
    if sqlite:
        R0006._sqlite_triggers(SQLITE_BUMP_AND_LOG, R0006.SQLITE_TRIGGERS)
    else:
        op.execute(POSTGRES_BUMP_AND_LOG)  # the trigger of 0002 calls it by name


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    if sqlite:  # SQLite copies a table to drop a column: no trigger may name it meanwhile
        R0006._sqlite_triggers("", ())
    else:
        op.execute(R0006.POSTGRES_BUMP_AND_LOG)
    for table in ("persona_memory_changes", "persona_memory_versions"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("stamp")
    if sqlite:
        R0006._sqlite_triggers(R0006.SQLITE_BUMP_AND_LOG, R0006.SQLITE_TRIGGERS)
    op.drop_table("store_identity")
