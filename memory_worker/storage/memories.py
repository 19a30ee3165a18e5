"""A persona's memories (`persona_memory`): every read and write of the rows, by name.

The commit inserts and closes (never deletes); the human's controls delete and reopen; the
router and extraction read a persona's open rows. `persona_memory_versions` is bumped by
database triggers (schema/versions/0002), never written here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from sqlalchemy import ColumnElement, Connection, and_, delete, func, insert, or_, select, update

from memory_worker import tables as t
from memory_worker.constants import SUBJECT_SELF, SUBJECT_WORLD
from memory_worker.rows import Candidate, Row, human_ref

pm = t.persona_memory.c


@dataclass(frozen=True)
class OpenRow:
    """The few columns of an open row the router needs."""

    id: int
    subject: str
    text: str
    embedding: bytes | None
    counterpart: str | None = None


# --- the write path -------------------------------------------------------------------------


def _audience(present: Iterable[int]) -> ColumnElement[bool]:
    """What the audience rule allows the write path's model calls for a present set (DESIGN.md
    "The model sees only what the audience allows"): rows about present humans, the persona's
    promises and loops with them, world rows. Never a row about an absent human."""
    refs = [human_ref(u) for u in sorted(set(present))]
    return or_(
        pm.subject.in_([SUBJECT_WORLD, *refs]),
        and_(pm.subject == SUBJECT_SELF, pm.counterpart.in_(refs)),
    )


def open_rows(
    conn: Connection, persona: str, present: Iterable[int], subjects: Iterable[str]
) -> list[OpenRow]:
    """The router's neighbour pool: the persona's open rows about these subjects that the
    audience allows for the present set, by id."""
    wanted = sorted(set(subjects))
    if not wanted:
        return []
    q = (
        select(pm.id, pm.subject, pm.text, pm.embedding, pm.counterpart)
        .where(
            pm.persona == persona,
            pm.valid_to.is_(None),
            pm.subject.in_(wanted),
            _audience(present),
        )
        .order_by(pm.id)
    )
    return [OpenRow(*r) for r in conn.execute(q)]


def known_texts(conn: Connection, persona: str, present: Iterable[int], limit: int) -> list[str]:
    """The texts of the persona's open rows the audience allows, most important first."""
    q = (
        select(pm.text)
        .where(pm.persona == persona, pm.valid_to.is_(None), _audience(present))
        .order_by(pm.importance.desc(), pm.id.desc())
        .limit(limit)
    )
    return [str(x) for x in conn.execute(q).scalars()]


def written_since(conn: Connection, persona: str, since: str) -> list[tuple[str, str | None, int]]:
    """(subject, counterpart, count) of the rows the persona wrote with `created >= since`
    (the daily caps: `guards.counts_by_cap` turns them into counts per cap)."""
    q = (
        select(pm.subject, pm.counterpart, func.count())
        .where(pm.persona == persona, pm.created >= since)
        .group_by(pm.subject, pm.counterpart)
    )
    return [(str(s), c, int(n)) for s, c, n in conn.execute(q)]


def add_sources(conn: Connection, row_id: int, humans: Iterable[int]) -> None:
    """The humans whose lines a world row cites: they see it on their page and may delete it."""
    for uid in sorted(set(humans)):
        conn.execute(insert(t.memory_sources).values(row_id=row_id, user_id=uid))


def sources_of(conn: Connection, ids: Sequence[int]) -> dict[int, list[int]]:
    """row id → the humans whose lines it cites (world rows; others have none)."""
    if not ids:
        return {}
    ms = t.memory_sources.c
    out: dict[int, list[int]] = {}
    q = select(ms.row_id, ms.user_id).where(ms.row_id.in_(list(ids))).order_by(ms.user_id)
    for row_id, uid in conn.execute(q):
        out.setdefault(int(row_id), []).append(int(uid))
    return out


def insert_row(
    conn: Connection,
    *,
    persona: str,
    room_id: str,
    witnessed: Iterable[int],
    candidate: Candidate,
    embedding: bytes | None,
    now: str,
) -> int:
    """A new open row from a guarded candidate. Returns its id."""
    c = candidate
    new = (
        insert(t.persona_memory).values(
            persona=persona,
            subject=c.subject,
            counterpart=c.counterpart,
            witnessed=json.dumps(sorted(witnessed)),
            room_id=room_id,
            kind=c.kind,
            text=c.text,
            importance=c.importance,
            valid_from=c.valid_from,
            valid_to=None,
            closed_by=None,
            evidence=json.dumps(list(c.evidence)),
            created=now,
            last_recalled=None,
            recall_count=0,
            embedding=embedding,
        )
    ).returning(pm.id)
    return int(conn.execute(new).scalar_one())


