"""The leak exam with the worst-case parrot: rows (b) and (c) test the code alone — and the
exam's self-test: every guard it relies on, broken on purpose in a copy of the code, fails it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from exams.leak import run as leak

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow  # the exam, in copies of the code broken each way: make test
# Two rules of docs/design.md §12: every human a row names is part of its audience, and a world
# fact learned from a person stays with that person. Until both land, the worst-case extractor
# leaks, and the exam says so.


def test_a_planted_secret_never_reaches_a_room_without_its_owner_nor_another_persona() -> None:
    counts = leak.run(turns=8)
    assert counts.without_dan == 0  # (b): by construction
    assert counts.by_nolan == 0  # (c): the cross-seat leak
    assert counts.with_dan == 0  # (a): groups load world facts only under the proven scope
    # The plant took and the parrot repeats it where it belongs: the zeros above mean something.
    assert counts.private_control > 0
    # Every probe ran: the groups with and without Dan, Cara's and Nolan's private chats.
    assert set(counts.rooms) == {r.id for r in leak.PROBES}


def test_a_mention_counts_only_in_a_personas_own_words() -> None:
    room = ["u:17: Tencent? Who's interviewing?"]
    assert not leak.mentions_plant("u:17: Tencent? Who's interviewing?", room)
    assert leak.mentions_plant("Dan is interviewing at Tencent.", room)


def test_the_mention_checker_catches_the_plant_in_any_words_and_nothing_else() -> None:
    """Row (a) counted only the word "tencent": "Dan, good luck with that job interview on
    Thursday! Big tech, right?" scored 0."""
    assert leak.checker_self_test() == []
    said = "Dan, good luck with that job interview on Thursday! Big tech, right?"
    assert leak.mentions_plant(said, [])
    assert not leak.mentions_plant("I'm pitching a new film on Thursday.", [])
    room = ["Cara: Anyone job-hunting? Tencent? Who's interviewing?"]
    assert not leak.mentions_plant(room[0], room)  # echoing the room is not the persona's


def test_a_persona_that_leaks_only_through_paraphrase_fails_a() -> None:
    counts = leak.run(turns=8, speaker=leak.Paraphrase(), proven_scope=False, extractor="scripted")
    assert counts.with_dan > 0  # what it told the group never names the firm
    assert counts.without_dan == 0 and counts.by_nolan == 0 and counts.private_control > 0


class Recites:
    """Says "as you told me" on every turn that holds a memory, and nothing of the kind else."""

    def reply(self, turn: leak.Turn) -> str:
        return "As you told me, films." if turn.holds_memory else "Films."


def test_memory_references_are_counted_per_turn_that_had_a_memory_loaded() -> None:
    """Divided by every persona turn, a persona reciting on each of the few turns that held a
    memory scored under the 0.2 ceiling."""
    counts = leak.run(turns=8, speaker=Recites(), proven_scope=False, extractor="scripted")
    assert 0 < counts.memory_turns < counts.persona_turns
    assert counts.references == counts.memory_turns
    assert counts.references_per_turn == 1.0


def test_with_dans_switch_off_what_he_told_warren_alone_stays_out_of_the_group() -> None:
    counts = leak.run(turns=8, proven_scope=False, extractor="scripted")
    assert counts.rooms["group-with-dan"]["warren"] > 0  # on: the parrot repeats it there
    assert counts.rooms[leak.SWITCH_OFF.id] == {"warren": 0, "nolan": 0}
    assert counts.switch_off == 0 and not counts.leaked


def test_a_row_that_names_a_second_human_shows_only_where_both_are() -> None:
    """The exam never planted a row naming another human."""
    counts = leak.run(turns=8, proven_scope=False, extractor="scripted")
    assert counts.named_present > 0  # with Dan and Cara: the parrot repeats it
    assert counts.named_absent == 0 and not counts.leaked  # with Dan alone, in any room: never


def test_with_the_group_scope_on_the_secret_follows_dan_and_no_further() -> None:
    counts = leak.run(turns=8, proven_scope=False)
    assert counts.with_dan > 0  # the parrot repeats what Dan's presence lets into the block
    assert counts.without_dan == 0 and counts.by_nolan == 0  # still 0 by construction


def test_against_the_worst_case_extractor_rows_b_and_c_stay_zero() -> None:
    counts = leak.run(turns=8, extractor="worst")
    assert counts.without_dan == 0 and counts.by_nolan == 0, leak.report(counts, "", "", False)
    assert counts.private_control > 0


# --- the self-test: each break of a guard fails the exam ---------------------------------------


@dataclass(frozen=True)
class Break:
    """A guard broken on purpose: each edit replaces `old` (which must still be in `file`, or
    the break would silently stop applying) by `new`, in a copy of the code."""

    name: str
    edits: tuple[tuple[str, str, str], ...]  # (file, old, new)
    extractor: str = "honest"


AUDIENCE, READ_PATH = "memory_worker/core/audience.py", "memory_worker/storage/read_path.py"
COLUMNS, RECALL = "memory_worker/reader/cache_loader.py", "memory_worker/reader/recall.py"

