"""docs/design.md is what the code cites for its rules: every section it or the code cites
exists, and its glossary defines the words the code uses without defining them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"
SECTION = re.compile(r"§(\d+(?:\.\d+)?)")
CITED = re.compile(r"design\.md §(\d+(?:\.\d+)?)")
SEARCHED = ("memory_worker", "tests", "benchmarks", "exams", "schema", "docs")

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
    "spell",
    "sweep",
    "toast",
    "verdict",
    "witness",
)


def headings() -> set[str]:
    """The section numbers the doc's headings carry: '## §4 …' → '4', '### §4.1 …' → '4.1'."""
    found = re.findall(r"^#{2,3} §(\d+(?:\.\d+)?) ", DESIGN.read_text(), re.MULTILINE)
    return set(found)


def glossary() -> dict[str, str]:
    """The glossary's entries: '**term** — definition' paragraphs after '## §N Glossary'."""
    text = DESIGN.read_text().split(" Glossary\n", 1)[1]
    entries = re.findall(r"^\*\*(.+?)\*\*(?: \([^)]*\))? — (.+?)(?=\n\n|\Z)", text, re.S | re.M)
    return {term: definition for term, definition in entries}


def test_every_section_the_doc_cites_of_itself_exists() -> None:
    missing = sorted(set(SECTION.findall(DESIGN.read_text())) - headings(), key=str)
    assert not missing, f"docs/design.md cites sections it does not have: {missing}"


def test_every_section_the_repository_cites_exists() -> None:
    have = headings()
    missing = []
    paths = [*ROOT.glob("*.md"), *(p for f in SEARCHED for p in (ROOT / f).rglob("*"))]
    for path in sorted(paths):
        if path.suffix not in (".py", ".md", ".txt") or not path.is_file():
            continue
        for number in CITED.findall(path.read_text(errors="replace")):
            if number not in have:
                missing.append(f"{path.relative_to(ROOT)}: §{number}")
    assert not missing, f"cited sections docs/design.md does not have: {missing}"


def test_the_glossary_defines_every_word_the_code_leans_on() -> None:
    defined = glossary()
    missing = [t for t in GLOSSARY_TERMS if not defined.get(t, "").strip()]
    assert not missing, f"docs/design.md's glossary lacks: {missing}"


def test_the_floor_is_defined_in_both_its_meanings() -> None:
    floor = glossary()["floor"]
    assert "Off the floor" in floor and "bare" in floor and "SELECT" in floor
