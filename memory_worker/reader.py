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
from memory_worker.audience import Consent, Scope, scope_for, visible_memories
from memory_worker.block import Block, Human, Section, render
from memory_worker.constants import (
    HUMAN_PREFIX,
    KINDS,
    SUBJECT_SELF,
    SUBJECT_WORLD,
    V1_PROVEN_SCOPE,
)
from memory_worker.ranking import (
    UNKNOWN_KIND,
    UNREADABLE_AGE_DAYS,
    WORLD_GROUP,
    Candidates,
    scores,
    take,
)
from memory_worker.read_cache import EMBEDDINGS_MAX_ROWS, Columns, Key, ReadCache, Version
from memory_worker.recall import recall
from memory_worker.rows import Room, Row
from memory_worker.storage import memories, users
from memory_worker.storage.rooms import UnknownRoom, load_room, members
from memory_worker.vectors import cosines, cosines_to, unit_rows

log = logging.getLogger(__name__)

# DESIGN.md read path step 5: a busy writer may delay a room opening by a few ms, no more.
TOUCH_BUSY_TIMEOUT_MS = 5
UNIX_EPOCH_JULIAN_DAY = 2440587.5  # SQLite's julianday('1970-01-01')

READ_CACHE = ReadCache()  # this process's ranking columns, checked against the store each open

__all__ = ["Block", "UnknownRoom", "blocks_for_room", "build_block", "format_block", "recall"]


def build_block(
    persona: str,
    present: Iterable[int],
    room_id: str,
    *,
    now: datetime | str | None = None,
    url: str | None = None,
    touch: bool = True,
    proven_scope: bool = V1_PROVEN_SCOPE,
) -> Block:
    """The memory block `persona` gets in `room_id` with these humans present.

    `now` (default: the store's clock) is the moment recency counts from and `last_recalled`
    is set to. `touch=False` builds without reinforcing (previews, the CLI, tests).
    Raises `UnknownRoom` for a room the store has never seen.
    """
    return _build(
        room_id, present, [persona], now=now, url=url, touch=touch, proven_scope=proven_scope
    )[persona]


def blocks_for_room(
    room_id: str,
    present: Iterable[int],
    *,
    now: datetime | str | None = None,
    url: str | None = None,
    touch: bool = True,
    proven_scope: bool = V1_PROVEN_SCOPE,
) -> dict[str, Block]:
    """The block of every persona member of the room, from one query over all their rows."""
    return _build(room_id, present, None, now=now, url=url, touch=touch, proven_scope=proven_scope)


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
    proven_scope: bool,
) -> dict[str, Block]:
    when = _as_datetime(now)
    present = frozenset(int(u) for u in present)
    eng = store.engine(url)
    with eng.connect() as conn:  # one read transaction: every query sees the same snapshot
        room = load_room(conn, room_id)
        member_personas, member_humans = members(conn, room_id)
        slugs = list(personas) if personas is not None else member_personas
        present = present & frozenset(member_humans)  # a non-member is not present here
        if room.incognito:
            return {p: Block.empty(p) for p in slugs}
        strangers = {p: Block.empty(p) for p in slugs if p not in member_personas}
        slugs = [p for p in slugs if p not in strangers]  # a persona remembers only where it is
        if not slugs:
            return strangers
        humans, memory_on = _load_humans(conn, present)
        consent = Consent(memory_on=memory_on, mutes=users.mutes(conn, present, slugs))
        scopes = {p: scope_for(p, present, room, consent, proven_scope=proven_scope) for p in slugs}
        candidates = _load_candidates(conn, scopes, when, room.topic_embedding, str(eng.url))
        picks = {p: take(c, scores(c)) for p, c in candidates.items()}
        wanted = sorted({i for got in picks.values() for ids in got.values() for i in ids})
        rows = memories.rows_by_id(conn, wanted)
        names = users.persona_names(conn, slugs)

    blocks = {
        p: _render(
            p, names[p], picks[p], rows, scopes[p], humans, present, room, consent, proven_scope
        )
        for p in slugs
    }
    blocks.update(strangers)
    if touch:
        ids = sorted({i for b in blocks.values() for i in b.row_ids})
        touched = [p for p, b in blocks.items() if b.row_ids]
        moves = _touch(eng, ids, touched, when) if ids else None
        if moves is not None:
            READ_CACHE.touched(str(eng.url), np.array(ids), _touch_day(when), moves)
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
    proven_scope: bool,
) -> Block:
    """The gate, then the block: every picked row passes the seed's predicate once more."""
    picked_rows = [rows[i] for ids in picked.values() for i in ids if i in rows]
    gate = visible_memories(persona, present, room, picked_rows, consent, proven_scope=proven_scope)
    allowed = {r.id: r for r in gate}
    sections = [
        Section(humans[u], [allowed[i] for i in picked.get(u, []) if i in allowed])
        for u in sorted(scope.humans)
        if u in humans
    ]
    world = [allowed[i] for i in picked.get(WORLD_GROUP, []) if i in allowed]
    sections.append(Section(None, world))
    return render(persona, persona_name, sections)


# --- loading --------------------------------------------------------------------------------


