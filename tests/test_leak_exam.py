"""The leak exam with the worst-case parrot: rows (b) and (c) test the code alone."""

from __future__ import annotations

from exams.leak import run as leak


def test_a_planted_secret_never_reaches_a_room_without_its_owner_nor_another_persona() -> None:
    counts = leak.run(turns=8)
    assert counts.without_dan == 0  # (b): by construction
    assert counts.by_nolan == 0  # (c): the cross-seat leak
    assert counts.with_dan == 0  # (a): groups load world facts only under the proven scope
    # The plant took and the parrot repeats it where it belongs: the zeros above mean something.
    assert counts.private_control > 0


def test_a_mention_counts_only_in_a_personas_own_words() -> None:
    room = ["u:17: Tencent? Who's interviewing?"]
    assert not leak.mentions_plant("u:17: Tencent? Who's interviewing?", room)
    assert leak.mentions_plant("Dan is interviewing at Tencent.", room)


def test_with_the_group_scope_on_the_secret_follows_dan_and_no_further() -> None:
    counts = leak.run(turns=8, proven_scope=False)
    assert counts.with_dan > 0  # the parrot repeats what Dan's presence lets into the block
    assert counts.without_dan == 0 and counts.by_nolan == 0  # still 0 by construction
