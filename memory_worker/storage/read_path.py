"""The reader's SQL: what a room open reads and writes, built once per process.

A room open is two statements: `context` (the room, its members, the present humans, their
mutes, the store's id, and the personas' versions and names, folded into one UNION ALL) and
`winners` (the few rows that made the blocks). `open_rows` and `embeddings` run only when a
persona's version moved since this process last read it; `touch` runs off the caller's path.

The hot statements are `memory_worker.storage.prepared.Prepared`: compiled to the driver's
SQL once per process, so a room open pays neither SQLAlchemy's statement building nor its
cache-key walk, and a fresh process compiles two small statements, not nine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    CompoundSelect,
    Connection,
    Select,
    Text,
    and_,
    bindparam,
    case,
    cast,
    func,
    literal,
    null,
    or_,
    select,
    text,
    union_all,
    update,
)
from sqlalchemy.engine import Dialect

from memory_worker.core import tables as t
from memory_worker.core.audience import Consent, Members, RoomAudience
from memory_worker.core.block import Human
from memory_worker.core.constants import KINDS, SUBJECT_SELF, SUBJECT_WORLD
from memory_worker.core.read_columns import NEVER_WRITTEN, Version, Versions
from memory_worker.core.rows import Room, Row, human_id
from memory_worker.storage import store
from memory_worker.storage.prepared import Prepared, tagged

UNIX_EPOCH_JULIAN_DAY = 2440587.5  # SQLite's julianday('1970-01-01')
UNKNOWN_KIND = len(KINDS)  # the kind code of a kind outside KINDS (ranked, never riding)
IDS_PER_STATEMENT = 10_000  # an IN list this long stays under every driver's parameter cap


@dataclass(frozen=True)
class Context:
    """Everything a room open needs besides memories, from one statement."""

    room: Room
    personas: list[str]  # the room's persona members, sorted
    members: frozenset[int]  # the room's human members
    humans: dict[int, Human]  # the present humans the store knows
    memory_on: dict[int, bool]
    mutes: frozenset[tuple[int, str]]  # (user_id, persona) for present humans
    versions: Versions  # the store's id; the versions of the room's personas and those asked for
    names: dict[str, str]  # display names, by slug, of the same
    # (user_id, persona) for present humans who keep their one-to-one rows out of groups
    stays_private: frozenset[tuple[int, str]] = frozenset()

    def audience(
        self, personas: Iterable[str], present: frozenset[int], proven_scope: bool
    ) -> RoomAudience:
        """The room's audience for `personas` with `present` there, from this statement: what a
        room open and a recall hand to the block, the gate and the ranking alike."""
        slugs = frozenset(personas)
        return RoomAudience(
            self.room,
            present,
            Members(self.members, frozenset(self.personas)),
            Consent(
                memory_on=self.memory_on,
                mutes=frozenset(m for m in self.mutes if m[1] in slugs),
                stays_private=frozenset(m for m in self.stays_private if m[1] in slugs),
            ),
            proven_scope,
        )


Column = ColumnElement[Any]


def room_branches(room: BindParameter[str]) -> list[Select[Any]]:
    """The room and its members as two branches of a `tagged` UNION ('room', 'member'): what
    both a room open and a spell read first, parsed by `room_or_member`."""
    r, m = t.rooms.c, t.room_members.c
    return [
        select(
            *tagged(
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
        select(*tagged("member", m.member)).where(m.room_id == room),
    ]


def room_from(row: Any) -> Room:
    """The Room of a 'room' branch row of `room_branches`."""
    _, k, a, b, n1, n2, n3, blob = row
    return Room(
        id=k,
        kind=a,
        incognito=bool(n1),
        kit_mounted=bool(n2),
        archived=bool(n3),
        topic=b,
        topic_embedding=None if blob is None else bytes(blob),
    )


def room_or_member(row: Any, personas: list[str], humans: list[int]) -> Room | None:
    """A row of `room_branches`: the Room, or a member added to its list (then None)."""
    if row[0] == "room":
        return room_from(row)
    uid = human_id(row[1])
    if uid is None:
        personas.append(row[1])
    else:
        humans.append(uid)
    return None


_v, _si = t.persona_memory_versions.c, t.store_identity.c


def _store_and_versions(which: ColumnElement[bool]) -> list[Select[Any]]:
    """The store's id and the versions of the personas `which` picks, as two branches of a
    `tagged` UNION ('store', 'version'), parsed by `store_or_version`."""
    return [
        select(*tagged("store", _si.store_id)),
        select(*tagged("version", _v.persona, n1=_v.version, n2=_v.stamp)).where(which),
    ]


def store_or_version(row: Any, versions: dict[str, Version]) -> str | None:
    """A row of `_store_and_versions`: the store's id, or a version added to `versions`."""
    if row[0] == "store":
        return str(row[1])
    versions[row[1]] = Version(int(row[4]), None if row[5] is None else int(row[5]))
    return None


