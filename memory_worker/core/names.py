"""How a display name appears in text: word runs and name forms, one spelling for both.

Pure text, used by the write path's guard (a world fact must name no human) and by the store's
name lookup (`storage.users.names_in`) alike, so both spell a name the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*['’]?")


def words(text: str) -> list[str]:
    """Lower-case words, possessives folded: "Dan's" and "Dans'" are "dan"/"dans"."""
    out = []
    for w in _WORD.findall(text or ""):
        w = w.lower().replace("’", "'")
        out.append(w.removesuffix("'s").rstrip("'"))
    return [w for w in out if w]


def name_forms(names: Iterable[str]) -> set[str]:
    """The forms a display name can appear in: the whole name and each word of it.

    "Dan Smith" → {"dan smith", "dan", "smith"}. Erring wide costs a world fact, never a person.
    """
    forms: set[str] = set()
    for name in names:
        parts = words(name)
        if parts:
            forms.add(" ".join(parts))
            forms.update(w for w in parts if len(w) >= 2)
    return forms


def word_ngrams(text: str, n_max: int = 3) -> set[str]:
    """Runs of 1..n_max words of `text`, in `name_forms`' spelling: what a name lookup asks for."""
    parts = words(text)
    grams: set[str] = set()
    for n in range(1, n_max + 1):
        grams.update(" ".join(parts[i : i + n]) for i in range(len(parts) - n + 1))
    return grams
