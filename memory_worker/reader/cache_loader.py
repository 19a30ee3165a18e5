"""The cache loader: a room open's ranking columns, from the read cache, a pack or the store.

A persona's open rows become columns (`read_columns.PersonaRows`) held in this process's read
cache. The loader returns a `Plan`: it reads the cache once (`ReadCache.at`), picks the rows a
scope may see (`visible_view`) and measures their relevance; a held entry behind the store is
brought up to it from the change log; a persona not held is ranked on its pack and the rows
changed since, or failing that on the rows its audience can see, and the fill thread
(fill.py) reads the whole entry afterwards. What the plan leaves the cache (entries, views,
winners' rows) is kept as the open ends, in one call (`finish`, `carry_out`). The block
(room_open.py: `held_plan` warm, `read_plan` cold) and on-demand recall (recall.py) both read
through here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import Connection

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
from memory_worker.reader.cache import ReadCache
from memory_worker.reader.threads import OPENS
from memory_worker.reader.vectors import (
    LoadVectors,
    Vectors,
    cosines_read,
    fits_whole,
    held_cosines,
    pending,
    slots_allowed,
    vectors_of,
    with_vectors,
)
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


def visible_view(rows: PersonaRows, scope: Scope) -> tuple[View, bool]:
    """`visible_index` in (group, kind) order with its runs, and whether it is new and worth
    keeping with the entry for the next open of the same audience (the latest VIEWS_KEPT
    audiences: the open's plan keeps it, `ReadCache.keep`)."""
    if len(rows) <= VIEWS_FROM_ROWS:  # a take sorts these at once: nothing to keep
        return View(visible_index(rows, scope), _NO_ORDER, _NO_RUNS), False
    try:
        got = rows.views.get(scope)
    except TypeError:  # a scope that cannot be a key: made every time
        return _view(rows, scope), False
    if got is not None:
        return got, False
    return _view(rows, scope), True


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


@dataclass(frozen=True)
class Entry:
    """A persona's columns for one open, from the first of its sources that has them (see
    `_entries`): the entry held here (`held`), its pack with the rows changed since
    (`packed`), or the store's rows — every open row, or only those its audience can see
    (`whole` False: then no byte bound's rule applies to its relevance)."""

    rows: PersonaRows
    held: bool = False
    packed: Packed | None = None
    whole: bool = True


@dataclass
class Plan:
    """An open's reads, done, and what it leaves the read cache: each persona's columns
    (`entries`) and ranking columns (`candidates`), and the changes the open carries out as
    it ends, in one call into the cache (`finish`): entries to keep (`put`: an entry brought
    up from the change log, a pack's, one given its vectors), audiences' views to keep, held
    entries whose vectors took a topic's cosines (`grown`: their bytes counted again), and the
    fills to ask for. The loader reads and plans; the cache changes only as the open ends."""

    url: str
    versions: Versions
    max_bytes: int  # the cache's bound, read once
    held: frozenset[str] = frozenset()  # personas the cache held anything for, fresh or not
    entries: dict[str, Entry] = field(default_factory=dict)
    candidates: dict[str, RankColumns] = field(default_factory=dict)
    put: dict[str, PersonaRows] = field(default_factory=dict)
    views: list[tuple[str, PersonaRows, Scope, View]] = field(default_factory=list)
    grown: dict[str, PersonaRows] = field(default_factory=dict)
    remember: dict[str, tuple[Version, dict[int, Row]]] = field(default_factory=dict)
    # the fills to ask for as the open ends: (personas, a topic), and the winners' rows read
    # of personas not held, to keep with their entries (`room_open.Fills`)
    asked: list[tuple[list[str], bytes | None]] = field(default_factory=list)
    fill_winners: dict[str, tuple[Version, dict[int, Row]]] = field(default_factory=dict)


def held_plan(
    scopes: Mapping[str, Scope],
    when: datetime,
    vector: bytes | None,
    url: str,
    versions: Versions,
) -> Plan | None:
    """A warm open's plan, from what the read cache holds at the store's `versions`, reading
    nothing: None as soon as something would have to be read (the open then reads it all in
    one transaction: `read_plan`)."""
    seen = [p for p, s in scopes.items() if s.world]
    held = READ_CACHE.at(url, versions, seen, enter=False)
    if held is None or any(held.entries[p][0] is None for p in seen):
        return None
    at = held.entries
    plan = Plan(url, versions, held.max_bytes, frozenset(seen))
    now_day = when.timestamp() / 86400.0
    for p, scope in scopes.items():
        rows = at[p][0] if scope.world else None
        if rows is None:
            plan.candidates[p] = _candidates(None, _NO_VIEW, now_day, None)
            continue
        plan.entries[p] = Entry(rows, held=True)
        view = _planned_view(plan, p, rows, scope)
        rel = None
        if vector is not None and view.idx.size:
            rel = _held_relevance(plan, p, rows, vector, view.idx)
            if rel is None:
                return None
        plan.candidates[p] = _candidates(rows, view, now_day, rel)
    return plan


def read_plan(
    conn: Connection,
    scopes: Mapping[str, Scope],
    when: datetime,
    vector: bytes | None,
    url: str | None = None,
    *,
    versions: Versions | None = None,
    keep_cosines: bool = True,
) -> Plan:
    """Every persona's visible open rows as ranking columns, relevance measured against
    `vector` (a room's topic; a message, for recall), read on `conn` where the cache lacks
    them.

    The columns come from `_entries`: the read cache, a pack, or the rows the audience can
    see. A persona not held has its whole entry read off the caller's path, asked for in the
    plan's fills. Relevance comes from the held vectors, else from the pack's cosines to this
    topic, else from the embeddings of the visible rows, read by id.

    `versions` are the store's id and the personas' versions if the caller has read them (a
    room open reads them with its context); `keep_cosines=False` for a vector seen once (a
    message), whose cosines would only push a room's topic out of the cache.
    """
    url = url or settings_mod.current().database_url
    now_day = when.timestamp() / 86400.0
    seen = {p: s for p, s in scopes.items() if s.world}
    if versions is None:
        versions = read_path.versions(conn, list(seen))
    # another store at this url: nothing held answers (`ReadCache.enter`)
    held = READ_CACHE.at(url, versions, list(seen), enter=True)
    assert held is not None
    at = held.entries
    plan = Plan(url, versions, held.max_bytes, frozenset(p for p in seen if at[p][1]))
    topic = vector if keep_cosines else None
    entries = plan.entries = _entries(conn, plan, at, seen, vector, topic)
    plan.asked = [
        ([p], None) for p, e in entries.items() if e.held and pending(e.rows, plan.max_bytes)
    ]
    cold = [p for p in seen if not entries[p].held]
    if cold:
        plan.asked.append((cold, topic))
    for p, scope in scopes.items():
        e = entries.get(p)
        r = e.rows if e is not None else None
        view = _planned_view(plan, p, r, scope) if r is not None else _NO_VIEW
        idx = view.idx
        rel = None
        if e is not None and r is not None and vector is not None and idx.size:
            fits = r.vectors is not None and r.vectors.dims == len(vector)
            if e.held and (fits or not keep_cosines):  # a message's: the vectors, loaded here
                load = vector_loader(conn, p, len(r))
                rel = _relevance(plan, p, r, vector, load, idx, keep=keep_cosines)
            else:
                rel = _measured(conn, plan, p, r, idx, vector, e.packed, e.whole)
                if e.held:
                    plan.asked.append(([p], vector))  # its vectors, for the next open here
        plan.candidates[p] = _candidates(r, view, now_day, rel)
    return plan


def _entries(
    conn: Connection,
    plan: Plan,
    at: Mapping[str, tuple[PersonaRows | None, PersonaRows | None]],
    scopes: Mapping[str, Scope],
    vector: bytes | None,
    topic: bytes | None,
) -> dict[str, Entry]:
    """Each persona's columns at the plan's versions, from the first of three sources that
    has them, in order: the entry the cache holds (brought up from the change log if behind,
    its new rows' vectors only into spare room: `vectors.with_vectors`); the persona's pack
    and the rows changed since (`read_packs`, one statement for every persona not held; the
    entry kept as the open ends); the rows its audience can see, or every open row when a
    topic's relevance must follow the byte bound (`_audience_rows`). Every persona of
    `scopes` gets an entry; `topic` is the vector whose kept cosines come with the packs
    (None: a message's, never kept)."""
    versions = plan.versions
    out: dict[str, Entry] = {}
    for p in scopes:
        fresh, old = at[p]
        if fresh is not None:
            out[p] = Entry(fresh, held=True)
            continue
        caught = None if old is None else patched_entry(conn, p, old, versions[p])
        if caught is not None:
            rows = caught[0]
            if rows.vectors is not None:
                load = vector_loader(conn, p, len(rows))
                rows = with_vectors(rows, load, plan.max_bytes, spare_only=True)
            plan.put[p] = rows
            out[p] = Entry(rows, held=True)
    cold = [p for p in scopes if p not in out]
    if not cold:
        return out
    for p, pack in read_packs.packs(conn, cold, topic).items():
        caught = patched_entry(conn, p, unpacked(pack.columns, pack.version), versions[p])
        if caught is not None:  # every open row: the entry, kept (its vectors later)
            plan.put[p] = caught[0]
            out[p] = Entry(caught[0], packed=Packed(pack, caught[1]))
    rest = [p for p in cold if p not in out]
    if rest:
        whole, visible = _audience_rows(conn, rest, scopes, versions, vector, plan.max_bytes)
        out.update({p: Entry(rows) for p, rows in whole.items()})
        out.update({p: Entry(rows, whole=False) for p, rows in visible.items()})
    return out


def _planned_view(plan: Plan, persona: str, rows: PersonaRows, scope: Scope) -> View:
    view, new = visible_view(rows, scope)
    if new:
        plan.views.append((persona, rows, scope, view))
    return view


def _held_relevance(
    plan: Plan, persona: str, rows: PersonaRows, topic: bytes, at: np.ndarray
) -> np.ndarray | None:
    """The relevance from the vectors held alone (a warm open reading nothing but its
    context): None when a row at `at` would need its vector read first."""
    held = vectors_of(rows)
    if held is None or rows.slots is None or held.dims != len(topic):
        return None
    out, waiting = held_cosines(rows, topic, at, True, plan.max_bytes)
    plan.grown[persona] = rows
    return None if waiting.any() else out


def _relevance(
    plan: Plan,
    persona: str,
    rows: PersonaRows,
    topic: bytes,
    load: LoadVectors,
    at: np.ndarray,
    *,
    keep: bool,
) -> np.ndarray:
    """The cosine to `topic` of the rows at positions `at` of a held entry (0 for rows whose
    vectors the bound left out), its vectors loaded first if it has none for this width; the
    cosines are kept for the next open unless `keep` is False. A row still waiting for its
    vector (`pending`) is measured on its vector read by id."""
    if rows.vectors is None or rows.slots is None or rows.vectors.dims != len(topic):
        fit = min(len(rows), slots_allowed(rows, len(topic), plan.max_bytes))
        empty = replace(rows, slots=None, vectors=Vectors(len(topic), fit))
        rows = plan.put[persona] = with_vectors(empty, load, plan.max_bytes)
    out, waiting = held_cosines(rows, topic, at, keep, plan.max_bytes)
    if keep:
        plan.grown[persona] = rows
    if waiting.any():
        out[waiting] = cosines_read(rows.ids[at[waiting]], load, topic)
    return out


def finish(
    plan: Plan, picks: Mapping[str, Sequence[int]], conn: Connection | None = None
) -> dict[int, Row] | None:
    """The full rows of each persona's winners, then the plan carried out. Those its entry
    keeps from earlier opens at the same version come from the plan; the rest are read on
    `conn` in one statement and kept with the entry (or, for a persona not held, handed to
    its fill: `plan.fill_winners`). Without `conn` (a warm open) None when some winner is not
    kept: nothing is carried out, and the open reads again."""
    out: dict[int, Row] = {}
    missing: dict[str, list[int]] = {}
    for p, ids in picks.items():
        e = plan.entries.get(p)
        kept = e.rows.winners if e is not None else {}
        for i in ids:
            if (row := kept.get(i)) is not None:
                out[i] = row
            else:
                missing.setdefault(p, []).append(i)
    if missing and conn is None:
        return None
    if missing:
        assert conn is not None
        found = read_path.winners(conn, sorted(i for ids in missing.values() for i in ids))
        out.update(found)
        for p, ids in missing.items():
            read = {i: found[i] for i in ids if i in found}
            if p in plan.held or p in plan.put:
                plan.remember[p] = (plan.versions[p], read)
            else:
                plan.fill_winners[p] = (plan.versions[p], read)
    carry_out(plan)
    return out


def carry_out(plan: Plan) -> None:
    """What the plan leaves the read cache, in one call into it (its fills are the open's to
    ask for: `plan.asked`, `plan.fill_winners`)."""
    READ_CACHE.keep(
        plan.url,
        plan.versions.store,
        put=plan.put,
        views=plan.views,
        grown=plan.grown,
        remember=plan.remember,
    )


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
    max_bytes: int,
) -> tuple[dict[str, PersonaRows], dict[str, PersonaRows]]:
    """Personas with no pack to rank on: (those read whole, those read only as far as their
    audience can see). Whole only when a topic's relevance must follow the byte bound: a
    persona whose every vector fits, with room to spare, ranks the same either way."""
    whole: list[str] = []
    if vector is not None:
        counts = read_path.open_counts(conn, personas)
        whole = [p for p in personas if not fits_whole(counts[p], len(vector), max_bytes)]
    rest = [p for p in personas if p not in whole]
    refs = sorted({r for p in rest for r in scopes[p].human_refs})
    found = _split(read_path.open_rows(conn, whole), whole, versions) if whole else {}
    seen = _split(read_path.visible_open_rows(conn, rest, refs), rest, versions) if rest else {}
    return found, seen


def _measured(
    conn: Connection,
    plan: Plan,
    persona: str,
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
        start = len(rows) - min(len(rows), slots_allowed(rows, len(vector), plan.max_bytes))
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
