"""Room-level tasks: the fan-out on a quiet room, the daily sweep, the room's topic vector."""

from __future__ import annotations

import logging

from sqlalchemy import func, select, update

from memory_worker import app_side, models, store
from memory_worker import tables as t
from memory_worker.app_side import UnknownRoom
from memory_worker.celery_app import app
from memory_worker.tasks.pipeline import spell_chain
from memory_worker.write import pipeline
from memory_worker.write.embed import embed_topic

log = logging.getLogger(__name__)


@app.task(name="memory_worker.on_room_quiet")
def on_room_quiet(room_id: str) -> list[str]:
    """Per persona in the room with new lines, start its chain. Returns the spell keys."""
    try:
        with store.engine().connect() as conn:
            room = app_side.load_room(conn, room_id)
            personas, _ = app_side.members(conn, room_id)
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


def lagging_rooms() -> list[str]:
    """Rooms (not incognito) where some persona member's cursor is behind the last line."""
    m, c, ln, r = t.room_members.c, t.cursors.c, t.lines.c, t.rooms.c
    last = select(ln.room_id, func.max(ln.id).label("last_id")).group_by(ln.room_id).subquery()
    q = (
        select(m.room_id)
        .join(t.rooms, r.id == m.room_id)
        .join(last, last.c.room_id == m.room_id)
        .outerjoin(t.cursors, (c.room_id == m.room_id) & (c.persona == m.member))
        .where(
            r.incognito == 0,
            ~m.member.like("u:%"),
            func.coalesce(c.last_line_id, 0) < last.c.last_id,
        )
        .distinct()
        .order_by(m.room_id)
    )
    with store.engine().connect() as conn:
        return list(conn.execute(q).scalars())


@app.task(name="memory_worker.sweep")
def sweep() -> list[str]:
    """The daily sweep: the queue is not the source of truth, the cursors are."""
    rooms = lagging_rooms()
    for room_id in rooms:
        on_room_quiet.delay(room_id)
    return rooms


@app.task(
    name="memory_worker.room_topic",
    bind=True,
    autoretry_for=(models.base.TransientModelError,),
    retry_backoff=True,
    max_retries=5,
)
def room_topic(self, room_id: str) -> bool:  # type: ignore[no-untyped-def]
    """Embed the room's topic off the floor, so opening a room never calls a model."""
    with store.engine().connect() as conn:
        topic = conn.execute(select(t.rooms.c.topic).where(t.rooms.c.id == room_id)).scalar()
    if not topic:
        return False
    vector = embed_topic(models.embedder(), topic)
    with store.transaction() as conn:
        conn.execute(update(t.rooms).where(t.rooms.c.id == room_id).values(topic_embedding=vector))
    return True