def _context_statement(
    present: list[BindParameter[Any]], personas: list[BindParameter[Any]]
) -> CompoundSelect[Any]:
    m, u = t.room_members.c, t.users.c
    mute, p = t.persona_memory_mute.c, t.personas.c
    keep = t.persona_memory_stays_private.c
    room: BindParameter[str] = bindparam("room")
    asked = personas

    def ours(col: Column) -> ColumnElement[bool]:
        return or_(col.in_(select(m.member).where(m.room_id == room)), col.in_(asked))

    return union_all(
        *room_branches(room),
        select(*tagged("user", cast(u.id, Text), a=u.name, b=u.memory_note, n1=u.memory_on)).where(
            u.id.in_(present)
        ),
        select(*tagged("mute", mute.persona, n1=mute.user_id)).where(mute.user_id.in_(present)),
        # every keeper of the room's personas, present or not: a row follows into a group only
        # when everyone it was formed with and everyone it names lets it (docs/design.md §4.3)
        select(*tagged("private", keep.persona, n1=keep.user_id)).where(ours(keep.persona)),
        *_store_and_versions(ours(_v.persona)),
        select(*tagged("name", p.slug, a=p.name)).where(ours(p.slug)),
    )


CONTEXT = Prepared(_context_statement, present=-1, personas="")  # no user -1, no persona ''


def context(
    conn: Connection, room_id: str, present: Iterable[int], personas: Sequence[str]
) -> Context | None:
    """The context of a room open, or None for a room the store has never seen."""
    found = CONTEXT.execute(
        conn, {"room": room_id}, present=sorted(present), personas=sorted(personas)
    ).all()
    return _context_of(found, personas)


def context_alone(
    raw: Any, dialect: Dialect, room_id: str, present: Iterable[int], personas: Sequence[str]
) -> Context | None:
    """`context`, as one statement on a pooled DBAPI connection with no transaction around it:
    a warm open that needs nothing else from the store (`Prepared.fetch_raw`)."""
    found = CONTEXT.fetch_raw(
        raw, dialect, {"room": room_id}, present=sorted(present), personas=sorted(personas)
    )
    return _context_of(found, personas)


def _context_of(found: Sequence[Any], personas: Sequence[str]) -> Context | None:
    room: Room | None = None
    members: list[str] = []
    member_humans: list[int] = []
    humans, memory_on = {}, {}
    mutes, names = set(), {}
    private: set[tuple[int, str]] = set()
    versions: dict[str, Version] = {}
    store = ""  # no identity row: no two stores' versions can still match (their stamps)
    row: Any
    for row in found:
        tag, k, a, b, n1, n2, n3, blob = row
        if tag in ("room", "member"):
            room = room_or_member(row, members, member_humans) or room
        elif tag == "user":
            uid = int(k)
            humans[uid] = Human(uid, a, b)
            memory_on[uid] = bool(n1)
        elif tag == "mute":
            mutes.add((int(n1), k))
        elif tag == "private":
            private.add((int(n1), k))
        elif tag in ("store", "version"):
            store = store_or_version(row, versions) or store
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
        versions=Versions(store, {p: versions.get(p, NEVER_WRITTEN) for p in wanted}),
        names={p: names.get(p) or p for p in wanted},
        stays_private=frozenset(private),
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
    refs: list[BindParameter[Any]] | None = None,
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
        _pm.named,
        _pm.private_to,
        _pm.witnessed,
    ).where(
        _pm.persona.in_(personas), _pm.valid_to.is_(None)
    )  # no ORDER BY: the index walks (persona, valid_to, subject); numpy sorts ids for less
    if refs is not None:  # whom the rows concern: the audience rule's subjects, on the index
        found = found.where(
            or_(
                _pm.subject.in_([literal(SUBJECT_WORLD), *refs]),
                and_(_pm.subject == SUBJECT_SELF, _pm.counterpart.in_(refs)),
            )
        )
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

VISIBLE_ROWS_SQLITE = Prepared(
    lambda personas, refs: _open_rows_statement(_JULIAN, personas, refs=refs),
    personas="",
    refs="",  # no subject is ''
)
VISIBLE_ROWS_OTHER = Prepared(
    lambda personas, refs: _open_rows_statement(_RECALLED, personas, refs=refs),
    personas="",
    refs="",
)


