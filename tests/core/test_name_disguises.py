"""Names through disguise (docs/design.md §12, names normalised once): a member's name is
found through digits and signs for letters (4/a, 3/e, 0/o, 1/i/l, 5/s, 7/t, @/a) and through
Greek and Cyrillic spellings, generated for every name of the test worlds; numbers, numbers
with units and everyday words name nobody new (LoCoMo 1–6, when it is there)."""

from __future__ import annotations

import json
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exams.flow.world import NAMES
from memory_worker.core import names

# Every name the test worlds give a human (exams/flow/world.py and tests/write/).
WORLD_NAMES = sorted(
    {*NAMES, "Dan", "Cara", "Eve", "Zed", "Bob", "Warren", "Maria de la Cruz Lopez", "Will"}
)
PEOPLE = dict(enumerate(WORLD_NAMES, start=100))
# The letters each disguise may replace: a digit or sign, a Greek letter, a Cyrillic letter.
DIGITS = {"a": "4@", "e": "3", "o": "0", "i": "1", "l": "1", "s": "5$", "t": "7"}
GREEK = dict(zip("abdegiklmnoprstuzfx", "αβδεγικλμνοπρστυζφξ", strict=True)) | {"c": "κ"}
CYRILLIC = dict(zip("abvgdeziklmnoprstufh", "абвгдезиклмнопрстуфх", strict=True)) | {"c": "к"}
LOCOMO = Path(__file__).resolve().parents[3] / "shared" / "data" / "locomo" / "locomo10.json"


def parts() -> list[tuple[int, str]]:
    """(id, word) for every word of three letters or more of every test-world name."""
    return [
        (uid, w)
        for uid, name in PEOPLE.items()
        for w in name.split()
        if len(w) >= 3 and w.isalpha()
    ]


@st.composite
def disguised(draw: st.DrawFn) -> tuple[int, str, str]:
    """A name part with some of its letters swapped for a digit, a Greek or a Cyrillic letter."""
    uid, word = draw(st.sampled_from(parts()))
    script = draw(st.sampled_from([DIGITS, GREEK, CYRILLIC]))
    out = []
    for ch in word:
        swaps = script.get(ch.lower(), "")
        if swaps and draw(st.booleans()):
            sub = draw(st.sampled_from(swaps))
            out.append(sub.upper() if ch.isupper() and sub.isalpha() else sub)
        else:
            out.append(ch)
    text = "".join(out)
    if text == word:  # nothing swapped: swap the first letter that can be
        n = next((i for i, ch in enumerate(word) if ch.lower() in script), None)
        if n is None:
            return uid, word, word
        sub = script[word[n].lower()][0]
        text = (
            word[:n] + (sub.upper() if word[n].isupper() and sub.isalpha() else sub) + word[n + 1 :]
        )
    return uid, word, text


@given(disguised())
def test_a_test_world_name_in_any_disguise_names_its_human(case: tuple[int, str, str]) -> None:
    uid, word, text = case
    if names._NUMBER_WITH_UNIT.fullmatch(text.casefold()):
        return  # "5am" is a time before it is Sam: the one disguise read as what it says
    assert uid in names.humans_named(f"u:7 says {text} is pregnant.", PEOPLE), (word, text)


@pytest.mark.parametrize(
    "text",
    [
        "u:7 says C4ra is pregnant.",
        "u:7 says Καρα is pregnant.",
        "u:7 says Кара is pregnant.",
        "u:7 says C@ra is pregnant.",
        "u:7 says c4r4 is pregnant.",
        "u:7 pinged @C4raWu.",
        "u:7 says CΑRΑ is pregnant.",
    ],
)
def test_cara_is_named_through_digits_and_other_scripts(text: str) -> None:
    assert 17 in names.humans_named(text, {17: "Cara Wu", 42: "Dan"})


@pytest.mark.parametrize(
    "text",
    [
        "Dan will call at 10.",
        "Dan ran 10 km at 7am on the 3rd, 5km more at 4pm.",
        "Dan paid $50 for a 3D print and an A1 steak.",
        "Dan's code is 1O, or 10.",
        "Dan bought 4 tickets for 30 dollars.",
    ],
)
def test_numbers_units_and_short_words_name_nobody(text: str) -> None:
    people = {1: "Lo", 2: "Ed", 3: "Al", 4: "Sam", 5: "Io", 6: "Will", 7: "Tom", 42: "Dan"}
    assert names.humans_named(text, people) == {42}


# Everyday words with digits or signs in them: model numbers, chemistry, slang, units.
EVERYDAY_WITH_DIGITS = (
    "mp3 mp4 b2b h2o co2 covid19 4x4 ps5 g7 x86 i7 w10 3g 4g 5g f1 a4 k9 r2d2 c3po b12 d3 4ever"
    " gr8 l8r b4 2moro m8 1st 2nd 3rd 4th 5th 18th 1900s 5K 2D 200A 7am 10pm 5km 3kg 90s 24h"
    " 360 1080p 4k 8k 3d 2fa 1password 7eleven 9to5 24/7 $5 $50k 50% #1 @home me@home"
).split()


@pytest.mark.parametrize("word", EVERYDAY_WITH_DIGITS)
def test_everyday_words_with_digits_name_no_one_of_the_test_worlds(word: str) -> None:
    assert names.humans_named(f"Bought a {word} thing.", PEOPLE) == set()


def test_a_lower_case_disguise_of_an_everyday_word_names_nobody() -> None:
    assert names.humans_named("Dan w1ll call.", {11: "Will"}) == set()
    assert names.humans_named("Dan says W1ll called.", {11: "Will"}) == {11}


@pytest.mark.skipif(not LOCOMO.exists(), reason="LoCoMo is not here (docs/testing.md)")
def test_the_disguises_add_no_match_on_locomo_1_to_6() -> None:
    """Every turn of LoCoMo's conversations 1–6 against every speaker of them and every name of
    the test worlds: the humans it names are the same with and without the disguises."""
    data = json.loads(LOCOMO.read_text())[:6]
    texts, speakers = [], set()
    for conv in data:
        c = conv["conversation"]
        speakers |= {c["speaker_a"], c["speaker_b"]}
        texts += [
            t["text"]
            for k, v in c.items()
            if k.startswith("session_") and isinstance(v, list)
            for t in v
        ]
    people = dict(enumerate(sorted(set(WORLD_NAMES) | speakers)))
    new = [names.humans_named(x, people) for x in texts]
    with mock.patch.object(names, "_disguised", lambda text, capitalised=False: set()):
        old = [names.humans_named(x, people) for x in texts]
    assert len(texts) > 3000 and sum(map(len, old)) > 1000  # it did read the conversations
    assert [(x, o, n) for x, o, n in zip(texts, old, new, strict=True) if o != n] == []
