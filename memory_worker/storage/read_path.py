"""The reader's SQL: what a room open reads and writes, built once per process.

A room open is two statements: `context` (the room, its members, the present humans, their
mutes, and the personas' versions and names, folded into one UNION ALL) and `winners` (the
few rows that made the blocks). `open_rows` and `embeddings` run only when a persona's
version moved since this process last read it; `touch` runs off the caller's path.

The hot statements are SQLAlchemy Core, compiled to the driver's SQL once per process,
dialect and IN-list shape (`Prepared`) and run with `exec_driver_sql`: a room open pays
neither SQLAlchemy's statement building nor its cache-key walk (issue 10 measured both above
SQLite's own work), and a fresh process compiles two small statements, not nine.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BindParameter,
    ClauseElement,
    ColumnElement,
    CompoundSelect,
    Connection,
    CursorResult,
    Integer,
    LargeBinary,
    Select,
    Text,
    bindparam,
    case,
    cast,
    func,
    literal,
    literal_column,
    null,
    or_,
    select,
    union_all,
    update,
)
from sqlalchemy.types import TypeEngine

from memory_worker import store
from memory_worker import tables as t
from memory_worker.block import Human
from memory_worker.constants import KINDS, SUBJECT_SELF, SUBJECT_WORLD
from memory_worker.rows import Room, Row, human_id

UNIX_EPOCH_JULIAN_DAY = 2440587.5  # SQLite's julianday('1970-01-01')
UNKNOWN_KIND = len(KINDS)  # the kind code of a kind outside KINDS (ranked, never riding)
IDS_PER_STATEMENT = 10_000  # an IN list this long stays under every driver's parameter cap

Version = int  # persona_memory_versions.version: 0 before the persona's first row


def _bucket(n: int) -> int:
    """An IN list's length rounded up to a power of two, at least 1: a handful of shapes."""
    return 1 << max(n - 1, 0).bit_length()


