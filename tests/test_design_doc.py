"""docs/design.md is what the code cites for its rules: every section it or the code cites
exists, its glossary defines the words the code uses without defining them, and the repository
stands alone — no tracked file names a document outside it, or an issue by its number (those
belong in commit messages)."""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"
SECTION = re.compile(r"§(\d+(?:\.\d+)?)")
# "design.md §4", "docs/design.md §2.1, §7, §11", "design.md §4.1 and §4.3": every number cited.
CITED = re.compile(r"design\.md((?:,?\s(?:and\s|or\s)?§\d+(?:\.\d+)?)+)")
# A Markdown link into the design doc at a heading: "[…](design.md#41-the-leak-exam)".
LINKED = re.compile(r"\]\(([^)\s#]*design\.md)#([^)\s]+)\)")

# What a file of this repository may not say, with why. The LoCoMo data set lives outside the
# repository by its licence (docs/testing.md, "LoCoMo"): a path to that data is the one exception.
LOCOMO = "../shared/data/locomo/"
OUTSIDE = {
    "the outside design document": re.compile(r"DESIGN\.md"),
    "a section of the outside source design": re.compile(r"\bseed(?:'s)? §", re.IGNORECASE),
    "a path outside the repository": re.compile(r"\.\./shared(?!/data/locomo/)"),
    "an issue by its number": re.compile(r"\bissues? #?\d|\(#\d+\)", re.IGNORECASE),
}

GLOSSARY_TERMS = (
    "audience",
    "block",
    "candidate",
    "claim",
    "cursor",
    "decision",
    "dispatch",
    "flow fuzzer",
    "floor",
    "follow scope",
    "human",
    "label",
    "leak exam",
    "line",
    "park",
    "persona",
    "proven scope",
    "recall",
    "room",
    "row",
    "seed rule",
    "spell",
    "subject-present rule",
    "sweep",
    "toast",
    "verdict",
    "witness",
)


def headings() -> set[str]:
    """The section numbers the doc's headings carry: '## §4 …' → '4', '### §4.1 …' → '4.1'."""
    found = re.findall(r"^#{2,3} §(\d+(?:\.\d+)?) ", DESIGN.read_text(), re.MULTILINE)
    return set(found)


def anchors() -> set[str]:
    """The anchors a Markdown renderer gives the doc's headings, GitHub's way: lower case, every
    character but letters, digits, '-', '_' and spaces dropped, spaces made '-'.
    '### §4.1 The leak exam' → '41-the-leak-exam'; '## §7 Failure modes → guards' →
    '7-failure-modes--guards'."""
    titles = re.findall(r"^#{1,6} (.+?)\s*$", DESIGN.read_text(), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", t.lower()).replace(" ", "-") for t in titles}


def glossary() -> dict[str, str]:
    """The glossary's entries: '**term** — definition' paragraphs after '## §N Glossary'."""
    text = DESIGN.read_text().split(" Glossary\n", 1)[1]
    entries = re.findall(r"^\*\*(.+?)\*\*(?: \([^)]*\))? — (.+?)(?=\n\n|\Z)", text, re.S | re.M)
    return {term: definition for term, definition in entries}


@cache
def tracked() -> dict[str, str]:
    """Every file git tracks, as text, by its path; binary files (a NUL byte, or not UTF-8) left
    out. Skips where there is no git checkout (an unpacked sdist)."""
    try:
        done = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: nothing says which files are the repository's")
    texts = {}
    for name in done.stdout.decode().split("\0"):
        path = ROOT / name
        if not name or not path.is_file():
            continue  # deleted in the working tree, not yet committed
        data = path.read_bytes()
        if b"\0" in data:
            continue
        try:
            texts[name] = data.decode()
        except UnicodeDecodeError:
            continue
    return texts


def outside_references(name: str, text: str) -> list[str]:
    """Each line of `text` that names a document outside the repository or an issue number."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for what, pattern in OUTSIDE.items():
            if pattern.search(line):
                found.append(f"{name}:{number}: {what}: {line.strip()[:120]}")
    return found


def test_every_section_the_doc_cites_of_itself_exists() -> None:
    missing = sorted(set(SECTION.findall(DESIGN.read_text())) - headings(), key=str)
    assert not missing, f"docs/design.md cites sections it does not have: {missing}"


def test_every_section_the_repository_cites_exists() -> None:
    have = headings()
    missing = []
    for name, text in sorted(tracked().items()):
        for cited in CITED.findall(text):
            missing += [f"{name}: §{n}" for n in SECTION.findall(cited) if n not in have]
    assert not missing, f"cited sections docs/design.md does not have: {missing}"


def test_every_link_into_the_doc_lands_on_a_heading() -> None:
    have = anchors()
    broken = []
    for name, text in sorted(tracked().items()):
        if not name.endswith(".md"):
            continue
        for target, anchor in LINKED.findall(text):
            if (ROOT / name).parent.joinpath(target).resolve() != DESIGN:
                broken.append(f"{name}: {target} is not docs/design.md")
            elif anchor not in have:
                broken.append(f"{name}: #{anchor}")
    assert not broken, f"links to headings docs/design.md does not have: {broken}"


def test_no_file_names_a_document_outside_the_repository() -> None:
    found = [
        hit for name, text in sorted(tracked().items()) for hit in outside_references(name, text)
    ]
    assert not found, (
        "the repository stands alone: cite docs/design.md by section, and leave issue numbers "
        "to commit messages:\n" + "\n".join(found)
    )


def test_the_check_sees_each_kind_of_outside_reference() -> None:
    # Built from pieces, so this file does not hold the strings it forbids.
    doc, sec, up, num = "DESIGN" + ".md", "seed" + " §4", ".." + "/shared", "issue" + " 31"
    for line in (
        f"see {doc}",
        f"({sec})",
        f"{sec.capitalize()}'s rule",
        f"{up}/seed/x.txt",
        f"({num})",
        "(#" + "12)",
    ):
        assert outside_references("x.py", line), line
    assert not outside_references("x.py", f"read from {LOCOMO}locomo10.json")
    assert not outside_references("x.py", "the seed that replays its world; docs/design.md §4")


def test_the_glossary_defines_every_word_the_code_leans_on() -> None:
    defined = glossary()
    missing = [t for t in GLOSSARY_TERMS if not defined.get(t, "").strip()]
    assert not missing, f"docs/design.md's glossary lacks: {missing}"


def test_the_floor_is_defined_in_both_its_meanings() -> None:
    floor = glossary()["floor"]
    assert "Off the floor" in floor and "bare" in floor and "SELECT" in floor
