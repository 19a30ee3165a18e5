"""Running whole spells in-process (no broker) and reading back what they left: the helpers
the write-path hole tests, the adversarial suite and the property test share."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from sqlalchemy import Engine, select

from memory_worker import tables as t
from memory_worker.models.hashing import HashingEmbedder
from memory_worker.rows import Spell
from memory_worker.write import pipeline


@dataclass
class SpellRun:
    """What one in-process spell did: its outcome, the spell as committed, the toasts posted."""

    status: str | None
    row_ids: list[int] = field(default_factory=list)
    spell: Spell | None = None
    toasts: int = 0


def run_spell(persona: str, room_id: str, chat) -> SpellRun:  # type: ignore[no-untyped-def]
    """begin → extract → embed → route → commit → notify, as the chain runs them."""
    spell = pipeline.begin(persona, room_id)
    if spell is None:
        return SpellRun(None)
    spell = pipeline.run_extract(spell, chat)
    spell = pipeline.run_embed(spell, HashingEmbedder())
    spell = pipeline.run_route(spell, chat)
    outcome = pipeline.run_commit(spell)
    if outcome.status == "stale":
        spell = pipeline.run_route(spell, chat)
        outcome = pipeline.run_commit(spell)
    toasts = pipeline.run_notify(spell, outcome.row_ids)
    return SpellRun(outcome.status, outcome.row_ids, spell, len(toasts))


def drain(persona: str, room_id: str, chat, max_spells: int = 10_000) -> list[SpellRun]:  # type: ignore[no-untyped-def]
    """Spells until the persona's cursor reaches the room's last line (a backlog, window by
    window, as the worker chains them)."""
    runs = []
    for _ in range(max_spells):
        run = run_spell(persona, room_id, chat)
        if run.status is None:
            return runs
        runs.append(run)
    raise AssertionError(f"{persona}/{room_id} not drained after {max_spells} spells")


def rows(db: Engine) -> list[dict]:
    with db.connect() as c:
        q = select(t.persona_memory).order_by(t.persona_memory.c.id)
        return [dict(r) for r in c.execute(q).mappings()]


def notices(db: Engine) -> list[dict]:
    with db.connect() as c:
        return [dict(r) for r in c.execute(select(t.notices).order_by(t.notices.c.id)).mappings()]


def spell_records(db: Engine) -> list[dict]:
    with db.connect() as c:
        q = select(t.spells).order_by(t.spells.c.last_line_id)
        return [dict(r) for r in c.execute(q).mappings()]


def speakers(db: Engine) -> dict[int, str]:
    with db.connect() as c:
        return {int(i): s for i, s in c.execute(select(t.lines.c.id, t.lines.c.speaker))}


def prompts(chat, purpose: str) -> list[str]:  # type: ignore[no-untyped-def]
    """The exact prompts a ScriptedChat received for one purpose ('extract' or 'route')."""
    return [p for what, _, p in chat.calls if what == purpose]


def evidence(row: dict) -> list[int]:
    return [int(i) for i in json.loads(row["evidence"])]
