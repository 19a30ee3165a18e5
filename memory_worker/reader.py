"""What the app imports at room open, join and leave (DESIGN.md "The read path").

filter → rank → take → render → touch, straight from the store: SQLite (or PostgreSQL through
the same Core code) and numpy. It imports no Celery, Redis or model SDK, and calls no model:
the room's topic vector was computed off the floor.

Cost grows with the rows a persona may see here, not the rows it holds: the audience rule's
subjects go into SQL (open rows of these personas, about 'world', 'self' or a present human who
allows it), scoring runs on a few numeric columns in numpy, and only the winners are fetched
whole. Before rendering, every winner passes `visible_memories` itself: the SQL narrows, the
seed's predicate decides, and nothing after it adds a row.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime

import numpy as np
from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Integer,
    and_,
    case,
    cast,
    func,
    literal,
    or_,
    select,
    text,
    update,
)

from memory_worker import clock, store
from memory_worker import tables as t
from memory_worker.app_side import UnknownRoom
from memory_worker.audience import Consent, Scope, load_mutes, scope_for, visible_memories
from memory_worker.block import Block, Human, Section, render
from memory_worker.constants import HUMAN_PREFIX, KINDS, SUBJECT_SELF, SUBJECT_WORLD
from memory_worker.ranking import (
    UNKNOWN_KIND,
    UNREADABLE_AGE_DAYS,
    WORLD_GROUP,
    Candidates,
    age_days,
    cosines,
    scores,
    take,
)
from memory_worker.rows import Room, Row, human_id

log = logging.getLogger(__name__)

# DESIGN.md read path step 5: a busy writer may delay a room opening by a few ms, no more.
TOUCH_BUSY_TIMEOUT_MS = 5
UNIX_EPOCH_JULIAN_DAY = 2440587.5  # SQLite's julianday('1970-01-01')

__all__ = ["Block", "UnknownRoom", "blocks_for_room", "build_block", "format_block"]


def build_block(
    persona: str,
    present: Iterable[int],
    room_id: str,
    *,
    now: datetime | str | None = None,
    url: str | None = None,
    touch: bool = True,
) -> Block:
    """The memory block `persona` gets in `room_id` with these humans present.

    `now` (default: the store's clock) is the moment recency counts from and `last_recalled`
    is set to. `touch=False` builds without reinforcing (previews, the CLI, tests).
    Raises `UnknownRoom` for a room the store has never seen.
    """
    return _build(room_id, present, [persona], now=now, url=url, touch=touch)[persona]


def blocks_for_room(
    room_id: str,
    present: Iterable[int],
    *,
    now: datetime | str | None = None,
    url: str | None = None,
    touch: bool = True,
) -> dict[str, Block]:
    """The block of every persona member of the room, from one query over all their rows."""
    return _build(room_id, present, None, now=now, url=url, touch=touch)


def format_block(block: Block) -> str:
    """The block as the CLI prints it: a rule with the meter, then the text."""
    n = len(block.row_ids)
    rule = (
        f"── {block.persona} · {block.chars_current}/{block.chars_limit} chars · "
        f"{n} row{'s' if n != 1 else ''}{' · touched' if block.touched else ''} ──"
    )
    return f"{rule}\n{block.text or '(empty: nothing this persona may recall here)'}"


# --- the pipeline ---------------------------------------------------------------------------


def _build(
    room_id: str,
    present: Iterable[int],
    personas: Sequence[str] | None,
    *,
    now: datetime | str | None,
    url: str | None,
    touch: bool,
) -> dict[str, Block]:
    when = _as_datetime(now)
    present = frozenset(int(u) for u in present)
    eng = store.engine(url)
    with eng.connect() as conn:  # one read transaction: every query sees the same snapshot
        room = _load_room(conn, room_id)
        slugs = list(personas) if personas is not None else _persona_members(conn, room_id)
        if room.incognito:
            return {p: Block.empty(p) for p in slugs}
        humans, memory_on = _load_humans(conn, present)
        consent = Consent(memory_on=memory_on, mutes=load_mutes(conn, present, slugs))
        scopes = {p: scope_for(p, present, room, consent) for p in slugs}
        candidates = _load_candidates(conn, scopes, when, room.topic_embedding)
        picks = {p: take(c, scores(c)) for p, c in candidates.items()}
        wanted = sorted({i for got in picks.values() for ids in got.values() for i in ids})
        rows = _load_rows(conn, wanted)
        names = _persona_names(conn, slugs)

    blocks = {
        p: _render(p, names[p], picks[p], rows, scopes[p], humans, present, room, consent)
        for p in slugs
    }
    if touch:
        ids = sorted({i for b in blocks.values() for i in b.row_ids})
        if ids and _touch(eng, ids, when):
            blocks = {p: replace(b, touched=bool(b.row_ids)) for p, b in blocks.items()}
    return blocks


def _render(
    persona: str,
    persona_name: str,
    picked: Mapping[int, list[int]],
    rows: Mapping[int, Row],
    scope: Scope,
    humans: Mapping[int, Human],
    present: frozenset[int],
    room: Room,
    consent: Consent,
) -> Block:
    """The gate, then the block: every picked row passes the seed's predicate once more."""
    picked_rows = [rows[i] for ids in picked.values() for i in ids if i in rows]
    allowed = {r.id: r for r in visible_memories(persona, present, room, picked_rows, consent)}
    sections = [
        Section(humans[u], [allowed[i] for i in picked.get(u, []) if i in allowed])
        for u in sorted(scope.humans)
        if u in humans
    ]
    world = [allowed[i] for i in picked.get(WORLD_GROUP, []) if i in allowed]
    sections.append(Section(None, world))
    return render(persona, persona_name, sections)


# --- loading --------------------------------------------------------------------------------


def _load_room(conn: Connection, room_id: str) -> Room:
    r = t.rooms.c
    found = conn.execute(
        select(r.id, r.kind, r.incognito, r.kit_mounted, r.archived, r.topic, r.topic_embedding)
        .where(r.id == room_id)
    ).first()
    if found is None:
        raise UnknownRoom(room_id)
    return Room(
        id=found.id,
        kind=found.kind,
        incognito=bool(found.incognito),
        kit_mounted=bool(found.kit_mounted),
        archived=bool(found.archived),
        topic=found.topic,
        topic_embedding=found.topic_embedding,
    )


def _persona_members(conn: Connection, room_id: str) -> list[str]:
    m = t.room_members.c
    members = conn.execute(select(m.member).where(m.room_id == room_id)).scalars()
    return sorted(x for x in members if human_id(x) is None)


def _persona_names(conn: Connection, slugs: Sequence[str]) -> dict[str, str]:
    p = t.personas.c
    query = select(p.slug, p.name).where(p.slug.in_(slugs))
    found = {slug: name for slug, name in conn.execute(query)}
    return {s: found.get(s) or s for s in slugs}


def _load_humans(
    conn: Connection, present: frozenset[int]
) -> tuple[dict[int, Human], dict[int, bool]]:
    """The present humans as the block names them, and their `memory_on` (one read of users)."""
    u = t.users.c
    query = select(u.id, u.name, u.memory_note, u.memory_on).where(u.id.in_(sorted(present)))
    found = conn.execute(query).all()
    humans = {r.id: Human(r.id, r.name, r.memory_note) for r in found}
    return humans, {r.id: bool(r.memory_on) for r in found}


def _load_rows(conn: Connection, ids: Sequence[int]) -> dict[int, Row]:
    if not ids:
        return {}
    query = select(t.persona_memory).where(t.persona_memory.c.id.in_(ids))
    return {m["id"]: Row.from_mapping(m) for m in conn.execute(query).mappings()}


def _visible_clause(scope: Scope) -> ColumnElement[bool] | None:
    """The audience rule's subjects as SQL, for one persona (None: it may see nothing)."""
    pm = t.persona_memory.c
    if not scope.world:
        return None
    refs = scope.human_refs
    subjects = [SUBJECT_WORLD, *refs, *([SUBJECT_SELF] if refs else [])]
    clause = and_(pm.persona == scope.persona, pm.valid_to.is_(None), pm.subject.in_(subjects))
    if refs:
        clause = and_(clause, or_(pm.subject != SUBJECT_SELF, pm.counterpart.in_(refs)))
    return clause


def _group_expr() -> ColumnElement[int]:
    """Whom a row is about, as an int: 42 for 'u:42' (a promise: its counterpart), or -1.

    Only rows whose refs passed the audience clause reach it, and those are all 'u:<digits>'.
    """
    pm = t.persona_memory.c
    ref = case((pm.subject == SUBJECT_SELF, pm.counterpart), else_=pm.subject)
    human = cast(func.substr(ref, len(HUMAN_PREFIX) + 1), Integer)
    return case((pm.subject == SUBJECT_WORLD, WORLD_GROUP), else_=human)


# Built once: the columns every candidate query shares.
_GROUP = _group_expr()
_KIND_CODE = case(
    {k: i for i, k in enumerate(KINDS)}, value=t.persona_memory.c.kind, else_=UNKNOWN_KIND
)


def _age_expr(conn: Connection, when: datetime) -> ColumnElement:
    """SQLite: days since `last_recalled`, else `created`, computed in C by julianday().

    Elsewhere: the stamp itself, parsed by `_ages` (PostgreSQL's cast would fail the whole read
    on one stamp it cannot read).
    """
    pm = t.persona_memory.c
    touched = func.coalesce(pm.last_recalled, pm.created)
    if not store.is_sqlite(conn):
        return touched
    now_jd = when.timestamp() / 86400.0 + UNIX_EPOCH_JULIAN_DAY
    return literal(now_jd) - func.julianday(touched)


def _load_candidates(
    conn: Connection, scopes: Mapping[str, Scope], when: datetime, topic: bytes | None
) -> dict[str, Candidates]:
    """One query for every persona's visible open rows, as the few columns ranking needs."""
    pm = t.persona_memory.c
    empty = _columns([], None, when)
    clauses = {p: c for p, s in scopes.items() if (c := _visible_clause(s)) is not None}
    if not clauses:
        return {p: empty for p in scopes}
    order = list(clauses)
    persona_code = case({p: i for i, p in enumerate(order)}, value=pm.persona)
    columns = [
        pm.id,
        persona_code if len(order) > 1 else literal(0),
        _GROUP,
        _KIND_CODE,
        pm.importance,
        _age_expr(conn, when),
        func.length(pm.text),
    ]
    if topic is not None:
        columns.append(pm.embedding)
    query = select(*columns).where(or_(*clauses.values()))
    fetched = conn.execute(query).all()
    out: dict[str, Candidates] = {p: empty for p in scopes}
    if len(order) == 1:
        out[order[0]] = _columns(fetched, topic, when)
        return out
    by_persona: dict[int, list[tuple]] = {}
    for r in fetched:
        by_persona.setdefault(r[1], []).append(r)
    for i, p in enumerate(order):
        out[p] = _columns(by_persona.get(i, []), topic, when)
    return out


def _columns(fetched: Sequence[tuple], topic: bytes | None, when: datetime) -> Candidates:
    """Columns from fetched (id, persona, group, kind, importance, age, chars[, embedding])."""
    if not fetched:
        z, zi = np.zeros(0), np.zeros(0, dtype=np.int64)
        return Candidates(zi, zi, zi, z, z, zi, z)
    # Transpose first: numpy probing 10,000 SQLAlchemy Row objects one by one is 50× slower.
    cols = list(zip(*fetched, strict=True))
    relevance = cosines(cols[7], topic) if topic is not None else np.zeros(len(fetched))
    return Candidates(
        ids=np.array(cols[0], dtype=np.int64),
        groups=np.array(cols[2], dtype=np.int64),
        kinds=np.array(cols[3], dtype=np.int64),
        importance=np.array(cols[4], dtype=np.float64),
        age_days=_ages(cols[5], when),
        chars=np.array(cols[6], dtype=np.int64),
        relevance=relevance,
    )


def _ages(values: Sequence[float | str | None], when: datetime) -> np.ndarray:
    """Days, never negative, from julianday arithmetic (SQLite) or from the stamps themselves.

    A stamp nobody can read (NULL from julianday) counts as very old rather than failing.
    """
    if values and isinstance(values[0], str):
        return np.array([age_days(v, when) for v in values], dtype=np.float64)
    ages = np.array(values, dtype=np.float64)  # None becomes NaN
    return np.maximum(np.nan_to_num(ages, nan=UNREADABLE_AGE_DAYS), 0.0)


# --- touch ----------------------------------------------------------------------------------


def _touch(eng: Engine, ids: Sequence[int], when: datetime) -> bool:
    """`last_recalled = now, recall_count += 1` for loaded rows; best effort, never raises.

    A short transaction of its own, allowed to wait TOUCH_BUSY_TIMEOUT_MS for the write lock:
    if a writer holds it, the touch is skipped (a memory that loaded stays as fresh as it was)
    rather than the room opening late. Returns True when the rows were touched.
    """
    pm = t.persona_memory.c
    try:
        stamp = when.astimezone(UTC).replace(microsecond=0).isoformat()
        touch = (
            update(t.persona_memory)
            .where(pm.id.in_(ids))
            .values(last_recalled=stamp, recall_count=pm.recall_count + 1)
        )
        with eng.connect() as conn:
            if store.is_sqlite(conn):
                return _touch_sqlite(conn, touch)
            with conn.begin():
                conn.execute(text(f"SET LOCAL lock_timeout = '{TOUCH_BUSY_TIMEOUT_MS}ms'"))
                conn.execute(touch)
            return True
    except Exception as exc:  # noqa: BLE001 — a failed touch must never fail the read
        log.info("touch skipped for %d rows: %s", len(ids), exc)
        return False


def _touch_sqlite(conn: Connection, touch) -> bool:  # type: ignore[no-untyped-def]
    raw = conn.connection.driver_connection
    raw.execute(f"PRAGMA busy_timeout = {TOUCH_BUSY_TIMEOUT_MS}")
    try:
        conn.info["sqlite_begin"] = "BEGIN IMMEDIATE"  # take the write lock first, or give up
        with conn.begin():
            conn.execute(touch)
        return True
    finally:
        try:
            raw.execute(f"PRAGMA busy_timeout = {store.SQLITE_BUSY_TIMEOUT_MS}")
        except Exception:  # noqa: BLE001 — never hand a short-timeout connection back
            conn.invalidate()


def _as_datetime(now: datetime | str | None) -> datetime:
    when = datetime.fromisoformat(now or clock.now()) if not isinstance(now, datetime) else now
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)
