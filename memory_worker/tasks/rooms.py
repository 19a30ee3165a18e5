"""Room-level tasks: the fan-out on a quiet room, the daily sweep, the room's topic vector,
and a renamed human's rows embedded again."""

from __future__ import annotations

import logging

from memory_worker import models, store
from memory_worker.celery_app import app
from memory_worker.storage import rooms
from memory_worker.storage.rooms import UnknownRoom
from memory_worker.tasks.pipeline import spell_chain
from memory_worker.write import pipeline, reembed
from memory_worker.write.embed import embed_topic, require_store_embedder

log = logging.getLogger(__name__)


@app.task(name="memory_worker.on_room_quiet")
def on_room_quiet(room_id: str) -> list[str]:
    """Per persona in the room with new lines, start its chain. Returns the spell keys."""
    try:
        with store.engine().connect() as conn:
            room = rooms.load_room(conn, room_id)
            personas, _ = rooms.members(conn, room_id)
    except UnknownRoom as e:
        log.error("%s", e)
        return []
    if room.incognito:
        return []  # a room that neither reads nor writes: not even a cursor moves
    started = []
    for persona in personas:
        spell = pipeline.begin(persona, room_id)
        if spell is not None:
            spell_chain(spell).apply_async()
            started.append(spell.key)
    return started


def sweep_lagging_rooms() -> list[str]:
    """Enqueue every room whose cursors lag its last line; returns them. The queue is not the
    source of truth, the cursors are: the daily beat and `memory-worker sweep` both run this."""
    with store.engine().connect() as conn:
        lagging = rooms.lagging_rooms(conn)
    for room_id in lagging:
        on_room_quiet.delay(room_id)
    return lagging


@app.task(name="memory_worker.sweep")
def sweep() -> list[str]:
    """The daily sweep (beat)."""
    return sweep_lagging_rooms()


@app.task(
    name="memory_worker.room_topic",
    autoretry_for=(models.base.TransientModelError,),
    retry_backoff=True,
    max_retries=5,
)
def room_topic(room_id: str) -> bool:
    """Embed the room's topic off the floor, so opening a room never calls a model."""
    with store.engine().connect() as conn:
        topic = rooms.topic(conn, room_id)
    if not topic:
        return False
    embedder = models.embedder()
    require_store_embedder(embedder)  # another model's vector would mean nothing here
    vector = embed_topic(embedder, topic)
    with store.transaction() as conn:
        rooms.set_topic_embedding(conn, room_id, vector)
    return True


@app.task(
    name="memory_worker.reembed_user",
    autoretry_for=(models.base.TransientModelError,),
    retry_backoff=True,
    max_retries=5,
)
def reembed_user(user_id: int) -> int:
    """After a rename: embed again the rows that name the human, off the floor. Returns how
    many rows were embedded."""
    return reembed.reembed_rows_naming(models.embedder(), user_id)
