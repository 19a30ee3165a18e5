"""On-demand recall (docs/design.md §3.1): the few rows a human's message is about.

The block is built at room open and holds ~10 rows per human; a persona that has talked with
someone for months holds hundreds. `recall(persona, present, room_id, query, k=5)` runs per
human message — "a newspaper across the table": the app hands what it returns to the persona
in the user turn, never as a tool the persona must remember to call.

It walks the reader's own path, not a copy of it: the block's context statement (the room,
its members, the present humans' switches), the block's `scope_for` with the room's
membership, the read cache's columns, the rule in force (`ranking.RULE`, with the message as
the topic), and every winner through `visible_memories` once more before it is returned. It
leaves out what the block already holds, and touches what it returns, as the block does: a
memory that keeps being recalled stays fresh.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from datetime import datetime

import numpy as np

from memory_worker.core import clock
from memory_worker.core import settings as settings_mod
from memory_worker.core.errors import EmbedderMismatch, UnknownRoom
from memory_worker.core.ranking import RankColumns, scores, take
from memory_worker.core.rows import Row
from memory_worker.core.vectors import quantise
from memory_worker.reader import cache_loader
from memory_worker.reader.room_open import opening, scope_in_force
from memory_worker.reader.touch import promise_touch
from memory_worker.storage import embedder as store_embedder
from memory_worker.storage import memories, read_path, store

RECALL_K = 5  # docs/design.md §3.1: Letta's archival_memory_search top_k=5


def recall(
    persona: str,
    present: Iterable[int],
    room_id: str,
    query: str,
    k: int = RECALL_K,
    *,
    query_vector: bytes | None = None,
    block_ids: Collection[int] | None = None,
    now: datetime | str | None = None,
    url: str | None = None,
    touch: bool = True,
    proven_scope: bool | None = None,
) -> list[Row]:
    """The `k` rows `persona` may recall here that best answer `query`, best first.

    `query_vector` (int8, from the store's embedder) skips embedding. Without it the query is
    embedded by the configured embedder (`MW_EMBEDDER`): in-process and offline for a local
    one (no network on this path), **a network call** to the API for gemini — a caller that
    already holds the message's vector should pass it. `block_ids` are the rows of the block
    this room opened with (default: the block as it would be built now); none of them is
    returned again. Raises `UnknownRoom` for a room the store has never seen.
    """
    present = frozenset(int(u) for u in present)
    when = clock.as_datetime(now)
    url = url or settings_mod.current().database_url
    proven_scope = scope_in_force(proven_scope, url)
    with opening(url) as fills, store.engine(url).connect() as conn:
        ctx = read_path.context(conn, room_id, present, [persona])  # the block's own statement
        if ctx is None:
            raise UnknownRoom(room_id)
        audience = ctx.audience([persona], present, proven_scope)
        scope = audience.scope(persona)
        if not scope.world or k <= 0:
            return []  # incognito, or a persona that is not in the room
        scopes = {persona: scope}
        vector = query_vector if query_vector is not None else embed_query(query, url)
        if block_ids is None:
            opened = cache_loader.read_plan(
                conn, scopes, when, ctx.room.topic_embedding, url, versions=ctx.versions
            )
            cache_loader.carry_out(opened)
            fills.of(opened)
            block_ids = block_of(opened.candidates[persona])
        plan = cache_loader.read_plan(
            conn, scopes, when, vector, url, versions=ctx.versions, keep_cosines=False
        )
        cache_loader.carry_out(plan)
        fills.of(plan)
        c = plan.candidates[persona]
        wanted = top(c, scores(c), exclude=block_ids, k=k)
        rows = memories.rows_by_id(conn, wanted)
    found = [rows[i] for i in wanted if i in rows]
    got = audience.visible(persona, found)
    if touch and got:
        promise_touch(url, {persona: [r.id for r in got]}, when)
    return got


def block_of(c: RankColumns) -> set[int]:
    """The ids the block takes from these candidates (the reader's take, the rule in force)."""
    return {i for ids in take(c, scores(c)).values() for i in ids}


def top(c: RankColumns, score: np.ndarray, *, exclude: Collection[int], k: int) -> list[int]:
    """Ids of the `k` best-scoring candidates not in `exclude`, best first, ties to the lower id."""
    if len(c) == 0 or k <= 0:
        return []
    keep = ~np.isin(c.ids, np.fromiter(exclude, dtype=np.int64, count=len(exclude)))
    idx = np.flatnonzero(keep)
    order = idx[np.lexsort((c.ids[idx], -score[idx]))]
    return [int(i) for i in c.ids[order[:k]]]


def embed_query(query: str, url: str | None = None) -> bytes:
    """The message as an int8 vector from the configured embedder (imported only here: the
    reader itself never loads a model). Raises `EmbedderMismatch` when the store's vectors
    are another model's: a cosine between the two would mean nothing."""
    from memory_worker import models

    embedder = models.embedder()
    with store.engine(url).connect() as conn:
        have = store_embedder.identity(conn)
    if have is not None and have.writer != (embedder.name, embedder.dims):
        raise EmbedderMismatch(store_embedder.mismatch(have, embedder.name, embedder.dims))
    (vector,) = embedder.embed([query], purpose="query")
    return quantise(vector)
