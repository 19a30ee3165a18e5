"""Order is part of exactly-once (run in-process on a real store): a spell whose lines the
cursor already covers changes nothing and toasts nothing; a late spell never reopens or
re-adds a fact a newer spell closed; toasts are written with their rows (an outbox) and
delivered once; a parked spell resolves when a later spell covers its lines."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, select

from memory_worker import app_side, cli
from memory_worker.core import tables as t
from memory_worker.core.rows import Spell
from memory_worker.models.hashing import HashingEmbedder
from memory_worker.models.scripted import ScriptedChat, sensible_route
from memory_worker.storage import rooms
from memory_worker.write import steps
from tests import bees
from tests.scenes import DAN, people
from tests.write_helpers import mark_told, notices, rows

pytestmark = pytest.mark.store


@pytest.fixture
def dm(db: Engine) -> Engine:
    people(db)
    with db.begin() as conn:
        app_side.add_room(conn, "dm-dan", "private", [f"u:{DAN}", "warren"])
    return db


def chat() -> ScriptedChat:
    return ScriptedChat({"extract": bees.extract, "route": sensible_route})


def routed(spell: Spell | None) -> Spell:
    assert spell is not None
    model = chat()
    spell = steps.run_extract(spell, model)
    spell = steps.run_embed(spell, HashingEmbedder())
    return steps.run_route(spell, model)


def committed(spell: Spell) -> str:
    outcome = steps.run_commit(spell)
    if outcome.status == "stale":
        outcome = steps.run_commit(routed(Spell.from_json({**spell.to_json(), "decisions": []})))
    return outcome.status


def bee_rows(db: Engine) -> list[dict]:
    return [r for r in rows(db) if r["text"] == bees.FACTS[bees.KEEPS]]


def test_a_late_spell_whose_lines_are_covered_changes_nothing_and_toasts_nothing(
    dm: Engine,
) -> None:
    bees.say(dm, bees.KEEPS)
    late = routed(steps.begin("warren", "dm-dan"))  # lines 1..1, held back (a 429's delay)
    bees.say(dm, bees.MORE)
    assert committed(routed(steps.begin("warren", "dm-dan"))) == "committed"  # 1..2
    bees.say(dm, bees.STOPPED)
    assert committed(routed(steps.begin("warren", "dm-dan"))) == "committed"  # 3: CLOSE
    (bee,) = bee_rows(dm)
    assert bee["valid_to"] is not None
    before_rows, before_notices = rows(dm), notices(dm)

    assert steps.run_commit(late).status == "covered"
    assert rows(dm) == before_rows  # the bee fact stays closed, nothing re-added
    assert notices(dm) == before_notices  # no second "noted"
    assert steps.pending_toasts(late.key) == []
    assert steps.run_commit(late).status == "covered"  # and so on every redelivery


def test_a_late_spell_reaching_past_the_cursor_keeps_only_what_cites_unread_lines(
    dm: Engine,
) -> None:
    bees.say(dm, bees.KEEPS)
    early = routed(steps.begin("warren", "dm-dan"))  # 1..1: commits first
    bees.say(dm, bees.MORE)
    bees.say(dm, bees.STOPPED)
    bees.say(dm, bees.NEWS)
    late = routed(steps.begin("warren", "dm-dan"))  # 1..4, routed before anything committed
    assert committed(early) == "committed"
    with dm.begin() as conn:  # a newer spell read lines 2..3 and closed the bee fact
        (bee,) = [r for r in rows(dm) if r["text"] == bees.FACTS[bees.KEEPS]]
        conn.execute(
            t.persona_memory.update()
            .where(t.persona_memory.c.id == bee["id"])
            .values(valid_to="2026-12-02")
        )
        conn.execute(t.cursors.update().values(last_line_id=3))

    assert steps.run_commit(late).status == "committed"
    texts = [(r["text"], r["valid_to"]) for r in rows(dm)]
    assert (bees.FACTS[bees.KEEPS], None) not in texts  # not re-added as open
    assert (bees.FACTS[bees.NEWS], None) in texts  # the unread line is still mined


def test_the_toast_is_written_with_its_rows_and_delivered_once(dm: Engine) -> None:
    bees.say(dm, bees.KEEPS)
    spell = routed(steps.begin("warren", "dm-dan"))
    assert steps.run_commit(spell).status == "committed"
    (notice,) = notices(dm)  # in the commit's transaction: no rows without their toast
    assert notice["delivered"] == 0
    assert [n.id for n in mark_told(spell)] == [notice["id"]]
    assert notices(dm)[0]["delivered"] == 1
    assert mark_told(spell) == []


def test_undelivered_toasts_are_found_by_the_sweep_query(dm: Engine) -> None:
    bees.say(dm, bees.KEEPS)
    spell = routed(steps.begin("warren", "dm-dan"))
    steps.run_commit(spell)  # its worker killed before it delivered the toast
    assert steps.waiting_toasts("9999-01-01") == [spell.key]
    assert steps.waiting_toasts("2000-01-01") == []  # a grace period for the chain's own
    mark_told(spell)
    assert steps.waiting_toasts("9999-01-01") == []


def test_a_parked_spell_resolves_when_a_later_spell_covers_its_lines(
    dm: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    bees.say(dm, bees.KEEPS)
    parked = steps.begin("warren", "dm-dan")
    assert parked is not None
    parked.parked = "model unavailable after 5 retries"
    assert steps.run_commit(parked).status == "parked"
    assert cli.main(["parked"]) == 0 and "1 parked spell(s)" in capsys.readouterr().out
    bees.say(dm, bees.MORE)
    assert committed(routed(steps.begin("warren", "dm-dan"))) == "committed"
    assert cli.main(["parked"]) == 0 and "0 parked spell(s)" in capsys.readouterr().out


def test_the_frequent_sweep_finds_rooms_whose_lines_waited_and_skips_fresh_ones(
    dm: Engine,
) -> None:
    with dm.begin() as conn:
        app_side.add_room(conn, "dm-old", "private", [f"u:{DAN}", "warren"])
        app_side.say(conn, "dm-old", DAN, "hello", at="2026-12-02T10:00:00+00:00")
        app_side.say(conn, "dm-dan", DAN, "hello", at="2026-12-02T11:59:00+00:00")
    with dm.connect() as conn:
        waited = rooms.lagging_rooms(
            conn, written_before="2026-12-02T11:55:00+00:00", written_after="2026-12-01T12:00"
        )
        assert waited == ["dm-old"]
        assert rooms.lagging_rooms(conn) == ["dm-dan", "dm-old"]  # the daily sweep: all
        assert rooms.lagging_rooms(conn, written_after="2026-12-02T11:00:00+00:00") == ["dm-dan"]


@pytest.mark.parametrize("bad", ["not-a-date", "2026-12-02T10:00:00", "", "2026-13-02T10:00Z"])
def test_a_line_stamped_with_a_time_that_is_not_one_is_refused_naming_it(
    dm: Engine, bad: str
) -> None:
    """A stamp the sweeps cannot order would hide the line from them for good."""
    with pytest.raises(ValueError, match="^at: .* ISO 8601 time with its UTC offset"):
        with dm.begin() as conn:
            app_side.say(conn, "dm-dan", DAN, "hello", at=bad)
    assert rooms_lines(dm) == 0


def test_a_line_stamped_in_another_offset_is_stored_in_utc_where_the_sweep_finds_it(
    dm: Engine,
) -> None:
    with dm.begin() as conn:
        app_side.say(conn, "dm-dan", DAN, "hello", at="2026-12-02T18:00:00.5+08:00")
    with dm.connect() as conn:
        assert conn.execute(select(t.lines.c.created)).scalar() == "2026-12-02T10:00:00+00:00"
        waited = rooms.lagging_rooms(
            conn, written_before="2026-12-02T11:55:00+00:00", written_after="2026-12-01T12:00"
        )
    assert waited == ["dm-dan"]


def rooms_lines(db: Engine) -> int:
    with db.connect() as conn:
        return len(conn.execute(select(t.lines.c.id)).all())
