"""The cache loader: a room open's ranking columns, from the read cache, a pack or the store.

A persona's open rows become columns (`read_columns.PersonaRows`) held in this process's read
cache; `load_candidates` picks the ones a scope may see (`visible_view`) and measures their
relevance. A held entry behind the store is brought up to it from the change log; a persona
not held is ranked on its pack and the rows changed since, or failing that on the rows its
audience can see, and the fill thread (fill.py) reads the whole entry afterwards. The block
(room_open.py) and on-demand recall (recall.py) both read through here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import Connection

from memory_worker.core import clock
from memory_worker.core import settings as settings_mod
from memory_worker.core.audience import Scope
from memory_worker.core.ranking import UNKNOWN_KIND, UNREADABLE_AGE_DAYS, WORLD_GROUP, RankColumns
from memory_worker.core.read_columns import (
    NO_REQUIREMENT,
    VIEWS_FROM_ROWS,
    Key,
    PersonaRows,
    Requirement,
    Version,
    Versions,
    View,
    narrow,
    narrow_ints,
    unpacked,
)
from memory_worker.core.rows import Row, human_id, human_ref, id_list
from memory_worker.core.vectors import int8_cosines, int8_norms, stack_int8
from memory_worker.reader.cache import LoadVectors, ReadCache
from memory_worker.reader.threads import OPENS
from memory_worker.storage import read_packs, read_path, store

log = logging.getLogger(__name__)


_EMPTY = np.zeros(0, dtype=np.int64)


NO_ONE = -2  # the group of a row no audience sees: a subject the rule does not know


READ_CACHE = ReadCache()  # this process's ranking columns, checked against the store each open


def visible_index(rows: PersonaRows, scope: Scope) -> np.ndarray:
    """The positions in a persona's columns of the rows this scope admits (the audience rule
    on whom each row concerns; `visible_memories` checks the winners again)."""
    if not scope.world:
        return np.zeros(0, dtype=np.int64)
    mask = rows.groups == WORLD_GROUP
    if len(scope.humans) <= 8:  # a room's few present humans: a pass each beats a sort
        for u in scope.humans:
            mask |= rows.groups == u
    else:
        mask |= np.isin(rows.groups, np.fromiter(scope.humans, dtype=np.int64))
    for (named, private_to), ids in rows.required.items():
        if not (scope.admits_named(named) and scope.admits_private_to(private_to)):
            mask[np.searchsorted(rows.ids, ids)] = False
    if scope.private_only:  # only under the group scope: a room open otherwise pays nothing
        _leave_out_kept_private(mask, rows, scope.private_only)
    return np.flatnonzero(mask)


def _leave_out_kept_private(mask: np.ndarray, rows: PersonaRows, keepers: frozenset[int]) -> None:
    """Clear the rows formed one-to-one with a human who keeps those out of groups: rows
    about them and promises to them (`groups`), and world rows they alone hold (`required`)."""
    alone = rows.alone == 1
    for u in keepers:
        mask &= ~((rows.groups == u) & alone)
    for (_, private_to), ids in rows.required.items():
        if private_to is not None and len(private_to) == 1 and private_to[0] in keepers:
            at = np.searchsorted(rows.ids, ids)
            mask[at[alone[at]]] = False


def visible_view(rows: PersonaRows, scope: Scope, key: Key | None = None) -> View:
    """`visible_index` in (group, kind) order with its runs, kept with a big entry for the
    next open of the same audience (the latest VIEWS_KEPT audiences, `ReadCache.keep_view`)."""
    if len(rows) <= VIEWS_FROM_ROWS:  # a take sorts these at once: nothing to keep
        return View(visible_index(rows, scope), _NO_ORDER, _NO_RUNS)
    try:
        got = rows.views.get(scope)
    except TypeError:  # a scope that cannot be a key: made every time
        return _view(rows, scope)
    if got is None:
        got = _view(rows, scope)
        if key is not None:
            READ_CACHE.keep_view(key, rows, scope, got)
    return got


def _view(rows: PersonaRows, scope: Scope) -> View:
    idx = visible_index(rows, scope)
    codes = rows.groups[idx].astype(np.int64) * (UNKNOWN_KIND + 1) + rows.kinds[idx]
    by_kind = np.argsort(codes, kind="stable")
    codes = codes[by_kind]
    runs = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]]) if idx.size else _EMPTY
    runs = np.append(runs, idx.size).astype(np.int64)
    return View(idx.astype(np.int32), by_kind.astype(np.int32), runs)


_NO_ORDER, _NO_RUNS = np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64)


_NO_VIEW = View(_EMPTY, _NO_ORDER, np.zeros(1, dtype=np.int64))


@dataclass
class Fills:
    """What a room open asks of the fill thread, requested as it returns (`opening`): these
    personas' entries (with a topic's cosines), and the winners' rows it read of personas
    it did not hold, to keep with their entries."""

    asked: list[tuple[list[str], bytes | None]] = field(default_factory=list)
    winners: dict[str, tuple[Version, dict[int, Row]]] = field(default_factory=dict)


@dataclass(frozen=True)
class Entry:
    """A persona's columns for one open, from the first of its sources that has them (see
    `load_entries`): the entry held here (`held`), its pack with the rows changed since
    (`packed`), or the store's rows — every open row, or only those its audience can see
    (`whole` False: then no byte bound's rule applies to its relevance)."""

    rows: PersonaRows
    held: bool = False
    packed: Packed | None = None
    whole: bool = True


def load_entries(
    conn: Connection,
    url: str,
    versions: Versions,
    scopes: Mapping[str, Scope],
    vector: bytes | None,
    topic: bytes | None,
) -> dict[str, Entry]:
    """Each persona's columns at `versions`, from the first of three sources that has them,
    in order: the entry this process holds (brought up from the change log if behind:
    `held_entry`); the persona's pack and the rows changed since (`read_packs`, one
    statement for every persona not held; the entry is kept at once); the rows its audience
    can see, or every open row when a topic's relevance must follow the byte bound
    (`_audience_rows`). Every persona of `scopes` gets an entry; `topic` is the vector whose
    kept cosines come with the packs (None: a message's, never kept)."""
    sid = versions.store
    out: dict[str, Entry] = {}
    for p in scopes:
        got = held_entry(conn, (url, sid, p), versions[p])
        if got is not None:
            out[p] = Entry(got, held=True)
    cold = [p for p in scopes if p not in out]
    if not cold:
        return out
    for p, pack in read_packs.packs(conn, cold, topic).items():
        caught = patched_entry(conn, p, unpacked(pack.columns, pack.version), versions[p])
        if caught is not None:  # every open row: the entry, kept now (its vectors later)
            READ_CACHE.put((url, sid, p), caught[0])
            out[p] = Entry(caught[0], packed=Packed(pack, caught[1]))
    rest = [p for p in cold if p not in out]
    if rest:
        whole, visible = _audience_rows(conn, rest, scopes, versions, vector)
        out.update({p: Entry(rows) for p, rows in whole.items()})
        out.update({p: Entry(rows, whole=False) for p, rows in visible.items()})
    return out


def load_candidates(
    conn: Connection,
    scopes: Mapping[str, Scope],
    when: datetime,
    vector: bytes | None,
    url: str | None = None,
    *,
    versions: Versions | None = None,
    keep_cosines: bool = True,
    fills: Fills | None = None,
) -> dict[str, RankColumns]:
    """Every persona's visible open rows as ranking columns, relevance measured against
    `vector` (a room's topic; a message, for recall).

    The columns come from `load_entries`: the read cache, a pack, or the rows the audience
    can see. A persona not held has its whole entry read off the caller's path, asked for in
    `fills` (see `room_open.opening`; without it, not at all). Relevance comes from the held
    vectors, else from the pack's cosines to this topic, else from the embeddings of the
    visible rows, read by id.

    `versions` are the store's id and the personas' versions if the caller has read them (a
    room open reads them with its context); `keep_cosines=False` for a vector seen once (a
    message), whose cosines would only push a room's topic out of the cache. A warm open
    that reads nothing but its context asks `held_candidates` instead.
    """
    url = url or settings_mod.current().database_url
    now_day = when.timestamp() / 86400.0
    seen = {p: s for p, s in scopes.items() if s.world}
    if versions is None:
        versions = read_path.versions(conn, list(seen))
    READ_CACHE.enter(url, versions.store)  # another store at this url: nothing held answers
    sid = versions.store
    topic = vector if keep_cosines else None
    entries = load_entries(conn, url, versions, seen, vector, topic)
    asked: list[tuple[list[str], bytes | None]] = [
        ([p], None) for p, e in entries.items() if e.held and READ_CACHE.pending(e.rows)
    ]
    cold = [p for p in seen if not entries[p].held]
    if cold:
        asked.append((cold, topic))
    if fills is not None:
        fills.asked.extend(asked)
    out = {}
    for p, scope in scopes.items():
        e = entries.get(p)
        r = e.rows if e is not None else None
        view = visible_view(r, scope, (url, sid, p)) if r is not None else _NO_VIEW
        idx = view.idx
        rel = None
        if e is not None and r is not None and vector is not None and idx.size:
            key = (url, sid, p)
            if e.held and r.vectors is not None and r.vectors.dims == len(vector):
                load = vector_loader(conn, p, len(r))
                rel = READ_CACHE.relevance(key, r, vector, load, idx, keep=keep_cosines)
            elif e.held and not keep_cosines:  # a message: the vectors, loaded once here
                load = vector_loader(conn, p, len(r))
                rel = READ_CACHE.relevance(key, r, vector, load, idx, keep=False)
            else:
                rel = _measured(conn, key, r, idx, vector, e.packed, e.whole)
                if e.held and fills is not None:
                    fills.asked.append(([p], vector))  # its vectors, for the next open here
        out[p] = _candidates(r, view, now_day, rel)
    return out


def held_candidates(
    scopes: Mapping[str, Scope],
    when: datetime,
    vector: bytes | None,
    url: str,
    versions: Versions,
) -> dict[str, RankColumns] | None:
    """`load_candidates` from what the read cache holds at the store's `versions`, reading
    nothing: None as soon as something would have to be read (the open then reads it all in
    one transaction)."""
    if READ_CACHE.store_of(url) != versions.store:
        return None
    now_day = when.timestamp() / 86400.0
    out = {}
    for p, scope in scopes.items():
        if not scope.world:
            out[p] = _candidates(None, _NO_VIEW, now_day, None)
            continue
        key = (url, versions.store, p)
        rows = READ_CACHE.get(key, versions[p])
        if rows is None:
            return None
        view = visible_view(rows, scope, key)
        rel = None
        if vector is not None and view.idx.size:
            rel = READ_CACHE.held_relevance(key, rows, vector, view.idx)
            if rel is None:
                return None
        out[p] = _candidates(rows, view, now_day, rel)
    return out


def kept_winners(
    url: str, versions: Versions, picks: Mapping[str, Sequence[int]]
) -> tuple[dict[int, Row], dict[str, list[int]]]:
    """The full rows of each persona's winners that its entry keeps from earlier opens at
    the same version, and the ids of those it does not keep, by persona."""
    out: dict[int, Row] = {}
    missing: dict[str, list[int]] = {}
    for p, ids in picks.items():
        entry = READ_CACHE.get((url, versions.store, p), versions[p])
        kept = entry.winners if entry is not None else {}
        for i in ids:
            if (row := kept.get(i)) is not None:
                out[i] = row
            else:
                missing.setdefault(p, []).append(i)
    return out, missing


def winner_rows(
    conn: Connection,
    url: str,
    versions: Versions,
    picks: Mapping[str, Sequence[int]],
    fills: Fills | None = None,
) -> dict[int, Row]:
    """The full rows of each persona's winners: those its entry keeps (`kept_winners`), the
    rest read in one statement and kept with the entry (or, for a persona not held, handed
    to its fill in `fills`)."""
    out, missing = kept_winners(url, versions, picks)
    if not missing:
        return out
    found = read_path.winners(conn, sorted(i for ids in missing.values() for i in ids))
    out.update(found)
    for p, ids in missing.items():
        key = (url, versions.store, p)
        read = {i: found[i] for i in ids if i in found}
        if READ_CACHE.previous(key) is not None:
            READ_CACHE.remember(key, versions[p], read)
        elif fills is not None:
            fills.winners[p] = (versions[p], read)
    return out


def held_entry(conn: Connection, key: Key, version: Version) -> PersonaRows | None:
    """The entry held for `key` at `version`, or an older one brought up to it from the
    change log and kept (its new rows' vectors only into spare room: `ReadCache.fill`)."""
    got = READ_CACHE.get(key, version)
    if got is not None:
        return got
    old = READ_CACHE.previous(key)
    caught = None if old is None else patched_entry(conn, key[2], old, version)
    if caught is None:
        return None
    rows = caught[0]
    return READ_CACHE.fill(key, rows, vector_loader(conn, key[2], len(rows)), spare_only=True)


@dataclass(frozen=True)
class Packed:
    """A persona ranked on its pack: the pack, and the rows the change log names since."""

    pack: read_packs.Pack
    changed: frozenset[int]


def _audience_rows(
    conn: Connection,
    personas: list[str],
    scopes: Mapping[str, Scope],
    versions: Versions,
    vector: bytes | None,
) -> tuple[dict[str, PersonaRows], dict[str, PersonaRows]]:
    """Personas with no pack to rank on: (those read whole, those read only as far as their
    audience can see). Whole only when a topic's relevance must follow the byte bound: a
    persona whose every vector fits, with room to spare, ranks the same either way."""
    whole: list[str] = []
    if vector is not None:
        counts = read_path.open_counts(conn, personas)
        whole = [p for p in personas if not READ_CACHE.fits_whole(counts[p], len(vector))]
    rest = [p for p in personas if p not in whole]
    refs = sorted({r for p in rest for r in scopes[p].human_refs})
    found = _split(read_path.open_rows(conn, whole), whole, versions) if whole else {}
    seen = _split(read_path.visible_open_rows(conn, rest, refs), rest, versions) if rest else {}
    return found, seen


def _measured(
    conn: Connection,
    key: Key,
    rows: PersonaRows,
    idx: np.ndarray,
    vector: bytes,
    packed: Packed | None,
    whole: bool,
) -> np.ndarray:
    """The relevance of the rows at `idx` without the persona's vectors at hand: the kept
    cosines to this topic where a row is unchanged since they were kept, its embedding read
    by id otherwise; then, for a whole entry, the byte bound's rule (its oldest rows rank
    with relevance 0, as a warm open ranks them)."""
    persona = key[2]
    kept = packed.pack.topic if packed is not None else None
    if packed is None and whole:  # a held entry without vectors yet
        pack = read_packs.packs(conn, [persona], vector).get(persona)
        kept = pack.topic if pack is not None else None
    want = rows.ids[idx]
    out = np.zeros(want.size)
    known = np.zeros(want.size, dtype=bool)
    changed = None if kept is None else _changed_since(conn, persona, kept.version, rows, packed)
    if kept is not None and changed is not None:
        ids = np.frombuffer(kept.ids, dtype="<i8")
        if ids.size:
            cos = np.frombuffer(kept.cosines, dtype="<f8")
            at = np.minimum(np.searchsorted(ids, want), ids.size - 1)
            gone = np.fromiter(changed, dtype=np.int64, count=len(changed))
            known = (ids[at] == want) & ~np.isin(want, gone)
            out[known] = cos[at[known]]
    if not known.all():
        out[~known] = _by_id(conn, persona, want[~known], vector)
    if whole:
        start = len(rows) - min(len(rows), READ_CACHE.slots_allowed(rows, len(vector)))
        out[idx < start] = 0.0
    return out


def _changed_since(
    conn: Connection, persona: str, since: Version, rows: PersonaRows, packed: Packed | None
) -> frozenset[int] | None:
    """The rows written between `since` and `rows`' version (None: the log cannot say)."""
    if since == rows.version:
        return frozenset()
    if packed is not None and since == packed.pack.version:
        return packed.changed
    found = read_path.changed_rows(conn, persona, since, rows.version)
    return None if found is None else frozenset(found)


def _by_id(conn: Connection, persona: str, ids: np.ndarray, vector: bytes) -> np.ndarray:
    """The cosine to `vector` of these rows' embeddings, read by id."""
    found = read_path.embeddings(conn, persona, ids.tolist(), of_all=4 * len(ids))
    block = stack_int8([found.get(int(i)) for i in ids], len(vector))
    return int8_cosines(block, vector, int8_norms(block))


def vector_loader(
    conn: Connection, persona: str, of_all: int, between: Callable[[], object] | None = None
) -> LoadVectors:
    return lambda ids: read_path.embeddings(conn, persona, ids, of_all, between=between)


def _split(
    found: Sequence[Any], personas: Sequence[str], versions: Versions
) -> dict[str, PersonaRows]:
    """Fetched rows of several personas (`read_path.open_rows`' tuples) as each one's columns."""
    if len(personas) == 1:
        return {personas[0]: columns_of(found, versions[personas[0]])}
    by_persona: dict[str, list[Any]] = {p: [] for p in personas}
    for r in found:
        by_persona[r[1]].append(r)
    return {p: columns_of(rows, versions[p]) for p, rows in by_persona.items()}


def patched_entry(
    conn: Connection, persona: str, old: PersonaRows, version: Version
) -> tuple[PersonaRows, frozenset[int]] | None:
    """`old` brought to `version` by re-reading only the rows its change log names since, with
    those rows' ids; None when the log no longer reaches that far back, or is not the
    history `old` was read from (`read_path.changed_rows`: a restored or remade store)."""
    if old.version == version:
        return old, frozenset()
    changed = read_path.changed_rows(conn, persona, old.version, version)
    if changed is None:
        return None
    fresh = columns_of(read_path.open_rows(conn, [persona], sorted(changed)), version)
    return old.patched(changed, fresh), frozenset(changed)


def catch_up_store(url: str, personas: Sequence[str] | None = None) -> int:
    held = READ_CACHE.held(url)
    if personas is not None:
        held = {p: rows for p, rows in held.items() if p in personas}
    if not held:
        return 0
    OPENS.wait_idle()
    with store.engine(url).connect() as conn:
        now = read_path.versions(conn, list(held))
        READ_CACHE.enter(url, now.store)  # another store: all of it let go of, nothing to fill
        moved = {p: old for p, old in held.items() if old.version != now[p]}
        for p, old in moved.items():
            key = (url, now.store, p)
            if READ_CACHE.forwarded(key, now[p]):
                continue  # behind only by this process's own touch: brought forward by it
            caught = patched_entry(conn, p, old, now[p])
            if caught is None:
                READ_CACHE.drop(key, old)
            else:
                rows = caught[0]
                READ_CACHE.fill(key, rows, vector_loader(conn, p, len(rows)), recent=False)
    return len(moved)


def _group(ref: str | None) -> int:
    """Whom a row concerns, as an int: 42 for exactly 'u:42', else NO_ONE."""
    uid = human_id(ref or "")
    return uid if uid is not None and human_ref(uid) == ref else NO_ONE


def columns_of(rows: Sequence[Any], version: Version) -> PersonaRows:
    """PersonaRows, sorted by id, from fetched (id, persona, is_world, ref, kind, importance,
    recalled, chars, named, private_to, witnessed)."""
    if not rows:
        z, zi = np.zeros(0), np.zeros(0, dtype=np.int64)
        return PersonaRows(version, zi, zi, zi, z, z, zi, np.zeros(0, dtype=np.int8))
    # Transpose first: numpy probing 100,000 SQLAlchemy Row objects one by one is 50× slower.
    cols = list(zip(*rows, strict=True))
    n = len(rows)
    groups_of = {ref: _group(ref) for ref in set(cols[3])}
    groups = np.fromiter(map(groups_of.__getitem__, cols[3]), dtype=np.int64, count=n)
    is_world = np.array(cols[2], dtype=bool)
    alone = _alone(groups, is_world, cols[9], cols[10])
    groups[is_world] = WORLD_GROUP
    ids = np.array(cols[0], dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    return PersonaRows(
        required=_requirements(cols[0], cols[8], cols[9]),
        version=version,
        ids=narrow_ints(ids[order]),
        groups=narrow_ints(groups[order]),
        kinds=np.array(cols[4], dtype=np.int8)[order],
        importance=narrow(np.array(cols[5], dtype=np.float64))[order],
        recalled_day=_days(cols[6])[order],
        chars=np.array(cols[7], dtype=np.int32)[order],
        alone=alone[order],
    )


def _alone(
    groups: np.ndarray,
    is_world: np.ndarray,
    private_to: Sequence[str | None],
    witnessed: Sequence[str | None],
) -> np.ndarray:
    """1 where a row was formed one-to-one (`audience.one_to_one`): witnessed by the one human
    who holds it — whom it concerns, or the one human a world row stays with."""
    one_of = {value: _one_human(value) for value in {*private_to, *witnessed}}
    n = len(groups)
    only_witness = np.fromiter(map(one_of.__getitem__, witnessed), dtype=np.int64, count=n)
    kept_by = np.fromiter(map(one_of.__getitem__, private_to), dtype=np.int64, count=n)
    holder = np.where(is_world, kept_by, groups)
    alone: np.ndarray = ((only_witness != NO_ONE) & (only_witness == holder)).astype(np.int8)
    return alone


def _one_human(stored: str | None) -> int:
    """The one human of a stored id list, else NO_ONE (none, or more than one)."""
    ids = id_list(stored)
    return ids[0] if ids is not None and len(ids) == 1 else NO_ONE


def _requirements(
    ids: Sequence[int], named: Sequence[str | None], private_to: Sequence[str | None]
) -> dict[Requirement, np.ndarray]:
    """Requirement → the ids (ascending) of the rows that carry it, from the stored columns."""
    out: dict[Requirement, list[int]] = {}
    parsed: dict[str | None, tuple[int, ...] | None] = {None: None}
    for i, n, p in zip(ids, named, private_to, strict=True):
        if n is None and p is None:
            continue
        for raw in (n, p):
            if raw not in parsed:
                parsed[raw] = id_list(raw)
        req = (parsed[n] or (), parsed[p])
        if req != NO_REQUIREMENT:
            out.setdefault(req, []).append(int(i))
    return {req: np.array(sorted(got), dtype=np.int64) for req, got in out.items()}


def _days(values: Sequence[float | str | None]) -> np.ndarray:
    """Unix days from julianday arithmetic (SQLite) or from the stamps themselves; a stamp
    nobody can read becomes NaN, which ranks as UNREADABLE_AGE_DAYS old."""
    if values and isinstance(values[0], str):
        return np.array([unix_day(v if isinstance(v, str) else None) for v in values])
    return np.array(values, dtype=np.float64)  # None becomes NaN


def unix_day(stamp: str | None) -> float:
    """An ISO stamp (naive means UTC) as Unix days; NaN when it cannot be read."""
    try:
        when = datetime.fromisoformat(stamp or "")
    except ValueError:
        return float("nan")
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp() / 86400.0


def _candidates(
    rows: PersonaRows | None, view: View, now_day: float, rel: np.ndarray | None
) -> RankColumns:
    if rows is None or not view.idx.size:
        z = np.zeros(0)
        return RankColumns(_EMPTY, _EMPTY, _EMPTY, z, z, _EMPTY, z)
    idx = np.asarray(view.idx, dtype=np.intp)  # numpy gathers fastest on its own index type
    ages = now_day - rows.recalled_day[idx]
    np.copyto(ages, UNREADABLE_AGE_DAYS, where=np.isnan(ages))  # np.nan_to_num, less its checks
    np.maximum(ages, 0.0, out=ages)
    return RankColumns(
        ids=rows.ids[idx],
        groups=rows.groups[idx].astype(np.int64),  # ranking multiplies them
        kinds=rows.kinds[idx],
        importance=rows.importance[idx].astype(np.float64),
        age_days=ages,
        chars=rows.chars[idx],
        relevance=rel if rel is not None else np.zeros(idx.size),
        by_kind=view.by_kind if view.runs.size else None,
        runs=view.runs if view.runs.size else None,
    )


def as_datetime(now: datetime | str | None) -> datetime:
    when = datetime.fromisoformat(now or clock.now()) if not isinstance(now, datetime) else now
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)
