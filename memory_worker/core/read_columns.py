"""A persona's ranking columns as the reader holds them, their versions, and their pack.

The columns ranking needs (id, whom, kind, importance, when last recalled, length) of every
open row of one persona (`PersonaRows`), as of one write (`Version`: the counter and random
stamp `persona_memory_versions` holds, bumped by database triggers), and the store they were
read from (`Versions`). Plain data and pure functions over it: the statements that version
their answers (`storage.read_path`), the packs a process that does not hold a persona ranks
on (`packed`, `unpacked`; `storage.read_packs`) and the reader's cache (`reader.cache`, which
holds these columns with their vectors, under a lock and a byte bound) all read them here.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, Protocol

import numpy as np

from memory_worker.core.rows import Row

TOPICS_PER_PERSONA = 4  # ours: the cosines kept per persona, one array per room topic
ENTRY_OVERHEAD_BYTES = 512  # ours: the Python objects around an entry's arrays
NO_SLOT = -1  # a row without a vector held: past the byte bound, or none loaded yet
VIEWS_FROM_ROWS = 4_096  # ours: fewer rows are ranked as fast without (ranking.SORT_ALL_UP_TO)
ROW_OVERHEAD_BYTES = 640  # ours: a Row object and its fields, besides its text


class Version(NamedTuple):
    """A persona's rows as of one write: its counter and the random stamp that bump wrote.

    The counter alone names no state: a store restored from a backup, or made anew, counts
    again, and the same number then names other rows. Equal stamps mean the same write.
    """

    counter: int  # persona_memory_versions.version: 0 before the persona's first row
    stamp: int | None  # persona_memory_versions.stamp: None before the first row


NEVER_WRITTEN = Version(0, None)  # a persona no row was ever written for: no rows, any store


@dataclass(frozen=True)
class Versions:
    """One read of a store: its id (`store_identity`) and the versions of the personas asked
    about, from the same statement."""

    store: str
    of: Mapping[str, Version]

    def __getitem__(self, persona: str) -> Version:
        return self.of[persona]


Key = tuple[str, str, str]  # (database url, store id, persona)
# Touches: these row ids were last recalled at this Unix day (this stamp, as the store has
# it), and recalled this many times more.
Batches = Sequence[tuple[np.ndarray, float, str, int]]
# Beyond whom a row concerns: the humans it names, and for a world row still private to its
# sources, those sources (None: public). Few rows carry one: kept as requirement → row ids.
Requirement = tuple[tuple[int, ...], tuple[int, ...] | None]
NO_REQUIREMENT: Requirement = ((), None)


class HeldVectors(Protocol):
    """What the columns know of the vectors held beside them (`reader.cache.Vectors`): their
    width and bytes, and how to zero the slots of rows written again."""

    @property
    def dims(self) -> int: ...

    @property
    def nbytes(self) -> int: ...

    def forget(self, slots: np.ndarray) -> None: ...


@dataclass(frozen=True)
class View:
    """The rows of an entry one audience may see: their positions in the entry (`idx`,
    ascending), those positions' order by (group, kind) (`by_kind`, into `idx`), and where
    each run of one (group, kind) starts in it (`runs`, then the end). Made once per audience
    and entry (`reader.cache_loader.visible_view`): neither the rule nor the sort by (group,
    kind) is paid again by every open."""

    idx: np.ndarray  # int32 positions into the entry (int64 when gathered: numpy's index)
    by_kind: np.ndarray  # int32 positions into `idx`
    runs: np.ndarray  # int64


@dataclass
class PersonaRows:
    """Every open row of one persona, as columns sorted by id, as of `version`.

    `slots[i]` is row i's place in `vectors` (NO_SLOT: no vector held); `slots` and `vectors`
    are None until a room with a topic first needs them.
    """

    version: Version
    ids: np.ndarray  # int32 or int64 (`narrow_ints`), ascending
    groups: np.ndarray  # the same: WORLD_GROUP, a human id, or NO_ONE (no audience sees it)
    kinds: np.ndarray  # int8
    importance: np.ndarray  # int16 (the store's 1..10), else float64: `narrow`
    recalled_day: np.ndarray  # float64: Unix day of last_recalled, else created
    chars: np.ndarray  # int32
    # int8: 1 for a row formed one-to-one (witnessed by the one human who holds it:
    # `audience.one_to_one`), which stays out of groups when its holder says so
    alone: np.ndarray
    slots: np.ndarray | None = None  # int32
    vectors: HeldVectors | None = None
    # Rows with a requirement beyond `groups` (named humans, a private world row): their ids,
    # ascending, by requirement. The audience rule checks each requirement once per open.
    required: Mapping[Requirement, np.ndarray] = field(default_factory=dict)
    # The full rows (no embedding) of recent winners, as of `version`: a warm open renders them
    # without reading them again (`ReadCache.remember`), each through the audience rule anew.
    winners: Mapping[int, Row] = field(default_factory=dict)
    # The latest audiences' visible rows (`View`), by scope, for a persona of more rows than a
    # take sorts at once: shared by every generation with the same rows (a touch, the winners
    # kept), made again after a patch; kept through `ReadCache.keep`, which counts them.
    views: dict[Any, View] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    @property
    def base_bytes(self) -> int:
        cols = (
            self.ids,
            self.groups,
            self.kinds,
            self.importance,
            self.recalled_day,
            self.chars,
            self.alone,
        )
        slots = 4 * len(self)  # int32 a row, whether made yet or not: the bound counts them
        required = sum(ENTRY_OVERHEAD_BYTES // 4 + a.nbytes for a in self.required.values())
        return ENTRY_OVERHEAD_BYTES + sum(a.nbytes for a in cols) + slots + required

    @property
    def nbytes(self) -> int:
        vectors = self.vectors.nbytes if self.vectors is not None else 0
        winners = sum(ROW_OVERHEAD_BYTES + len(r.text) for r in self.winners.values())
        views = sum(v.idx.nbytes + v.by_kind.nbytes + v.runs.nbytes for v in self.views.values())
        return self.base_bytes + vectors + winners + views

    def touched(self, batches: Batches, version: Version) -> PersonaRows:
        """The columns after `last_recalled = day` on each batch's ids in turn, as of `version`.
        An id not held (deleted meanwhile) is skipped: a touch never moves to another row.

        A copy: another thread may be ranking on this entry right now.
        """
        recalled = self.recalled_day.copy()
        winners = dict(self.winners)
        for ids, day, stamp, times in batches:
            at = np.searchsorted(self.ids, ids)
            inside = at < len(self.ids)
            at, ids = at[inside], ids[inside]
            hit = self.ids[at] == ids
            recalled[at[hit]] = day
            for i in ids[hit].tolist():
                if (row := winners.get(i)) is not None:
                    winners[i] = replace(
                        row, last_recalled=stamp, recall_count=row.recall_count + times
                    )
        return replace(self, recalled_day=recalled, version=version, winners=winners)

    def without(self, gone: Collection[int], version: Version) -> PersonaRows:
        """The columns less the rows `gone` (deleted), as of `version`: what a delete leaves of
        a pack (`storage.read_packs.forget`), with no vectors to keep in step."""
        drop = np.fromiter(gone, dtype=np.int64, count=len(gone))
        keep = ~np.isin(self.ids, drop)
        names = ("ids", "groups", "kinds", "importance", "recalled_day", "chars", "alone")
        return PersonaRows(
            version=version,
            **{n: getattr(self, n)[keep] for n in names},
            required=merged_requirements(self.required, gone, {}),
        )

    def patched(self, changed: Collection[int], fresh: PersonaRows) -> PersonaRows:
        """The columns after re-reading the `changed` rows: those of them still open are
        `fresh` (sorted by id, as of its version), the rest were closed or deleted. The other
        rows keep their vector slots; the changed ones have none until `ReadCache.fill`, and
        their old slots are zeroed (`Vectors.forget`)."""
        keep = ~np.isin(self.ids, np.fromiter(changed, dtype=np.int64, count=len(changed)))
        names = ("ids", "groups", "kinds", "importance", "recalled_day", "chars", "alone")
        cols = {n: np.concatenate([getattr(self, n)[keep], getattr(fresh, n)]) for n in names}
        if self.slots is not None and self.vectors is not None:
            gone = self.slots[~keep]
            self.vectors.forget(gone[gone >= 0])
            none = np.full(len(fresh), NO_SLOT, dtype=np.int32)
            cols["slots"] = np.concatenate([self.slots[keep], none])
        ids = cols["ids"]
        if ids.size > 1 and not bool(np.all(ids[1:] > ids[:-1])):  # not a pure append
            order = np.argsort(ids, kind="stable")
            cols = {n: c[order] for n, c in cols.items()}
        required = merged_requirements(self.required, changed, fresh.required)
        winners = {i: r for i, r in self.winners.items() if i not in changed}
        return PersonaRows(
            version=fresh.version,
            ids=cols["ids"],
            groups=cols["groups"],
            kinds=cols["kinds"],
            importance=cols["importance"],
            recalled_day=cols["recalled_day"],
            chars=cols["chars"],
            alone=cols["alone"],
            slots=cols.get("slots"),
            vectors=self.vectors,
            required=required,
            winners=winners,
        )


def merged_requirements(
    held: Mapping[Requirement, np.ndarray],
    changed: Collection[int],
    fresh: Mapping[Requirement, np.ndarray],
) -> dict[Requirement, np.ndarray]:
    """`held` without the `changed` rows, plus what `fresh` (their re-read) requires."""
    gone = np.fromiter(changed, dtype=np.int64, count=len(changed))
    out: dict[Requirement, np.ndarray] = {}
    for req in held.keys() | fresh.keys():
        ids = held.get(req, _NO_IDS)
        ids = ids[~np.isin(ids, gone)]
        more = fresh.get(req)
        if more is not None:
            ids = np.union1d(ids, more)
        if ids.size:
            out[req] = ids
    return out


_NO_IDS = np.zeros(0, dtype=np.int64)


# A pack (`packed`): the columns of one persona's rows in one blob, for the store to keep
# (schema/versions/0015; 0016 dropped the packs made before `alone`). Each column at a width
# that holds its values exactly.
PACKED_COLUMNS = (
    ("ids", "<i8", np.int64),
    ("groups", "<i8", np.int64),
    ("kinds", "<i2", np.int8),
    ("importance", "<f8", np.float64),  # held as `narrow` makes it
    ("recalled_day", "<f8", np.float64),
    ("chars", "<i4", np.int32),
    ("alone", "<i1", np.int8),
)


def narrow_ints(values: np.ndarray) -> np.ndarray:
    """Ids (of rows, of humans) as an entry holds them: int32 while every one fits, else
    int64. Whoever multiplies them widens them first."""
    fits = not values.size or (int(values.min()) >= -(2**31) and int(values.max()) < 2**31)
    return values.astype(np.int32 if fits else np.int64)


def narrow(importance: np.ndarray) -> np.ndarray:
    """A persona's importance column as an entry holds it: int16 when every value is one
    exactly (the store's 1..10), else as read (float64): ranking reads it as float64 either
    way, the same numbers."""
    small = importance.astype(np.int16)
    return small if np.array_equal(small, importance) else importance.astype(np.float64)


def packed(rows: PersonaRows) -> bytes:
    """The columns of `rows` (not their vectors) as one blob: a header (the row count and the
    requirements, JSON) and each column's values. `unpacked` reads back the same arrays."""
    head = json.dumps(
        {
            "n": len(rows),
            "required": [
                [list(named), None if private is None else list(private), ids.tolist()]
                for (named, private), ids in rows.required.items()
            ],
        }
    ).encode()
    parts = [len(head).to_bytes(4, "little"), head]
    for name, width, _ in PACKED_COLUMNS:
        values = getattr(rows, name)
        stored = values.astype(width)
        if not np.array_equal(stored, values, equal_nan=values.dtype.kind == "f"):
            raise ValueError(f"a pack's {name} column does not fit {width}")
        parts.append(stored.tobytes())
    return b"".join(parts)


def unpacked(blob: bytes, version: Version) -> PersonaRows:
    """The columns `packed` wrote, as of `version` (the version the pack was written at)."""
    size = int.from_bytes(blob[:4], "little")
    head = json.loads(blob[4 : 4 + size])
    n, at = int(head["n"]), 4 + size
    cols: dict[str, np.ndarray] = {}
    for name, width, dtype in PACKED_COLUMNS:
        values = np.frombuffer(blob, dtype=width, count=n, offset=at)
        at += values.nbytes
        cols[name] = values if values.dtype == dtype else values.astype(dtype)
    cols["importance"] = narrow(cols["importance"])
    cols["ids"], cols["groups"] = narrow_ints(cols["ids"]), narrow_ints(cols["groups"])
    required: dict[Requirement, np.ndarray] = {
        (tuple(named), None if private is None else tuple(private)): np.array(ids, dtype=np.int64)
        for named, private, ids in head["required"]
    }
    return PersonaRows(
        version=version,
        ids=cols["ids"],
        groups=cols["groups"],
        kinds=cols["kinds"],
        importance=cols["importance"],
        recalled_day=cols["recalled_day"],
        chars=cols["chars"],
        alone=cols["alone"],
        required=required,
    )
