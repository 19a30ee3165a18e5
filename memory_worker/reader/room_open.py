"""The room open: the block each persona gets in a room, at open, join and leave.

filter → rank → take → render → touch, straight from the store and the read cache
(cache_loader.py). A warm open reads one statement; the audience rule decides first
(`scope_for`, `visible_view`), and before rendering every winner passes `visible_memories`
itself: the cache narrows, the audience rule decides, and nothing after it adds a row. The
touch is promised, then applied by a background flush (touch.py); the fill (fill.py) is asked
for as the open returns.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime

from sqlalchemy import Connection

from memory_worker.core import clock
from memory_worker.core import settings as settings_mod
from memory_worker.core.audience import RoomAudience, Scope
from memory_worker.core.block import Block, Human, Section, render
from memory_worker.core.errors import UnknownRoom
from memory_worker.core.ranking import WORLD_GROUP, RankColumns, scores, take
from memory_worker.core.read_columns import Version
from memory_worker.core.rows import Row
from memory_worker.reader import cache_loader
from memory_worker.reader.fill import FILLS
from memory_worker.reader.sweep import SWEEP
from memory_worker.reader.threads import OPENS
from memory_worker.reader.touch import promise_touch
from memory_worker.storage import read_path, store, verdicts

log = logging.getLogger(__name__)


@dataclass
class Fills:
    """What a room open asks of the fill thread, requested as it returns (`opening`): these
    personas' entries (with a topic's cosines), and the winners' rows it read of personas
    it did not hold, to keep with their entries."""

    asked: list[tuple[list[str], bytes | None]] = field(default_factory=list)
    winners: dict[str, tuple[Version, dict[int, Row]]] = field(default_factory=dict)

    def of(self, plan: cache_loader.Plan) -> None:
        """Ask for the fills a loader's plan names."""
        self.asked.extend(plan.asked)
        self.winners.update(plan.fill_winners)


@contextmanager
def opening(url: str) -> Iterator[Fills]:
    """A room open (or a recall) in flight: background work steps aside while it runs, and
    the fills it asks for are requested as it ends, never while it still works."""
    asked = Fills()
    with OPENS.opening():
        yield asked
    SWEEP.start()  # what this process holds from now on is caught up even if never opened again
    for personas, topic in asked.asked:
        winners = {p: asked.winners[p] for p in personas if p in asked.winners}
        FILLS.request(url, personas, topic, winners)