def _load_humans(
    conn: Connection, present: frozenset[int]
) -> tuple[dict[int, Human], dict[int, bool]]:
    """The present humans as the block names them, and their `memory_on` (one read of users)."""
    found = users.present_users(conn, present)
    humans = {r.id: Human(r.id, r.name, r.memory_note) for r in found}
    return humans, {r.id: bool(r.memory_on) for r in found}


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


def _recalled_expr(conn: Connection) -> ColumnElement:
    """When each row was last recalled (else created): SQLite gives Unix days, computed in C
    by julianday(); elsewhere the stamp itself, parsed by `_days` (PostgreSQL's cast would
    fail the whole read on one stamp it cannot read)."""
    pm = t.persona_memory.c
    touched = func.coalesce(pm.last_recalled, pm.created)
    if not store.is_sqlite(conn):
        return touched
    return func.julianday(touched) - literal(UNIX_EPOCH_JULIAN_DAY)


def _key(url: str, scope: Scope) -> Key:
    return (url, scope.persona, scope.world, tuple(scope.human_refs))


def _versions(
    conn: Connection, personas: Iterable[str], *, lock: bool = False
) -> dict[str, Version]:
    """Each persona's write counter (0 before its first row): one primary-key read each.

    `lock` (PostgreSQL) holds the counters until commit, so nobody writes between a read of
    them and ours; SQLite's BEGIN IMMEDIATE already shuts every other writer out.
    """
    v = t.persona_memory_versions.c
    query = select(v.persona, v.version).where(v.persona.in_(sorted(personas)))
    if lock and not store.is_sqlite(conn):
        query = query.with_for_update()
    found = dict(conn.execute(query).all())
    return {p: int(found.get(p, 0)) for p in personas}


def _load_candidates(
    conn: Connection,
    scopes: Mapping[str, Scope],
    when: datetime,
    topic: bytes | None,
    url: str,
) -> dict[str, Candidates]:
    """Every persona's visible open rows as ranking columns: from the read cache when the
    store's version of them has not moved, else from one query for all that moved."""
    now_day = when.timestamp() / 86400.0
    empty = _candidates(_fetched([], 0), now_day, None)
    clauses = {p: c for p, s in scopes.items() if (c := _visible_clause(s)) is not None}
    out: dict[str, Candidates] = {p: empty for p in scopes}
    if not clauses:
        return out
    versions = _versions(conn, clauses)
    columns: dict[str, Columns] = {}
    for p in clauses:
        got = READ_CACHE.get(_key(url, scopes[p]), versions[p])
        if got is not None and (topic is None or got.unit_vectors is not None or _too_big(got)):
            columns[p] = got
    stale = [p for p in clauses if p not in columns]
    if stale:
        fetched = _fetch_columns(conn, {p: clauses[p] for p in stale}, versions, topic)
        for p, cols in fetched.items():
            READ_CACHE.put(_key(url, scopes[p]), cols)
        columns.update(fetched)
    for p, cols in columns.items():
        if topic is not None and cols.unit_vectors is None and len(cols.ids):
            blobs = _embeddings(conn, clauses[p], cols.ids)  # too many to keep: read each time
            out[p] = _candidates(cols, now_day, None, cosines(blobs, topic))
        else:
            out[p] = _candidates(cols, now_day, topic)
    return out


def _too_big(cols: Columns) -> bool:
    return len(cols.ids) > EMBEDDINGS_MAX_ROWS


def _fetch_columns(
    conn: Connection,
    clauses: Mapping[str, ColumnElement[bool]],
    versions: Mapping[str, Version],
    topic: bytes | None,
) -> dict[str, Columns]:
    """One query over the rows of every persona in `clauses`, split into Columns each."""
    pm = t.persona_memory.c
    order = list(clauses)
    persona_code = case({p: i for i, p in enumerate(order)}, value=pm.persona)
    want_vectors = topic is not None
    columns = [
        pm.id,
        persona_code if len(order) > 1 else literal(0),
        _GROUP,
        _KIND_CODE,
        pm.importance,
        _recalled_expr(conn),
        func.length(pm.text),
    ]
    if want_vectors:
        columns.append(pm.embedding)
    fetched = conn.execute(select(*columns).where(or_(*clauses.values()))).all()
    by_persona: dict[int, list[tuple]] = {}
    for r in fetched:
        by_persona.setdefault(r[1], []).append(r)
    out = {}
    for i, p in enumerate(order):
        cols = _fetched(by_persona.get(i, []), versions[p])
        if want_vectors and cols.ids.size and not _too_big(cols):
            rows = sorted(by_persona[i], key=lambda r: r[0])
            cols = replace(cols, unit_vectors=unit_rows([r[7] for r in rows], len(topic)))
        out[p] = cols
    return out


