"""Names, normalised once: how a human's name is found in text, however it is spelled.

Every name check of the project goes through here — the write path's guard (a world fact
names no human), the humans a row names (`named`: the row shows only where they are in the
audience), the store's name index (`storage.users`) and the migration that fills it — so a
spelling that gets past one gets past none. docs/design.md §12, "Names, normalised once".

`fold` is the one normalisation: Unicode compatibility forms (full-width "Ｃａｒａ", ligatures),
invisible characters dropped (zero-width spaces and joiners, soft hyphens, Hangul fillers),
accents stripped ("Zoë" → "zoe"), characters that look like Latin letters read as those
letters (Cyrillic "Саrа" → "cara", the Unicode consortium's confusables list), then case
folding. A human is named by any distinctive part of the name they go by: the whole name of
any length, each word of two letters or more ("Cara", "Wu", "Wu's", "Ms Wu"), the words run
together as in a handle ("@CaraWu", "@cara_wu"), a name in a script written without spaces
found inside a sentence ("我和李雷去了"), and their `u:` id in any width ("ｕ：４２"). A word in
disguise is read as the name it spells (`readings`): digits and signs for letters ("C4ra"),
Greek or Cyrillic letters for Latin ones ("Καρα").

Erring wide is the safe side (fail closed): a false match holds a row back where someone it
seems to name is absent, never shows one. One exception keeps the rule usable: a name part
that is also an everyday word ("Will", "May", "Grace") counts only where it is written with a
capital, as names are; lower-case "will" in "Dan will call" names nobody.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Mapping
from functools import lru_cache

# Characters that render as nothing and so can hide inside a name: every format character
# (category Cf: zero-width space, joiners, soft hyphen, bidi marks, BOM) and these letters.
_FILLERS = frozenset("\u115f\u1160\u3164\uffa0\u034f\u180b\u180c\u180d\u180e")
_APOSTROPHES = str.maketrans({"’": "'", "ʼ": "'", "‘": "'", "`": "'", "´": "'"})
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*'?")
# "u:17", and "user 17" (the word and an id: "User17", "user #17", "USER_17") — on folded text,
# so any width or case.
_HUMAN_REF = re.compile(r"\b(?:u\s*:|user\s*[:#_\-]?)\s*(\d+)", re.IGNORECASE)
# Scripts written without spaces between words: a name in them is found as a substring.
_UNSPACED = re.compile(
    r"[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff"
    r"\uf900-\ufaff\U00020000-\U0002fa1f]+"
)
MAX_NAME_WORDS = 6  # a whole name of up to this many words is looked up as one gram
UNSPACED_GRAM_MAX = 8  # the longest name looked up inside an unspaced run, in characters
MIN_PART_CHARS = 2  # one letter is an initial, not a name

# Words a name may share with everyday English, and the particles of names ("de la", "van"):
# they name someone only when capitalised.
EVERYDAY_WORDS = frozenset(
    """
    a about after all also am an and any april are art as at august autumn be bill bliss
    but by can chance crystal dawn day did do does dusty early eve faith fall for frank from
    gene get go grace had has have he her hero him his hope hunter i if in is it its ivy jack
    jay joy june just king lane lee love lucky mark march max may me melody mike miles more
    most my no not of on one or our over pat patience penny pearl rich river robin rock rose
    ruby rusty sage she sky so some summer sunny than that the their them then there they
    this to too up us victor was we were what when where who will with won would yes you
    young your
    al ap bin ben da das de del della den der di dos du el la las le les los st van von y
    """.split()
)


@lru_cache(maxsize=1)
def _lookalikes() -> dict[int, str]:
    """Non-ASCII characters that look like an ASCII letter or digit → that character, from
    the Unicode confusables data (the `confusable-homoglyphs` package). Characters of the
    unspaced scripts are left alone: they are letters of names, not disguises."""
    from confusable_homoglyphs.confusables import confusables_data  # type: ignore[import-untyped]

    table: dict[int, str] = {}
    for char, glyphs in confusables_data.items():
        if len(char) != 1 or char.isascii() or _UNSPACED.match(char):
            continue
        for glyph in glyphs:
            c = glyph["c"]
            if len(c) == 1 and c.isascii() and c.isalnum():
                table[ord(char)] = c
                break
    return table


def fold(text: str, *, keep_case: bool = False) -> str:
    """The one normalisation every name check uses (see the module's docstring)."""
    t = unicodedata.normalize("NFKC", _plain(text).translate(_lookalikes()).translate(_APOSTROPHES))
    return t if keep_case else t.casefold()


def _plain(text: str) -> str:
    """Compatibility forms, invisible characters and accents undone; nothing else."""
    t = unicodedata.normalize("NFKC", text or "")
    t = "".join(c for c in t if c not in _FILLERS and unicodedata.category(c) != "Cf")
    t = unicodedata.normalize("NFKD", t)
    return "".join(c for c in t if not unicodedata.combining(c))


# --- disguises: digits for letters, names written in another script --------------------------

# What a character may stand for in a disguised name: digits and signs for the letters they
# look like ("C4ra", "@nna", "5ara"), Greek and Cyrillic letters for the Latin ones they are
# read as ("Καρα", "Кара": a kappa is read as k or c). Read only inside a word that has
# letters of its own (`readings`).
_STANDS_FOR: dict[str, tuple[str, ...]] = {
    "0": ("o",),
    "1": ("i", "l"),
    "3": ("e",),
    "4": ("a",),
    "5": ("s",),
    "7": ("t",),
    "@": ("a", ""),  # "@nna", or a handle's "@"
    "$": ("s",),
    **{
        g: tuple(r.split("/"))
        for g, r in zip(
            "αβγδεζηθικλμνξοπρσςτυφχψω",
            "a b/v g d e z i/e th i k/c l m n x o p r s s t u/y f/ph ch/h/x ps o".split(),
            strict=True,
        )
    },
    **{
        c: tuple(r.split("/"))
        for c, r in zip(
            "абвгдеёжзийклмнопрстуфхцчшщъыьэюя",
            (
                "a b v g d e e zh z i i/y k/c l m n o p r s/c t u f h/kh ts/c ch sh sch - y - e"
                " yu ya"
            ).split(),
            strict=True,
        )
    },
}
_DIGIT_SIGNS = frozenset("0123456789@$")
# A number with its unit, ordinal or time is a number, not a disguise: "7am", "3rd", "5km".
_NUMBER_WITH_UNIT = re.compile(
    r"\d+(?:st|nd|rd|th|s|am|pm|h|hr|hrs|min|mins|k|m|km|mi|kg|g|lb|lbs|ft|cm|mm|ml|l|x|d"
    r"|gb|mb|tb|yo|yr|yrs|mph|kph|kmh|p)"
)
_TOKEN = re.compile(r"(?:[^\W_]|[@$])+")
MAX_READINGS = 32  # readings of one word at most: a long word of ambiguous letters stops here
MIN_READING_CHARS = 3  # "A1", "3d", "b4" are not read as "Al", "Ed", "Ba"


def readings(word: str) -> list[str]:
    """How a disguised word may be read as a name, folded: "C4ra" → cara; "Καρα" → kara,
    cara; "A1ice" → aiice, alice. Nothing for a word with nothing to read otherwise, with no
    letter ("10", "$50"), a number with its unit ("7am", "5km"), and a reading shorter than
    MIN_READING_CHARS ("A1", "3d": two-letter names are found as written)."""
    low = _plain(word).casefold()
    if not any(c in _STANDS_FOR for c in low) or _NUMBER_WITH_UNIT.fullmatch(low):
        return []
    if not any(c.isalpha() for c in low):
        return []
    options = [_STANDS_FOR.get(c, (c,)) for c in low]
    found = {
        _clean(fold("".join(p).replace("-", "")))
        for p in itertools.islice(itertools.product(*options), MAX_READINGS)
    }
    return sorted(
        w for w in found if len(w) >= MIN_READING_CHARS and not any(c in _DIGIT_SIGNS for c in w)
    )


def _disguised(text: str, *, capitalised: bool = False) -> set[str]:
    """The readings of every disguised word of `text` (`readings`); with `capitalised`, only
    of the words written as names are: a capital first, or a digit or sign standing for one."""
    found: set[str] = set()
    if text.isascii() and not _DIGIT_SIGNS.intersection(text):
        return found  # most text: nothing to read otherwise
    for word in _TOKEN.findall(_plain(text)):
        if capitalised and not (word[0].isupper() or word[0] in _DIGIT_SIGNS):
            continue
        found.update(readings(word))
    return found


def words(text: str) -> list[str]:
    """Folded words, possessives dropped: "Wu's" and "Wu’s" are "wu"."""
    return [w for w in (_clean(m) for m in _WORD.findall(fold(text))) if w]


def sentence_key(text: str) -> str:
    """A row's sentence as exactly-once across audiences compares it (the commit's fold,
    `write.copies`): two rows fold only when they say the same sentence. Unicode compatibility
    forms (NFKC: full-width "ＨＩＶ＋" is "HIV+"), case and runs of whitespace are all that may
    differ; every letter, digit, sign, currency, unit, percent and punctuation mark counts, so
    "HIV+" and "HIV-", "$50k" and "€50k", "C++" and "C#", "90%" and "90" stay two facts.

    Not `fold`, which is for finding names and errs wide: here a wrong fold loses a fact, a
    missed one only keeps a duplicate, so everything doubtful stays apart. Three exceptions
    to NFKC and case folding, each a minimal pair: superscripts, subscripts and vulgar
    fractions keep their form ("10²" is not "102", "½" is not "12"), and "ß" stays "ß" ("Maße"
    is not "Masse")."""
    pieces = _kept_forms().split(text)  # the kept characters at odd indices
    said = "".join(
        ("ß" if p == "\u1e9e" else p) if n % 2 else _casefold(unicodedata.normalize("NFKC", p))
        for n, p in enumerate(pieces)
    )
    return " ".join(said.split())


def _casefold(text: str) -> str:
    """Case folded, but "ß" kept (`sentence_key`)."""
    return "ß".join(part.casefold() for part in text.split("ß"))


@lru_cache(maxsize=1)
def _kept_forms() -> re.Pattern[str]:
    """The characters `sentence_key` keeps as written: those NFKC would turn into characters
    they differ from in meaning (superscripts, subscripts, vulgar fractions), and capital ẞ."""
    tags = ("<super>", "<sub>", "<fraction>")
    kept = [
        chr(i) for i in range(0x80, 0x20000) if unicodedata.decomposition(chr(i)).startswith(tags)
    ]
    return re.compile("([" + re.escape("".join(kept)) + "\u1e9e])")


def search_key(text: str) -> str:
    """A text as the page's search compares it, case-blind in every script: compatibility
    forms composed (NFKC: "Café" typed with a combining accent is "Café") and case folded
    ("CAFÉ" → "café", "STRASSE" → "strasse"). Unlike `fold`, letters stay the letters they
    are: a search finds what was written, not its lookalikes."""
    return unicodedata.normalize("NFKC", text or "").casefold()


def _clean(word: str) -> str:
    return word.removesuffix("'s").rstrip("'")


def human_refs(text: str) -> set[int]:
    """The humans `text` names by id: `u:42` in any width, spacing or disguise."""
    return {int(m) for m in _HUMAN_REF.findall(fold(text))}


def name_parts(name: str) -> dict[str, bool]:
    """The distinctive parts of a display name → whether the part is an everyday word (then it
    names someone only when capitalised). "Cara Wu" → cara, wu, "cara wu", carawu."""
    parts = words(name)
    found: dict[str, bool] = {}
    if not parts:
        return found
    for p in parts:
        if len(p) >= MIN_PART_CHARS:
            found[p] = p in EVERYDAY_WORDS
    if len(parts) > 1:
        found[" ".join(parts)] = False
        found["".join(parts)] = False
    return found


def text_grams(text: str) -> set[str]:
    """Every string of `text` a name part could equal: runs of 1..MAX_NAME_WORDS folded words
    (joined by a space, and run together for handles), and the substrings of each run of an
    unspaced script. What the store's name index is asked for."""
    parts = words(text)
    grams: set[str] = set()
    for n in range(1, MAX_NAME_WORDS + 1):
        for i in range(len(parts) - n + 1):
            run = parts[i : i + n]
            grams.add(" ".join(run))
            if n > 1:
                grams.add("".join(run))
    for run in _UNSPACED.findall(fold(text)):
        for i in range(len(run)):
            for j in range(i + MIN_PART_CHARS, min(len(run), i + UNSPACED_GRAM_MAX) + 1):
                grams.add(run[i:j])
    return grams | _disguised(text)


def _capitalised(text: str) -> set[str]:
    """The folded words of `text` that were written with a capital letter."""
    written = _WORD.findall(fold(text, keep_case=True))
    return {_clean(w).casefold() for w in written if w[0].isupper()} | _disguised(
        text, capitalised=True
    )


def humans_named(text: str, people: Mapping[int, str]) -> set[int]:
    """Which of `people` (id → display name) `text` names, by id or by any part of the name."""
    found = human_refs(text)
    if not people:
        return found
    grams = text_grams(text)
    capitalised: set[str] | None = None
    for uid, name in people.items():
        for part, everyday in name_parts(name).items():
            if part not in grams:
                continue
            if everyday:
                capitalised = _capitalised(text) if capitalised is None else capitalised
                if part not in capitalised:
                    continue
            found.add(uid)
            break
    return found
