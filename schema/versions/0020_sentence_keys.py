"""Each row keeps its sentence's key: `persona_memory.sentence_key`, indexed.

The commit's exactly-once check across audiences (`write/copies.py`) looks for open rows of the
same sentence as a candidate's. It read every open row about the spell's subjects and keyed
each through `names.sentence_key`: 18 of 21 s of a commit for a human with 100k rows about
them (benchmarks/page_path.py). Now the key is written with the text (`memories.insert_row`,
the only write of a row's text) and `ix_persona_memory_sentence` (persona, sentence_key) finds
a candidate's copies in one range.

The rows stored before are keyed here, in Python (the key's normalisation is Unicode folding no
SQL dialect has), in batches by id so a big store is never held in memory at once. On
PostgreSQL the table's own triggers are off meanwhile: each keyed row would bump its persona's
version row again in the one transaction (minutes for 200k rows, each update slower than the
last), and a key is nothing the reader's caches or the page's counters hold. SQLite keeps them
(7 s for 200k rows): its triggers cannot be switched off, only dropped.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    from memory_worker.core.names import sentence_key
    from memory_worker.storage.memories import key_sentences

    op.add_column("persona_memory", sa.Column("sentence_key", sa.Text, nullable=True))
    bind = op.get_bind()
    postgres = bind.dialect.name == "postgresql"
    if postgres:
        op.execute("ALTER TABLE persona_memory DISABLE TRIGGER USER")
    key_sentences(bind, sentence_key)
    if postgres:
        op.execute("ALTER TABLE persona_memory ENABLE TRIGGER USER")
    op.create_index("ix_persona_memory_sentence", "persona_memory", ["persona", "sentence_key"])


def downgrade() -> None:
    op.drop_index("ix_persona_memory_sentence", table_name="persona_memory")
    # Not batch_alter_table: on SQLite it copies the table, and the copy has none of its
    # triggers. SQLite (3.35 and later) and PostgreSQL both drop an unindexed column in place.
    op.execute("ALTER TABLE persona_memory DROP COLUMN sentence_key")