def _fetched(rows: Sequence[tuple], version: Version) -> Columns:
    """Columns, sorted by id, from fetched (id, persona, group, kind, importance, recalled,
    chars[, embedding])."""
    if not rows:
        z, zi = np.zeros(0), np.zeros(0, dtype=np.int64)
        return Columns(version, zi, zi, zi, z, z, zi)
    # Transpose first: numpy probing 10,000 SQLAlchemy Row objects one by one is 50× slower.
    cols = list(zip(*sorted(rows, key=lambda r: r[0]), strict=True))
    return Columns(
        version=version,
        ids=np.array(cols[0], dtype=np.int64),
        groups=np.array(cols[2], dtype=np.int64),
        kinds=np.array(cols[3], dtype=np.int64),
        importance=np.array(cols[4], dtype=np.float64),
        recalled_day=_days(cols[5]),
        chars=np.array(cols[6], dtype=np.int64),
    )


def _days(values: Sequence[float | str | None]) -> np.ndarray:
    """Unix days from julianday arithmetic (SQLite) or from the stamps themselves; a stamp
    nobody can read becomes NaN, which ranks as UNREADABLE_AGE_DAYS old."""
    if values and isinstance(values[0], str):
        return np.array([unix_day(v) for v in values], dtype=np.float64)
    return np.array(values, dtype=np.float64)  # None becomes NaN


def unix_day(stamp: str | None) -> float:
    """An ISO stamp (naive means UTC) as Unix days; NaN when it cannot be read."""
    try:
        when = datetime.fromisoformat(stamp or "")
    except ValueError:
        return float("nan")
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp() / 86400.0


def _candidates(
    cols: Columns, now_day: float, topic: bytes | None, rel: np.ndarray | None = None
) -> Candidates:
    ages = np.nan_to_num(now_day - cols.recalled_day, nan=UNREADABLE_AGE_DAYS)
    if rel is None:
        rel = np.zeros(cols.ids.size)
        if topic is not None and cols.unit_vectors is not None:
            rel = cosines_to(cols.unit_vectors, topic)
    return Candidates(
        ids=cols.ids,
        groups=cols.groups,
        kinds=cols.kinds,
        importance=cols.importance,
        age_days=np.maximum(ages, 0.0),
        chars=cols.chars,
        relevance=rel,
    )


def _embeddings(
    conn: Connection, clause: ColumnElement[bool], ids: np.ndarray
) -> list[bytes | None]:
    """The embeddings of a persona too big to cache, in the order of `ids`."""
    pm = t.persona_memory.c
    found = dict(conn.execute(select(pm.id, pm.embedding).where(clause)).all())
    return [found.get(int(i)) for i in ids]


# --- touch ----------------------------------------------------------------------------------


def _touch_stamp(when: datetime) -> str:
    return when.astimezone(UTC).replace(microsecond=0).isoformat()


def _touch_day(when: datetime) -> float:
    """The Unix day a touch stamps, as a refetch would read it back."""
    return datetime.fromisoformat(_touch_stamp(when)).timestamp() / 86400.0


def _touch(
    eng: Engine, ids: Sequence[int], personas: Sequence[str], when: datetime
) -> dict[str, tuple[Version, Version]] | None:
    """`last_recalled = now, recall_count += 1` for loaded rows; best effort, never raises.

    A short transaction of its own, allowed to wait TOUCH_BUSY_TIMEOUT_MS for the write lock:
    if a writer holds it, the touch is skipped (a memory that loaded stays as fresh as it was)
    rather than the room opening late. Returns each persona's version (before, after) the
    touch, read inside its transaction for the read cache; None when it was skipped.
    """
    pm = t.persona_memory.c
    try:
        stamp = _touch_stamp(when)
        touch = (
            update(t.persona_memory)
            .where(pm.id.in_(ids))
            .values(last_recalled=stamp, recall_count=pm.recall_count + 1)
        )
        with eng.connect() as conn:
            if store.is_sqlite(conn):
                return _touch_sqlite(conn, touch, personas)
            with conn.begin():
                conn.execute(text(f"SET LOCAL lock_timeout = '{TOUCH_BUSY_TIMEOUT_MS}ms'"))
                return _touched(conn, touch, personas)
    except Exception as exc:  # noqa: BLE001 — a failed touch must never fail the read
        log.info("touch skipped for %d rows: %s", len(ids), exc)
        return None


def _touched(conn: Connection, touch, personas: Sequence[str]):  # type: ignore[no-untyped-def]
    before = _versions(conn, personas, lock=True)
    conn.execute(touch)
    after = _versions(conn, personas)
    return {p: (before[p], after[p]) for p in personas}


def _touch_sqlite(conn: Connection, touch, personas: Sequence[str]):  # type: ignore[no-untyped-def]
    raw = conn.connection.driver_connection
    raw.execute(f"PRAGMA busy_timeout = {TOUCH_BUSY_TIMEOUT_MS}")
    try:
        conn.info["sqlite_begin"] = "BEGIN IMMEDIATE"  # take the write lock first, or give up
        with conn.begin():
            return _touched(conn, touch, personas)
    finally:
        try:
            raw.execute(f"PRAGMA busy_timeout = {store.SQLITE_BUSY_TIMEOUT_MS}")
        except Exception:  # noqa: BLE001 — never hand a short-timeout connection back
            conn.invalidate()


def _as_datetime(now: datetime | str | None) -> datetime:
    when = datetime.fromisoformat(now or clock.now()) if not isinstance(now, datetime) else now
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)
