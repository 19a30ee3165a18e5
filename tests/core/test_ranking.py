"""Rank, take and render (docs/design.md §3 steps 2–4): each rule on its own, each able to fail."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine

from memory_worker.core.block import Human, Section, render, render_line, tail
from memory_worker.core.constants import (
    ALWAYS_RIDE_KINDS,
    BLOCK_CHARS_LIMIT,
    DIVERSITY_PER_KIND,
    KINDS,
    TAKE_PER_HUMAN,
)
from memory_worker.core.ranking import (
    RULE,
    SEED_RULE,
    WORLD_GROUP,
    RankColumns,
    diversify,
    group_order,
    scores,
    take,
)
from memory_worker.core.rows import Candidate, Row
from memory_worker.core.vectors import quantise
from memory_worker.reader import build_block
from memory_worker.storage import memories, rooms, store, users
from memory_worker.testing.rank_rows import columns, pick
from tests.examples import examples

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
DAN, CARA = 42, 17


def ago(days: float) -> str:
    return (NOW - timedelta(days=days)).isoformat()


def row(
    id: int,
    *,
    subject: str = "u:42",
    counterpart: str | None = None,
    kind: str = "fact",
    importance: int = 5,
    created: float = 10,
    recalled: float | None = None,
    text: str | None = None,
    embedding: bytes | None = None,
    confidence: bool = False,
    valid_from: str | None = None,
    valid_to: str | None = None,
) -> Row:
    return Row(
        id=id,
        persona="warren",
        subject=subject,
        counterpart=counterpart,
        witnessed=[DAN],
        room_id="p",
        kind=kind,
        text=text or f"u:42 said thing {id}.",
        importance=importance,
        valid_from=valid_from,
        valid_to=valid_to,
        closed_by=None,
        evidence=[1],
        created=ago(created),
        last_recalled=ago(recalled) if recalled is not None else None,
        embedding=embedding,
        confidence=confidence,
    )


def ranked_ids(rows: list[Row], topic: bytes | None = None) -> list[int]:
    c = columns(rows, NOW, topic)
    s = scores(c)
    return [int(c.ids[i]) for i in sorted(range(len(c)), key=lambda i: (-s[i], c.ids[i]))]


def picked_ids(rows: list[Row], **limits: int) -> dict[int, list[int]]:
    return {g: [r.id for r in rs] for g, rs in pick(rows, NOW, **limits).items()}


# --- score ------------------------------------------------------------------------------------


def test_recency_decays_from_last_recall_not_from_creation() -> None:
    old_but_recalled = row(1, created=300, recalled=1)
    newer_never_recalled = row(2, created=30)
    assert ranked_ids([old_but_recalled, newer_never_recalled]) == [1, 2]


def test_the_seed_rule_decays_recency_by_098_per_day() -> None:
    rows = [row(1, created=0), row(2, created=1), row(3, created=50)]
    got = scores(columns(rows, NOW), SEED_RULE)
    expected_middle = (0.98 - 0.98**50) / (1 - 0.98**50)  # min-max of 1, 0.98, 0.98^50
    assert got == pytest.approx([1.0, expected_middle, 0.0])


def test_the_seed_rule_min_max_normalises_each_component_and_weighs_them_equally() -> None:
    topic = quantise([1.0, 0.0, 0.0, 0.0])
    near, far = quantise([1.0, 0.0, 0.0, 0.0]), quantise([0.0, 1.0, 0.0, 0.0])
    rows = [
        row(1, importance=9, created=100, embedding=far),  # best importance only
        row(2, importance=3, created=1, embedding=far),  # best recency only
        row(3, importance=3, created=100, embedding=near),  # best relevance only
        row(4, importance=9, created=1, embedding=near),  # best of everything
        row(5, importance=3, created=100, embedding=far),  # worst of everything
    ]
    got = scores(columns(rows, NOW, topic), SEED_RULE)
    assert got == pytest.approx([1.0, 1.0, 1.0, 3.0, 0.0])


def test_min_max_makes_the_scale_of_importance_irrelevant() -> None:
    low = [row(1, importance=3, created=5), row(2, importance=4, created=50)]
    high = [row(1, importance=3, created=5), row(2, importance=10, created=50)]
    assert scores(columns(low, NOW)) == pytest.approx([1.0, 1.0])
    assert scores(columns(high, NOW)) == pytest.approx([1.0, 1.0])


def test_a_component_with_no_spread_adds_nothing() -> None:
    rows = [row(1, importance=5, created=3), row(2, importance=5, created=3)]
    assert scores(columns(rows, NOW)) == pytest.approx([0.0, 0.0])


def test_topic_relevance_changes_the_order() -> None:
    a = row(1, embedding=quantise([1.0, 0.1, 0.0]))
    b = row(2, embedding=quantise([0.1, 1.0, 0.0]))
    assert ranked_ids([a, b]) == [1, 2]  # no topic: a tie, broken by id
    assert ranked_ids([a, b], topic=quantise([0.0, 1.0, 0.0])) == [2, 1]
    assert ranked_ids([a, b], topic=quantise([1.0, 0.0, 0.0])) == [1, 2]


def test_a_row_without_an_embedding_counts_as_unrelated_to_the_topic() -> None:
    related = row(1, embedding=quantise([1.0, 0.0]), created=20)
    bare = row(2, embedding=None, created=20)
    assert ranked_ids([bare, related], topic=quantise([1.0, 0.0])) == [1, 2]


def test_a_timestamp_that_cannot_be_read_counts_as_very_old_rather_than_failing() -> None:
    broken = replace(row(1, importance=9), created="last Tuesday")
    assert ranked_ids([broken, row(2, importance=9, created=400)]) == [2, 1]


# --- the rule in force (tuned on LoCoMo, constants.py says why) ------------------------------

TOPIC = quantise([1.0, 0.0, 0.0, 0.0])
STRONG = quantise([1.0, 0.05, 0.0, 0.0])  # cosine ≈ 1 to the topic
WEAK = quantise([0.3, 0.95, 0.0, 0.0])  # cosine ≈ 0.3
UNRELATED = [quantise(v) for v in ([0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], [0, 0, 0, 1.0])]

row_specs = st.lists(
    st.tuples(
        st.sampled_from(KINDS),
        st.integers(3, 10),  # importance
        st.integers(0, 400),  # age in days
        st.integers(0, 2),  # which unrelated vector
    ),
    min_size=1,
    max_size=40,
)


def rows_from(specs: list[tuple[str, int, int, int]], first_id: int = 1) -> list[Row]:
    return [
        row(i, kind=k, importance=imp, created=age, embedding=UNRELATED[v])
        for i, (k, imp, age, v) in enumerate(specs, start=first_id)
    ]


def block_ids(rows: list[Row], topic: bytes | None) -> set[int]:
    c = columns(rows, NOW, topic)
    return {i for ids in take(c, scores(c)).values() for i in ids}


def test_the_rule_in_force_is_not_the_seeds_and_the_seeds_stays_measurable() -> None:
    assert RULE != SEED_RULE
    assert RULE.relevance > RULE.recency + RULE.importance  # a topic leads when there is one
    assert (SEED_RULE.decay_per_day, SEED_RULE.recency, SEED_RULE.relevance) == (0.98, 1, 1)


@settings(max_examples=examples(100), deadline=None)
@given(row_specs, st.integers(0, 400), st.integers(3, 10))
def test_a_strong_topic_match_beats_every_fresh_weak_one(
    specs: list[tuple[str, int, int, int]], strong_age: int, strong_importance: int
) -> None:
    others = [
        replace(r, kind="fact" if r.kind in ALWAYS_RIDE_KINDS else r.kind)
        for r in rows_from(specs, first_id=2)
    ]  # riders take their places first, whatever the rule
    fresh_weak = [replace(r, embedding=WEAK, created=ago(0), importance=10) for r in others[:3]]
    strong = row(1, importance=strong_importance, created=strong_age, embedding=STRONG)
    rows = [strong, *fresh_weak, *others[3:]]
    c = columns(rows, NOW, TOPIC)
    s = scores(c)
    assert all(s[0] > s[i] for i in range(1, len(rows)))  # strictly first, whatever its age
    assert 1 in block_ids(rows, TOPIC)


@settings(max_examples=examples(100), deadline=None)
@given(row_specs, st.randoms(use_true_random=False))
def test_with_no_topic_recency_and_importance_alone_decide(
    specs: list[tuple[str, int, int, int]], rnd: random.Random
) -> None:
    rows = rows_from(specs)
    shuffled = [replace(r, embedding=UNRELATED[rnd.randrange(3)]) for r in rows]
    assert ranked_ids(rows) == ranked_ids(shuffled)  # the vectors say nothing without a topic
    s = scores(columns(rows, NOW))
    for a in range(len(rows)):
        for b in range(len(rows)):
            ia, ib = rows[a].importance, rows[b].importance
            age_a, age_b = specs[a][2], specs[b][2]
            if ia >= ib and age_a <= age_b and (ia, age_a) != (ib, age_b):
                assert s[a] > s[b]  # newer and at least as important, or more important


@settings(max_examples=examples(100), deadline=None)
@given(row_specs, st.booleans())
def test_open_loops_and_promises_ride_whatever_the_topic(
    specs: list[tuple[str, int, int, int]], with_topic: bool
) -> None:
    rows = rows_from(specs)
    facts = [row(100 + i, importance=10, created=0, embedding=STRONG) for i in range(12)]
    rows += facts  # a dozen fresh, important, on-topic facts compete for the places
    riders = {r.id for r in rows if r.kind in ALWAYS_RIDE_KINDS}
    block = block_ids(rows, TOPIC if with_topic else None)
    assert len(riders & block) == min(len(riders), TAKE_PER_HUMAN)  # all, up to the ~10 bound


def test_a_memory_that_keeps_loading_stays_fresh_under_the_rule_in_force() -> None:
    old_recalled_today = row(1, created=300, recalled=0)
    month_old = row(2, created=30)
    assert ranked_ids([month_old, old_recalled_today]) == [1, 2]


# --- take -------------------------------------------------------------------------------------


def test_the_diversity_pass_puts_at_most_two_of_a_kind_before_the_rest() -> None:
    facts = [row(i, kind="fact", importance=10 - i) for i in range(1, 6)]  # the five best
    prefs = [row(i, kind="preference", importance=1) for i in (6, 7)]
    got = picked_ids(facts + prefs)[DAN]
    assert DIVERSITY_PER_KIND == 2
    assert got == [1, 2, 6, 7, 3, 4, 5]


def test_diversify_keeps_rank_order_within_each_pass() -> None:
    kinds = np.array([0, 0, 0, 1, 0, 1, 1])
    assert diversify(range(7), kinds, 2) == [0, 1, 3, 5, 2, 4, 6]


def test_the_take_keeps_the_top_ten_per_present_human() -> None:
    rows = [row(i, kind=KINDS[i % 3], importance=1 + i % 10, text="x" * 20) for i in range(1, 31)]
    got = picked_ids(rows)[DAN]
    assert len(got) == TAKE_PER_HUMAN == 10


def test_the_char_cap_bounds_everything_but_open_loops_and_promises() -> None:
    rows = [row(i, text="x" * 190, importance=10 - i % 7, kind=KINDS[i % 3]) for i in range(1, 11)]
    got = picked_ids(rows)[DAN]
    assert len(got) == BLOCK_CHARS_LIMIT // 190 == 6


def test_a_row_that_does_not_fit_is_skipped_and_a_shorter_one_after_it_still_goes_in() -> None:
    rows = [row(1, text="a" * 150, importance=9), row(2, text="b" * 100, importance=5)]
    assert picked_ids(rows, chars_limit=120)[DAN] == [2]


def test_open_loops_and_promises_ride_past_the_char_cap() -> None:
    facts = [row(i, text="f" * 190, importance=10) for i in range(1, 9)]
    loop = row(20, kind="open_loop", text="l" * 190, importance=3, created=200)
    promise = row(21, subject="self", counterpart="u:42", kind="promise", text="p" * 190)
    assert set(ALWAYS_RIDE_KINDS) == {"open_loop", "promise"}
    past_the_cap = picked_ids([*facts, loop, promise], chars_limit=300)[DAN]
    assert past_the_cap == [21, 20], "both ride, best first, though 380 chars > 300"
    room_for_one = picked_ids([*facts, loop, promise], chars_limit=600)[DAN]
    assert room_for_one == [21, 20, 1], "the rest fill only what the riders leave"


def test_riders_ride_even_when_the_cap_is_already_spent() -> None:
    loop = row(1, kind="open_loop", text="l" * 190)
    fact = row(2, text="f" * 10, importance=10)
    assert picked_ids([loop, fact], chars_limit=50)[DAN] == [1]


def test_a_promise_rides_with_the_human_it_is_to() -> None:
    promise = row(1, subject="self", counterpart="u:17", kind="promise")
    got = picked_ids([promise, row(2)])
    assert got == {CARA: [1], DAN: [2]}


def test_world_rows_take_their_own_group_after_the_humans() -> None:
    got = pick([row(1, subject="world"), row(2), row(3, subject="u:17")], NOW)
    assert list(got) == [CARA, DAN, WORLD_GROUP]
    assert group_order([WORLD_GROUP, 99, 5]) == [5, 99, WORLD_GROUP]


def test_the_char_cap_is_shared_round_robin_so_no_human_crowds_out_another() -> None:
    dans = [row(i, text="d" * 150, importance=10, created=1) for i in range(1, 11)]
    caras = [
        row(i, subject="u:17", text="c" * 150, importance=3, created=90) for i in range(11, 21)
    ]
    got = picked_ids(dans + caras)
    assert len(got[DAN]) == 4 and len(got[CARA]) == 4  # 8 × 150 = 1,200


def test_equal_scores_are_ordered_by_row_id() -> None:
    rows = [row(i, kind=k, importance=5, created=7) for i, k in enumerate(["event", "fact"] * 2, 1)]
    assert picked_ids(rows)[DAN] == [1, 2, 3, 4]


@given(st.randoms(use_true_random=False))
def test_ties_break_by_id_whatever_order_the_rows_come_in(rnd: random.Random) -> None:
    rows = [row(i, kind=KINDS[i % 4], importance=5, created=7) for i in range(1, 25)]
    shuffled = rows[:]
    rnd.shuffle(shuffled)
    assert picked_ids(shuffled) == picked_ids(rows)


def reference_take(c: RankColumns, s: np.ndarray, per_human: int, chars_limit: int) -> dict:
    """The take over every row, with no shortlist: what `take` must equal."""
    ride = {KINDS.index(k) for k in ALWAYS_RIDE_KINDS}
    out_riders, out_rest = {}, {}
    for g in group_order(c.groups.tolist()):
        ranked = sorted(np.flatnonzero(c.groups == g), key=lambda i: (-s[i], c.ids[i]))
        out_riders[g] = [i for i in ranked if c.kinds[i] in ride][:per_human]
        others = [i for i in ranked if c.kinds[i] not in ride]
        # a row is in the first pass when fewer than DIVERSITY_PER_KIND of its kind rank above it
        ahead = [sum(c.kinds[j] == c.kinds[i] for j in others[:n]) for n, i in enumerate(others)]
        first = [i for i, a in zip(others, ahead, strict=True) if a < DIVERSITY_PER_KIND]
        rest = first + [i for i in others if i not in first]
        out_rest[g] = rest[: per_human - len(out_riders[g])]
    used = sum(int(c.chars[i]) for rs in out_riders.values() for i in rs)
    taken: dict = {g: [] for g in out_rest}
    for turn in range(per_human):
        for g, rest in out_rest.items():
            if turn < len(rest) and used + c.chars[rest[turn]] <= chars_limit:
                used += int(c.chars[rest[turn]])
                taken[g].append(rest[turn])
    ids = {g: [int(c.ids[i]) for i in out_riders[g] + taken[g]] for g in out_rest}
    return {g: v for g, v in ids.items() if v}


def row_specs(
    subjects: list[str], *, max_age: int, max_chars: int, max_size: int
) -> st.SearchStrategy[list[tuple[str, str, int, int, int]]]:
    """(subject, kind, importance, age in days, chars) per row."""
    spec = st.tuples(
        st.sampled_from(subjects),
        st.sampled_from(KINDS),
        st.integers(1, 10),
        st.integers(0, max_age),
        st.integers(10, max_chars),
    )
    return st.lists(spec, max_size=max_size)


@settings(max_examples=examples(150), deadline=None)
@given(
    row_specs(["u:42", "u:17", "world"], max_age=40, max_chars=200, max_size=80),
    st.integers(1, 12),
    st.integers(100, 1500),
)
def test_the_shortlist_never_changes_what_the_take_picks(
    specs: list[tuple[str, str, int, int, int]], per_human: int, chars_limit: int
) -> None:
    rows = [
        row(i, subject=s, kind=k, importance=imp, created=age, text="x" * n)
        for i, (s, k, imp, age, n) in enumerate(specs, start=1)
    ]
    c = columns(rows, NOW)
    s = scores(c)
    got = take(c, s, per_human=per_human, chars_limit=chars_limit)
    assert got == reference_take(c, s, per_human, chars_limit)


# --- render -----------------------------------------------------------------------------------

DAN_HUMAN = Human(DAN, "Dan", 'I\'m vegetarian.\nCall me Dan — never "Daniel".  ')


def test_the_note_rides_verbatim_under_its_human_and_outside_the_char_cap() -> None:
    rows = [row(i, text="x" * 190) for i in range(1, 11)]
    chosen = pick(rows, NOW)[DAN]
    block = render("warren", "Warren", [Section(DAN_HUMAN, chosen), Section(None, [])])
    assert DAN_HUMAN.note in block.text
    assert block.text.index("Dan (u:42)") < block.text.index(DAN_HUMAN.note)
    assert block.chars_current == sum(len(r.text) for r in chosen) <= BLOCK_CHARS_LIMIT


def test_the_note_rides_even_when_the_persona_holds_nothing_about_the_human() -> None:
    block = render("warren", "Warren", [Section(DAN_HUMAN, [])])
    assert DAN_HUMAN.note in block.text and block.row_ids == () and block.chars_current == 0


def test_lines_carry_confidence_open_loop_and_date_tags() -> None:
    assert render_line(row(1, text="u:42 owns a flat.", confidence=True)) == (
        "- u:42 owns a flat. (told one-to-one)"
    )
    assert render_line(row(2, kind="open_loop", text="u:42 has an interview.")) == (
        "- u:42 has an interview. (open loop)"
    )
    closed = row(3, text="u:42 owned a flat.", valid_from="2026-07", valid_to="2026-11-03")
    assert render_line(closed) == "- u:42 owned a flat. (2026-07 → 2026-11-03)"
    no_start = row(4, text="u:42 rented.", valid_to="2026-11-03T10:00:00+00:00")
    assert render_line(no_start) == "- u:42 rented. (until 2026-11-03)"
    state = row(5, text="u:42 lives in Xuhui.", valid_from="2026-07", confidence=True)
    assert render_line(state) == "- u:42 lives in Xuhui. (told one-to-one · since 2026-07)"
    event = row(6, kind="event", text="u:42 sold shares.", valid_from="2026-07")
    assert render_line(event) == "- u:42 sold shares."


def test_the_block_has_its_meter_sections_and_per_human_ids() -> None:
    world = row(9, subject="world", text="Odyssey opened.")
    dan = [row(1, text="u:42 owns a flat."), replace(row(2), kind="open_loop")]
    block = render("warren", "Warren", [Section(DAN_HUMAN, dan), Section(None, [world])])
    chars = sum(len(r.text) for r in [*dan, world])
    assert block.text.startswith(f"Warren's memory · {chars}/{BLOCK_CHARS_LIMIT} chars\n")
    assert block.chars_current == chars and block.chars_limit == BLOCK_CHARS_LIMIT
    assert block.row_ids == (1, 2, 9)
    assert block.row_ids_by_human == {"u:42": (1, 2), "world": (9,)}
    assert block.text.index("Dan (u:42)") < block.text.index("The world")


def test_the_tail_describes_what_the_persona_does_and_never_orders_a_recital() -> None:
    text = tail("Warren", any_confidence=True)
    assert "Warren knows these things" in text
    assert "Nothing here is announced" in text
    for order in ("You must", "Always mention", "Remind", "Recite", "Tell "):
        assert order.lower() not in text.lower()
    assert "confidence" not in tail("Warren", any_confidence=False)


def test_nothing_to_recall_renders_no_text_at_all() -> None:
    block = render("warren", "Warren", [Section(Human(DAN, "Dan", None), []), Section(None, [])])
    assert block.text == "" and block.row_ids == () and block.chars_current == 0


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(-1, 3), st.integers(0, 6), st.integers(0, 4)),
        min_size=0,
        max_size=80,
    ),
    st.integers(1, 12),
    st.sampled_from(["one sort", "a pass per (group, kind)", "runs given"]),
)
def test_the_per_kind_cut_keeps_exactly_what_a_full_sort_would(rows, k, way) -> None:  # type: ignore[no-untyped-def]
    """The fast cut against the obvious one: sort every row by (group, kind, -score, id);
    each of its ways: one sort of a few thousand rows, a pass per (group, kind), or the runs
    of rows that come sorted by (group, kind) (the reader's views)."""
    from memory_worker.core import ranking
    from memory_worker.core.ranking import _top_per_group_kind

    n = len(rows)
    ids = np.arange(100, 100 + n, dtype=np.int64)[::-1].copy()  # ids not in row order
    by_kind = sorted(range(n), key=lambda i: (rows[i][0], rows[i][1]))
    codes = [(rows[i][0], rows[i][1]) for i in by_kind]
    runs = [i for i in range(n) if i == 0 or codes[i] != codes[i - 1]] + [n]
    given = way == "runs given"
    c = RankColumns(
        ids=ids,
        groups=np.array([g for g, _, _ in rows], dtype=np.int64),
        kinds=np.array([kd for _, kd, _ in rows], dtype=np.int64),
        importance=np.zeros(n),
        age_days=np.zeros(n),
        chars=np.zeros(n, dtype=np.int64),
        relevance=np.zeros(n),
        by_kind=np.array(by_kind, dtype=np.int32) if given else None,
        runs=np.array(runs, dtype=np.int64) if given else None,
    )
    score = np.array([s / 4 for _, _, s in rows], dtype=np.float64)  # many exact ties
    expected: set[int] = set()
    seen: dict[tuple[int, int], int] = {}
    for i in sorted(range(n), key=lambda i: (c.groups[i], c.kinds[i], -score[i], ids[i])):
        key = (int(c.groups[i]), int(c.kinds[i]))
        if seen.get(key, 0) < k:
            expected.add(i)
            seen[key] = seen.get(key, 0) + 1
    saved, ranking.SORT_ALL_UP_TO = ranking.SORT_ALL_UP_TO, (10**9 if way == "one sort" else 0)
    try:
        assert set(_top_per_group_kind(c, score, k).tolist()) == expected
    finally:
        ranking.SORT_ALL_UP_TO = saved


# --- the columns above are the reader's columns -----------------------------------------------


@pytest.mark.store
@settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(row_specs(["u:42", "world", "self"], max_age=400, max_chars=300, max_size=40))
def test_the_python_columns_rank_exactly_as_the_reader_does(
    db: Engine, specs: list[tuple[str, str, int, int, int]]
) -> None:
    """Rows in a real store, ranked by `build_block` (the SQL path), pick what the Python
    columns of tests.ranking_rows pick: the ranking tests above test the production rule."""
    with store.transaction() as conn:
        if not users.persona_exists(conn, "warren"):
            users.add_user(conn, DAN, "Dan")
            users.add_persona(conn, "warren", "Warren")
            rooms.add_room(conn, "p", "private", ["u:42", "warren"])
        memories.delete_rows(conn, [r.id for r in memories.all_rows(conn)])
        written = []
        for subject, kind, importance, age, chars in specs:
            counterpart = "u:42" if subject == "self" else None
            kind = "promise" if subject == "self" else kind
            cand = Candidate(subject, kind, "x" * chars, importance, (1,), None, counterpart)
            stamp = ago(age)
            new_id = memories.insert_row(
                conn, persona="warren", room_id="p", witnessed=[DAN], candidate=cand,
                embedding=None, now=stamp,
            )  # fmt: skip
            written.append(new_id)
        rows = list(memories.rows_by_id(conn, written).values())
    block = build_block("warren", {DAN}, "p", now=NOW, touch=False)
    want = {
        ("world" if g == WORLD_GROUP else f"u:{g}"): tuple(r.id for r in picked)
        for g, picked in pick(rows, NOW).items()
    }
    assert dict(block.row_ids_by_human) == want
