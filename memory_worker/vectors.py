"""Vectors as int8: quantise, cosine, top-k neighbours. numpy only, no vector database.

A persona holds hundreds of open rows, not millions (seed §6): a dot product over one
persona's rows is the whole neighbour search.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

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
    return np.clip(np.rint(a * INT8_SCALE), -127, 127).astype(np.int8).tobytes()


def dequantise(blob: bytes) -> np.ndarray:
    """int8 bytes back to a unit float32 vector."""
    return normalise(np.frombuffer(blob, dtype=np.int8).astype(np.float32))


def to_b64(blob: bytes) -> str:
    """int8 bytes as text, small enough for a JSON Celery message."""
    return base64.b64encode(blob).decode("ascii")


def from_b64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"))


def matrix(blobs: Sequence[bytes]) -> np.ndarray:
    """Stack int8 blobs into an (n, d) matrix of unit float32 rows."""
    if not blobs:
        return np.zeros((0, 0), dtype=np.float32)
    m = np.frombuffer(b"".join(blobs), dtype=np.int8).reshape(len(blobs), -1).astype(np.float32)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return m / norms


def cosine(a: bytes, b: bytes) -> float:
    return float(np.dot(dequantise(a), dequantise(b)))


def top_k(
    query: bytes, blobs: Sequence[bytes], k: int, min_cosine: float
) -> list[tuple[int, float]]:
    """Indexes into `blobs` of the k most similar at or above `min_cosine`, best first."""
    if not blobs:
        return []
    scores = matrix(blobs) @ dequantise(query)
    order = np.argsort(-scores, kind="stable")[:k]
    return [(int(i), float(scores[i])) for i in order if scores[i] >= min_cosine]
