"""The group scope (the New) in the audience rule, and the human's switch for it: what one
person told a persona one-to-one follows them into groups only while they let it."""

from __future__ import annotations

from dataclasses import replace

from memory_worker.core.audience import Consent, Members, one_to_one, visible_memories
from memory_worker.core.rows import Room
from tests.core.test_audience import CARA, DAN, EVERYONE, EVERYONE_ON, GROUP, PRIVATE, row

EVE = 58
ONE_TO_ONE = row(1, f"u:{DAN}", witnessed=(DAN,))
FROM_A_GROUP = row(2, f"u:{DAN}", witnessed=(DAN, CARA))
PROMISE = row(3, "self", counterpart=f"u:{DAN}", witnessed=(DAN,), kind="promise")
DANS_NEWS = replace(row(4, "world", witnessed=(DAN,)), private_to=(DAN,))
GROUP_NEWS = replace(row(5, "world", witnessed=(DAN, CARA)), private_to=(CARA, DAN))
ROWS = [ONE_TO_ONE, FROM_A_GROUP, PROMISE, DANS_NEWS, GROUP_NEWS]


def shown(present: set[int], room: Room, consent: Consent, proven: bool) -> list[int]:
    got = visible_memories(
        "warren", present, room, ROWS, consent, members=EVERYONE, proven_scope=proven
    )
    return [r.id for r in got]


def test_in_the_proven_scope_a_group_hears_only_what_all_of_it_heard() -> None:
    assert shown({DAN, CARA}, GROUP, EVERYONE_ON, proven=True) == [GROUP_NEWS.id]
    assert shown({DAN, EVE}, GROUP, EVERYONE_ON, proven=True) == []


def test_with_the_group_scope_a_persons_rows_follow_them_and_no_further() -> None:
    assert shown({DAN, EVE}, GROUP, EVERYONE_ON, proven=False) == [1, 2, 3, 4, 5]
    assert shown({CARA, EVE}, GROUP, EVERYONE_ON, proven=False) == [5]
    assert shown({EVE}, GROUP, EVERYONE_ON, proven=False) == []


def test_the_switch_off_keeps_what_was_told_one_to_one_in_private_chats() -> None:
    off = replace(EVERYONE_ON, stays_private=frozenset({(DAN, "warren")}))
    # what was said with others follows Dan no further either: he keeps it out of groups
    assert shown({DAN, EVE}, GROUP, off, proven=False) == []
    # where everyone present heard it, it is nobody's to follow
    assert shown({DAN, CARA}, GROUP, off, proven=False) == [FROM_A_GROUP.id, GROUP_NEWS.id]
    assert shown({DAN}, PRIVATE, off, proven=False) == [1, 2, 3, 4, 5]
    other_persona = replace(EVERYONE_ON, stays_private=frozenset({(DAN, "nolan")}))
    assert shown({DAN, EVE}, GROUP, other_persona, proven=False) == [1, 2, 3, 4, 5]


def test_only_a_row_about_someone_is_told_one_to_one_never_a_world_row_or_a_promise() -> None:
    got = {
        r.id: r.confidence
        for r in visible_memories("warren", {DAN}, PRIVATE, ROWS, EVERYONE_ON, members=EVERYONE)
    }
    assert got == {1: True, 2: False, 3: False, 4: False, 5: False}
    assert one_to_one(PROMISE) and not one_to_one(GROUP_NEWS)


def test_members_still_decide_under_the_group_scope() -> None:
    outsiders = Members(frozenset({CARA}), frozenset({"warren"}))
    got = visible_memories(
        "warren", {DAN, CARA}, GROUP, ROWS, EVERYONE_ON, members=outsiders, proven_scope=False
    )
    assert [r.id for r in got] == [GROUP_NEWS.id]


def test_a_row_follows_only_when_everyone_it_was_formed_with_and_names_lets_it() -> None:
    cara_keeps = replace(EVERYONE_ON, stays_private=frozenset({(CARA, "warren")}))
    assert shown({DAN, EVE}, GROUP, cara_keeps, proven=False) == [1, 3, 4]  # not 2, 5: Cara's
    names_cara = replace(row(6, f"u:{DAN}", witnessed=(DAN,)), named=(CARA,))
    got = visible_memories(
        "warren",
        {DAN, CARA, EVE},
        GROUP,
        [names_cara],
        cara_keeps,
        members=EVERYONE,
        proven_scope=False,
    )
    assert got == []  # a row about Dan that names Cara stays out while Cara's switch is off


def test_a_human_who_deleted_a_shared_row_never_hears_it_again_in_a_group() -> None:
    dan_left = replace(GROUP_NEWS, private_to=(CARA,))  # Dan deleted it; Cara still holds it
    for present in ({DAN, CARA}, {DAN, CARA, EVE}):
        got = visible_memories(
            "warren", present, GROUP, [dan_left], EVERYONE_ON, members=EVERYONE, proven_scope=False
        )
        assert got == []
    got = visible_memories(
        "warren", {CARA}, PRIVATE, [dan_left], EVERYONE_ON, members=EVERYONE, proven_scope=False
    )
    assert [r.id for r in got] == [GROUP_NEWS.id]
