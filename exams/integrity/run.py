"""The integrity exam: no fact is lost or folded into another on the way to the store.

README.md beside this file says what it proves. In short: every minimal pair of the corpus
(exams/integrity/pairs.py: sentences a sign, a digit, a unit or a "not" apart) is written
through the real write path (extract → embed → route → commit, with a scripted model), in
both orders, along each path where two sentences can meet — ADD beside ADD, an UPDATE of one
into the other, the fold across audiences in both directions, and a delete of the wider world
row — each in a store of its own; then the open rows, what closed what, and the toasts are
read. A pair left as one memory is a wrong fold; a fact gone is a loss; a fact about a human
written without their toast is untold. The variants of one sentence (case, whitespace, Unicode
compatibility forms) must fold, on the same paths.

    .venv/bin/python -m exams.integrity.run [--self-test]

With --self-test it runs again with the old folding (word characters only: signs, currency
and percent dropped) in place of `names.sentence_key`, and must see wrong folds. Exit status 1
when the exam fails (or the self-test sees nothing).
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

from sqlalchemy import select, update

from exams.flow.run import fresh_store, migrated_template
from exams.integrity.pairs import DIFFERENT, SAME
from memory_worker import app_side, controls
from memory_worker.core import names
from memory_worker.core import tables as t
from memory_worker.models.hashing import HashingEmbedder
from memory_worker.models.scripted import ScriptedChat, candidate, route_payload
from memory_worker.storage import notices, store
from memory_worker.write import steps

DAN, CARA = 42, 17
HUMAN = "u:42"  # whom the pairs about a human are about
WORLD = "Otto"  # what the world pairs are about: no human of the store
EMBEDDER = HashingEmbedder()


@dataclass(frozen=True)
class Case:
    """One pair along one path: `first` written, then `second`; `same`: they must fold."""

    path: str
    first: str
    second: str
    same: bool

    def __str__(self) -> str:  # the corpus's own sentences: no one's memory
        return f"{self.path}: {self.first!r} then {self.second!r}"


@dataclass
class Tally:
    cases: int = 0
    lost: list[str] = field(default_factory=list)  # a fact gone that should be open
    folded: list[str] = field(default_factory=list)  # two facts left as one
    unfolded: list[str] = field(default_factory=list)  # one sentence left as two
    untold: list[str] = field(default_factory=list)  # a human's new fact without its toast

    @property
    def failures(self) -> int:
        return len(self.lost) + len(self.folded) + len(self.unfolded) + len(self.untold)


# --- the world and its spells ---------------------------------------------------------------


def build() -> None:
    """Dan and Cara, each in a private chat with Warren, and their group."""
    with store.transaction() as conn:
        app_side.add_user(conn, DAN, "Dan")
        app_side.add_user(conn, CARA, "Cara")
        app_side.add_persona(conn, "warren", "Warren")
        app_side.add_room(conn, "dm-dan", "private", [f"u:{DAN}", "warren"])
        app_side.add_room(conn, "g-dc", "group", [f"u:{DAN}", f"u:{CARA}", "warren"])


def _router(event: str, target: str | None) -> Callable[[str], dict[str, Any]]:
    """Every candidate gets `event`, against the shown row whose text is `target`."""

    def answer(prompt: str) -> dict[str, Any]:
        shown, cands = route_payload(prompt)
        old = next((m["id"] for m in shown if m["text"] == target), None)
        return {
            "decisions": [
                {"candidate": c["candidate"], "event": event, "old_id": old} for c in cands
            ]
        }

    return answer


def write(
    room: str, subject: str, text: str, event: str = "ADD", target: str | None = None
) -> None:
    """Dan says something in `room`; the model writes `text` about `subject` from it, and the
    router answers `event` (against the row saying `target`). One spell, toasts told."""
    with store.transaction() as conn:
        line = app_side.say(conn, room, DAN, "Something about me.")
    kind = "event" if subject == "world" else "fact"
    extract = {"candidates": [candidate(subject, kind, text, 6, [line])]}
    chat = ScriptedChat({"extract": extract, "route": _router(event, target)})
    spell = steps.begin("warren", room)
    assert spell is not None, "the line was said: a spell begins"
    spell = steps.run_route(steps.run_embed(steps.run_extract(spell, chat), EMBEDDER), chat)
    outcome = steps.run_commit(spell)
    while outcome.status == "stale":
        spell = steps.run_route(spell, chat)
        outcome = steps.run_commit(spell)
    steps.mark_delivered(steps.place_toasts(spell.persona, spell.room_id))


def rows() -> list[dict[str, Any]]:
    with store.engine().connect() as conn:
        q = select(t.persona_memory).order_by(t.persona_memory.c.id)
        return [dict(r) for r in conn.execute(q).mappings()]


def row_of(text: str) -> dict[str, Any]:
    (found,) = [r for r in rows() if r["text"] == text]
    return found


def told(user_id: int) -> set[int]:
    """The row ids the user's toasts list."""
    with store.engine().connect() as conn:
        return {i for n in notices.of_user(conn, user_id, 0, 1000) for i in n.row_ids}


