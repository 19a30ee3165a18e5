"""Embedding: one batched call for all of a spell's candidates; vectors travel as int8 base64.

Also the room's topic vector (the read path's relevance), computed here, off the floor.
"""

from __future__ import annotations

from memory_worker.models.base import Embedder
from memory_worker.rows import Candidate
from memory_worker.vectors import quantise, to_b64


def embed_candidates(embedder: Embedder, candidates: list[Candidate]) -> list[Candidate]:
    """The same candidates with `embedding` filled; no call at all for an empty list."""
    if not candidates:
        return []
    vectors = embedder.embed([c.text for c in candidates], purpose="candidates")
    if len(vectors) != len(candidates):
        raise ValueError(f"embedder returned {len(vectors)} vectors for {len(candidates)} texts")
    return [
        Candidate.from_json({**c.to_json(), "embedding": to_b64(quantise(v))})
        for c, v in zip(candidates, vectors, strict=True)
    ]


def embed_topic(embedder: Embedder, topic: str) -> bytes:
    """A room's opener or topic as an int8 vector, stored on the room."""
    (vector,) = embedder.embed([topic], purpose="topic")
    return quantise(vector)
