"""A delete no longer drops the persona's packs: it takes its rows out of them instead.

The trigger of 0015 dropped a persona's pack and topics' cosines with any row of it deleted,
so after a human's delete, undo or clear every cold open of that persona in every process
ranked without a pack (with a topic, reading every visible row's vector by id) until a fill
wrote it again. The human's delete (`memory_worker.storage.memories.delete_rows`, the only
physical delete) now takes the deleted rows out of the pack and cosines in its own
transaction (`memory_worker.storage.read_packs.forget`): not one number of a deleted row is
kept, and the pack survives. Packs are a cache of the store: going down drops them all.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06
"""

import importlib.util
from pathlib import Path
from types import ModuleType

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None



def _made_by_0015() -> ModuleType:
    """0015's migration, whose trigger a downgrade puts back (its SQL has one home)."""
    spec = importlib.util.spec_from_file_location("_0015", Path(__file__).with_name("0015_read_packs.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS persona_read_packs_drop")
    else:
        op.execute("DROP TRIGGER IF EXISTS persona_read_packs_drop ON persona_memory")
        op.execute("DROP FUNCTION IF EXISTS persona_read_packs_drop()")


def downgrade() -> None:
    op.execute("DELETE FROM persona_read_packs")  # 0016's reader trusts no pack a delete kept
    op.execute("DELETE FROM persona_read_topics")
    made = _made_by_0015()
    if op.get_bind().dialect.name == "sqlite":
        op.execute(made.SQLITE_DROP_ON_DELETE)
    else:
        op.execute(made.POSTGRES_DROP_FUNCTION)
        op.execute(
            "CREATE TRIGGER persona_read_packs_drop AFTER DELETE ON persona_memory "
            "FOR EACH ROW EXECUTE FUNCTION persona_read_packs_drop()"
        )
