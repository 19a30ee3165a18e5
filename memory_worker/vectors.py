"""Vectors as int8, and cosine: quantise, unit rows, cosines, top-k. numpy only.

The one home of cosine in the project: the router's neighbours (`top_k`), the reader's topic
relevance over cached unit rows (`cosines_to`) and over rows too many to cache (`cosines`) all
compute it here. A persona holds hundreds of open rows, not millions (seed §6): a dot product
over one persona's rows is the whole neighbour search, no vector database.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import cast

import numpy as np

INT8_SCALE = 127.0  # a unit vector's components lie in [-1, 1]
COSINE_CHUNK_ROWS = 4096  # ours: int8 rows turned to float32 at a time, bounded memory at 100k


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


def unit(blob: bytes) -> np.ndarray:
    """One int8 vector as a unit float32 vector (a zero vector stays zero)."""
    return normalise(np.frombuffer(blob, dtype=np.int8).astype(np.float32))


def _all_of_length(blobs: Sequence[bytes | None], dims: int) -> bool:
    """True when every blob is bytes of `dims` length, checked at C speed (len(None) raises)."""
    try:
        lengths = cast(Sequence[bytes], blobs)
        return min(map(len, lengths)) == max(map(len, lengths)) == dims
    except (TypeError, ValueError):  # a row without an embedding; no rows at all
        return False


def unit_rows(blobs: Sequence[bytes | None], dims: int) -> np.ndarray:
    """int8 blobs → an (n, dims) matrix of unit float32 rows; a missing, odd-sized or zero blob
    becomes a zero row (its cosine to anything is 0)."""
    index: Sequence[int]
    fit: Sequence[bytes]
    if _all_of_length(blobs, dims):  # the common case: no per-row Python
        index, fit = range(len(blobs)), cast(Sequence[bytes], blobs)
    else:
        index = [i for i, b in enumerate(blobs) if b is not None and len(b) == dims]
        fit = [b for b in blobs if b is not None and len(b) == dims]
    out = np.zeros((len(blobs), dims), dtype=np.float32)
    if fit:
        m = np.frombuffer(b"".join(fit), dtype=np.int8).reshape(len(fit), dims)
        m = m.astype(np.float32)
        norms = np.sqrt(np.einsum("ij,ij->i", m, m))
        norms[norms == 0] = 1.0
        out[np.asarray(index)] = m / norms[:, None]
    return out


def cosines_to(units: np.ndarray, query: bytes) -> np.ndarray:
    """Cosine of each unit row to the int8 `query` (all 0 for a zero or mismatched query)."""
    q = unit(query)
    if not q.any() or units.ndim != 2 or units.shape[1] != q.shape[0]:
        return np.zeros(units.shape[0])
    return (units @ q).astype(np.float64)


def cosines(blobs: Sequence[bytes | None], query: bytes) -> np.ndarray:
    """Cosine of each int8 blob to the int8 `query`; 0 for a missing or wrong-sized blob.
    Chunked, so 100,000 rows never become one 300 MB float matrix."""
    out = np.zeros(len(blobs))
    for start in range(0, len(blobs), COSINE_CHUNK_ROWS):
        part = blobs[start : start + COSINE_CHUNK_ROWS]
        out[start : start + len(part)] = cosines_to(unit_rows(part, len(query)), query)
    return out


def top_k(
    query: bytes, blobs: Sequence[bytes], k: int, min_cosine: float
) -> list[tuple[int, float]]:
    """Indexes into `blobs` of the k most similar at or above `min_cosine`, best first."""
    if not blobs:
        return []
    scores = cosines(blobs, query)
    order = np.argsort(-scores, kind="stable")[:k]
    return [(int(i), float(scores[i])) for i in order if scores[i] >= min_cosine]
