"""The audience rule (docs/design.md §4): property tests over random stores, rooms and present
sets, and one plain example for every case in its table."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from memory_worker.core.audience import Consent, Members, scope_for, visible_memories
from memory_worker.core.constants import KINDS, V1_PROVEN_SCOPE
from memory_worker.core.rows import Room, Row, human_id
from tests.examples import examples

PERSONAS = ("warren", "nolan")
HUMANS = (17, 42, 58, 99)
DAN, CARA = 42, 17

PRIVATE = Room(id="p", kind="private")
GROUP = Room(id="g", kind="group")
INCOGNITO = Room(id="i", kind="private", incognito=True)
EVERYONE_ON = Consent(memory_on={u: True for u in HUMANS})
EVERYONE = Members(frozenset(HUMANS), frozenset(PERSONAS))  # every human and persona a member


def row(
    id: int,
    subject: str,
    *,
    persona: str = "warren",
    counterpart: str | None = None,
    witnessed: tuple[int, ...] = (DAN,),
    kind: str = "fact",
    valid_to: str | None = None,
) -> Row:
    return Row(
        id=id,
        persona=persona,
        subject=subject,
        counterpart=counterpart,
        witnessed=list(witnessed),
        room_id="p",
        kind=kind,
        text=f"row {id} about {subject}",
        importance=5,
        valid_from=None,
        valid_to=valid_to,
        closed_by=None,
        evidence=[1],
        created="2026-08-01T10:00:00+00:00",
    )


# --- random stores ----------------------------------------------------------------------------

subjects = st.one_of(
    st.just("world"), st.just("self"), st.sampled_from(HUMANS).map(lambda u: f"u:{u}")
)


row_specs = st.tuples(
    st.sampled_from(PERSONAS),
    subjects,
    st.none() | st.sampled_from(HUMANS),  # a self row's counterpart
    st.sets(st.sampled_from(HUMANS), max_size=3),  # witnessed
    st.sampled_from(KINDS),
    st.booleans(),  # closed
)


@st.composite
def stores(draw: st.DrawFn) -> list[Row]:
    """A persona_memory table: rows of two personas about anyone, open or closed."""
    specs = draw(st.lists(row_specs, max_size=20))
    return [
        row(
            i,
            subject,
            persona=persona,
            counterpart=f"u:{cp}" if subject == "self" and cp is not None else None,
            witnessed=tuple(sorted(witnessed)),
            kind=kind,
            valid_to="2026-08-10" if closed else None,
        )
        for i, (persona, subject, cp, witnessed, kind, closed) in enumerate(specs, start=1)
    ]


rooms = st.builds(
    Room,
    id=st.just("r"),
    kind=st.sampled_from(["private", "group"]),
    incognito=st.booleans(),
)
present_sets = st.sets(st.sampled_from(HUMANS), max_size=4)


@st.composite
def consents(draw: st.DrawFn) -> Consent:
    """Random switches; some present humans are missing from `users` altogether."""
    known = draw(st.sets(st.sampled_from(HUMANS)))
    memory_on = {u: draw(st.booleans()) for u in known}
    mutes = draw(st.sets(st.tuples(st.sampled_from(HUMANS), st.sampled_from(PERSONAS))))
    return Consent(memory_on=memory_on, mutes=frozenset(mutes))


def seed_rule(
    persona: str,
    present: set[int],
    room: Room,
    rows: list[Row],
    consent: Consent,
    proven_scope: bool,
) -> dict[int, bool]:
    """An independent reading of docs/design.md §4's code: row id → confidence, for rows it
    loads."""

    def allowed(u: int | None) -> bool:
        return (
            u is not None
            and u in present
            and consent.memory_on.get(u, False)
            and (u, persona) not in consent.mutes
        )

    if room.incognito:
        return {}
    out: dict[int, bool] = {}
    for r in rows:
        if r.persona != persona or r.valid_to is not None:
            continue
        if r.subject == "world":
            out[r.id] = False
        elif r.subject == "self":
            if allowed(human_id(r.counterpart or "")):
                out[r.id] = False
        elif allowed(human_id(r.subject)):
            out[r.id] = set(r.witnessed) == {human_id(r.subject)}
    if proven_scope and not (room.kind == "private" and len(present) == 1):
        world = {r.id for r in rows if r.subject == "world"}
        return {i: c for i, c in out.items() if i in world}
    return out


# --- properties -------------------------------------------------------------------------------


@settings(max_examples=examples(300))
@given(stores(), st.sampled_from(PERSONAS), present_sets, rooms, consents(), st.booleans())
def test_no_row_about_an_absent_muted_or_memory_off_human_is_ever_visible(
    rows: list[Row], persona: str, present: set[int], room: Room, consent: Consent, proven: bool
) -> None:
    for r in visible_memories(
        persona, present, room, rows, consent, proven_scope=proven, members=EVERYONE
    ):
        about = human_id(r.counterpart or "") if r.subject == "self" else human_id(r.subject)
        if r.subject == "world":
            continue
        assert about in present, f"row {r.id} is about someone absent"
        assert consent.memory_on.get(about) is True, f"row {r.id}: u:{about} has memory off"
        assert (about, persona) not in consent.mutes, f"row {r.id}: u:{about} muted {persona}"


@settings(max_examples=examples(300))
@given(stores(), st.sampled_from(PERSONAS), present_sets, rooms, consents(), st.booleans())
def test_visible_memories_is_the_seeds_predicate_with_the_proven_scope_on_or_off(
    rows: list[Row], persona: str, present: set[int], room: Room, consent: Consent, proven: bool
) -> None:
    got = visible_memories(
        persona, present, room, rows, consent, proven_scope=proven, members=EVERYONE
    )
    assert {r.id: r.confidence for r in got} == seed_rule(
        persona, present, room, rows, consent, proven
    )
    assert [r.id for r in got] == sorted(r.id for r in got), "the input order is kept"


@given(stores(), st.sampled_from(PERSONAS), present_sets, consents(), st.booleans())
def test_an_incognito_room_gets_nothing_not_even_world_facts(
    rows: list[Row], persona: str, present: set[int], consent: Consent, proven: bool
) -> None:
    for kind in ("private", "group"):
        room = Room(id="r", kind=kind, incognito=True)
        assert (
            visible_memories(
                persona, present, room, rows, consent, proven_scope=proven, members=EVERYONE
            )
            == []
        )


@given(stores(), st.sampled_from(PERSONAS), present_sets, consents())
def test_a_group_room_gets_world_rows_only_while_the_proven_scope_holds(
    rows: list[Row], persona: str, present: set[int], consent: Consent
) -> None:
    got = visible_memories(
        persona, present, GROUP, rows, consent, proven_scope=True, members=EVERYONE
    )
    assert all(r.subject == "world" for r in got)
    world = [r.id for r in rows if r.persona == persona and r.subject == "world" and not r.valid_to]
    assert [r.id for r in got] == world


@given(stores(), st.sampled_from(PERSONAS), present_sets, consents())
def test_with_the_proven_scope_off_a_group_room_loads_each_present_humans_rows(
    rows: list[Row], persona: str, present: set[int], consent: Consent
) -> None:
    got = visible_memories(
        persona, present, GROUP, rows, consent, proven_scope=False, members=EVERYONE
    )
    assert {r.id for r in got} == set(seed_rule(persona, present, GROUP, rows, consent, False))
    for r in rows:
        u = human_id(r.subject)
        if r.persona == persona and not r.valid_to and u is not None and consent.allows(u, persona):
            assert (r.id in {g.id for g in got}) == (u in present)


@given(stores(), st.sampled_from(PERSONAS), present_sets, rooms, consents(), st.booleans())
def test_a_closed_row_never_loads(
    rows: list[Row], persona: str, present: set[int], room: Room, consent: Consent, proven: bool
) -> None:
    got = visible_memories(
        persona, present, room, rows, consent, proven_scope=proven, members=EVERYONE
    )
    assert all(r.valid_to is None for r in got)


@given(stores(), st.sampled_from(PERSONAS), present_sets, rooms, consents())
def test_another_personas_rows_never_load(
    rows: list[Row], persona: str, present: set[int], room: Room, consent: Consent
) -> None:
    got = visible_memories(
        persona, present, room, rows, consent, proven_scope=False, members=EVERYONE
    )
    assert all(r.persona == persona for r in got)


@given(stores(), present_sets, rooms, consents(), st.booleans())
def test_the_rule_sets_confidence_on_copies_and_leaves_the_callers_rows_alone(
    rows: list[Row], present: set[int], room: Room, consent: Consent, proven: bool
) -> None:
    before = [replace(r) for r in rows]
    visible_memories("warren", present, room, rows, consent, proven_scope=proven, members=EVERYONE)
    assert rows == before


# --- docs/design.md §4's table, one example per case -----------------------------------------

FORMED_ONE_TO_ONE = row(1, "u:42", witnessed=(DAN,))
FORMED_IN_A_GROUP = row(2, "u:42", witnessed=(DAN, CARA))
PROMISE_TO_DAN = row(3, "self", counterpart="u:42", kind="promise")
WORLD_FACT = row(4, "world", witnessed=())
ABOUT_CARA = row(5, "u:17", witnessed=(CARA,))
TABLE = [FORMED_ONE_TO_ONE, FORMED_IN_A_GROUP, PROMISE_TO_DAN, WORLD_FACT, ABOUT_CARA]


def ids(rows: list[Row]) -> list[int]:
    return [r.id for r in rows]


def test_about_dan_with_dan_present_formed_one_to_one_loads_tagged_confidence() -> None:
    got = visible_memories(
        "warren", {DAN}, PRIVATE, [FORMED_ONE_TO_ONE], EVERYONE_ON, members=EVERYONE
    )
    assert ids(got) == [1] and got[0].confidence


def test_about_dan_with_dan_present_formed_in_a_group_loads_without_confidence() -> None:
    got = visible_memories(
        "warren", {DAN}, PRIVATE, [FORMED_IN_A_GROUP], EVERYONE_ON, members=EVERYONE
    )
    assert ids(got) == [2] and not got[0].confidence


def test_about_dan_with_dan_absent_does_not_exist_for_the_room() -> None:
    for proven in (True, False):
        got = visible_memories(
            "warren", {CARA}, PRIVATE, TABLE, EVERYONE_ON, proven_scope=proven, members=EVERYONE
        )
        assert 1 not in ids(got) and 2 not in ids(got) and 3 not in ids(got)


def test_warrens_promise_to_dan_loads_when_dan_is_present() -> None:
    got = visible_memories(
        "warren", {DAN}, PRIVATE, [PROMISE_TO_DAN], EVERYONE_ON, members=EVERYONE
    )
    assert ids(got) == [3]


def test_a_world_fact_loads_with_anyone_or_no_one_present() -> None:
    for present in (set(), {DAN}, {DAN, CARA}):
        for room in (PRIVATE, GROUP):
            assert ids(
                visible_memories(
                    "warren", present, room, [WORLD_FACT], EVERYONE_ON, members=EVERYONE
                )
            ) == [4]


def test_any_of_the_above_in_a_group_room_under_the_proven_scope_is_world_facts_only() -> None:
    assert V1_PROVEN_SCOPE, "v1 ships with the proven scope on until the leak exam says otherwise"
    got = visible_memories("warren", {DAN, CARA}, GROUP, TABLE, EVERYONE_ON, members=EVERYONE)
    assert ids(got) == [4]


def test_the_same_group_room_with_the_proven_scope_off_loads_everyone_presents_rows() -> None:
    got = visible_memories(
        "warren", {DAN, CARA}, GROUP, TABLE, EVERYONE_ON, proven_scope=False, members=EVERYONE
    )
    assert ids(got) == [1, 2, 3, 4, 5]
    assert [r.confidence for r in got] == [True, False, False, False, True]


def test_a_private_chat_with_two_humans_present_counts_as_a_group_under_the_proven_scope() -> None:
    got = visible_memories("warren", {DAN, CARA}, PRIVATE, TABLE, EVERYONE_ON, members=EVERYONE)
    assert ids(got) == [4]


def test_a_human_who_muted_the_persona_loses_their_rows_and_its_promises_to_them() -> None:
    muted = Consent(memory_on={DAN: True}, mutes=frozenset({(DAN, "warren")}))
    assert ids(visible_memories("warren", {DAN}, PRIVATE, TABLE, muted, members=EVERYONE)) == [4]
    nolans = [replace(r, persona="nolan") for r in TABLE]
    assert ids(visible_memories("nolan", {DAN}, PRIVATE, nolans, muted, members=EVERYONE)) == [
        1,
        2,
        3,
        4,
    ]


def test_a_human_with_memory_off_loses_their_rows_and_the_personas_promises_to_them() -> None:
    off = Consent(memory_on={DAN: False})
    assert ids(visible_memories("warren", {DAN}, PRIVATE, TABLE, off, members=EVERYONE)) == [4]


def test_a_present_human_the_store_does_not_know_counts_as_memory_off() -> None:
    assert ids(visible_memories("warren", {DAN}, PRIVATE, TABLE, Consent(), members=EVERYONE)) == [
        4
    ]


def test_a_closed_row_about_a_present_human_does_not_load() -> None:
    closed = replace(FORMED_ONE_TO_ONE, valid_to="2026-11-01")
    assert visible_memories("warren", {DAN}, PRIVATE, [closed], EVERYONE_ON, members=EVERYONE) == []


def test_an_incognito_private_chat_loads_nothing() -> None:
    assert visible_memories("warren", {DAN}, INCOGNITO, TABLE, EVERYONE_ON, members=EVERYONE) == []


def test_the_scope_lists_only_humans_who_are_present_and_allow_the_persona() -> None:
    consent = Consent(
        memory_on={DAN: True, CARA: True, 58: False}, mutes=frozenset({(CARA, "warren")})
    )
    scope = scope_for(
        "warren", {DAN, CARA, 58, 99}, GROUP, consent, proven_scope=False, members=EVERYONE
    )
    assert scope.humans == {DAN} and scope.human_refs == ("u:42",) and scope.world
    assert scope_for("warren", {DAN}, INCOGNITO, consent, members=EVERYONE).world is False