# --- the paths --------------------------------------------------------------------------------


def _add(first: str, second: str) -> None:
    write("dm-dan", HUMAN, first)
    write("dm-dan", HUMAN, second)


def _update(first: str, second: str) -> None:
    write("dm-dan", HUMAN, first)
    write("dm-dan", HUMAN, second, "UPDATE", target=first)


def _fold_wider(first: str, second: str) -> None:
    write("dm-dan", HUMAN, first)  # formed with Dan
    write("g-dc", HUMAN, second)  # formed with Dan and Cara: folds a narrower copy


def _fold_narrower(first: str, second: str) -> None:
    write("g-dc", HUMAN, first)
    write("dm-dan", HUMAN, second)  # held back when the wider says the same


def _delete_wider(first: str, second: str) -> None:
    write("dm-dan", "world", first)  # Dan's own world row
    write("g-dc", "world", second)  # Dan's and Cara's
    wider = row_of(second)["id"]
    controls.delete_row(CARA, wider)  # Cara leaves its audience
    controls.delete_row(DAN, wider)  # the last holder: the row goes


def _delete_stored_fold(first: str, second: str) -> None:
    """As `_delete_wider`, over a store where the first row was closed by the second, as the
    old folding left stores it had folded: the delete must look at the text, not the link."""
    write("dm-dan", "world", first)
    write("g-dc", "world", second)
    wider = row_of(second)["id"]
    stored_fold(row_of(first)["id"], wider)
    controls.delete_row(CARA, wider)
    controls.delete_row(DAN, wider)


def stored_fold(narrow: int, wider: int) -> None:
    """Close `narrow` by `wider`, as the old folding closed a copy it took for the same."""
    with store.transaction() as conn:
        pm = t.persona_memory.c
        values = {"valid_to": "2026-12-01", "closed_by": wider}
        conn.execute(update(t.persona_memory).where(pm.id == narrow).values(values))


PATHS: dict[str, Callable[[str, str], None]] = {
    "ADD beside ADD": _add,
    "UPDATE": _update,
    "fold into a wider copy": _fold_wider,
    "fold under a wider copy": _fold_narrower,
    "delete of the wider world row": _delete_wider,
    "delete over a stored fold": _delete_stored_fold,
}
WORLD_PATHS = ("delete of the wider world row", "delete over a stored fold")


def expected_open(case: Case) -> list[str]:
    """The texts that must be open after the case, as sentences (`names.sentence_key` aside:
    the exam compares texts it wrote)."""
    first, second = case.first, case.second
    if case.path == "UPDATE":
        return [first] if case.same else [second]
    if case.path in WORLD_PATHS:
        return [] if case.same else [first]
    if case.same:
        return [second] if case.path == "fold into a wider copy" else [first]
    return [first, second]


