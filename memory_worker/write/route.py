"""Routing (model call B, seed §2.2): each candidate against its neighbours → a decision.

Neighbours are the persona's open rows about the same subject, top 5 by cosine ≥ 0.6 — a dot
product over one persona's rows, no vector database. The model sees them as numbers ("0",
"1", …), never raw ids (mem0's guard against an invented id), and a number it was not shown
for that candidate is never trusted. One call covers every candidate of the spell.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from string import Template

from pydantic import BaseModel

from memory_worker.constants import EVENTS, NEIGHBOUR_MIN_COSINE, NEIGHBOURS_TOP_K
from memory_worker.models.base import MalformedAnswer
from memory_worker.rows import Candidate, Decision
from memory_worker.storage.memories import OpenRow
from memory_worker.vectors import from_b64, top_k

HERE = Path(__file__).resolve().parent
SYSTEM = Template((HERE / "route_system.txt").read_text())
PROMPT = Template((HERE / "route_prompt.txt").read_text())


class DecisionOut(BaseModel):
    candidate: int
    event: str
    old_id: str | None = None


class RouteAnswer(BaseModel):
    decisions: list[DecisionOut]


def fingerprint(rows: list[OpenRow]) -> str:
    """What the router saw: the open row ids. The commit re-checks it under the writer lock."""
    return hashlib.sha1(json.dumps([r.id for r in rows]).encode()).hexdigest()


def neighbours(candidates: list[Candidate], rows: list[OpenRow]) -> list[list[int]]:
    """Per candidate, the row ids of its top-5 neighbours (same subject, cosine ≥ 0.6)."""
    out: list[list[int]] = []
    for c in candidates:
        pool = [r for r in rows if r.subject == c.subject and r.embedding is not None]
        if c.embedding is None or not pool:
            out.append([])
            continue
        hits = top_k(
            from_b64(c.embedding),
            [r.embedding for r in pool],  # type: ignore[misc]
            NEIGHBOURS_TOP_K,
            NEIGHBOUR_MIN_COSINE,
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
) -> list[Decision]:
    """Turn the model's numbered decisions into decisions on real row ids.

    An answer without exactly one valid decision per candidate is malformed (re-asked, then
    parked). A number not shown for that candidate is never trusted: UPDATE falls back to
    ADD (the candidate passed every guard; the commit's duplicate check still applies) and
    CLOSE to NONE (we cannot close what we did not show).
    """
    by_candidate: dict[int, DecisionOut] = {}
    for d in answer.decisions:
        if d.candidate in by_candidate or not 0 <= d.candidate < len(candidates):
            raise MalformedAnswer(f"decision for unknown or repeated candidate {d.candidate}")
        if d.event.upper() not in EVENTS:
            raise MalformedAnswer(f"event {d.event!r} is not one of {EVENTS}")
        by_candidate[d.candidate] = d
    if len(by_candidate) != len(candidates):
        raise MalformedAnswer(f"{len(by_candidate)} decisions for {len(candidates)} candidates")
    out: list[Decision] = []
    for i in range(len(candidates)):
        d = by_candidate[i]
        event = d.event.upper()
        old = numbers.get((d.old_id or "").strip())
        trusted = old is not None and old in per_candidate[i]
        if event in ("UPDATE", "CLOSE") and not trusted:
            event = "ADD" if event == "UPDATE" else "NONE"
            old = None
        out.append(Decision(i, event, old if event in ("UPDATE", "CLOSE") else None))
    return out
