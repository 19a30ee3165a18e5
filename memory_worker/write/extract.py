"""Extraction (model call A, seed §2.1): the prompt, the answer's schema, and the guards.

The model proposes; code disposes. Every guard of the seed is here, applied to each candidate
before anything is embedded or written: subject ∈ present ∪ {self, world}; evidence ⊆ the
slice; a fact about u:X cites a line u:X spoke; kind in the six; one sentence ≤ 200 chars;
importance 1–10 and ≥ 3; at most 12 new rows per persona per human per day.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from string import Template

from pydantic import BaseModel, Field
from sqlalchemy import Connection

from memory_worker.constants import (
    DAILY_CAP_PER_HUMAN,
    IMPORTANCE_MAX,
    IMPORTANCE_THRESHOLD,
    KINDS,
    SUBJECT_SELF,
    SUBJECT_WORLD,
    TEXT_MAX_CHARS,
)
from memory_worker.rows import Candidate, Line, Room, human_id, human_ref
from memory_worker.storage import memories

HERE = Path(__file__).resolve().parent
SYSTEM = Template((HERE / "extract_system.txt").read_text())
PROMPT = Template((HERE / "extract_prompt.txt").read_text())
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


class ExtractAnswer(BaseModel):
    candidates: list[CandidateOut]


@dataclass(frozen=True)
class Rejection:
    """A candidate the guards dropped, and why (logged; asserted by tests)."""

    text: str
    reason: str


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
    transcript = "\n".join(f"[{ln.id}] {ln.speaker}: {_one_line(ln.text)}" for ln in lines)
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


def _one_line(text: str) -> str:
    # A line's text cannot fake another line id or close the transcript tag.
    return re.sub(r"\s+", " ", text).replace("</transcript>", "</ transcript>")


def known_rows(conn: Connection, persona: str, present: list[int]) -> list[str]:
    """The persona's open rows about the people present (and self/world): what it knows."""
    subjects = [SUBJECT_SELF, SUBJECT_WORLD, *(human_ref(u) for u in present)]
    return memories.known_texts(conn, persona, subjects, KNOWN_MAX_ROWS)


def rows_today(conn: Connection, persona: str, present: list[int], today: str) -> dict[int, int]:
    """New rows per human written by this persona today (the daily cap's count)."""
    got = memories.written_since(conn, persona, [human_ref(u) for u in present], today)
    return {human_id(s) or 0: n for s, n in got.items()}


# A sentence ends at . ! or ? followed by space and a capital, unless after a known abbreviation.
_ABBREVIATIONS = {
    *("mr", "mrs", "ms", "dr", "st", "jr", "sr", "vs", "prof", "mt", "ft", "no", "approx"),
    *("jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec"),
}
_SENTENCE_BREAK = re.compile(r"(\w+)?([.!?])\s+[\"'(]?[A-Z0-9]")
_VALID_FROM = re.compile(r"^\d{4}(-\d{2}(-\d{2})?)?$")


def is_one_sentence(text: str) -> bool:
    if "\n" in text:
        return False
    for m in _SENTENCE_BREAK.finditer(text):
        word = (m.group(1) or "").lower()
        if m.group(2) == "." and (word in _ABBREVIATIONS or len(word) == 1):
            continue
        return False
    return True


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
    already_today: dict[int, int],
) -> tuple[list[Candidate], list[Rejection]]:
    """Apply every guard; return the candidates that pass and why the others did not."""
    spoke: dict[int, set[str]] = {ln.id: {ln.speaker} for ln in lines}
    allowed_subjects = {SUBJECT_SELF, SUBJECT_WORLD, *(human_ref(u) for u in present)}
    kept: list[Candidate] = []
    rejected: list[Rejection] = []
    seen_texts: set[tuple[str, str]] = set()
    for c in answer.candidates:
        text = c.text.strip()
        reason = _reject_reason(c, text, allowed_subjects, spoke, present)
        key = (c.subject.strip(), text.lower())
        if reason is None and key in seen_texts:
            reason = "a duplicate within the spell"
        if reason:
            rejected.append(Rejection(c.text, reason))
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
    capped, over = cap_per_human(kept, already_today)
    rejected += [Rejection(c.text, "over the daily cap for this human") for c in over]
    return capped, rejected


def _counterpart(c: CandidateOut) -> str | None:
    """Only self items have a counterpart; stored as the canonical 'u:<id>'."""
    uid = human_id((c.counterpart or "").strip())
    return human_ref(uid) if c.subject.strip() == SUBJECT_SELF and uid is not None else None


def _reject_reason(
    c: CandidateOut,
    text: str,
    allowed_subjects: set[str],
    spoke: dict[int, set[str]],
    present: list[int],
) -> str | None:
    subject = c.subject.strip()
    if subject not in allowed_subjects:
        return f"subject {subject!r} is not present (or does not let this persona remember)"
    if c.kind.strip() not in KINDS:
        return f"kind {c.kind!r} is not one of the six"
    if not text or len(text) > TEXT_MAX_CHARS:
        return f"text is empty or longer than {TEXT_MAX_CHARS} chars"
    if not is_one_sentence(text):
        return "text is not one sentence"
    if not IMPORTANCE_THRESHOLD <= c.importance <= IMPORTANCE_MAX:
        return f"importance {c.importance} is outside {IMPORTANCE_THRESHOLD}..{IMPORTANCE_MAX}"
    if not c.evidence or not set(c.evidence) <= spoke.keys():
        return "evidence cites lines outside this spell"
    if subject.startswith("u:") and not any(subject in spoke[i] for i in c.evidence):
        return f"no evidence line was spoken by {subject}"
    if subject == SUBJECT_SELF:
        cp = human_id((c.counterpart or "").strip())
        if cp is None or cp not in present:
            return f"a self item needs a present counterpart, not {c.counterpart!r}"
    if subject == SUBJECT_WORLD and c.kind.strip() in ("promise", "open_loop", "relationship"):
        return f"a world fact cannot be a {c.kind}"
    return None


def cap_per_human(
    candidates: list[Candidate], already_today: dict[int, int]
) -> tuple[list[Candidate], list[Candidate]]:
    """Keep at most DAILY_CAP_PER_HUMAN new rows per human today, the most important first."""
    room_left = {u: DAILY_CAP_PER_HUMAN - n for u, n in already_today.items()}
    order = sorted(range(len(candidates)), key=lambda i: (-candidates[i].importance, i))
    over: set[int] = set()
    for i in order:
        uid = human_id(candidates[i].subject)
        if uid is None:
            continue
        left = room_left.get(uid, DAILY_CAP_PER_HUMAN)
        if left <= 0:
            over.add(i)
        room_left[uid] = left - 1
    kept = [c for i, c in enumerate(candidates) if i not in over]
    return kept, [c for i, c in enumerate(candidates) if i in over]
