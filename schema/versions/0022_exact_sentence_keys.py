"""Each row's sentence key is its exact sentence: `persona_memory.sentence_key` re-keyed.

Exactly-once across audiences (`write/copies.py`) folds a candidate into an open row of the
same key. The key 0020 stored kept word characters only, so "HIV+" and "HIV-", "$50k" and
"€50k", "C++" and "C#" were one sentence: a correction was never written, a group's row
closed a private one that said something else, a delete took both. `names.sentence_key` now
folds only Unicode compatibility forms, case and whitespace; every stored row is keyed again
with it, in Python, in batches by id, as 0020 keyed them (PostgreSQL's triggers off meanwhile,
for the reason 0020 gives). Rows the old key folded stay as they are: the delete path now reads
the text, not the link (`controls.deletes._same_sentence`), so a row closed by a different sentence is
reopened, never deleted, when its closer goes.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-07
"""

from collections.abc import Callable

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def _rekey(key: Callable[[str], str]) -> None:
    from memory_worker.storage.memories import key_sentences

    postgres = op.get_bind().dialect.name == "postgresql"
    if postgres:
        op.execute("ALTER TABLE persona_memory DISABLE TRIGGER USER")
    key_sentences(op.get_bind(), key)
    if postgres:
        op.execute("ALTER TABLE persona_memory ENABLE TRIGGER USER")


def upgrade() -> None:
    from memory_worker.core.names import sentence_key

    _rekey(sentence_key)


def downgrade() -> None:
    from memory_worker.core.names import words

    _rekey(lambda text: " ".join(words(text)))  # 0020's key: word characters only