def cases(*, both_orders: bool = True) -> Iterator[Case]:
    """Every pair (in both orders) along every path, and every same-sentence variant."""
    for path in PATHS:
        who = WORLD if path in WORLD_PATHS else HUMAN
        for same, pairs in ((False, DIFFERENT), (True, SAME)):
            for a, b in pairs:
                x, y = a.format(who=who), b.format(who=who)
                yield Case(path, x, y, same)
                if both_orders:
                    yield Case(path, y, x, same)


def run_case(case: Case, *, built: bool = False) -> Tally:
    """One case in the configured (fresh) store: the world built (unless `built`), the path
    run, the verdict."""
    tally = Tally(cases=1)
    if not built:
        build()
    PATHS[case.path](case.first, case.second)
    open_rows = [r for r in rows() if r["valid_to"] is None]
    got = sorted(r["text"] for r in open_rows)
    want = sorted(expected_open(case))
    if got != want:
        if case.same and len(got) > len(want):
            tally.unfolded.append(str(case))
        elif len(got) < len(want):
            # fewer facts than said: folded when one of them is still there, else lost
            (tally.folded if got else tally.lost).append(str(case))
        else:
            tally.folded.append(str(case))
    about_dan = [r["id"] for r in open_rows if r["subject"] == HUMAN]
    if set(about_dan) - told(DAN):
        tally.untold.append(str(case))
    return tally


def exam(folder: Path, *, only: int | None = None) -> Tally:
    """Every case (the first `only` of each path and kind, when given), each in a store of
    its own."""
    template = migrated_template(folder)
    total = Tally()
    taken: dict[tuple[str, bool], int] = {}
    for n, case in enumerate(cases()):
        key = (case.path, case.same)
        if only is not None and taken.get(key, 0) >= only:
            continue
        taken[key] = taken.get(key, 0) + 1
        with fresh_store(template, folder / f"c{n}"):
            got = run_case(case)
        total.cases += 1
        total.lost += got.lost
        total.folded += got.folded
        total.unfolded += got.unfolded
        total.untold += got.untold
    return total


# --- the self-test ----------------------------------------------------------------------------


def old_sentence_key(text: str) -> str:
    """The folding before exact keys: word characters only (signs, currency, percent gone)."""
    return " ".join(names.words(text))


@contextmanager
def old_folding() -> Iterator[None]:
    with mock.patch("memory_worker.core.names.sentence_key", old_sentence_key):
        yield


def report(tally: Tally, took: float) -> str:
    lines = [
        f"{tally.cases} cases ({len(DIFFERENT)} minimal pairs and {len(SAME)} variants of one "
        f"sentence, both orders, {len(PATHS)} paths): {len(tally.lost)} facts lost, "
        f"{len(tally.folded)} wrongly folded, {len(tally.unfolded)} left unfolded, "
        f"{len(tally.untold)} untold, {took:.0f} s"
    ]
    for what, found in (
        ("lost", tally.lost),
        ("wrongly folded", tally.folded),
        ("unfolded", tally.unfolded),
        ("untold", tally.untold),
    ):
        lines += [f"  {what}: {c}" for c in found[:5]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--self-test", action="store_true", help="with the old folding")
    parser.add_argument("--only", type=int, default=None, help="cases per path and kind")
    a = parser.parse_args(argv)
    logging.getLogger("memory_worker").setLevel(logging.CRITICAL)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mw-integrity-") as tmp:
        with old_folding() if a.self_test else nullcontext():
            tally = exam(Path(tmp), only=a.only)
    print(report(tally, time.monotonic() - started))
    if a.self_test:
        caught = bool(tally.folded or tally.lost)
        print(f"the exact folding, removed: {'caught' if caught else 'NOT CAUGHT'}")
        return 0 if caught else 1
    return 1 if tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
