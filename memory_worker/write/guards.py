"""The write path's guards: pure functions that decide what a candidate may become.

The model proposes; code disposes (docs/design.md §2.1, §7, §11). Each rule here is one
function over plain data, so extraction, the commit and the tests apply the very same rule:

- one sentence means one sentence, whatever follows the full stop;
- evidence is the subject's own: every line cited by a row about u:X is u:X's or a persona's,
  at least one is u:X's; a `self` row cites the persona's or the counterpart's lines;
- a `world` row is about the world: it names no human (no `u:` id, no part of a known name);
- caps cover every kind: a `self` row counts towards its counterpart, `world` has its own.

Nothing here reads the database or logs: callers load the data and say what was dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from memory_worker.core import names
from memory_worker.core.constants import (
    DAILY_CAP_PER_HUMAN,
    DAILY_CAP_WORLD,
    HUMAN_PREFIX,
    SUBJECT_SELF,
    SUBJECT_WORLD,
)
from memory_worker.core.rows import human_id, human_ref

# --- one sentence -------------------------------------------------------------------------

_ABBREVIATIONS = {
    *("mr", "mrs", "ms", "dr", "st", "jr", "sr", "vs", "prof", "mt", "ft", "no", "approx"),
    *("jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec"),
    *("etc", "inc", "ltd", "co", "corp", "e.g", "i.e"),
}
# A terminator, any closing quotes/brackets, then either whitespace and anything at all (an id,
# lower case, a quote: the model's common failure), or directly a `u:` id ("jazz.u:7 hates…").
_SENTENCE_BREAK = re.compile(r"(\w+)?([.!?]+)[\"'”’)\]]*(?=\s+(\S)|(u):\d)")


def is_one_sentence(text: str) -> bool:
    """True when `text` is a single sentence: no line break, no terminator followed by more.

    A full stop after a known abbreviation ("Dr.", "Jul.") or a single letter (an initial)
    does not end the sentence; an ellipsis followed by lower case does not either.
    """
    if "\n" in text or "\r" in text:
        return False
    for m in _SENTENCE_BREAK.finditer(text):
        word = (m.group(1) or "").lower()
        stop = m.group(2)
        following = m.group(3) or m.group(4)
        if stop == "." and (word in _ABBREVIATIONS or len(word) == 1):
            continue
        if stop == "..." and following.islower():
            continue
        return False
    return True


# --- evidence -----------------------------------------------------------------------------


def is_persona_speaker(speaker: str) -> bool:
    """Transcript speakers are 'u:42' for humans and a slug for personas."""
    return not speaker.startswith(HUMAN_PREFIX)


def evidence_problem(
    subject: str,
    counterpart: str | None,
    persona: str,
    evidence: Sequence[int],
    speaker_of: Mapping[int, str],
) -> str | None:
    """Why these cited lines cannot support a row about `subject`, or None when they can.

    `speaker_of` maps each line id of the spell to its speaker. The rule (docs/design.md §11.3): a
    row about u:X cites only u:X's lines or a persona's, and at least one of u:X's — another human's
    words about X are never evidence about X. A `self` row cites only this persona's lines or its
    counterpart's. A `world` row cites lines of the spell.
    """
    if not evidence:
        return "cites no line"
    if any(i not in speaker_of for i in evidence):
        return "cites lines outside this spell"
    speakers = [speaker_of[i] for i in evidence]
    if subject == SUBJECT_SELF:
        allowed = {persona, counterpart or ""}
        if any(s not in allowed for s in speakers):
            return "a self row cites a line that is neither the persona's nor the counterpart's"
        return None
    if subject == SUBJECT_WORLD:
        return None
    if any(s != subject and not is_persona_speaker(s) for s in speakers):
        return f"cites another human's line about {subject}"
    if subject not in speakers:
        return f"no evidence line was spoken by {subject}"
    return None


# --- a world row is about the world ----------------------------------------------------------


def names_a_human(text: str, people: Mapping[int, str]) -> bool:
    """True when `text` names a human: a `u:` id in any form, or any distinctive part of the
    name of one of `people` (id → display name: the room's humans and every human the store
    knows whose name the text may hold, `users.people_named_in`), after `core.names.fold`."""
    return bool(names.humans_named(text, people))


# --- every human a row names is part of its audience --------------------------------------


def humans_named(
    text: str, subject: str, counterpart: str | None, people: Mapping[int, str]
) -> set[int]:
    """The humans `text` names besides whom its row concerns (docs/design.md §12, every human a
    row names): every `u:` id, and each of `people` named by any distinctive part of their name,
    however it is spelled (`core.names`). Erring wide hides a row where someone it seems to name
    is absent; it never shows one."""
    own = {human_id(subject), human_id(counterpart or "")}
    return {u for u in names.humans_named(text, people) if u not in own}


def humans_named_each(
    rows: Sequence[tuple[str, str, str | None]], people: Mapping[int, str]
) -> list[set[int]]:
    """`humans_named` of each (text, subject, counterpart), in order."""
    return [humans_named(text, subject, counterpart, people) for text, subject, counterpart in rows]


# --- caps ---------------------------------------------------------------------------------


def cap_key(subject: str, counterpart: str | None) -> str | None:
    """Which daily cap a row counts towards: the human it concerns ('u:42'), or 'world'.

    A `self` row (a promise, an open loop) counts towards its counterpart: twenty promises to
    Dan are twenty rows about Dan's day with the persona.
    """
    if subject == SUBJECT_WORLD:
        return SUBJECT_WORLD
    uid = human_id(counterpart or "") if subject == SUBJECT_SELF else human_id(subject)
    return human_ref(uid) if uid is not None else None


def cap_limit(key: str) -> int:
    return DAILY_CAP_WORLD if key == SUBJECT_WORLD else DAILY_CAP_PER_HUMAN


def counts_by_cap(pairs: Iterable[tuple[str, str | None, int]]) -> dict[str, int]:
    """(subject, counterpart, count) rows written today → count per cap key."""
    out: dict[str, int] = {}
    for subject, counterpart, n in pairs:
        key = cap_key(subject, counterpart)
        if key is not None:
            out[key] = out.get(key, 0) + int(n)
    return out


class Capped(Protocol):
    @property
    def subject(self) -> str: ...
    @property
    def counterpart(self) -> str | None: ...
    @property
    def importance(self) -> int: ...


def over_caps(candidates: Sequence[Capped], already_today: Mapping[str, int]) -> set[int]:
    """Indexes of the candidates past their cap today, keeping the most important first."""
    left: dict[str, int] = {}
    order = sorted(range(len(candidates)), key=lambda i: (-candidates[i].importance, i))
    over: set[int] = set()
    for i in order:
        key = cap_key(candidates[i].subject, candidates[i].counterpart)
        if key is None:
            over.add(i)  # counts towards no one's cap: not a row we can write
            continue
        remaining = left.get(key, cap_limit(key) - already_today.get(key, 0))
        if remaining <= 0:
            over.add(i)
        left[key] = remaining - 1
    return over
