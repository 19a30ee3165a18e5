"""Provenance decides who may know: a row's audience from who witnessed its evidence.

The write path's threat model is a model whose output is untrusted, so nothing here reads what
the model wrote to decide who may see it; only the store's own facts do — who was in the room
when each cited line was said, who said it, and what a human's own line says. Pure rules over
plain data; the commit loads the facts and applies them (docs/design.md §12):

- a line's witnesses are the room's members who had joined before it was said, who let the
  persona remember them (memory on, not muting it);
- a world row is everyone's only when every line it cites is a dispatch (no human or
  persona said it); otherwise its audience is the witnesses of its lines;
- a world row's audience grows only when a human outside it states its distinctive content
  in their own line (`carries`): that human joins it. Repetition never makes it public;
- the router may change (UPDATE, CLOSE) a world row only when its audience is exactly the
  spell's: nobody loses, and nobody learns of, a row through a spell they did not witness.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping

from memory_worker.core.constants import DISPATCH_PREFIX
from memory_worker.core.names import EVERYDAY_WORDS, fold, words
from memory_worker.core.rows import human_ref

Audience = tuple[int, ...] | None  # a world row's `private_to`: sorted ids, or None (public)


def is_dispatch(speaker: str) -> bool:
    """A line no human or persona said: the world's news posted into the room."""
    return speaker.startswith(DISPATCH_PREFIX)


def witnesses(line_id: int, joined: Mapping[int, int]) -> frozenset[int]:
    """The humans who witnessed line `line_id`: of the room's members (`joined`: id → the
    room's last line id when they joined, `room_members.since_line`), those who had joined
    before it was said."""
    return frozenset(u for u, since in joined.items() if since < line_id)


def world_label(
    cited: Iterable[tuple[str, str]], row_text: str, witnessed_by: Collection[int]
) -> Audience:
    """A new world row's audience, from the lines it cites — (speaker, text) — never from what
    the model wrote: public (None) only when every one is a dispatch and together they state
    everything distinctive the row says (`carries`: a row citing the news but carrying a
    secret from another line is no news); else the humans who witnessed them (`witnessed_by`,
    already narrowed to those who let the persona remember them). A persona's own line is no
    dispatch: what Warren says in Dan's chat stays with Dan."""
    lines = list(cited)
    if lines and all(is_dispatch(who) for who, _ in lines):
        if carries(" ".join(text for _, text in lines), row_text):
            return None
    return tuple(sorted(set(witnessed_by)))


def may_change(target: Audience, label: Audience) -> bool:
    """May a spell whose rows get `label` UPDATE or CLOSE a world row held by `target`? Only
    when they are the same people: closing a row some of its holders did not witness the
    reason for would tell them something, and a public row is changed only by the news."""
    return target == label


# --- the confirmation: a human states what a row says, in their own words ------------------

_SUFFIXES = ("ing", "ed", "es", "s")
_NUMBER = re.compile(r"\d")


def _stem(word: str) -> str:
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def distinctive(text: str) -> frozenset[str]:
    """The words that make a row's text say something: every folded word that is not an
    everyday word, numbers included, stemmed ("interviewing" → "interview")."""
    return frozenset(_stem(w) for w in words(text) if w not in EVERYDAY_WORDS or _NUMBER.search(w))


def confirms(line_text: str, row_text: str) -> bool:
    """A human's own line confirms a world row they are not in the audience of: it states
    everything distinctive the row says (`carries`). The one check between a stranger and a
    row, so the flow exam's self-test can take it away on its own."""
    return carries(line_text, row_text)


def carries(line_text: str, row_text: str) -> bool:
    """True when a human's line states everything distinctive in a row's text — its names,
    numbers and rare words, compared on folded text — so joining the row's audience tells
    them nothing they did not say. A row with nothing distinctive is never confirmed."""
    wanted = distinctive(row_text)
    if not wanted:
        return False
    said = {_stem(w) for w in words(line_text)}
    unspaced = fold(line_text)
    return all(w in said or (not w.isascii() and w in unspaced) for w in wanted)


def may_join(
    human: int,
    audience: Audience,
    *,
    allowing: Collection[int],
    speakers: Mapping[int, str],
    line_id: int,
) -> bool:
    """The checks on the human, before `carries` checks the words: a present member who lets
    the persona remember them (`allowing`), outside the row's audience (a public row needs
    no one; a witness is already in), and the speaker of the cited line."""
    return (
        audience is not None
        and human in allowing
        and human not in audience
        and speakers.get(line_id) == human_ref(human)
    )
