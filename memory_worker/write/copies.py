"""Exactly once across audiences: the same sentence about the same human is one memory.

A model call sees only the rows its label allows (`core.labels`), so a spell in a group cannot
see the row a private chat wrote a moment before, and would write the same fact again. The
commit's code sees every audience: a candidate whose sentence (`names.sentence_key`) is already
open for the same concern is folded here, never by moving text between rows — when the open
row was formed with everyone the new one is (or more), the new one is not written; when the
new one is formed with more, it is written and closes the narrower copy (`closed_by`), whose
human is not told twice; when neither holds the other, both stay (duplicates across
audiences are the price of never widening one). Only the same sentence folds: "HIV+" and
"HIV-" are two (`names.sentence_key`), and an UPDATE that says something else than the row it
replaces is never held back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Connection

from memory_worker.core import labels, names
from memory_worker.core.constants import SUBJECT_WORLD
from memory_worker.core.labels import Label
from memory_worker.core.rows import Candidate
from memory_worker.storage import memories

Key = tuple[str, str | None, str]  # (subject, counterpart, sentence)


@dataclass(frozen=True)
class Copy:
    id: int
    formed: Label  # who it was formed with: a world row's audience, else its witnesses


@dataclass(frozen=True)
class Found:
    held: bool  # an open copy was formed with everyone this one is: do not write it
    narrower: list[Copy]  # open copies formed with fewer: closed by the new row


def formed_with(subject: str, private_to: Label, witnessed: frozenset[int]) -> Label:
    """Who a row was formed with, for comparing copies: a world row's audience (None: public),
    a row about a human the humans who witnessed it."""
    return private_to if subject == SUBJECT_WORLD else witnessed


def _key(subject: str, counterpart: str | None, text: str) -> Key:
    return (subject, counterpart if subject != SUBJECT_WORLD else None, names.sentence_key(text))


@dataclass
class Copies:
    """The persona's open rows of the spell's sentences about its subjects, every audience."""

    by_key: dict[Key, list[Copy]] = field(default_factory=dict)

    @classmethod
    def load(cls, conn: Connection, persona: str, candidates: list[Candidate]) -> Copies:
        """The open rows of the candidates' sentences about their subjects (`find` and `add`
        look up no other key): the rows stored under each sentence's key, not every row."""
        out = cls()
        subjects = {c.subject for c in candidates}
        keys = {names.sentence_key(c.text) for c in candidates}
        for r in memories.open_sentences(conn, persona, subjects, keys):
            audience = labels.from_json(r.private_to)
            formed = formed_with(r.subject, audience, frozenset(r.witnessed))
            out.by_key.setdefault(_key(r.subject, r.counterpart, r.text), []).append(
                Copy(r.id, formed)
            )
        return out

    def find(self, c: Candidate, formed: Label, replaces: str | None = None) -> Found:
        """The open copies of `c`'s sentence. `replaces`: the text of the row an UPDATE
        replaces — an UPDATE that says something else than its old row is never held back
        (its old row must close), only one that says the same."""
        key = _key(c.subject, c.counterpart, c.text)
        copies = self.by_key.get(key, [])
        changes = replaces is not None and names.sentence_key(replaces) != key[2]
        if not changes and any(labels.within(formed, copy.formed) for copy in copies):
            return Found(True, [])
        return Found(False, [copy for copy in copies if labels.within(copy.formed, formed)])

    def take(
        self,
        c: Candidate,
        audience: Label,
        witnessed: frozenset[int],
        row_id: int,
        replaces: str | None = None,
    ) -> Found:
        """What writing `c` as row `row_id`, reaching `audience`, meets (`find`); unless held,
        it is then one of the copies, and the narrower ones it closes are not (`add`)."""
        formed = formed_with(c.subject, audience, witnessed)
        found = self.find(c, formed, replaces)
        if not found.held:
            self.add(c, formed, row_id, found.narrower)
        return found

    def add(self, c: Candidate, formed: Label, row_id: int, closed: list[Copy]) -> None:
        key = _key(c.subject, c.counterpart, c.text)
        gone = {copy.id for copy in closed}
        kept = [copy for copy in self.by_key.get(key, []) if copy.id not in gone]
        self.by_key[key] = [*kept, Copy(row_id, formed)]