OPEN_COUNTS = Prepared(
    lambda personas: (
        select(_pm.persona, func.count())
        .where(_pm.persona.in_(personas), _pm.valid_to.is_(None))
        .group_by(_pm.persona)
    ),
    personas="",
)


def open_counts(conn: Connection, personas: Sequence[str]) -> dict[str, int]:
    """How many open rows each persona holds (on the index; no row is read)."""
    rows: Any = OPEN_COUNTS.execute(conn, {}, personas=list(personas)).all()
    found = {str(p): int(n) for p, n in rows}
    return {p: found.get(p, 0) for p in personas}


def visible_open_rows(
    conn: Connection, personas: Sequence[str], refs: Sequence[str]
) -> Sequence[Any]:
    """`open_rows` of these personas, only those that concern these humans ('u:42' refs) or
    the world: what a room's audience can see, before the named/private check (a cold open
    answers from these instead of reading every audience's rows)."""
    query = VISIBLE_ROWS_SQLITE if store.is_sqlite(conn) else VISIBLE_ROWS_OTHER
    result = query.execute(conn, {}, personas=list(personas), refs=sorted(set(refs)))
    try:
        return result.cursor.fetchall()
    finally:
        result.close()


def open_rows(
    conn: Connection,
    personas: Sequence[str],
    ids: Sequence[int] | None = None,
    *,
    between: Callable[[], object] | None = None,
) -> Sequence[Any]:
    """Every open row of these personas (of those with these `ids`, if given) as (id, persona,
    is_world, ref, kind code, importance, recalled, chars, named, private_to, witnessed), in no
    order; `recalled` is Unix days on SQLite, else a stamp; the id lists as stored.
    `between` (a background reader) is called between parts of the read."""
    sqlite = store.is_sqlite(conn)
    if ids is None:
        query = OPEN_ROWS_SQLITE if sqlite else OPEN_ROWS_OTHER
        result = query.execute(conn, {}, personas=list(personas))
    else:
        query = OPEN_ROWS_BY_ID_SQLITE if sqlite else OPEN_ROWS_BY_ID_OTHER
        result = query.execute(conn, {}, personas=list(personas), ids=list(ids))
    try:  # the driver's own tuples: 100k SQLAlchemy Row objects would cost a tenth of the read
        return _fetched(result.cursor, between)
    finally:
        result.close()


PART_ROWS = 5_000  # ours: rows a background read takes before it calls `between` again


def _fetched(cursor: Any, between: Callable[[], object] | None) -> list[Any]:
    """Every row of `cursor`; with `between`, in parts, calling it before each."""
    if between is None:
        return list(cursor.fetchall())
    out: list[Any] = []
    while True:
        between()
        part = cursor.fetchmany(PART_ROWS)
        if not part:
            return out
        out.extend(part)


_ch = t.persona_memory_changes.c
CHANGES = Prepared(
    lambda: select(_ch.version, _ch.row_id, _ch.stamp).where(
        _ch.persona == bindparam("persona"),
        _ch.version >= bindparam("since"),
        _ch.version <= bindparam("upto"),
    )
)


def changed_rows(conn: Connection, persona: str, since: Version, upto: Version) -> set[int] | None:
    """The ids of the rows `persona`'s writes after version `since` up to `upto` touched, or
    None when the change log cannot say: it no longer holds all of them (it keeps the last
    1,024 versions: schema/versions/0006), or its stamp at `since` is not the one held — the
    log of another history (a restored or remade store) whose counter passed the same number.
    Each version logs exactly one row, so counting proves it whole."""
    if not since.counter < upto.counter:
        return None
    found: Sequence[Any] = CHANGES.execute(
        conn, {"persona": persona, "since": since.counter, "upto": upto.counter}
    ).all()
    log = {int(r[0]): (int(r[1]), r[2]) for r in found}
    if since != NEVER_WRITTEN and log.pop(since.counter, (0, None))[1] != since.stamp:
        return None
    if len(log) != upto.counter - since.counter or log[upto.counter][1] != upto.stamp:
        return None
    return {row_id for row_id, _ in log.values()}


def logged(conn: Connection, persona: str, version: Version) -> bool:
    """Whether the change log holds `version` of `persona`, stamp and all: the write that made
    it is in this store's history (stamps are random: no other write has its stamp)."""
    at = {"persona": persona, "since": version.counter, "upto": version.counter}
    found: Sequence[Any] = CHANGES.execute(conn, at).all()
    return any(r[2] == version.stamp for r in found)


EMBEDDINGS_BY_ID = select(_pm.id, _pm.embedding).where(_pm.id.in_(bindparam("ids", expanding=True)))
EMBEDDINGS_OF_PERSONA = select(_pm.id, _pm.embedding).where(
    _pm.persona == bindparam("persona"), _pm.valid_to.is_(None)
)


