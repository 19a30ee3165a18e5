"""Re-embedding: every vector after a switch of embedder, and a human's rows after a rename.

A row is embedded with each `u:N` it names replaced by N's display name (`embed.embeddable_text`),
so a question that names someone finds the rows about them; when the name changes, the rows
that name them are embedded again. A switch of embedder (`memory-worker reembed`) re-embeds
every row and room topic in batches, each batch its own transaction with the cursor moved in
the same one: stopped anywhere, it resumes where it stopped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from memory_worker.core.model_interfaces import Embedder
from memory_worker.core.vectors import quantise
from memory_worker.storage import embedder as store_embedder
from memory_worker.storage import memories, rooms, store, users
from memory_worker.write.embed import embeddable_text, humans_named, require_store_embedder

REEMBED_BATCH = 128  # ours: texts per embedding call and per transaction (cli.py's default)


@dataclass
class Progress:
    rows: int = 0
    rooms: int = 0
    batches: int = 0
    done: bool = False


def reembed_store(
    embedder: Embedder,
    *,
    batch: int = REEMBED_BATCH,
    url: str | None = None,
    max_batches: int | None = None,
    on_batch: Callable[[Progress], None] | None = None,
) -> Progress:
    """Make `embedder` the store's: re-embed every row, then every room topic, resumably.

    `max_batches` stops early (an operator's slice of work; the tests' interruption), leaving
    the cursors where a next run picks up. A store already on `embedder` is left alone.
    """
    with store.transaction(url) as conn:
        have = store_embedder.begin_reembed(conn, embedder.name, embedder.dims)
    progress = Progress()
    if have.pending_name is None:
        progress.done = True
        return progress
    after_row, after_room = have.after_row_id, have.after_room_id

    def room_for_more() -> bool:
        return max_batches is None or progress.batches < max_batches

    while room_for_more():
        with store.engine(url).connect() as conn:
            todo = memories.texts_after(conn, after_row, batch)
            names = users.user_names(conn, sorted(humans_named(text for _, text in todo)))
        if not todo:
            break
        vectors = _embed(embedder, [embeddable_text(text, names) for _, text in todo], "rows")
        after_row = todo[-1][0]
        with store.transaction(url) as conn:
            memories.set_embeddings(conn, zip([i for i, _ in todo], vectors, strict=True))
            store_embedder.advance(conn, after_row_id=after_row)
        progress.rows += len(todo)
        _tick(progress, on_batch)
    while room_for_more():
        with store.engine(url).connect() as conn:
            topics = rooms.topics_after(conn, after_room, batch)
        if not topics:
            break
        vectors = _embed(embedder, [topic for _, topic in topics], "topic")
        after_room = topics[-1][0]
        with store.transaction(url) as conn:
            for (room_id, _), blob in zip(topics, vectors, strict=True):
                rooms.set_topic_embedding(conn, room_id, blob)
            store_embedder.advance(conn, after_room_id=after_room)
        progress.rooms += len(topics)
        _tick(progress, on_batch)
    if room_for_more():
        with store.transaction(url) as conn:
            store_embedder.finish_reembed(conn)
        progress.done = True
    return progress


def reembed_rows_naming(embedder: Embedder, user_id: int, *, url: str | None = None) -> int:
    """Embed again every row that names `u:<user_id>`, with the names as they are now (after a
    rename). Refused, like any write of vectors, if `embedder` is not the store's."""
    require_store_embedder(embedder, url)
    with store.engine(url).connect() as conn:
        todo = memories.texts_naming(conn, user_id)
        names = users.user_names(conn, sorted(humans_named(text for _, text in todo)))
    for start in range(0, len(todo), REEMBED_BATCH):
        part = todo[start : start + REEMBED_BATCH]
        vectors = _embed(embedder, [embeddable_text(text, names) for _, text in part], "rows")
        with store.transaction(url) as conn:
            memories.set_embeddings(conn, zip([i for i, _ in part], vectors, strict=True))
    return len(todo)


def _embed(embedder: Embedder, texts: list[str], purpose: str) -> list[bytes]:
    vectors = embedder.embed(texts, purpose=purpose)
    if len(vectors) != len(texts):
        raise ValueError(f"embedder returned {len(vectors)} vectors for {len(texts)} texts")
    return [quantise(v) for v in vectors]


def _tick(progress: Progress, on_batch: Callable[[Progress], None] | None) -> None:
    progress.batches += 1
    if on_batch is not None:
        on_batch(progress)