class Prepared:
    """A Core statement compiled once per dialect and IN-list shape, run as driver SQL.

    `build` takes, for each name in `lists`, a list of bind parameters to put in an IN; a list
    of values is padded to a power of two by repeating its last value (IN ignores repeats), and
    an empty one holds the `lists` value given for it: one that matches no row.
    """

    def __init__(self, build: Callable[..., ClauseElement], **lists: Any):
        self._build = build
        self._lists = tuple(lists)
        self._nothing = lists
        self._compiled: dict[tuple[Any, ...], tuple[str, Any, dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def execute(
        self, conn: Connection, params: dict[str, Any], **lists: Sequence[Any]
    ) -> CursorResult[Any]:
        sizes = tuple(_bucket(len(lists[n])) for n in self._lists)
        sql, order, constants = self._compile(conn, sizes)
        values = {**constants, **params}
        for name, size in zip(self._lists, sizes, strict=True):
            items = list(lists[name]) or [self._nothing[name]]
            items += items[-1:] * (size - len(items))
            values.update({f"{name}_{i}": v for i, v in enumerate(items)})
        args = tuple(values[k] for k in order) if order is not None else values
        return conn.exec_driver_sql(sql, args)

    def _compile(self, conn: Connection, sizes: tuple[int, ...]) -> tuple[str, Any, dict[str, Any]]:
        key = (conn.dialect.name, conn.dialect.paramstyle, sizes)
        got = self._compiled.get(key)
        if got is None:
            with self._lock:
                binds: dict[str, list[BindParameter[Any]]] = {
                    name: [bindparam(f"{name}_{i}") for i in range(size)]
                    for name, size in zip(self._lists, sizes, strict=True)
                }
                compiled: Any = self._build(**binds).compile(dialect=conn.dialect)  # SQLCompiler
                order = tuple(compiled.positiontup or ()) if compiled.positional else None
                # The statement's own literals (CASE values, constants) are bound too.
                got = self._compiled[key] = (str(compiled), order, dict(compiled.params))
        return got


@dataclass(frozen=True)
class Context:
    """Everything a room open needs besides memories, from one statement."""

    room: Room
    personas: list[str]  # the room's persona members, sorted
    members: frozenset[int]  # the room's human members
    humans: dict[int, Human]  # the present humans the store knows
    memory_on: dict[int, bool]
    mutes: frozenset[tuple[int, str]]  # (user_id, persona) for present humans
    versions: dict[str, Version]  # of the room's personas and the ones asked for
    names: dict[str, str]  # display names, by slug, of the same


Column = ColumnElement[Any]


def _tagged(
    tag: str,
    key: Column,
    *,
    a: Column | None = None,
    b: Column | None = None,
    n1: Column | None = None,
    n2: Column | None = None,
    n3: Column | None = None,
    blob: Column | None = None,
) -> list[Column]:
    """One branch of the context UNION: (tag, key, a, b, n1, n2, n3, blob), typed for
    PostgreSQL's UNION rules."""

    def typed(value: Column | None, type_: type[TypeEngine[Any]]) -> Column:
        return cast(null(), type_) if value is None else value

    return [
        literal_column(f"'{tag}'", Text).label("tag"),
        typed(key, Text).label("k"),
        typed(a, Text).label("a"),
        typed(b, Text).label("b"),
        typed(n1, Integer).label("n1"),
        typed(n2, Integer).label("n2"),
        typed(n3, Integer).label("n3"),
        typed(blob, LargeBinary).label("blob"),
    ]


def _context_statement(
    present: list[BindParameter[Any]], personas: list[BindParameter[Any]]
) -> CompoundSelect[Any]:
    r, m, u = t.rooms.c, t.room_members.c, t.users.c
    mute, v, p = t.persona_memory_mute.c, t.persona_memory_versions.c, t.personas.c
    room: BindParameter[str] = bindparam("room")
    asked = personas

    def ours(col: Column) -> ColumnElement[bool]:
        return or_(col.in_(select(m.member).where(m.room_id == room)), col.in_(asked))

    return union_all(
        select(
            *_tagged(
                "room",
                r.id,
                a=r.kind,
                b=r.topic,
                n1=r.incognito,
                n2=r.kit_mounted,
                n3=r.archived,
                blob=r.topic_embedding,
            )
        ).where(r.id == room),
        select(*_tagged("member", m.member)).where(m.room_id == room),
        select(*_tagged("user", cast(u.id, Text), a=u.name, b=u.memory_note, n1=u.memory_on)).where(
            u.id.in_(present)
        ),
        select(*_tagged("mute", mute.persona, n1=mute.user_id)).where(mute.user_id.in_(present)),
        select(*_tagged("version", v.persona, n1=v.version)).where(ours(v.persona)),
        select(*_tagged("name", p.slug, a=p.name)).where(ours(p.slug)),
    )


CONTEXT = Prepared(_context_statement, present=-1, personas="")  # no user -1, no persona ''


def context(
    conn: Connection, room_id: str, present: Iterable[int], personas: Sequence[str]
) -> Context | None:
    """The context of a room open, or None for a room the store has never seen."""
    found = CONTEXT.execute(
        conn, {"room": room_id}, present=sorted(present), personas=sorted(personas)
    ).all()
    room: Room | None = None
    members, member_humans, humans, memory_on = [], set(), {}, {}
    mutes, versions, names = set(), {}, {}
    row: Any
    for row in found:
        tag, k, a, b, n1, n2, n3, blob = row
        if tag == "room":
            room = Room(
                id=k,
                kind=a,
                incognito=bool(n1),
                kit_mounted=bool(n2),
                archived=bool(n3),
                topic=b,
                topic_embedding=None if blob is None else bytes(blob),
            )
        elif tag == "member":
            uid = human_id(k)
            if uid is None:
                members.append(k)
            else:
                member_humans.add(uid)
        elif tag == "user":
            uid = int(k)
            humans[uid] = Human(uid, a, b)
            memory_on[uid] = bool(n1)
        elif tag == "mute":
            mutes.add((int(n1), k))
        elif tag == "version":
            versions[k] = int(n1)
        else:
            names[k] = a
    if room is None:
        return None
    wanted = [*members, *personas]
    return Context(
        room=room,
        personas=sorted(members),
        members=frozenset(member_humans),
        humans=humans,
        memory_on=memory_on,
        mutes=frozenset(mutes),
        versions={p: versions.get(p, 0) for p in wanted},
        names={p: names.get(p) or p for p in wanted},
    )


# --- a persona's open rows, as ranking columns --------------------------------------------

_pm = t.persona_memory.c
KIND_CODE = case({k: i for i, k in enumerate(KINDS)}, value=_pm.kind, else_=UNKNOWN_KIND)
# Whom a row concerns before the audience rule: its subject, or a promise's counterpart.
REF = case((_pm.subject == SUBJECT_SELF, _pm.counterpart), else_=_pm.subject)
IS_WORLD = case((_pm.subject == SUBJECT_WORLD, 1), else_=0)


def _open_rows_statement(
    recalled: Column,
    personas: list[BindParameter[Any]],
    ids: list[BindParameter[Any]] | None = None,
) -> Select[Any]:
    found = select(
        _pm.id,
        _pm.persona,
        IS_WORLD,
        REF,
        KIND_CODE,
        _pm.importance,
        recalled,
        func.length(_pm.text),
    ).where(
        _pm.persona.in_(personas), _pm.valid_to.is_(None)
    )  # no ORDER BY: the index walks (persona, valid_to, subject); numpy sorts ids for less
    return found if ids is None else found.where(_pm.id.in_(ids))


# SQLite: Unix days computed in C by julianday(); elsewhere the stamp itself, parsed in
# Python (PostgreSQL's cast would fail the whole read on one stamp it cannot read).
_RECALLED = func.coalesce(_pm.last_recalled, _pm.created)
_JULIAN = func.julianday(_RECALLED) - literal(UNIX_EPOCH_JULIAN_DAY)
OPEN_ROWS_SQLITE = Prepared(lambda personas: _open_rows_statement(_JULIAN, personas), personas="")
OPEN_ROWS_OTHER = Prepared(lambda personas: _open_rows_statement(_RECALLED, personas), personas="")
OPEN_ROWS_BY_ID_SQLITE = Prepared(
    lambda personas, ids: _open_rows_statement(_JULIAN, personas, ids), personas="", ids=-1
)
OPEN_ROWS_BY_ID_OTHER = Prepared(
    lambda personas, ids: _open_rows_statement(_RECALLED, personas, ids), personas="", ids=-1
)


def open_rows(
    conn: Connection, personas: Sequence[str], ids: Sequence[int] | None = None
) -> Sequence[Any]:
    """Every open row of these personas (of those with these `ids`, if given) as (id, persona,
    is_world, ref, kind code, importance, recalled, chars), in no order; `recalled` is Unix
    days on SQLite, else a stamp."""
    sqlite = store.is_sqlite(conn)
    if ids is None:
        query = OPEN_ROWS_SQLITE if sqlite else OPEN_ROWS_OTHER
        result = query.execute(conn, {}, personas=list(personas))
    else:
        query = OPEN_ROWS_BY_ID_SQLITE if sqlite else OPEN_ROWS_BY_ID_OTHER
        result = query.execute(conn, {}, personas=list(personas), ids=list(ids))
    try:  # the driver's own tuples: 100k SQLAlchemy Row objects would cost a tenth of the read
        return result.cursor.fetchall()
    finally:
        result.close()


_ch = t.persona_memory_changes.c
CHANGES = Prepared(
    lambda: select(_ch.row_id).where(
        _ch.persona == bindparam("persona"),
        _ch.version > bindparam("since"),
        _ch.version <= bindparam("upto"),
    )
)


def changed_rows(conn: Connection, persona: str, since: Version, upto: Version) -> set[int] | None:
    """The ids of the rows `persona`'s writes after version `since` up to `upto` touched, or
    None when the change log no longer holds all of them (it keeps the last 1,024 versions:
    schema/versions/0006). Each version logs exactly one row, so counting proves it whole."""
    if not since < upto:
        return None
    found = CHANGES.execute(conn, {"persona": persona, "since": since, "upto": upto}).all()
    if len(found) != upto - since:
        return None
    return {int(r[0]) for r in found}


EMBEDDINGS_BY_ID = select(_pm.id, _pm.embedding).where(_pm.id.in_(bindparam("ids", expanding=True)))
EMBEDDINGS_OF_PERSONA = select(_pm.id, _pm.embedding).where(
    _pm.persona == bindparam("persona"), _pm.valid_to.is_(None)
)


def embeddings(
    conn: Connection, persona: str, ids: Sequence[int], of_all: int
) -> dict[int, bytes | None]:
    """id → int8 embedding for `ids` (rows of `persona`): by id when they are few against
    the persona's `of_all` open rows, else one scan of the persona's open rows."""
    if len(ids) * 4 > of_all or len(ids) > IDS_PER_STATEMENT:
        wanted = set(ids)
        found = conn.execute(EMBEDDINGS_OF_PERSONA, {"persona": persona})
        return {i: e for i, e in found if i in wanted}
    return {i: e for i, e in conn.execute(EMBEDDINGS_BY_ID, {"ids": list(ids)})}


# --- the winners ----------------------------------------------------------------------------

WINNERS = Prepared(
    lambda ids: select(
        *(c for c in t.persona_memory.c if c.name != "embedding"), null().label("embedding")
    ).where(_pm.id.in_(ids)),
    ids=-1,  # ids start at 1
)


def winners(conn: Connection, ids: Sequence[int]) -> dict[int, Row]:
    """The full rows (without their embeddings, which no block shows) of the winners."""
    if not ids:
        return {}
    return {
        m["id"]: Row.from_mapping(m) for m in WINNERS.execute(conn, {}, ids=list(ids)).mappings()
    }


# --- the touch ------------------------------------------------------------------------------

TOUCH = (
    update(t.persona_memory)
    .where(_pm.id.in_(bindparam("ids", expanding=True)))
    .values(last_recalled=bindparam("stamp"), recall_count=_pm.recall_count + 1)
)
_v = t.persona_memory_versions.c
VERSIONS = select(_v.persona, _v.version).where(
    _v.persona.in_(bindparam("personas", expanding=True))
)


def versions(
    conn: Connection, personas: Sequence[str], *, lock: bool = False
) -> dict[str, Version]:
    """Each persona's write counter (0 before its first row).

    `lock` (PostgreSQL) holds the counters until commit, so nobody writes between a read of
    them and ours; SQLite's BEGIN IMMEDIATE already shuts every other writer out.
    """
    query = VERSIONS.with_for_update() if lock and not store.is_sqlite(conn) else VERSIONS
    found = {p: v for p, v in conn.execute(query, {"personas": sorted(personas)})}
    return {p: int(found.get(p, 0)) for p in personas}


def touch(conn: Connection, ids: Sequence[int], stamp: str) -> None:
    """`last_recalled = stamp, recall_count += 1` for these rows."""
    for start in range(0, len(ids), IDS_PER_STATEMENT):
        conn.execute(TOUCH, {"ids": list(ids[start : start + IDS_PER_STATEMENT]), "stamp": stamp})
