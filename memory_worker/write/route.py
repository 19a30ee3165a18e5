"""Routing (model call B, docs/design.md §2.2): each candidate against its neighbours.

Neighbours are the persona's open rows about the same subject, top 5 by cosine at or above the floor
of the embedder that made the vectors (`neighbour_floor`, docs/design.md §2.2: 0.6 for gemini's,
measured on LoCoMo for the others) — a dot product over one persona's rows, no vector database.
The model sees them as numbers ("0", "1", …), never raw ids (mem0's guard against an invented
id), and a number it was not shown for that candidate is never trusted. The pool is what the
spell's scope admits (`write.window.spell_scope`: the block's rule for the room with all the
spell's witnesses present) — so the router can never see, let alone change, a row about
someone absent, nor a world row someone here never witnessed. One call covers every
candidate of the spell; a decision that fails its schema drops its candidate only.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator

from memory_worker.core.constants import (
    NEIGHBOUR_FLOORS,
    NEIGHBOUR_MIN_COSINE,
    NEIGHBOURS_TOP_K,
    SUBJECT_SELF,
)
from memory_worker.core.rows import Candidate, Decision
from memory_worker.core.vectors import from_b64, top_k
from memory_worker.storage.memories import OpenRow
from memory_worker.write.ask import ItemsAnswer, templates

SYSTEM, PROMPT = templates("route")


def _upper(value: object) -> object:
    return value.strip().upper() if isinstance(value, str) else value


# The four operations, in the schema itself (docs/design.md §2.2: there is no DELETE).
Event = Annotated[Literal["ADD", "UPDATE", "CLOSE", "NONE"], BeforeValidator(_upper)]


class DecisionOut(BaseModel):
    candidate: int
    event: Event
    old_id: str | None = None


class RouteAnswer(ItemsAnswer):
    """The router's answer. Decisions are validated one by one: an ill-typed one is dropped
    and counted in `ill_formed` (its candidate then gets no change); only an answer that is not
    this JSON at all is re-asked."""

    ITEMS = "decisions"
    ITEM = DecisionOut
    decisions: list[DecisionOut]


def same_concern(row: OpenRow, c: Candidate) -> bool:
    """A neighbour is about what the candidate is about: the same subject, and for a `self`
    row the same counterpart (a promise to Dan is never a neighbour of a promise to Cara)."""
    if row.subject != c.subject:
        return False
    return row.subject != SUBJECT_SELF or row.counterpart == c.counterpart


def fingerprint(rows: list[OpenRow]) -> str:
    """What the router saw: the open row ids. The commit re-checks it under the writer lock."""
    return hashlib.sha1(json.dumps([r.id for r in rows]).encode()).hexdigest()


def neighbour_floor(embedder_name: str | None) -> float:
    """The cosine a row needs to be shown as a neighbour, for vectors of `embedder_name` (as a
    store records it): each embedder's cosines live on their own scale."""
    return NEIGHBOUR_FLOORS.get(embedder_name or "", NEIGHBOUR_MIN_COSINE)


def neighbours(
    candidates: list[Candidate], rows: list[OpenRow], min_cosine: float
) -> list[list[int]]:
    """Per candidate, the row ids of its top-5 neighbours (`same_concern`, cosine ≥
    `min_cosine`: the floor of the embedder that made the vectors, `neighbour_floor`)."""
    out: list[list[int]] = []
    for c in candidates:
        pool = [r for r in rows if same_concern(r, c) and r.embedding is not None]
        if c.embedding is None or not pool:
            out.append([])
            continue
        hits = top_k(
            from_b64(c.embedding),
            [r.embedding for r in pool if r.embedding is not None],
            NEIGHBOURS_TOP_K,
            min_cosine,
        )
        out.append([pool[i].id for i, _ in hits])
    return out


def number(per_candidate: list[list[int]]) -> dict[str, int]:
    """Spell-wide numbers for every neighbour: "0" → row id. First seen, first numbered."""
    numbers: dict[str, int] = {}
    for ids in per_candidate:
        for rid in ids:
            if rid not in numbers.values():
                numbers[str(len(numbers))] = rid
    return numbers


def build_prompt(
    persona_name: str,
    candidates: list[Candidate],
    per_candidate: list[list[int]],
    numbers: dict[str, int],
    rows: list[OpenRow],
) -> tuple[str, str]:
    text_of = {r.id: r.text for r in rows}
    number_of = {rid: n for n, rid in numbers.items()}
    memories = [{"id": n, "text": text_of[rid]} for n, rid in numbers.items()]
    shown = [
        {
            "candidate": i,
            "subject": c.subject,
            "kind": c.kind,
            "text": c.text,
            "neighbours": [number_of[rid] for rid in ids],
        }
        for i, (c, ids) in enumerate(zip(candidates, per_candidate, strict=True))
    ]
    prompt = PROMPT.substitute(
        memories=json.dumps(memories, ensure_ascii=False, indent=1) if memories else "(none)",
        candidates=json.dumps(shown, ensure_ascii=False, indent=1),
    )
    return SYSTEM.substitute(persona_name=persona_name), prompt


def resolve(
    answer: RouteAnswer,
    candidates: list[Candidate],
    per_candidate: list[list[int]],
    numbers: dict[str, int],
) -> tuple[list[Decision], int]:
    """Turn the model's numbered decisions into decisions on real row ids; also how many
    candidates were left without a usable decision.

    A candidate with no decision, or with more than one, gets NONE (dropped, counted); a
    decision for an unknown candidate is ignored (counted). A number not shown for that
    candidate is never trusted: UPDATE falls back to ADD (the candidate passed every guard;
    the commit's duplicate check still applies) and CLOSE to NONE (we cannot close what we
    did not show).
    """
    by_candidate: dict[int, list[DecisionOut]] = {}
    dropped = answer.ill_formed
    for d in answer.decisions:
        if 0 <= d.candidate < len(candidates):
            by_candidate.setdefault(d.candidate, []).append(d)
        else:
            dropped += 1
    out: list[Decision] = []
    for i in range(len(candidates)):
        given = by_candidate.get(i, [])
        if len(given) != 1:
            dropped += 1
            out.append(Decision(i, "NONE", None))
            continue
        d = given[0]
        event: str = d.event
        old = numbers.get((d.old_id or "").strip())
        trusted = old is not None and old in per_candidate[i]
        if event in ("UPDATE", "CLOSE") and not trusted:
            event = "ADD" if event == "UPDATE" else "NONE"
            old = None
        # NONE names nothing the commit acts on: the router's word confirms nothing
        # (the call's label decides who may know, `core.labels`).
        keeps_old = event in ("UPDATE", "CLOSE")
        out.append(Decision(i, event, old if keeps_old else None))
    return out, dropped