def embeddings(
    conn: Connection,
    persona: str,
    ids: Sequence[int],
    of_all: int,
    *,
    between: Callable[[], object] | None = None,
) -> dict[int, bytes | None]:
    """id → int8 embedding for `ids` (rows of `persona`): by id when they are few against
    the persona's `of_all` open rows, else one scan of the persona's open rows (in parts,
    calling `between` before each, for a background reader)."""
    if len(ids) * 4 > of_all or len(ids) > IDS_PER_STATEMENT:
        wanted = set(ids)
        found = conn.execute(EMBEDDINGS_OF_PERSONA, {"persona": persona})
        try:
            return {i: e for i, e in _fetched(found.cursor, between) if i in wanted}
        finally:
            found.close()
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
    .where(_pm.persona == bindparam("of"), _pm.id.in_(bindparam("ids", expanding=True)))
    .values(last_recalled=bindparam("stamp"), recall_count=_pm.recall_count + bindparam("n"))
)
VERSIONS = Prepared(
    lambda personas: union_all(*_store_and_versions(_v.persona.in_(personas))), personas=""
)
LOCK_VERSIONS = (
    select(_v.persona)
    .where(_v.persona.in_(bindparam("personas", expanding=True)))
    .with_for_update()
)


def versions(conn: Connection, personas: Sequence[str], *, lock: bool = False) -> Versions:
    """The store's id and each persona's version (NEVER_WRITTEN before its first row), from
    one statement.

    `lock` (PostgreSQL) holds the counters until commit, so nobody writes between a read of
    them and ours; SQLite's BEGIN IMMEDIATE already shuts every other writer out.
    """
    if lock and not store.is_sqlite(conn):
        conn.execute(LOCK_VERSIONS, {"personas": sorted(personas)})
    found: dict[str, Version] = {}
    sid = ""  # as `context`: no identity row
    for row in VERSIONS.execute(conn, {}, personas=sorted(personas)):
        sid = store_or_version(row, found) or sid
    return Versions(sid, {p: found.get(p, NEVER_WRITTEN) for p in personas})


# PostgreSQL: a touch waits for row locks as long as a SQLite writer waits for the file's.
LOCK_TIMEOUT = text(f"SET LOCAL lock_timeout = '{store.SQLITE_BUSY_TIMEOUT_MS}ms'")


@contextmanager
def touching(url: str) -> Iterator[Connection]:
    """The touch's write transaction: on SQLite the write lock first (BEGIN IMMEDIATE: no
    upgrade race), on PostgreSQL a bounded wait for the rows' locks."""
    with store.transaction(url) as conn:
        if not store.is_sqlite(conn):
            conn.execute(LOCK_TIMEOUT)
        yield conn


def touch(conn: Connection, persona: str, ids: Sequence[int], stamp: str, times: int = 1) -> None:
    """`last_recalled = stamp, recall_count += times` for these rows of `persona` (`times`
    touches folded into one write); an id that is not (any longer) one of its rows touches
    nothing."""
    for start in range(0, len(ids), IDS_PER_STATEMENT):
        part = list(ids[start : start + IDS_PER_STATEMENT])
        conn.execute(TOUCH, {"of": persona, "ids": part, "stamp": stamp, "n": times})


def compile_for(dialect: Dialect) -> None:
    """Compile the statements of a room open for this dialect in the shapes opens use (one to
    four present humans and packs, up to 64 winners, up to 256 rows changed since a pack),
    so a process's first opens build no SQL: in `reader.prepare`, for the store's dialect
    (importing compiles nothing)."""
    sqlite = dialect.name == "sqlite"
    for n in (1, 2, 4):
        CONTEXT.compile_for(dialect, present=n, personas=1)
        VERSIONS.compile_for(dialect, personas=n)
        (VISIBLE_ROWS_SQLITE if sqlite else VISIBLE_ROWS_OTHER).compile_for(
            dialect, personas=1, refs=n
        )
    CHANGES.compile_for(dialect)
    OPEN_COUNTS.compile_for(dialect, personas=1)
    (OPEN_ROWS_SQLITE if sqlite else OPEN_ROWS_OTHER).compile_for(dialect, personas=1)
    for n in (1, 2, 4, 8, 16, 32, 64):
        WINNERS.compile_for(dialect, ids=n)
    by_id = OPEN_ROWS_BY_ID_SQLITE if sqlite else OPEN_ROWS_BY_ID_OTHER
    for n in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        by_id.compile_for(dialect, personas=1, ids=n)
