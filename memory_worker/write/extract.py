"""Extraction (model call A, docs/design.md §2.1): the prompt, the answer's schema, the guards.

The model proposes; code disposes. Every guard of docs/design.md §2.1 is here, applied to each
candidate before anything is embedded or written: each candidate is validated on its own (one bad
field drops that candidate, not the spell); subject ∈ present ∪ {self, world}; evidence ⊆ the slice
and the subject's own (`guards.evidence_problem`); a world row names no human; kind in the six; one
sentence ≤ 200 chars; importance 1–10 and ≥ 3; the daily caps, `self` rows counting towards their
counterpart and `world` rows towards their own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date

from pydantic import BaseModel, Field
from sqlalchemy import Connection

from memory_worker.core.audience import Scope
from memory_worker.core.constants import (
    IMPORTANCE_MAX,
    IMPORTANCE_THRESHOLD,
    KINDS,
    LINE_MAX_CHARS,
    SUBJECT_SELF,
    SUBJECT_WORLD,
    TEXT_MAX_CHARS,
)
from memory_worker.core.rows import Candidate, Line, Room, human_id, human_ref
from memory_worker.storage import memories
from memory_worker.write import guards
from memory_worker.write.ask import ItemsAnswer, templates
from memory_worker.write.guards import is_one_sentence

SYSTEM, PROMPT = templates("extract")
KNOWN_MAX_ROWS = 40  # how much of the persona's current memory the prompt repeats back


class CandidateOut(BaseModel):
    """One candidate as the model writes it. Loose on purpose: guards judge each field."""

    subject: str
    kind: str
    text: str
    importance: int
    counterpart: str | None = None
    valid_from: str | None = None
    evidence: list[int] = Field(default_factory=list)


class ExtractAnswer(ItemsAnswer):
    """The whole answer. Candidates are validated one by one: an ill-typed one is dropped and
    counted in `ill_formed`, its siblings go on. Only an answer that is not this JSON at all
    (no `candidates` list) fails, and is re-asked."""

    ITEMS = "candidates"
    ITEM = CandidateOut
    candidates: list[CandidateOut]


@dataclass(frozen=True)
class Rejection:
    """A candidate the guards dropped: a short `code` (logged, counted in the spell's record)
    and a `reason` for tests and debugging. Neither the text nor the reason is ever logged:
    both may carry what someone said."""

    text: str
    reason: str
    code: str = "guard"


def build_prompt(
    persona_name: str,
    room: Room,
    lines: list[Line],
    present: dict[int, str],
    known: list[str],
    today: str,
) -> tuple[str, str]:
    """(system, prompt) for the extraction call. `present` maps user id → display name."""
    situation = "a private chat" if room.is_private_chat() else "a group room"
    who = "\n".join(f"- {human_ref(u)} ({name})" for u, name in sorted(present.items()))
    transcript = "\n".join(f"[{ln.id}] {ln.speaker}: {prompt_line(ln.text)}" for ln in lines)
    system = SYSTEM.substitute(persona_name=persona_name)
    prompt = PROMPT.substitute(
        persona_name=persona_name,
        today=today,
        room_situation=situation,
        present=who or "- (nobody)",
        known="\n".join(f"- {k}" for k in known) or "- (nothing yet)",
        transcript=transcript,
    )
    return system, prompt


CUT_MARK = " […]"


def prompt_line(text: str) -> str:
    """A line as the prompt shows it: on one line, inert, and at most LINE_MAX_CHARS long.

    A line's text cannot fake another line id or close the transcript tag; an oversize line is
    cut (its id stays whole, so evidence still points at it).
    """
    one = re.sub(r"\s+", " ", text).replace("</transcript>", "</ transcript>")
    if len(one) > LINE_MAX_CHARS:
        one = one[: LINE_MAX_CHARS - len(CUT_MARK)] + CUT_MARK
    return one


def known_rows(conn: Connection, scope: Scope) -> list[tuple[int, str]]:
    """What the persona knows that a block for this room and its present humans could hold
    (docs/design.md §11.2), (id, text): the block's own `scope_for`, so the extraction can
    never launder into a new row what the room may not see."""
    return memories.known(conn, scope, KNOWN_MAX_ROWS)


def rows_today(
    conn: Connection, persona: str, today: str, present: Iterable[int]
) -> dict[str, int]:
    """New rows written by this persona today, per cap key (`guards.cap_key`), for the caps a
    spell with these present humans can meet: theirs and the world's (a candidate about anyone
    else is dropped by the subject guard before any cap)."""
    return guards.counts_by_cap(memories.written_since(conn, persona, today, present))


_VALID_FROM = re.compile(r"^\d{4}(-\d{2}(-\d{2})?)?$")


def clean_valid_from(value: str | None) -> str | None:
    """YYYY, YYYY-MM or YYYY-MM-DD that is a real date, else None (the episode date rules)."""
    if not value or not _VALID_FROM.match(value.strip()):
        return None
    v = value.strip()
    try:
        parts = [int(p) for p in v.split("-")] + [1, 1]
        date(parts[0], parts[1], parts[2])
    except ValueError:
        return None
    return v


def guard(
    answer: ExtractAnswer,
    *,
    persona: str,
    present: list[int],
    lines: list[Line],
    already_today: dict[str, int],
    people: Mapping[int, str] | None = None,
) -> tuple[list[Candidate], list[Rejection]]:
    """Apply every guard; return the candidates that pass and why the others did not.

    `already_today` counts today's rows per cap key (`guards.cap_key`); `people` are the
    humans (id → display name) a world row must not name: at least the room's humans, and
    everyone the store knows whose name a world candidate may hold.
    """
    people = people or {}
    speaker_of = {ln.id: ln.speaker for ln in lines}
    allowed_subjects = {SUBJECT_SELF, SUBJECT_WORLD, *(human_ref(u) for u in present)}
    kept: list[Candidate] = []
    rejected = [Rejection("", "failed the candidate schema", "schema")] * answer.ill_formed
    seen_texts: set[tuple[str, str]] = set()
    for c in answer.candidates:
        text = c.text.strip()
        found = _reject_reason(c, text, allowed_subjects, speaker_of, present, persona, people)
        key = (c.subject.strip(), text.lower())
        if found is None and key in seen_texts:
            found = ("duplicate", "a duplicate within the spell")
        if found:
            rejected.append(Rejection(c.text, found[1], found[0]))
            continue
        seen_texts.add(key)
        kept.append(
            Candidate(
                subject=c.subject.strip(),
                kind=c.kind.strip(),
                text=text,
                importance=c.importance,
                evidence=tuple(sorted(set(c.evidence))),
                valid_from=clean_valid_from(c.valid_from),
                counterpart=_counterpart(c),
            )
        )
    capped, over = cap(kept, already_today)
    rejected += [Rejection(c.text, "over the daily cap", "cap") for c in over]
    return capped, rejected


def _counterpart(c: CandidateOut) -> str | None:
    """Only self items have a counterpart; stored as the canonical 'u:<id>'."""
    uid = human_id((c.counterpart or "").strip())
    return human_ref(uid) if c.subject.strip() == SUBJECT_SELF and uid is not None else None


def _reject_reason(
    c: CandidateOut,
    text: str,
    allowed_subjects: set[str],
    speaker_of: dict[int, str],
    present: list[int],
    persona: str,
    people: Mapping[int, str],
) -> tuple[str, str] | None:
    """(code, reason) for the first guard the candidate fails, or None."""
    subject = c.subject.strip()
    if subject not in allowed_subjects:
        return "subject", f"subject {subject!r} is not present (or does not allow memory)"
    if c.kind.strip() not in KINDS:
        return "kind", f"kind {c.kind!r} is not one of the six"
    if not text or len(text) > TEXT_MAX_CHARS:
        return "text", f"text is empty or longer than {TEXT_MAX_CHARS} chars"
    if not is_one_sentence(text):
        return "text", "text is not one sentence"
    if not IMPORTANCE_THRESHOLD <= c.importance <= IMPORTANCE_MAX:
        bounds = f"{IMPORTANCE_THRESHOLD}..{IMPORTANCE_MAX}"
        return "importance", f"importance {c.importance} is outside {bounds}"
    counterpart = _counterpart(c)
    if subject == SUBJECT_SELF:
        if counterpart is None or human_id(counterpart) not in present:
            return "subject", f"a self item needs a present counterpart, not {c.counterpart!r}"
    problem = guards.evidence_problem(subject, counterpart, persona, c.evidence, speaker_of)
    if problem:
        return "evidence", problem
    if subject == SUBJECT_WORLD:
        if c.kind.strip() in ("promise", "open_loop", "relationship"):
            return "world", f"a world fact cannot be a {c.kind}"
        if guards.names_a_human(text, people):
            return "world", "a world row names a human"
    return None


def cap(
    candidates: list[Candidate], already_today: dict[str, int]
) -> tuple[list[Candidate], list[Candidate]]:
    """(kept, over): every kind within its daily cap, the most important first."""
    over = guards.over_caps(candidates, already_today)
    kept = [c for i, c in enumerate(candidates) if i not in over]
    return kept, [c for i, c in enumerate(candidates) if i in over]
