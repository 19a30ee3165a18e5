"""Embedding: one batched call for all of a spell's candidates; vectors travel as int8 base64.

Also the room's topic vector (the read path's relevance), computed here, off the floor.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from memory_worker.core.constants import HUMAN_PREFIX
from memory_worker.core.model_interfaces import Embedder
from memory_worker.core.rows import Candidate
from memory_worker.core.vectors import quantise, to_b64
from memory_worker.storage import embedder as store_embedder
from memory_worker.storage import store

_HUMAN_REF = re.compile(rf"\b{re.escape(HUMAN_PREFIX)}(\d+)\b")


def embed_candidates(
    embedder: Embedder, candidates: list[Candidate], names: Mapping[int, str] | None = None
) -> list[Candidate]:
    """The same candidates with `embedding` filled (each `u:N` embedded as N's name from
    `names`); no call at all for an empty list."""
    if not candidates:
        return []
    texts = [embeddable_text(c.text, names or {}) for c in candidates]
    vectors = embedder.embed(texts, purpose="candidates")
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


def embeddable_text(text: str, names: Mapping[int, str]) -> str:
    """The text a row is embedded as: each `u:42` it names replaced by that human's display
    name, so "What did Caroline research?" finds "u:1 researched adoption agencies". The
    stored text keeps the id (docs/design.md §1: the id survives a rename); a rename re-embeds."""
    return _HUMAN_REF.sub(lambda m: names.get(int(m.group(1)), m.group(0)), text)


def humans_named(texts: Iterable[str]) -> set[int]:
    """The ids of every human the texts name as `u:N`."""
    return {int(m) for text in texts for m in _HUMAN_REF.findall(text)}


def require_store_embedder(embedder: Embedder, url: str | None = None) -> None:
    """Raise `EmbedderMismatch` unless `embedder` may write vectors into the store (the first
    to write claims it). One small read when it may; a write only to claim."""
    with store.engine(url).connect() as conn:
        have = store_embedder.identity(conn)
    if have is not None and have.writer == (embedder.name, embedder.dims):
        return
    with store.transaction(url) as conn:
        store_embedder.check(conn, embedder.name, embedder.dims)
