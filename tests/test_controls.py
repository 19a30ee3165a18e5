"""The human's controls (docs/design.md §5): each acts as one user and touches only what is
about them."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import Engine, insert, select

from memory_worker import app_side, controls
from memory_worker.core import tables as t
from memory_worker.core.block import span
from memory_worker.core.constants import BLOCK_CHARS_LIMIT, MEMORY_NOTE_MAX_CHARS
from memory_worker.core.errors import NoteTooLong, NotFound, UnknownUser
from memory_worker.core.rows import Row
from memory_worker.storage import memories
from memory_worker.web import page_model
from tests import scenes
from tests.scenes import CARA, DAN

pytestmark = pytest.mark.store


@pytest.fixture
def world(db: Engine) -> Engine:
    """Dan and Cara, Warren and Nolan (no rows yet)."""
    scenes.people(db)
    return db


def add_row(
    eng: Engine,
    subject: str,
    text: str,
    *,
    persona: str = "warren",
    counterpart: str | None = None,
    kind: str = "fact",
    room_id: str = "dm-dan",
    evidence: tuple[int, ...] = (),
    valid_from: str | None = None,
    valid_to: str | None = None,
    closed_by: int | None = None,
) -> int:
    """Insert a persona_memory row the way the commit would; returns its id."""
    with eng.begin() as conn:
        res = conn.execute(
            insert(t.persona_memory).values(
                persona=persona,
                subject=subject,
                counterpart=counterpart,
                witnessed=json.dumps([DAN]),
                room_id=room_id,
                kind=kind,
                text=text,
                importance=5,
                valid_from=valid_from,
                valid_to=valid_to,
                closed_by=closed_by,
                evidence=json.dumps(list(evidence)),
                created="2026-08-01T10:00:00+00:00",
            )
        )
        return int(res.inserted_primary_key[0])


def add_update(eng: Engine, old_text: str, new_text: str) -> tuple[int, int]:
    """An UPDATE as the commit writes it: the new row, and the old one closed by it."""
    old = add_row(eng, "u:42", old_text, valid_from="2026-07")
    new = add_row(eng, "u:42", new_text, valid_from="2026-11")
    with eng.begin() as conn:
        conn.execute(
            t.persona_memory.update()
            .where(t.persona_memory.c.id == old)
            .values(valid_to="2026-11", closed_by=new)
        )
    return old, new


def add_notice(eng: Engine, user_id: int, row_ids: list[int]) -> int:
    with eng.begin() as conn:
        res = conn.execute(
            insert(t.notices).values(
                user_id=user_id,
                persona="warren",
                room_id="dm-dan",
                kind="memory_toast",
                text="Warren noted: ... · undo",
                row_ids=json.dumps(row_ids),
                spell_key=f"warren/dm-dan/{row_ids}",
                created="2026-08-01T10:00:00+00:00",
            )
        )
        return int(res.inserted_primary_key[0])


def row_ids(eng: Engine) -> set[int]:
    with eng.connect() as conn:
        return set(conn.execute(select(t.persona_memory.c.id)).scalars())


def row(eng: Engine, row_id: int) -> dict:
    with eng.connect() as conn:
        q = select(t.persona_memory).where(t.persona_memory.c.id == row_id)
        return dict(conn.execute(q).mappings().one())


def user(eng: Engine, user_id: int) -> dict:
    with eng.connect() as conn:
        return dict(conn.execute(select(t.users).where(t.users.c.id == user_id)).mappings().one())


# --- the note -------------------------------------------------------------------------------


def test_a_note_of_exactly_400_chars_is_kept(world: Engine) -> None:
    controls.set_note(DAN, "x" * MEMORY_NOTE_MAX_CHARS)
    assert user(world, DAN)["memory_note"] == "x" * 400


def test_a_401_char_note_is_refused_by_name_and_the_old_note_stays(world: Engine) -> None:
    controls.set_note(DAN, "I am vegetarian.")
    with pytest.raises(NoteTooLong, match="401.*400"):
        controls.set_note(DAN, "x" * 401)
    assert user(world, DAN)["memory_note"] == "I am vegetarian."


def test_the_note_is_stripped_and_a_blank_note_clears_it(world: Engine) -> None:
    controls.set_note(DAN, "  call me Dan  \n")
    assert user(world, DAN)["memory_note"] == "call me Dan"
    controls.set_note(DAN, "   ")
    assert user(world, DAN)["memory_note"] is None


def test_a_note_for_an_unknown_user_is_an_unknown_user_error(world: Engine) -> None:
    with pytest.raises(UnknownUser):
        controls.set_note(999, "hello")


# --- undo -----------------------------------------------------------------------------------


def test_undo_deletes_only_the_listed_rows_that_concern_the_user(world: Engine) -> None:
    flat = add_row(world, "u:42", "u:42 owns a flat in Xuhui.")
    promise = add_row(world, "self", "Warren will ask u:42 about Thursday.", counterpart="u:42")
    unlisted = add_row(world, "u:42", "u:42 likes jazz.")
    caras = add_row(world, "u:17", "u:17 runs marathons.")  # listed by mistake: must survive
    notice = add_notice(world, DAN, [flat, promise, caras])
    assert controls.undo_notice(DAN, notice) == 2
    assert row_ids(world) == {unlisted, caras}


def test_undo_of_an_update_reopens_the_row_it_closed(world: Engine) -> None:
    old, new = add_update(world, "u:42 owns a flat in Xuhui.", "u:42 sold his flat.")
    controls.undo_notice(DAN, add_notice(world, DAN, [new]))
    assert row_ids(world) == {old}
    assert row(world, old)["valid_to"] is None and row(world, old)["closed_by"] is None


def test_undoing_twice_is_harmless(world: Engine) -> None:
    flat = add_row(world, "u:42", "u:42 owns a flat in Xuhui.")
    notice = add_notice(world, DAN, [flat])
    controls.undo_notice(DAN, notice)
    later = add_row(world, "u:42", "u:42 owns a flat in Xuhui.")  # re-learned afterwards
    assert controls.undo_notice(DAN, notice) == 0
    assert row_ids(world) == {later}


def test_a_user_cannot_undo_another_users_notice(world: Engine) -> None:
    flat = add_row(world, "u:42", "u:42 owns a flat in Xuhui.")
    notice = add_notice(world, DAN, [flat])
    with pytest.raises(NotFound):
        controls.undo_notice(CARA, notice)
    assert row_ids(world) == {flat}
    with world.connect() as conn:
        assert conn.execute(select(t.notices.c.undone)).scalar() == 0


def test_undoing_an_unknown_notice_is_not_found(world: Engine) -> None:
    with pytest.raises(NotFound, match="notice 999"):
        controls.undo_notice(DAN, 999)


# --- delete and clear all -------------------------------------------------------------------


def test_a_user_cannot_delete_someone_elses_row_a_world_row_or_their_promise(
    world: Engine,
) -> None:
    caras = add_row(world, "u:17", "u:17 runs marathons.")
    fact = add_row(world, "world", "The cafe on Wuyuan Road closed.")
    promise = add_row(world, "self", "Warren owes u:17 a book.", counterpart="u:17")
    for row_id in (caras, fact, promise):
        with pytest.raises(NotFound):
            controls.delete_row(DAN, row_id)
    assert row_ids(world) == {caras, fact, promise}


def test_deleting_a_row_reopens_the_row_it_had_closed(world: Engine) -> None:
    old, new = add_update(world, "u:42 owns a flat in Xuhui.", "u:42 sold his flat.")
    controls.delete_row(DAN, new)
    assert row_ids(world) == {old}
    assert row(world, old)["valid_to"] is None


def test_deleting_never_reopens_a_row_about_someone_else(world: Engine) -> None:
    mine = add_row(world, "self", "Warren will call u:42.", counterpart="u:42")
    caras = add_row(
        world, "self", "Warren will call u:17.", counterpart="u:17", valid_to="2026-08",
        closed_by=mine,
    )  # fmt: skip
    controls.delete_row(DAN, mine)
    assert row(world, caras)["valid_to"] == "2026-08"


def test_deleting_an_unknown_row_is_not_found(world: Engine) -> None:
    with pytest.raises(NotFound):
        controls.delete_row(DAN, 12345)


def test_clear_all_deletes_only_the_users_rows(world: Engine) -> None:
    add_row(world, "u:42", "u:42 owns a flat in Xuhui.")
    add_row(world, "u:42", "u:42 plays chess.", persona="nolan")
    add_row(world, "self", "Warren will ask u:42 about Thursday.", counterpart="u:42")
    keep = {
        add_row(world, "u:17", "u:17 runs marathons."),
        add_row(world, "world", "The cafe on Wuyuan Road closed."),
        add_row(world, "self", "Warren owes u:17 a book.", counterpart="u:17"),
    }
    assert controls.clear_all(DAN) == 3
    assert row_ids(world) == keep


def test_clear_all_for_one_persona_leaves_the_other_personas(world: Engine) -> None:
    add_row(world, "u:42", "u:42 owns a flat in Xuhui.")
    nolans = add_row(world, "u:42", "u:42 plays chess.", persona="nolan")
    caras = add_row(world, "u:17", "u:17 runs marathons.")
    assert controls.clear_all(DAN, persona="warren") == 1
    assert row_ids(world) == {nolans, caras}


# --- the page -------------------------------------------------------------------------------


def test_the_page_never_shows_a_row_about_someone_else(world: Engine) -> None:
    mine = add_row(world, "u:42", "u:42 owns a flat in Xuhui.")
    promise = add_row(world, "self", "Warren will ask u:42 about Thursday.", counterpart="u:42")
    add_row(world, "u:17", "u:17 runs marathons.")
    add_row(world, "world", "The cafe on Wuyuan Road closed.")
    add_row(world, "self", "Warren owes u:17 a book.", counterpart="u:17")
    shown = {line.id for s in page_model.manage_page(DAN).personas for line in s.lines}
    assert shown == {mine, promise}


def test_the_page_groups_by_persona_with_display_names_and_meters(world: Engine) -> None:
    add_row(world, "u:42", "u:42 owns a flat.")  # 17 chars
    add_row(world, "u:42", "u:42 had a cat.", valid_from="2025", valid_to="2026")  # closed
    add_row(world, "u:42", "u:42 plays chess.", persona="nolan")  # 17 chars
    page = page_model.manage_page(DAN)
    sections = {s.persona: s for s in page.personas}
    assert [(s.persona, s.name) for s in page.personas] == [
        ("nolan", "Nolan"),
        ("warren", "Warren"),
    ]
    assert len(sections["warren"].lines) == 2 and len(sections["nolan"].lines) == 1
    assert sections["warren"].meter_chars == 17 and sections["nolan"].meter_chars == 17
    assert sections["warren"].meter_limit == BLOCK_CHARS_LIMIT


def test_the_page_shows_closed_arcs_with_their_range(world: Engine) -> None:
    old, new = add_update(world, "u:42 owns a flat in Xuhui.", "u:42 sold his flat.")
    lines = {line.id: line for line in page_model.manage_page(DAN).personas[0].lines}
    assert lines[old].closed and lines[old].arc == "2026-07 → 2026-11"
    assert not lines[new].closed and lines[new].arc is None


def test_each_page_line_carries_its_origin_date_and_delete_handle(world: Engine) -> None:
    line_ids = scenes.private_chat(world)
    flat = add_row(world, "u:42", "u:42 owns a flat in Xuhui.", evidence=(line_ids[0],))
    (line,) = page_model.manage_page(DAN).personas[0].lines
    assert (line.room_id, line.evidence) == ("dm-dan", [line_ids[0]])
    assert line.created == "2026-08-01" and line.delete_id == flat


def test_the_page_carries_the_note_and_the_switches(world: Engine) -> None:
    controls.set_note(DAN, "Call me Dan.")
    controls.mute(DAN, "nolan")
    page = page_model.manage_page(DAN)
    assert (page.note, page.memory_on, page.muted, page.personas) == (
        "Call me Dan.", True, ["nolan"], [],
    )  # fmt: skip


def test_grouping_drops_any_row_not_about_the_user_even_if_the_query_let_it_through() -> None:
    def r(row_id: int, subject: str, counterpart: str | None = None) -> Row:
        return Row(row_id, "warren", subject, counterpart, [DAN], "dm-dan", "fact", "t", 5,
                   None, None, None, [], "2026-08-01T10:00:00+00:00")  # fmt: skip

    rows = [r(1, "u:42"), r(2, "u:17"), r(3, "world"), r(4, "self", "u:17"), r(5, "self", "u:42")]
    (section,) = page_model.group_by_persona(rows, DAN, {"warren": "Warren"})
    assert [line.id for line in section.lines] == [5, 1]


def test_one_renderer_writes_when_a_memory_held_for_every_view() -> None:
    assert span("2026-07", "2026-08-18T10:00:00+00:00") == "2026-07 → 2026-08-18"
    assert span(None, "2026-11") == "until 2026-11"
    assert span("2026-07-14", None) == "since 2026-07-14"
    assert span(None, None) is None


# --- the switches ---------------------------------------------------------------------------


def test_mute_and_unmute_persist_and_repeat_harmlessly(world: Engine) -> None:
    controls.mute(DAN, "warren")
    controls.mute(DAN, "warren")
    with world.connect() as conn:
        assert conn.execute(select(t.persona_memory_mute)).all() == [(DAN, "warren")]
    controls.unmute(DAN, "warren")
    controls.unmute(DAN, "warren")
    assert page_model.manage_page(DAN).muted == []


def test_muting_an_unknown_persona_is_not_found(world: Engine) -> None:
    with pytest.raises(NotFound, match="ghost"):
        controls.mute(DAN, "ghost")


def test_the_memory_on_switch_persists(world: Engine) -> None:
    controls.set_memory_on(DAN, False)
    assert user(world, DAN)["memory_on"] == 0 and user(world, CARA)["memory_on"] == 1
    controls.set_memory_on(DAN, True)
    assert user(world, DAN)["memory_on"] == 1


def test_the_page_lists_only_the_evidence_lines_its_human_witnessed(db: Engine) -> None:
    """A second wall behind the labels: a row whose evidence reaches back before the human
    joined the room (a row written by an older version, or by hand) shows them only the
    lines they heard."""
    from memory_worker.storage import memories
    from tests.write_helpers import plant

    with db.begin() as c:
        app_side.add_user(c, 42, "Dan")
        app_side.add_user(c, 17, "Cara")
        app_side.add_persona(c, "warren", "Warren")
        app_side.add_room(c, "g", "group", ["u:42", "warren"])
        before = app_side.say(c, "g", 42, "Before Cara came.")
        app_side.join(c, "g", "u:17")
        after = app_side.say(c, "g", 17, "Hi, I'm here.")
    row_id = plant(
        db,
        "world",
        "A fact from the group.",
        witnessed="[17, 42]",
        room_id="g",
        evidence=f"[{before}, {after}]",
    )
    with db.begin() as c:
        memories.set_audience(c, row_id, [17, 42])
    (line,) = [x for s in page_model.manage_page(17).personas for x in s.lines]
    assert line.id == row_id and line.evidence == [after]
    (dans,) = [x for s in page_model.manage_page(42).personas for x in s.lines]
    assert dans.evidence == [before, after]


def test_the_page_s_meter_is_the_block_s_for_the_same_rows(world: Engine) -> None:
    """The CLI printed 307/1200 and the page 259/1200 for the demo's block: the page left the
    world row out. Both now count through `block.meter`."""
    from memory_worker import reader

    scenes.private_chat(world)
    add_row(world, "u:42", "u:42 owns a flat in Xuhui.")
    add_row(world, "self", "Warren promised to send u:42 the list.", counterpart="u:42")
    world_row = add_row(world, "world", "The Odyssey is playing at the Majestic this week.")
    with world.begin() as conn:
        memories.set_audience(conn, world_row, [DAN])  # Dan witnessed its line: it is his too
    add_row(world, "u:42", "u:42 rents in Jing'an.", valid_to="2026-08-01T00:00:00+00:00")
    block = reader.build_block("warren", {DAN}, "dm-dan", touch=False)
    (section,) = page_model.manage_page(DAN).personas
    assert len(block.row_ids) == 3
    assert section.meter_chars == block.chars_current
