"""A persona's memories (`persona_memory`): every read and write of the rows, by name.

The commit inserts and closes (never deletes); the human's controls delete and reopen; the
router and extraction read a persona's open rows. `persona_memory_versions` is bumped by
database triggers (schema/versions/0002), never written here.

The statements a spell runs on every call are `Prepared` (`memory_worker.storage.prepared`):
compiled once per process, run as the driver's SQL. That skips SQLAlchemy's type processing,
which here is only LargeBinary's (`embedding` comes back as bytes: `_blob`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Connection,
    Select,
    Text,
    and_,
    bindparam,
    case,
    cast,
    delete,
    func,
    insert,
    literal,
    null,
    or_,
    select,
    true,
    union_all,
    update,
)

from memory_worker.core import names
from memory_worker.core import rows as core_rows
from memory_worker.core import tables as t
from memory_worker.core.audience import Scope
from memory_worker.core.constants import SUBJECT_SELF, SUBJECT_WORLD
from memory_worker.core.rows import Candidate, Row, human_ref, id_json, id_list
from memory_worker.storage import read_packs, read_path
from memory_worker.storage.prepared import PREPARED_IN_MAX, Prepared, in_parts

pm = t.persona_memory.c
ma = t.memory_audience.c


def _blob(value: Any) -> bytes | None:
    """LargeBinary's result processing: a driver's buffer (psycopg's memoryview) as bytes."""
    return None if value is None else bytes(value)


@dataclass(frozen=True)
class OpenRow:
    """The few columns of an open row the router needs."""

    id: int
    subject: str
    text: str
    embedding: bytes | None
    counterpart: str | None = None
    private_to: tuple[int, ...] | None = None  # a world row's audience; None: public
    named: tuple[int, ...] = ()  # the humans its text names besides whom it concerns


# --- the write path -------------------------------------------------------------------------


def _refs(present: Iterable[int]) -> list[str]:
    """The present humans' refs, in the order the audience rule lists them."""
    return [human_ref(u) for u in sorted(set(present))]


def _audience(refs: Sequence[str | BindParameter[Any]]) -> ColumnElement[bool]:
    """Whom the rows a scope may admit concern, in SQL (on the index): world rows, rows about
    the scope's humans and the persona's promises and loops with them. `Scope.admits` then
    checks the rest in Python (the humans a row names, a world row's audience).

    `refs` are the scope's humans (`Scope.human_refs`), or a `Prepared` statement's bind
    parameters for them; an empty set is padded with NULL there, which, like an empty IN,
    matches nothing."""
    return or_(
        pm.subject.in_([SUBJECT_WORLD, *refs]),
        and_(pm.subject == SUBJECT_SELF, pm.counterpart.in_(refs)),
    )


OPEN_ROWS = Prepared(
    lambda subjects, refs: (
        select(pm.id, pm.subject, pm.text, pm.embedding, pm.counterpart, pm.private_to, pm.named)
        .where(
            pm.persona == bindparam("persona"),
            pm.valid_to.is_(None),
            pm.subject.in_(subjects),
            _audience(refs),
        )
        .order_by(pm.id)
    ),
    subjects=None,
    refs=None,
)


def _wanted(scope: Scope, subjects: Iterable[str]) -> list[str]:
    """The subjects of `subjects` whose rows `scope` may read (no world row where it is off)."""
    return sorted(set(subjects) - (set() if scope.world else {SUBJECT_WORLD}))


def _open_row(i: int, subject: str, text: str, e: Any, cp: Any, p: Any, n: Any) -> OpenRow:
    return OpenRow(i, subject, text, _blob(e), cp, id_list(p), id_list(n) or ())


def _admitted(scope: Scope, r: OpenRow) -> bool:
    """What `scope` checks in Python of a row its SQL admitted: whom it names, who it stays with."""
    return scope.admits_named(r.named) and scope.admits_private_to(r.private_to)


def open_rows(conn: Connection, scope: Scope, subjects: Iterable[str]) -> list[OpenRow]:
    """The router's neighbour pool and the rows its decisions may change: the persona's open
    rows about these subjects that `scope` admits (the block's own rule for the spell's
    room, docs/design.md §11.2), by id."""
    wanted = _wanted(scope, subjects)
    if not wanted:
        return []
    found: Any = OPEN_ROWS.execute(
        conn, {"persona": scope.persona}, subjects=wanted, refs=list(scope.human_refs)
    )
    rows = [_open_row(*r) for r in found.all()]
    return [r for r in rows if _admitted(scope, r)]


def rows_in_view(
    conn: Connection, scope: Scope, subjects: Iterable[str], ids: Sequence[int]
) -> tuple[dict[int, OpenRow], set[int]]:
    """Of the rows `ids`: those `open_rows(conn, scope, subjects)` reads now, by id; and those
    that exist but that it reads under no change of theirs — another persona's, or about
    other subjects or people (what a row is about is never rewritten). A few rows by id,
    however many the persona holds."""
    wanted = _wanted(scope, subjects)
    concerns = (
        and_(
            pm.persona == scope.persona,
            pm.subject.in_(wanted),
            _audience(list(scope.human_refs)),
        )
        if wanted
        else literal(False)
    )
    read: dict[int, OpenRow] = {}
    elsewhere: set[int] = set()
    for part in in_parts(sorted(set(ids))):
        query = select(
            pm.id,
            pm.subject,
            pm.text,
            pm.embedding,
            pm.counterpart,
            pm.private_to,
            pm.named,
            pm.valid_to,
            concerns.label("concerns"),
        ).where(pm.id.in_(part))
        for *cols, valid_to, concerned in conn.execute(query):
            row = _open_row(*cols)
            if not concerned:
                elsewhere.add(row.id)
            elif valid_to is None and _admitted(scope, row):
                read[row.id] = row
    return read, elsewhere


def highest_id(conn: Connection) -> int:
    """The highest row id of the store (0: none yet). Ids are never reused (0003): a row
    above it was written after this read."""
    return int(conn.execute(select(func.max(pm.id))).scalar_one() or 0)


KNOWN_TEXTS = Prepared(
    lambda refs: (
        select(pm.id, pm.text, pm.named, pm.private_to)
        .where(pm.persona == bindparam("persona"), pm.valid_to.is_(None), _audience(refs))
        .order_by(pm.importance.desc(), pm.id.desc())
        .limit(bindparam("limit"))
    ),
    refs=None,
)
KNOWN_FETCH_FACTOR = 4  # ours: rows read per row wanted, for those the named/private rule drops


def known(conn: Connection, scope: Scope, limit: int) -> list[tuple[int, str]]:
    """(id, text) of the persona's open rows `scope` admits (the block's audience rule: whom
    they concern in SQL, then the humans they name and whom a world row stays with), most
    important first. An incognito scope knows nothing."""
    if not scope.world or limit <= 0:
        return []
    params = {"persona": scope.persona, "limit": limit * KNOWN_FETCH_FACTOR}
    found: Any = KNOWN_TEXTS.execute(conn, params, refs=list(scope.human_refs)).all()
    out = [
        (int(i), str(text))
        for i, text, named, private in found
        if scope.admits_named(id_list(named) or ()) and scope.admits_private_to(id_list(private))
    ]
    return out[:limit]


def known_texts(conn: Connection, scope: Scope, limit: int) -> list[str]:
    """The texts of `known`."""
    return [text for _, text in known(conn, scope, limit)]


def _written_since(subjects: Sequence[Any], refs: Sequence[Any]) -> Any:
    """The rows that count towards these caps (`guards.cap_key`), per (subject, counterpart):
    rows about a human or the world (only `self` rows have a counterpart), and `self` rows by
    their counterpart. Two branches, so each is a range on `ix_persona_memory_day` (persona,
    subject, counterpart, created): the count reads today's rows about these people only."""
    since = pm.created >= bindparam("since")
    persona = pm.persona == bindparam("persona")
    return union_all(
        select(pm.subject, pm.counterpart, func.count())
        .where(persona, pm.subject.in_(subjects), pm.counterpart.is_(None), since)
        .group_by(pm.subject, pm.counterpart),
        select(pm.subject, pm.counterpart, func.count())
        .where(persona, pm.subject == SUBJECT_SELF, pm.counterpart.in_(refs), since)
        .group_by(pm.subject, pm.counterpart),
    )


WRITTEN_SINCE = Prepared(_written_since, subjects=SUBJECT_WORLD, refs=None)


def written_since(
    conn: Connection, persona: str, since: str, humans: Iterable[int]
) -> list[tuple[str, str | None, int]]:
    """(subject, counterpart, count) of the rows the persona wrote with `created >= since`
    that count towards these humans' caps or the world's (the daily caps:
    `guards.counts_by_cap` turns them into counts per cap). However many rows the persona
    wrote today about others, this reads none of them."""
    refs = _refs(humans)
    subjects = [SUBJECT_WORLD, *refs]
    params = {"persona": persona, "since": since}
    found: Any
    if len(subjects) <= PREPARED_IN_MAX:
        found = WRITTEN_SINCE.execute(conn, params, subjects=subjects, refs=refs)
    else:
        found = conn.execute(_written_since(subjects, refs), params)
    return [(str(s), c, int(n)) for s, c, n in found.all()]


ADD_AUDIENCE = Prepared(
    lambda: insert(t.memory_audience).values(
        row_id=bindparam("row_id"), user_id=bindparam("user_id")
    )
)
SET_PRIVATE_TO = Prepared(
    lambda: (
        update(t.persona_memory)
        .where(pm.id == bindparam("k_id"))
        .values(private_to=bindparam("k_private_to"))
    )
)


def set_audience(
    conn: Connection, row_id: int, audience: Iterable[int] | None, *, was: Iterable[int] = ()
) -> None:
    """A world row's audience, in both its homes: `private_to` on the row (what the reader
    checks) and `memory_audience` (what finds it by user). None: public. `was`: the audience
    it had, so only the difference is written."""
    before = set(was)
    after = None if audience is None else sorted(set(audience))
    SET_PRIVATE_TO.execute(conn, {"k_id": row_id, "k_private_to": id_json(after)})
    gone = before - set(after or ())
    if gone:
        conn.execute(
            delete(t.memory_audience).where(ma.row_id == row_id, ma.user_id.in_(sorted(gone)))
        )
    for uid in sorted(set(after or ()) - before):
        ADD_AUDIENCE.execute(conn, {"row_id": row_id, "user_id": uid})


INSERTED = (  # the columns a new row takes from its call; the rest are an open row's own
    "persona",
    "subject",
    "counterpart",
    "witnessed",
    "room_id",
    "kind",
    "text",
    "importance",
    "valid_from",
    "evidence",
    "created",
    "embedding",
    "named",
    "private_to",
    "sentence_key",
    "search_text",
)

INSERT_ROW = Prepared(
    lambda: (
        insert(t.persona_memory)
        .values(
            {name: bindparam(name) for name in INSERTED}
            | {"valid_to": None, "closed_by": None, "last_recalled": None, "recall_count": 0}
        )
        .returning(pm.id)
    )
)


def insert_row(
    conn: Connection,
    *,
    persona: str,
    room_id: str,
    witnessed: Iterable[int],
    candidate: Candidate,
    embedding: bytes | None,
    now: str,
    named: Iterable[int] = (),
    private_to: Iterable[int] | None = None,
) -> int:
    """A new open row from a guarded candidate, with the humans its text names besides whom it
    concerns, and for a world row learned from people, whom it stays with. Returns its id.

    The only write of a row's text: its `sentence_key` (`names.sentence_key`) is written with
    it, here and nowhere else (schema/versions/0020 filled the rows stored before), and so is
    its `search_text` (`names.search_key`, 0023)."""
    named = sorted(set(named))
    c = candidate
    new = INSERT_ROW.execute(
        conn,
        {
            "persona": persona,
            "subject": c.subject,
            "counterpart": c.counterpart,
            "witnessed": json.dumps(sorted(witnessed)),
            "room_id": room_id,
            "kind": c.kind,
            "text": c.text,
            "importance": c.importance,
            "valid_from": c.valid_from,
            "evidence": json.dumps(list(c.evidence)),
            "created": now,
            "embedding": embedding,  # bytes: what LargeBinary would have bound
            "named": id_json(named) if named else None,
            "private_to": id_json(private_to),
            "sentence_key": names.sentence_key(c.text),
            "search_text": names.search_key(c.text),
        },
    )
    return int(new.scalar_one())


CLOSE = Prepared(  # a column's name is the SET clause's own bind name: k_* here
    lambda: (
        update(t.persona_memory)
        .where(pm.id == bindparam("k_id"), pm.valid_to.is_(None))
        .values(
            valid_to=bindparam("k_valid_to"),
            closed_by=bindparam("k_closed_by"),
            toggled=bindparam("k_toggled"),
        )
    )
)


def toggle_stamp() -> int:
    """`persona_memory.toggled` for a close or reopen now: microseconds since the epoch."""
    return time.time_ns() // 1000


def close(conn: Connection, row_id: int, valid_to: str, closed_by: int | None) -> None:
    """Close an open row (a closed arc: never deleted by the write path)."""
    CLOSE.execute(
        conn,
        {
            "k_id": row_id,
            "k_valid_to": valid_to,
            "k_closed_by": closed_by,
            "k_toggled": toggle_stamp(),
        },
    )


# --- whole rows -----------------------------------------------------------------------------


def _row(m: Mapping[Any, Any]) -> Row:
    row = Row.from_mapping(m)
    row.embedding = _blob(row.embedding)
    return row


@dataclass(frozen=True)
class Sentence:
    """An open row as the commit's exactly-once check reads it: whom it concerns, its
    sentence, and who it was formed with (a world row: its audience; None: public)."""

    id: int
    subject: str
    counterpart: str | None
    text: str
    private_to: tuple[int, ...] | None
    witnessed: tuple[int, ...]


def open_sentences(
    conn: Connection, persona: str, subjects: Iterable[str], keys: Iterable[str]
) -> list[Sentence]:
    """The persona's open rows about these subjects whose sentence is one of `keys`
    (`names.sentence_key`), under every audience: the commit's code compares sentences across
    audiences; none of it is shown to a model. One range on `ix_persona_memory_sentence` per
    key: however many rows the persona holds about these subjects, it reads only those."""
    wanted, sentences = sorted(set(subjects)), sorted(set(keys))
    if not wanted or not sentences:
        return []
    query = select(pm.id, pm.subject, pm.counterpart, pm.text, pm.private_to, pm.witnessed).where(
        pm.persona == persona,
        pm.sentence_key.in_(sentences),
        pm.subject.in_(wanted),
        pm.valid_to.is_(None),
    )
    return [
        Sentence(int(i), subject, cp, text, id_list(p), tuple(id_list(w) or ()))
        for i, subject, cp, text, p, w in conn.execute(query)
    ]


def _rows(conn: Connection, where: ColumnElement[bool]) -> list[Row]:
    """Whole rows."""
    found = conn.execute(select(t.persona_memory).where(where).order_by(pm.id)).mappings()
    return [_row(m) for m in found]


def _by_id_statement(ids: Sequence[int | BindParameter[Any]]) -> Select[Any]:
    return select(t.persona_memory).where(pm.id.in_(ids)).order_by(pm.id)


ROWS_BY_ID = Prepared(_by_id_statement, ids=-1)  # ids start at 1


def rows_by_id(conn: Connection, ids: Sequence[int]) -> dict[int, Row]:
    """Whole rows by id (ids that do not exist are simply absent)."""
    if not ids:
        return {}
    if len(ids) <= PREPARED_IN_MAX:
        found = [_row(m) for m in ROWS_BY_ID.execute(conn, {}, ids=list(ids)).mappings().all()]
    else:
        found = [
            _row(m)
            for part in in_parts(ids)
            for m in conn.execute(_by_id_statement(part)).mappings()
        ]
    return {r.id: r for r in found}


def about_user(user_id: int) -> ColumnElement[bool]:
    """SQL for `rows.concerns_user(row, user_id)` (callers re-check in Python): the user's
    rows, the persona's promises to them, world rows whose audience holds them."""
    ref = human_ref(user_id)
    held = select(ma.row_id).where(ma.user_id == user_id)
    return or_(
        pm.subject == ref,
        and_(pm.subject == SUBJECT_SELF, pm.counterpart == ref),
        and_(pm.subject == SUBJECT_WORLD, pm.id.in_(held)),
    )


def rows_about(conn: Connection, user_id: int, persona: str | None = None) -> list[Row]:
    """Every row that concerns the user, open and closed (only `persona`'s when given)."""
    where = about_user(user_id)
    if persona is not None:
        where = and_(where, pm.persona == persona)
    return _rows(conn, where)


# A row as the page and the export show it: not its vector (a kilobyte a row with e5) nor the
# keys kept for the commit and the search.
SHOWN_COLUMNS = [
    c for c in t.persona_memory.c if c.name not in ("embedding", "sentence_key", "search_text")
]


def page_of(
    conn: Connection,
    user_id: int,
    *,
    closed: bool | None,
    before_id: int | None,
    limit: int,
    text: str | None = None,
) -> list[Row]:
    """One page of the rows that concern the user, newest first: open ones or closed ones
    (None: both, the export's walk), with ids below `before_id` (the page's cursor), whose
    text holds `text` in any case and script (`search_text`, `names.search_key`).

    Each way a row concerns the user (`about_user`) is read on its own, newest first and at
    most `limit`, then the newest `limit` of those: one OR over all three made SQLite
    collect and sort every row about the human (170 ms at 100k rows) for 50."""
    ref = human_ref(user_id)
    held = select(ma.row_id).where(ma.user_id == user_id)
    shared: ColumnElement[bool] = true()
    if closed is not None:
        shared = pm.valid_to.is_not(None) if closed else pm.valid_to.is_(None)
    if before_id is not None:
        shared = and_(shared, pm.id < before_id)
    if text:
        shared = and_(shared, pm.search_text.contains(names.search_key(text), autoescape=True))
    ways = (
        pm.subject == ref,
        and_(pm.subject == SUBJECT_SELF, pm.counterpart == ref),
        and_(pm.subject == SUBJECT_WORLD, pm.id.in_(held)),
    )
    newest = union_all(
        *(
            select(pm.id).where(way, shared).order_by(pm.id.desc()).limit(limit).subquery().select()
            for way in ways
        )
    ).subquery()
    page = select(*SHOWN_COLUMNS, null().label("embedding")).where(pm.id.in_(select(newest.c.id)))
    found = conn.execute(page.order_by(pm.id.desc()).limit(limit))
    return [_row(m) for m in found.mappings()]


TOGGLED_READ_MAX = 1_000  # ours: toggles since a walk began read at most; past it, "changed"


def toggled_since(conn: Connection, user_id: int, since: int) -> bool:
    """Whether a row that concerns the user was closed or reopened at or after `since`
    (`toggle_stamp`): a page walk begun then may have shown it in the other half.

    Only `ix_persona_memory_toggled` is read — the rows toggled since, whoever they are about,
    few in the seconds or minutes of a walk — and whom each concerns is checked here: with the
    audience rule in the WHERE, SQLite read every row about the human instead. More than
    TOGGLED_READ_MAX toggles since then counts as a change (a walk starts again), never a scan."""
    query = (
        select(pm.subject, pm.counterpart, pm.private_to)
        .where(pm.toggled >= since)
        .limit(TOGGLED_READ_MAX + 1)
    )
    found = conn.execute(query).all()
    if len(found) > TOGGLED_READ_MAX:
        return True
    return any(user_id in core_rows.concerned(s, c, id_list(p)) for s, c, p in found)


def page_counts(conn: Connection, user_id: int) -> dict[str, tuple[int, int, int]]:
    """Per persona, of the rows that concern the user: (open, closed, the chars of its open
    rows: the page's meter, counted as `core.block.meter` counts).

    The store's triggers keep them (`persona_memory_counts`, schema/versions/0019) as rows
    are written, closed, reopened and deleted: counting every row about the human on each
    page view took 119 ms of a 138 ms first page at 100k rows."""
    pc = t.persona_memory_counts.c
    found = conn.execute(
        select(pc.persona, pc.open_rows, pc.closed_rows, pc.open_chars).where(
            pc.ref == human_ref(user_id), pc.open_rows + pc.closed_rows > 0
        )
    )
    return {str(p): (int(o), int(c), int(m)) for p, o, c, m in found}


def _whom() -> ColumnElement[Any]:
    """Whom a row concerns in SQL by its own columns (a world row: by its audience, apart)."""
    return case(
        (pm.subject == SUBJECT_SELF, pm.counterpart),
        (pm.subject == SUBJECT_WORLD, null()),
        else_=pm.subject,
    )


def recount(conn: Connection) -> None:
    """Every counter of `page_counts` from the rows themselves: what the triggers keep, for
    rows written with them off (a benchmark's bulk load)."""
    owners = union_all(
        select(_whom().label("ref"), pm.persona, pm.valid_to, pm.text),
        select(literal("u:") + cast(ma.user_id, Text), pm.persona, pm.valid_to, pm.text)
        .select_from(t.memory_audience.join(t.persona_memory, pm.id == ma.row_id))
        .where(pm.subject == SUBJECT_WORLD),
    ).subquery()
    w = owners.c
    opened = w.valid_to.is_(None)
    counted = (
        select(
            w.ref,
            w.persona,
            func.count().filter(opened),
            func.count().filter(w.valid_to.is_not(None)),
            func.coalesce(func.sum(func.length(w.text)).filter(opened), 0),
        )
        .where(w.ref.is_not(None))
        .group_by(w.ref, w.persona)
    )
    conn.execute(delete(t.persona_memory_counts))
    conn.execute(
        insert(t.persona_memory_counts).from_select(
            ["ref", "persona", "open_rows", "closed_rows", "open_chars"], counted
        )
    )


def rows_closed_by(conn: Connection, ids: Sequence[int]) -> list[Row]:
    """The rows that these rows closed (an UPDATE's predecessor)."""
    found = [r for part in in_parts(ids) for r in _rows(conn, pm.closed_by.in_(part))]
    return sorted(found, key=lambda r: r.id)


def all_rows(conn: Connection) -> list[Row]:
    """Every row of every persona, by id (the demo's table)."""
    return _rows(conn, pm.id.is_not(None))


# --- vectors (the embedder's upkeep: a switch of embedder, a rename) ------------------------


def texts_after(conn: Connection, after_id: int, limit: int) -> list[tuple[int, str]]:
    """(id, text) of up to `limit` rows with an id above `after_id`, by id: a re-embedding's
    next batch. Every row, open or closed (an undo can reopen a closed one)."""
    query = select(pm.id, pm.text).where(pm.id > after_id).order_by(pm.id).limit(limit)
    return [(int(i), str(text)) for i, text in conn.execute(query)]


def key_sentences(conn: Connection, key: Callable[[str], str], batch: int = 5_000) -> None:
    """Every row's `sentence_key` from its text by `key`: a migration's keying of the rows
    stored before it (schema/versions 0020, 0022), in batches by id so a big store is never
    held in memory at once. In Python: the key's normalisation is Unicode folding no SQL
    dialect has."""
    write = (
        update(t.persona_memory)
        .where(pm.id == bindparam("k_id"))
        .values(sentence_key=bindparam("k_key"))
    )
    after = 0
    while found := texts_after(conn, after, batch):
        conn.execute(write, [{"k_id": i, "k_key": key(text)} for i, text in found])
        after = found[-1][0]


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
    values = dict(valid_to=None, closed_by=None, toggled=toggle_stamp())
    for part in in_parts(ids):
        conn.execute(update(t.persona_memory).where(pm.id.in_(part)).values(**values))


def delete_rows(conn: Connection, ids: Sequence[int]) -> None:
    """The only physical delete in the system: the human's undo, delete and clear. The rows
    leave their personas' read packs in the same transaction (`read_packs.forget`): a pack
    outlives a delete, so the next cold open still ranks on it."""
    if not ids:
        return
    gone: dict[str, list[int]] = {}
    for part in in_parts(ids):
        for persona, row_id in conn.execute(select(pm.persona, pm.id).where(pm.id.in_(part))):
            gone.setdefault(str(persona), []).append(int(row_id))
    before = read_path.versions(conn, sorted(gone))
    for part in in_parts(ids):
        conn.execute(delete(t.persona_memory).where(pm.id.in_(part)))
    read_packs.forget(conn, gone, before)
