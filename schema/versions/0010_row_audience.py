"""Every human a row names is part of its audience; a world row learned from people stays
with them (docs/design.md §11.4, §12).

`persona_memory.named`: the humans a row's text names besides whom it concerns (JSON ids). A
row about Dan that says Cara is pregnant then shows only where Cara is in the audience too.
`persona_memory.private_to`: a world row whose evidence is people's lines stays with them
(JSON ids; NULL = public) until a second human states it independently.

Rows written before: `named` from the `u:N` ids and the full display names the store knows
in each open row's text; world rows with sources are private to those sources (a store cannot
tell which of its world rows were confirmed before this existed: the safe side is private).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04
"""

import json
import re

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_REF = re.compile(r"\bu\s*:\s*(\d+)", re.IGNORECASE)
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")


def _named(text: str, subject: str, counterpart: str | None, names: dict[str, int]) -> list[int]:
    found = {int(m) for m in _REF.findall(text)}
    words = [w.lower().removesuffix("'s") for w in _WORD.findall(text)]
    for n in (1, 2, 3):
        for i in range(len(words) - n + 1):
            uid = names.get(" ".join(words[i : i + n]))
            if uid is not None:
                found.add(uid)
    own = {subject, counterpart or ""}
    return sorted(u for u in found if f"u:{u}" not in own)


def upgrade() -> None:
    op.add_column("persona_memory", sa.Column("named", sa.Text, nullable=True))
    op.add_column("persona_memory", sa.Column("private_to", sa.Text, nullable=True))
    bind = op.get_bind()
    names = {
        " ".join(w.lower() for w in _WORD.findall(name)): int(uid)
        for uid, name in bind.execute(sa.text("SELECT id, name FROM users"))
        if name
    }
    rows = bind.execute(
        sa.text("SELECT id, subject, counterpart, text FROM persona_memory WHERE valid_to IS NULL")
    ).all()
    for row_id, subject, counterpart, text in rows:
        named = _named(text or "", subject, counterpart, names)
        if named:
            bind.execute(
                sa.text("UPDATE persona_memory SET named = :n WHERE id = :i"),
                {"n": json.dumps(named), "i": row_id},
            )
    sources: dict[int, list[int]] = {}
    for row_id, uid in bind.execute(sa.text("SELECT row_id, user_id FROM memory_sources")):
        sources.setdefault(int(row_id), []).append(int(uid))
    for row_id, humans in sources.items():
        bind.execute(
            sa.text(
                "UPDATE persona_memory SET private_to = :p WHERE id = :i AND subject = 'world'"
            ),
            {"p": json.dumps(sorted(humans)), "i": row_id},
        )


def downgrade() -> None:
    # Plain DROP COLUMN (SQLite ≥ 3.35): batch mode would rebuild the table without its triggers.
    op.execute("ALTER TABLE persona_memory DROP COLUMN private_to")
    op.execute("ALTER TABLE persona_memory DROP COLUMN named")
