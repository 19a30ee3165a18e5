"""Vectors as int8, and cosine: quantise, int8 matrices, cosines, top-k. numpy only.

The one home of cosine in the project: the router's neighbours (`top_k`), the ranking rule's
relevance over rows (`cosines`) and the reader's over its cached int8 matrix (`int8_cosines`) all
compute it here, with the same exact arithmetic. A persona holds hundreds of open rows, not millions
(docs/design.md §6): a dot product over one persona's rows is the whole neighbour search, no vector
database.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import cast

import numpy as np

INT8_SCALE = 127.0  # a unit vector's components lie in [-1, 1]


def normalise(v: Sequence[float] | np.ndarray) -> np.ndarray:
    """L2-normalise (gemini-embedding-001 below 3072 dims is not normalised)."""
    a = np.asarray(v, dtype=np.float32)
    n = float(np.linalg.norm(a))
    return a / n if n > 0 else a


def quantise(v: Sequence[float] | np.ndarray) -> bytes:
    """Normalise, then store as int8 bytes (768 bytes for 768 dims)."""
    a = normalise(v)
    return bytes(np.clip(np.rint(a * INT8_SCALE), -127, 127).astype(np.int8).tobytes())


def to_b64(blob: bytes) -> str:
    """int8 bytes as text, small enough for a JSON Celery message."""
    return base64.b64encode(blob).decode("ascii")


def from_b64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"))


def cosines(blobs: Sequence[bytes | None], query: bytes) -> np.ndarray:
    """Cosine of each int8 blob to the int8 `query`; 0 for a missing or wrong-sized blob."""
    return int8_cosines(stack_int8(blobs, len(query)), query)


def top_k(
    query: bytes, blobs: Sequence[bytes], k: int, min_cosine: float
) -> list[tuple[int, float]]:
    """Indexes into `blobs` of the k most similar at or above `min_cosine`, best first."""
    if not blobs:
        return []
    scores = cosines(blobs, query)
    order = np.argsort(-scores, kind="stable")[:k]
    return [(int(i), float(scores[i])) for i in order if scores[i] >= min_cosine]


def stack_int8(blobs: Sequence[bytes | None], dims: int) -> np.ndarray:
    """int8 blobs as an (n, dims) int8 matrix; a missing or wrong-sized blob is a zero row."""
    fit = cast(Sequence[bytes], blobs)  # checked next: len(None) raises TypeError
    try:  # the common case, every row embedded by the same model: no per-row Python
        uniform = bool(fit) and min(map(len, fit)) == max(map(len, fit)) == dims
    except TypeError:  # a row without an embedding
        uniform = False
    if uniform:
        return np.frombuffer(b"".join(fit), dtype=np.int8).reshape(len(fit), dims)
    out = np.zeros((len(blobs), dims), dtype=np.int8)
    for i, b in enumerate(blobs):
        if b is not None and len(b) == dims:
            out[i] = np.frombuffer(b, dtype=np.int8)
    return out


def int8_norms(m: np.ndarray) -> np.ndarray:
    """The length of each int8 row, float32 (exact before the square root: sums < 2**24)."""
    squares = np.einsum("ij,ij->i", m, m, dtype=np.float32, casting="unsafe")
    norms: np.ndarray = np.sqrt(squares)
    return norms


def int8_cosines(m: np.ndarray, query: bytes, norms: np.ndarray | None = None) -> np.ndarray:
    """Cosine of each int8 row of `m` to the int8 `query` (0 for a zero row), as float64.

    Exact and order-free: every product and sum of int8 values stays below 2**24, so float32
    holds it exactly and the result does not depend on how the sum is split. einsum reads the
    int8 rows as float32 directly (no copy of the matrix), and never calls BLAS: numpy's
    matrix product would wake OpenBLAS's thread pool, which on a busy host costs a room open
    more than the arithmetic (measured). `norms` (from `int8_norms`) may be given when kept.
    """
    out = np.zeros(m.shape[0])
    t = np.frombuffer(query, dtype=np.int8).astype(np.float32)
    t_norm = float(np.sqrt(np.einsum("i,i->", t, t)))
    if t_norm == 0 or m.shape[0] == 0 or m.ndim != 2 or m.shape[1] != t.shape[0]:
        return out
    norms = int8_norms(m) if norms is None else norms.copy()
    norms[norms == 0] = 1.0
    dots = np.einsum("ij,j->i", m, t, dtype=np.float32, casting="unsafe")
    out[:] = dots / (norms * t_norm)
    return out
