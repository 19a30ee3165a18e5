"""Each row keeps its text folded for the search, and when it was last closed or reopened.

`persona_memory.search_text`: the page's search compared `lower(text)` with `lower(q)`, and
SQLite's lower() (and LIKE) fold ASCII only, PostgreSQL's whatever its locale knows: "CAFÉ"
found none of the "Café" lines. Now the text is folded in Python (`names.search_key`: NFKC,
then case folding) when it is written (`memories.insert_row`), and the search folds the query
the same way: case-blind in every script, on every database and locale.

`persona_memory.toggled`: when `valid_to` last changed (`memories.close`, `memories.reopen`),
in microseconds since the epoch, indexed. A page walk remembers when it began; a row about
the human toggled since then means the open-then-closed order it walks has moved under it,
and the page says the list changed instead of showing a line twice or never.

The rows stored before are folded here in batches by id, PostgreSQL's triggers off meanwhile,
as 0020 keys them (a folded text is nothing the caches or counters hold).

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

BATCH = 5_000  # ours: rows folded per read and per UPDATE batch


def upgrade() -> None:
    from memory_worker.core.names import search_key

    op.add_column("persona_memory", sa.Column("search_text", sa.Text, nullable=True))
    op.add_column("persona_memory", sa.Column("toggled", sa.BigInteger, nullable=True))
    bind = op.get_bind()
    postgres = bind.dialect.name == "postgresql"
    if postgres:
        op.execute("ALTER TABLE persona_memory DISABLE TRIGGER USER")
    read = sa.text("SELECT id, text FROM persona_memory WHERE id > :after ORDER BY id LIMIT :n")
    write = sa.text("UPDATE persona_memory SET search_text = :k WHERE id = :i")
    after = 0
    while batch := bind.execute(read, {"after": after, "n": BATCH}).all():
        bind.execute(write, [{"k": search_key(text), "i": int(i)} for i, text in batch])
        after = int(batch[-1][0])
    if postgres:
        op.execute("ALTER TABLE persona_memory ENABLE TRIGGER USER")
    op.create_index("ix_persona_memory_toggled", "persona_memory", ["toggled"])


def downgrade() -> None:
    op.drop_index("ix_persona_memory_toggled", table_name="persona_memory")
    # In place, as 0020's downgrade: a table copy would lose its triggers.
    op.execute("ALTER TABLE persona_memory DROP COLUMN toggled")
    op.execute("ALTER TABLE persona_memory DROP COLUMN search_text")
