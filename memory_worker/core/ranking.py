"""Rank and take (docs/design.md §3 steps 2–3): which of the visible rows make the block. Pure.

score = w_recency·recency + w_importance·importance + w_relevance·relevance, each min-max normalised
over the candidates. Recency decays per day from `last_recalled`, else `created`; importance is /10;
relevance is the cosine to the room's topic vector, 0 without one. The weights and the decay are a
`Rule`: `SEED_RULE` is the rule as first written (equal weights, 0.98/day), kept so both can be
measured in one run; `RULE` is the one in force, tuned on LoCoMo (constants.py says why). Then, per
human: open loops and promises first (they always ride, past the char cap, though still within the
~10 per human so a block stays bounded), then the rest through the diversity pass (at most two per
kind before the rest), and the char cap over the whole persona, filled round-robin so no one human
crowds out the others.

The rows come as `RankColumns` (numpy arrays), not Row objects: the reader ranks 10,000
visible rows without building 10,000 Python objects, and fetches full rows only for the few
that win.
Every tie is broken by row id, so the same store at the same time gives the same block.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.ma  # noqa: F401 — np.unique imports it on first use: at import, not a first open

from memory_worker.core.constants import (
    ALWAYS_RIDE_KINDS,
    BLOCK_CHARS_LIMIT,
    DIVERSITY_PER_KIND,
    KINDS,
    RANKING_DECAY_PER_DAY,
    RANKING_IMPORTANCE_WEIGHT,
    RANKING_RECENCY_WEIGHT,
    RANKING_RELEVANCE_WEIGHT,
    RECENCY_DECAY_PER_DAY,
    TAKE_PER_HUMAN,
)

WORLD_GROUP = -1  # the group of world rows; rows about a human are grouped by the human's id
UNKNOWN_KIND = len(KINDS)  # the kind code of a kind outside KINDS (ranked, never riding)
UNREADABLE_AGE_DAYS = 36_500.0  # ours: a timestamp we cannot read counts as a century old


@dataclass(frozen=True)
class Rule:
    """How the three signals are weighed: a named setting, so rules compare in one run."""

    name: str
    decay_per_day: float
    recency: float  # weights of the min-max normalised components
    importance: float
    relevance: float


# docs/design.md §3 step 2, as first written: kept and measured beside the rule in force
SEED_RULE = Rule("seed", RECENCY_DECAY_PER_DAY, 1.0, 1.0, 1.0)
TUNED_RULE = Rule(
    "tuned",
    RANKING_DECAY_PER_DAY,
    RANKING_RECENCY_WEIGHT,
    RANKING_IMPORTANCE_WEIGHT,
    RANKING_RELEVANCE_WEIGHT,
)
RULE = TUNED_RULE  # the rule in force: the reader and recall rank with it
RULES = {r.name: r for r in (SEED_RULE, TUNED_RULE)}


@dataclass(frozen=True)
class RankColumns:
    """The visible rows of one persona, as columns (one entry per row, same order in each)."""

    ids: np.ndarray  # int64
    groups: np.ndarray  # int64: whom the row is about (self rows: the counterpart), or WORLD_GROUP
    kinds: np.ndarray  # int64: index into KINDS, or UNKNOWN_KIND
    importance: np.ndarray  # float64, 1..10
    age_days: np.ndarray  # float64: days since last_recalled, else created
    chars: np.ndarray  # int: len(text), what the char cap counts
    relevance: np.ndarray  # float64: cosine to the room's topic; all 0 without a topic
    # Optionally, the rows' order by (group, kind) and where each run of one starts in it
    # (then the length): the reader keeps them per audience (read_columns.View).
    by_kind: np.ndarray | None = None
    runs: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.ids.shape[0])


def kind_code(kind: str) -> int:
    return KINDS.index(kind) if kind in KINDS else UNKNOWN_KIND


def minmax(x: np.ndarray) -> np.ndarray:
    """Scale to [0, 1] over the candidates; a column with no spread says nothing: all 0."""
    scaled = _spread(x)
    return np.zeros(x.shape, dtype=np.float64) if scaled is None else scaled


def _spread(x: np.ndarray) -> np.ndarray | None:
    """`minmax`, or None for a column with no spread (all 0, which adds nothing)."""
    if x.size == 0:
        return None
    lo, hi = float(x.min()), float(x.max())
    if hi <= lo:
        return None
    scaled: np.ndarray = x - lo
    scaled /= hi - lo
    return scaled


def scores(c: RankColumns, rule: Rule = RULE) -> np.ndarray:
    """The rule's weighted sum of recency, importance and relevance, each min-max normalised.

    Without a topic every relevance is 0, a column with no spread, so recency and importance
    alone decide. A column with no spread adds nothing: it is skipped (adding 0 changes no
    score), as a warm open's few hundred rows pay per numpy call, not per row.
    """
    recency = rule.decay_per_day ** np.maximum(c.age_days, 0.0)
    total = np.zeros(len(c))
    for weight, column in (
        (rule.recency, recency),
        (rule.importance, c.importance / 10.0),
        (rule.relevance, c.relevance),
    ):
        scaled = _spread(column)
        if scaled is not None:
            scaled *= weight
            total += scaled
    return total


def diversify(ranked: Sequence[int], kinds: Sequence[int] | np.ndarray, per_kind: int) -> list[int]:
    """At most `per_kind` of each kind first (in rank order), then the rest (in rank order)."""
    seen: dict[int, int] = {}
    first: list[int] = []
    rest: list[int] = []
    for i in ranked:
        k = int(kinds[i])
        if seen.get(k, 0) < per_kind:
            seen[k] = seen.get(k, 0) + 1
            first.append(i)
        else:
            rest.append(i)
    return first + rest


SORT_ALL_UP_TO = 4_096  # ours: below this many rows one sort beats a pass per (group, kind)


def _top_per_group_kind(c: RankColumns, score: np.ndarray, per_kind_top: int) -> np.ndarray:
    """Indexes of the best `per_kind_top` rows of each (group, kind); nothing else can win.

    A group takes at most `per_human` rows, and the diversity pass never reaches past a kind's
    first `per_human` rows before the group is full, so this cut changes no block; it keeps
    the Python loop below small however many rows a persona holds. A few thousand rows are
    sorted once by (group and kind, score, id); more take one linear pass per (group, kind) —
    a handful — instead of sorting every row.
    """
    codes = c.groups * (UNKNOWN_KIND + 1) + c.kinds
    n = len(c)
    if n <= SORT_ALL_UP_TO:
        order = np.lexsort((c.ids, -score, codes))
        sorted_codes = codes[order]
        first = np.empty(n, dtype=bool)  # where each (group, kind) begins in `order`
        first[:1] = True
        np.not_equal(sorted_codes[1:], sorted_codes[:-1], out=first[1:])
        starts = np.flatnonzero(first)
        rank = np.arange(n) - starts[np.cumsum(first) - 1]  # place within its (group, kind)
        kept: np.ndarray = order[rank < per_kind_top]
        return kept
    if c.by_kind is not None and c.runs is not None:
        bounds = c.runs.tolist()
        parts = [
            _best(c.by_kind[a:b].astype(np.int64), score, c.ids, per_kind_top)
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)
        ]
    else:
        parts = [
            _best(np.flatnonzero(codes == code), score, c.ids, per_kind_top)
            for code in np.unique(codes)
        ]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _best(idx: np.ndarray, score: np.ndarray, ids: np.ndarray, k: int) -> np.ndarray:
    """The k of `idx` with the highest score, ties going to the lower id (deterministic)."""
    if len(idx) <= k:
        return idx
    s = score[idx]
    threshold = -np.partition(-s, k - 1)[k - 1]  # the k-th highest score
    above = idx[s > threshold]
    tied = idx[s == threshold]
    tied = tied[np.argsort(ids[tied], kind="stable")[: k - len(above)]]
    return np.concatenate([above, tied])


def group_order(groups: Iterable[int]) -> list[int]:
    """Humans by id, then the world: the order of sections and of the round-robin."""
    return sorted(set(groups), key=lambda g: (g == WORLD_GROUP, g))


def take(
    c: RankColumns,
    score: np.ndarray,
    *,
    per_human: int = TAKE_PER_HUMAN,
    chars_limit: int = BLOCK_CHARS_LIMIT,
    per_kind: int = DIVERSITY_PER_KIND,
    ride_kinds: Sequence[str] = ALWAYS_RIDE_KINDS,
) -> dict[int, list[int]]:
    """Row ids per group (human id, or WORLD_GROUP), in block order.

    Per group, at most `per_human` rows: open loops and promises first — they always ride,
    even past the char cap, because they are why a persona follows up at all — then the rest in
    diversity order. The rest share what the riders leave of `chars_limit`, taken round-robin
    across groups (each group's best, then each group's second, ...); a row that does not fit
    is skipped and a shorter one after it may still go in.
    """
    if len(c) == 0:
        return {}
    ride = {kind_code(k) for k in ride_kinds}
    kept = _top_per_group_kind(c, score, per_human)
    order = kept[np.lexsort((c.ids[kept], -score[kept]))]  # best first, ties to the lower id
    ids, groups = c.ids[order].tolist(), c.groups[order].tolist()
    kinds, chars = c.kinds[order].tolist(), c.chars[order].tolist()
    riders: dict[int, list[int]] = {}  # group → positions in `order`, best first
    others: dict[int, list[int]] = {}
    for j, g in enumerate(groups):
        (riders if kinds[j] in ride else others).setdefault(g, []).append(j)

    rest: dict[int, list[int]] = {}
    in_order = group_order(groups)
    for g in in_order:
        riders[g] = riders.get(g, [])[:per_human]
        rest[g] = diversify(others.get(g, []), kinds, per_kind)[: per_human - len(riders[g])]

    used = sum(chars[j] for g in in_order for j in riders[g])
    taken: dict[int, list[int]] = {g: [] for g in in_order}
    for turn in range(per_human):
        for g in in_order:
            if turn < len(rest[g]):
                j = rest[g][turn]
                if used + chars[j] <= chars_limit:
                    used += chars[j]
                    taken[g].append(j)

    out: dict[int, list[int]] = {}
    for g in in_order:
        got = [ids[j] for j in riders[g] + taken[g]]
        if got:
            out[g] = got
    return out