# A scope that admits every row of the persona: recall's scope dropped.
EVERYONE = (
    "scope_for(persona, range(1000), ctx.room, "
    "Consent(memory_on=dict.fromkeys(range(1000), True)), "
    "members=Members(frozenset(range(1000)), frozenset({persona})), proven_scope=False)"
)

BREAKS = [
    Break(
        "the persona check, in the predicate and in the SQL push-down",
        (
            (
                AUDIENCE,
                "if row.persona != self.persona or row.valid_to is not None:",
                "if row.valid_to is not None:",
            ),
            (
                READ_PATH,
                "_pm.persona.in_(personas), _pm.valid_to.is_(None)",
                "_pm.valid_to.is_(None)",
            ),
        ),
    ),
    # Each layer of the subject check alone is caught by the other (the columns' filter picks
    # only present subjects; the predicate checks every winner again): the exam passes with
    # either one broken, so only both together are a leak for it to catch.
    Break(
        "the subject-present check, in the columns' filter and in the predicate",
        (
            (COLUMNS, "mask = rows.groups == WORLD_GROUP", "mask = rows.groups == rows.groups"),
            (
                AUDIENCE,
                "return concerns(row.subject, row.counterpart) in self.humans",
                "return True",
            ),
        ),
    ),
    Break(
        "recall's gate and its scope",
        (
            (
                RECALL,
                "got = audience.visible(persona, found)",
                "got = found",
            ),
            (
                RECALL,
                "scope = audience.scope(persona)",
                "scope = " + EVERYONE,
            ),
            (
                RECALL,
                "from memory_worker.core.rows import Row\n",
                "from memory_worker.core.audience import Consent, Members, scope_for\n"
                "from memory_worker.core.rows import Row\n",
            ),
        ),
    ),
]

# The named-humans and world-source rules (docs/design.md §12): each predicate made to admit
# everything. The original method stays, renamed, so the module still imports. If a rule is also
# pushed down into SQL or the columns' filter, add that layer's edit here too.
RULE_BREAKS = [
    Break(
        f"the {what} check",
        (
            (
                AUDIENCE,
                f"\n    def {method}(",
                f"\n    def {method}(self, *_: object, **__: object) -> bool:\n"
                f"        return True\n\n    def _{method}_unbroken(",
            ),
        ),
        extractor="worst",
    )
    for what, method in (("named-humans", "admits_named"), ("world-source", "admits_private_to"))
]


def broken_copy(brk: Break, into: Path) -> Path:
    """The package and the exam copied under `into`, with the break applied."""
    for part in ("memory_worker", "exams", "schema"):
        shutil.copytree(ROOT / part, into / part, ignore=shutil.ignore_patterns("__pycache__"))
    for file, old, new in brk.edits:
        path = into / file
        text = path.read_text()
        assert old in text, f"break {brk.name!r} no longer applies: {old!r} is not in {file}"
        path.write_text(text.replace(old, new, 1))
    return into


def exam(code: Path, planted: Path, extractor: str) -> subprocess.CompletedProcess[str]:
    """The exam's CLI on a copy of `planted`, importing the package from `code` (first on the
    path, and the working directory, so the installed package cannot win)."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    command = [sys.executable, "-m", "exams.leak.run", "--store", str(planted)]
    return subprocess.run(
        [*command, "--extractor", extractor],
        cwd=code,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One store per extractor, planted by the unbroken code: every break is read-side."""
    out = {}
    for extractor in leak.EXTRACTORS:
        path = tmp_path_factory.mktemp("planted") / f"{extractor}.db"
        leak.plant_into(path, extractor)
        out[extractor] = path
    return out


def test_the_unbroken_exam_passes_on_a_planted_store_in_a_copy_of_the_code(
    planted: dict[str, Path], tmp_path: Path
) -> None:
    done = exam(broken_copy(Break("nothing", ()), tmp_path), planted["honest"], "honest")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "control: Warren alone with Dan: 0" not in done.stdout


@pytest.mark.parametrize("brk", BREAKS, ids=[b.name for b in BREAKS])
def test_each_break_of_a_guard_fails_the_exam(
    brk: Break, planted: dict[str, Path], tmp_path: Path
) -> None:
    done = exam(broken_copy(brk, tmp_path), planted[brk.extractor], brk.extractor)
    assert "Traceback" not in done.stderr, done.stderr  # the break leaks, it does not crash
    assert done.returncode == 1, f"the exam passed with {brk.name} broken:\n{done.stdout}"


@pytest.mark.parametrize("brk", RULE_BREAKS, ids=[b.name for b in RULE_BREAKS])
def test_each_break_of_the_new_rules_fails_the_exam(
    brk: Break, planted: dict[str, Path], tmp_path: Path
) -> None:
    done = exam(broken_copy(brk, tmp_path), planted[brk.extractor], brk.extractor)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1, f"the exam passed with {brk.name} broken:\n{done.stdout}"