def close(conn: Connection, row_id: int, valid_to: str, closed_by: int | None) -> None:
    """Close an open row (a closed arc: never deleted by the write path)."""
    conn.execute(
        update(t.persona_memory)
        .where(pm.id == row_id, pm.valid_to.is_(None))
        .values(valid_to=valid_to, closed_by=closed_by)
    )


# --- whole rows -----------------------------------------------------------------------------


def _rows(conn: Connection, where: ColumnElement[bool]) -> list[Row]:
    """Whole rows, world rows with their `sources` filled."""
    found = conn.execute(select(t.persona_memory).where(where).order_by(pm.id)).mappings()
    rows = [Row.from_mapping(m) for m in found]
    sources = sources_of(conn, [r.id for r in rows if r.subject == SUBJECT_WORLD])
    return [replace(r, sources=tuple(sources[r.id])) if r.id in sources else r for r in rows]


def rows_by_id(conn: Connection, ids: Sequence[int]) -> dict[int, Row]:
    """Whole rows by id (ids that do not exist are simply absent)."""
    if not ids:
        return {}
    return {r.id: r for r in _rows(conn, pm.id.in_(list(ids)))}


def about_user(user_id: int) -> ColumnElement[bool]:
    """SQL for `rows.concerns_user(row, user_id)` (callers re-check in Python): the user's
    rows, the persona's promises to them, world rows that cite their lines."""
    ref = human_ref(user_id)
    cites = select(t.memory_sources.c.row_id).where(t.memory_sources.c.user_id == user_id)
    return or_(
        pm.subject == ref,
        and_(pm.subject == SUBJECT_SELF, pm.counterpart == ref),
        and_(pm.subject == SUBJECT_WORLD, pm.id.in_(cites)),
    )


def rows_about(conn: Connection, user_id: int, persona: str | None = None) -> list[Row]:
    """Every row that concerns the user, open and closed (only `persona`'s when given)."""
    where = about_user(user_id)
    if persona is not None:
        where = and_(where, pm.persona == persona)
    return _rows(conn, where)


def rows_closed_by(conn: Connection, ids: Sequence[int]) -> list[Row]:
    """The rows that these rows closed (an UPDATE's predecessor)."""
    return _rows(conn, pm.closed_by.in_(list(ids))) if ids else []


def all_rows(conn: Connection) -> list[Row]:
    """Every row of every persona, by id (the demo's table)."""
    return _rows(conn, pm.id.is_not(None))


# --- vectors (the embedder's upkeep: a switch of embedder, a rename) ------------------------


def texts_after(conn: Connection, after_id: int, limit: int) -> list[tuple[int, str]]:
    """(id, text) of up to `limit` rows with an id above `after_id`, by id: a re-embedding's
    next batch. Every row, open or closed (an undo can reopen a closed one)."""
    query = select(pm.id, pm.text).where(pm.id > after_id).order_by(pm.id).limit(limit)
    return [(int(i), str(text)) for i, text in conn.execute(query)]


def texts_naming(conn: Connection, user_id: int) -> list[tuple[int, str]]:
    """(id, text) of every row whose text may name `u:<user_id>` (a superset: `u:4` also
    matches `u:42`; re-embedding a row that did not need it changes nothing)."""
    query = select(pm.id, pm.text).where(pm.text.contains(human_ref(user_id))).order_by(pm.id)
    return [(int(i), str(text)) for i, text in conn.execute(query)]


def set_embeddings(conn: Connection, vectors: Iterable[tuple[int, bytes]]) -> None:
    """Store new int8 vectors by row id."""
    for row_id, blob in vectors:
        conn.execute(update(t.persona_memory).where(pm.id == row_id).values(embedding=blob))


# --- the human's deletes --------------------------------------------------------------------


def reopen(conn: Connection, ids: Sequence[int]) -> None:
    """Make closed rows open again (undoing the UPDATE that closed them)."""
    if ids:
        values = dict(valid_to=None, closed_by=None)
        conn.execute(update(t.persona_memory).where(pm.id.in_(list(ids))).values(**values))


def delete_rows(conn: Connection, ids: Sequence[int]) -> None:
    """The only physical delete in the system: the human's undo, delete and clear."""
    if ids:
        conn.execute(delete(t.persona_memory).where(pm.id.in_(list(ids))))