def build_block(
    persona: str,
    present: Iterable[int],
    room_id: str,
    *,
    now: datetime | str | None = None,
    url: str | None = None,
    touch: bool = True,
    proven_scope: bool | None = None,
) -> Block:
    """The memory block `persona` gets in `room_id` with these humans present.

    `now` (default: the store's clock) is the moment recency counts from and `last_recalled`
    is set to. `touch=False` builds without reinforcing (previews, the CLI, tests); with it,
    the touch is promised (`block.touched`) and applied in the background (`flush_touches`).
    Raises `UnknownRoom` for a room the store has never seen. `proven_scope` (default: the
    deployment's, `MW_MEMORY_SCOPE`, checked against its verdict once per process and store:
    `scope_in_force`) says whether groups load world facts only.
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
    proven_scope: bool | None = None,
) -> dict[str, Block]:
    """The block of every persona member of the room, from one query over all their rows."""
    return _build(room_id, present, None, now=now, url=url, touch=touch, proven_scope=proven_scope)


def _build(
    room_id: str,
    present: Iterable[int],
    personas: Sequence[str] | None,
    *,
    now: datetime | str | None,
    url: str | None,
    touch: bool,
    proven_scope: bool | None,
) -> dict[str, Block]:
    url = url or settings_mod.current().database_url
    proven = scope_in_force(proven_scope, url)
    with opening(url) as fills:  # the fills it asks for start once it returns
        return _open(room_id, present, personas, now, url, touch, proven, fills)


_SCOPE_CHECKED: set[tuple[object, ...]] = set()  # (url, the settings the verdict is for)


def forget_scope_checks() -> None:
    """A store is going away (`reader.close`): another may come at the same URL, with
    verdicts of its own, so every check is made again."""
    _SCOPE_CHECKED.clear()


def scope_in_force(proven_scope: bool | None, url: str) -> bool:
    """Whether the proven scope holds for an open: the deployment's (`MW_MEMORY_SCOPE`), which
    a caller may narrow (`proven_scope=True`) but never widen unchecked: the group scope, asked
    for or in force, is checked against the store's leak exam verdicts as every process start
    checks it (`ScopeNotAllowed`, naming the command to run, else; the override passes,
    logged), once per process, store and settings it depends on."""
    if proven_scope:
        return True
    s = settings_mod.current()
    if s.memory_scope != "follow" and proven_scope is None:
        return True
    key = (url, s.memory_scope_override, s.block_tail, s.persona_models, s.exam_max_with_owner,
           s.exam_max_references_per_turn, s.gemini_base_url)  # fmt: skip
    if key not in _SCOPE_CHECKED:
        # Asked for, or in force: the same gate either way. The copy is made only here: a
        # validated Settings costs about a millisecond, more than a warm open's whole work.
        with store.engine(url).connect() as conn:
            verdicts.require_scope(conn, s.with_(memory_scope="follow"))
        _SCOPE_CHECKED.add(key)
    return False


def _open(
    room_id: str,
    present: Iterable[int],
    personas: Sequence[str] | None,
    now: datetime | str | None,
    url: str,
    touch: bool,
    proven_scope: bool,
    fills: Fills,
) -> dict[str, Block]:
    """The context, read once; then a warm open from the read cache alone, or, if anything is
    missing there (a persona not held at its version, a winner's row not kept), a cold one in
    one transaction, where every read sees one snapshot."""
    when = clock.as_datetime(now)
    present = frozenset(int(u) for u in present)
    eng = store.engine(url)
    raw = eng.raw_connection()
    try:
        ctx = read_path.context_alone(raw, eng.dialect, room_id, present, personas or [])
    finally:
        raw.close()
    if ctx is None:
        raise UnknownRoom(room_id)
    room = _room(ctx, present, personas, proven_scope)
    blocks = _warm(ctx, room, when, url) if room.scopes else room.fixed
    if blocks is None:
        with eng.connect() as conn:  # SQLite: one snapshot for every read below
            pinned = _pinned(conn, ctx, room_id, present, personas)
            if pinned is not ctx:  # a write landed between: the audience as it is now
                ctx, room = pinned, _room(pinned, present, personas, proven_scope)
            blocks = _cold(conn, ctx, room, when, url, fills) if room.scopes else room.fixed
    if present - ctx.members:
        log.error(
            "room %s: %d present human(s) are not members: nothing about them loads and "
            "the room is not private",
            room_id,
            len(present - ctx.members),
        )
    if touch and any(b.row_ids for b in blocks.values()):
        promise_touch(url, {p: b.row_ids for p, b in blocks.items() if b.row_ids}, when)
        blocks = {p: replace(b, touched=bool(b.row_ids)) for p, b in blocks.items()}
    return blocks


def _pinned(
    conn: Connection,
    ctx: read_path.Context,
    room_id: str,
    present: frozenset[int],
    personas: Sequence[str] | None,
) -> read_path.Context:
    """The context for a cold open's transaction: the one read, while the store's id and the
    personas' versions in this snapshot are still its own (one small statement); else the
    context as this snapshot has it (a write landed between: every read sees one store)."""
    if read_path.versions(conn, list(ctx.versions.of)) == ctx.versions:
        return ctx
    again = read_path.context(conn, room_id, present, personas or [])
    if again is None:
        raise UnknownRoom(room_id)
    return again


@dataclass(frozen=True)
class _Room:
    """What an open ranks for, from its context alone: each persona's scope under the room's
    audience, the topic, and the blocks that need no memory (an incognito room's, or a
    persona's that is not a member: it remembers only where it is)."""

    audience: RoomAudience | None
    scopes: dict[str, Scope]
    topic: bytes | None
    fixed: dict[str, Block]


def _room(
    ctx: read_path.Context,
    present: frozenset[int],
    personas: Sequence[str] | None,
    proven_scope: bool,
) -> _Room:
    slugs = list(personas) if personas is not None else ctx.personas
    if ctx.room.incognito:
        return _Room(None, {}, None, {p: Block.empty(p) for p in slugs})
    fixed = {p: Block.empty(p) for p in slugs if p not in ctx.personas}
    slugs = [p for p in slugs if p not in fixed]
    if not slugs:
        return _Room(None, {}, None, fixed)
    audience = ctx.audience(slugs, present, proven_scope)
    scopes = {p: audience.scope(p) for p in slugs}
    return _Room(audience, scopes, ctx.room.topic_embedding, fixed)


def _warm(ctx: read_path.Context, room: _Room, when: datetime, url: str) -> dict[str, Block] | None:
    """Every block from the read cache alone, reading nothing: None when something would
    have to be read."""
    plan = cache_loader.held_plan(room.scopes, when, room.topic, url, ctx.versions)
    if plan is None:
        return None
    picks = _ranked(plan.candidates)
    rows = cache_loader.finish(plan, _won(picks))
    return None if rows is None else _rendered(ctx, room, picks, rows)


def _cold(
    conn: Connection,
    ctx: read_path.Context,
    room: _Room,
    when: datetime,
    url: str,
    fills: Fills,
) -> dict[str, Block]:
    """Every block, reading what the read cache lacks on `conn`: the loader's plan, the rank,
    then the winners' rows and the plan carried out (its fills asked for in `fills`)."""
    plan = cache_loader.read_plan(conn, room.scopes, when, room.topic, url, versions=ctx.versions)
    picks = _ranked(plan.candidates)
    rows = cache_loader.finish(plan, _won(picks), conn)
    assert rows is not None  # with a connection, every winner is read
    fills.of(plan)
    return _rendered(ctx, room, picks, rows)


Picks = dict[str, dict[int, list[int]]]  # persona → group → the ids it takes, in order


def _ranked(candidates: Mapping[str, RankColumns]) -> Picks:
    """The rank: each persona's candidates scored and taken (pure)."""
    return {p: take(c, scores(c)) for p, c in candidates.items()}


def _won(picks: Picks) -> dict[str, list[int]]:
    return {p: [i for ids in got.values() for i in ids] for p, got in picks.items()}


def _rendered(
    ctx: read_path.Context, room: _Room, picks: Picks, rows: Mapping[int, Row]
) -> dict[str, Block]:
    """The render: every persona's block from its picks and the winners' rows (pure)."""
    assert room.audience is not None
    blocks = {
        p: _render(p, ctx.names[p], picks[p], rows, scope, ctx.humans, room.audience)
        for p, scope in room.scopes.items()
    }
    return {**blocks, **room.fixed}


def _render(
    persona: str,
    persona_name: str,
    picked: Mapping[int, list[int]],
    rows: Mapping[int, Row],
    scope: Scope,
    humans: Mapping[int, Human],
    audience: RoomAudience,
) -> Block:
    """The gate, then the block: every picked row passes the audience rule once more."""
    picked_rows = [rows[i] for ids in picked.values() for i in ids if i in rows]
    gate = audience.visible(persona, picked_rows)
    allowed = {r.id: r for r in gate}
    sections = [
        Section(humans[u], [allowed[i] for i in picked.get(u, []) if i in allowed])
        for u in sorted(scope.humans)
        if u in humans
    ]
    world = [allowed[i] for i in picked.get(WORLD_GROUP, []) if i in allowed]
    sections.append(Section(None, world))
    return render(persona, persona_name, sections)
