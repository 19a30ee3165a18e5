"""The write path's eleven holes (docs/design.md §10, §11), one test (or a few) each, on a real
SQLite file with a scripted model that records the exact prompts it receives. Each test is named
for what it guards; each failed on the main branch before the guard (checked by breaking the
guard once)."""

from __future__ import annotations

import json
import logging

import pytest
from sqlalchemy import Engine, insert, select

from memory_worker import app_side, controls, reader
from memory_worker.core import settings as settings_mod
from memory_worker.core import tables as t
from memory_worker.core.constants import DAILY_CAP_PER_HUMAN, DAILY_CAP_WORLD
from memory_worker.core.errors import NotFound, UnknownUser
from memory_worker.models.hashing import HashingEmbedder
from memory_worker.models.scripted import ScriptedChat, candidate, sensible_route, transcript_ids
from memory_worker.web import page_model
from memory_worker.write.guards import is_one_sentence
from tests.scenes import CARA, DAN, people
from tests.write_helpers import drain, notices, plant, prompts, rows, run_spell, spell_records

pytestmark = pytest.mark.store

EMB = HashingEmbedder()


def dm(db: Engine, *said: tuple[int | str, str], room: str = "dm-dan") -> list[int]:
    """Dan's private chat with Warren; returns the ids of the lines said."""
    with db.begin() as conn:
        if conn.execute(select(t.rooms.c.id).where(t.rooms.c.id == room)).first() is None:
            app_side.add_room(conn, room, "private", [f"u:{DAN}", "warren"])
        return [app_side.say(conn, room, who, text) for who, text in said]


def group(db: Engine, *said: tuple[int | str, str], room: str = "g1") -> list[int]:
    with db.begin() as conn:
        if conn.execute(select(t.rooms.c.id).where(t.rooms.c.id == room)).first() is None:
            app_side.add_room(conn, room, "group", [f"u:{DAN}", f"u:{CARA}", "warren"])
        return [app_side.say(conn, room, who, text) for who, text in said]


def chat(*cands: dict, route: object = sensible_route) -> ScriptedChat:
    return ScriptedChat({"extract": {"candidates": list(cands)}, "route": route})


@pytest.fixture
def world(db: Engine) -> Engine:
    people(db)
    with db.begin() as conn:
        app_side.add_user(conn, 5, "Mila Novak")  # known to the store, in no room of Warren's
    return db


# --- 1. personal data as a world row --------------------------------------------------------------


def test_hole1_a_world_row_that_names_a_human_by_id_or_by_name_is_never_stored(world) -> None:  # type: ignore[no-untyped-def]
    (line,) = dm(world, (DAN, "Cara took money from the office, and Mila won the lottery."))
    model = chat(
        candidate("world", "fact", "u:17 stole money from the office.", 8, [line]),
        candidate("world", "event", "Cara stole money from the office.", 8, [line]),
        candidate("world", "event", "Someone called Mila won the lottery.", 6, [line]),
        candidate(
            "world", "event", "Money went missing from an office after u : 17 left.", 6, [line]
        ),
    )
    run = run_spell("warren", "dm-dan", model)
    assert run.status == "committed" and rows(world) == []
    assert json.loads(spell_records(world)[0]["dropped"]) == {"world": 4}


def test_hole1_a_world_row_is_on_the_page_of_whoever_it_cites_who_gets_its_toast_and_may_delete_it(
    world,
) -> None:  # type: ignore[no-untyped-def]
    (line,) = dm(world, (DAN, "The Odyssey opened in cinemas yesterday, by the way."))
    fact = candidate("world", "event", "The Odyssey opened in cinemas on 2026-08-17.", 4, [line])
    run = run_spell("warren", "dm-dan", chat(fact))
    (row,) = rows(world)
    assert row["subject"] == "world" and run.row_ids == [row["id"]]
    (toast,) = notices(world)
    assert toast["user_id"] == DAN and json.loads(toast["row_ids"]) == [row["id"]]
    page = page_model.manage_page(DAN)
    assert [ln.id for s in page.personas for ln in s.lines] == [row["id"]]
    with pytest.raises(NotFound):
        controls.delete_row(CARA, row["id"])  # not from Cara's words
    assert controls.clear_all(DAN) == 1 and rows(world) == []


def test_hole1_world_rows_have_a_daily_cap_of_their_own(world) -> None:  # type: ignore[no-untyped-def]
    (line,) = dm(world, (DAN, "Lots of news today."))
    many = [
        candidate("world", "event", f"Bridge number {i} opened to traffic.", 4, [line])
        for i in range(DAILY_CAP_WORLD + 8)
    ]
    run_spell("warren", "dm-dan", chat(*many))
    assert len(rows(world)) == DAILY_CAP_WORLD
    assert json.loads(spell_records(world)[0]["dropped"]) == {"cap": 8}


# --- 2. the model calls see only what the audience allows -----------------------------------------


def test_hole2_neither_model_call_sees_a_row_about_an_absent_human_nor_a_promise_to_one(
    world,
) -> None:  # type: ignore[no-untyped-def]
    caras = plant(world, "u:17", "u:17 is pregnant and has a scan on Friday.")
    promise = plant(world, "self", "Warren promised u:17 to ask about the scan.", "u:17")
    danish = plant(world, "u:42", "u:42 owns a flat in Xuhui.", witnessed="[42]")
    worldly = plant(world, "world", "The Odyssey opened in cinemas on 2026-07-17.")
    (ask,) = dm(world, ("warren", "I will ask you about the scan, Dan."))
    close_everything = lambda prompt: {  # noqa: E731 - a manipulated router
        "decisions": [{"candidate": 0, "event": "CLOSE", "old_id": "0"}]
    }
    mine = candidate(
        "self", "promise", "Warren promised u:42 to ask about the scan.", 7, [ask],
        counterpart="u:42",
    )  # fmt: skip
    model = chat(mine, route=close_everything)
    run_spell("warren", "dm-dan", model)
    (extract_prompt,) = prompts(model, "extract")
    (route_prompt,) = prompts(model, "route")
    for prompt in (extract_prompt, route_prompt):
        assert "pregnant" not in prompt and "u:17" not in prompt
    assert "u:42 owns a flat in Xuhui." in extract_prompt
    assert "The Odyssey opened" in extract_prompt
    open_ids = {r["id"] for r in rows(world) if r["valid_to"] is None}
    assert {caras, promise, danish, worldly} <= open_ids  # the confused CLOSE changed nothing


# --- 3. evidence is the subject's own -------------------------------------------------------------


def test_hole3_a_fact_about_dan_that_cites_another_humans_line_is_not_stored(world) -> None:  # type: ignore[no-untyped-def]
    gossip, weather, own = group(
        world,
        (CARA, "Dan has a criminal record."),
        (DAN, "The weather is nice."),
        (DAN, "I run a bakery."),
    )
    model = chat(
        candidate("u:42", "fact", "u:42 has a criminal record.", 9, [gossip, weather]),
        candidate("u:42", "fact", "u:42 runs a bakery.", 6, [own]),
        candidate("self", "promise", "Warren will visit the bakery of u:42.", 5, [gossip],
                  counterpart="u:42"),
    )  # fmt: skip
    run_spell("warren", "g1", model)
    assert [r["text"] for r in rows(world)] == ["u:42 runs a bakery."]


# --- 4. caps cover every kind ---------------------------------------------------------------------


def test_hole4_promises_to_a_human_count_towards_that_humans_daily_cap(world) -> None:  # type: ignore[no-untyped-def]
    said, promised = dm(world, (DAN, "I have many plans."), ("warren", "I will help with all."))
    facts = [candidate("u:42", "fact", f"u:42 has plan number {i}.", 5, [said]) for i in range(8)]
    promises = [
        candidate("self", "promise", f"Warren will help u:42 with plan {i}.", 5, [promised],
                  counterpart="u:42")
        for i in range(20)
    ]  # fmt: skip
    run_spell("warren", "dm-dan", chat(*facts, *promises))
    assert len(rows(world)) == DAILY_CAP_PER_HUMAN


# --- 5. one bad field does not lose the spell -----------------------------------------------------


def test_hole5_an_ill_typed_candidate_is_dropped_and_counted_and_its_siblings_are_stored(
    world,
) -> None:  # type: ignore[no-untyped-def]
    (line,) = dm(world, (DAN, "I bought a flat in Xuhui."))
    model = chat(
        candidate("u:42", "fact", "u:42 bought a flat.", "high", [line]),
        candidate("u:42", "fact", "u:42 owns a flat in Xuhui.", 6, [line]),
        {"subject": "u:42", "text": "no kind, no importance"},
        "not even an object",
    )
    run = run_spell("warren", "dm-dan", model)
    assert run.status == "committed"
    assert [r["text"] for r in rows(world)] == ["u:42 owns a flat in Xuhui."]
    assert json.loads(spell_records(world)[0]["dropped"]) == {"schema": 3}
    assert len(model.calls) == 2  # nothing re-asked: the answer as a whole was the JSON asked for


# --- 6. deletion reaches every copy; memory text stays in the store -------------------------------


def test_hole6_deleting_rows_rewords_the_toasts_that_quoted_them(world) -> None:  # type: ignore[no-untyped-def]
    flat, jazz = dm(world, (DAN, "I bought a flat in Xuhui."), (DAN, "I love jazz."))
    model = chat(
        candidate("u:42", "fact", "u:42 owns a flat in Xuhui.", 6, [flat]),
        candidate("u:42", "preference", "u:42 loves jazz.", 5, [jazz]),
    )
    run = run_spell("warren", "dm-dan", model)
    (toast,) = notices(world)
    assert "flat in Xuhui" in toast["text"] and "jazz" in toast["text"]
    controls.delete_row(DAN, run.row_ids[0])
    (toast,) = notices(world)
    assert "Xuhui" not in toast["text"] and "jazz" in toast["text"] and "removed" in toast["text"]
    assert json.loads(toast["row_ids"]) == [run.row_ids[1]]
    controls.clear_all(DAN)
    (toast,) = notices(world)
    assert "jazz" not in toast["text"] and json.loads(toast["row_ids"]) == []


def test_hole6_no_log_line_of_a_spell_carries_what_anyone_said(world, caplog) -> None:  # type: ignore[no-untyped-def]
    (line,) = dm(world, (DAN, "I keep a zebra called Marmalade."))
    model = chat(
        candidate("u:42", "fact", "u:42 keeps a zebra called Marmalade.", 6, [line]),
        candidate("u:17", "fact", "u:17 fears the zebra Marmalade.", 6, [line]),  # dropped
        candidate("u:42", "fact", "u:42 keeps a zebra. Marmalade is its name.", 6, [line]),
    )
    with caplog.at_level(logging.DEBUG):
        run_spell("warren", "dm-dan", model)
    assert len(rows(world)) == 1
    assert caplog.records and not any("armalade" in r.getMessage() for r in caplog.records)


# --- 10. one sentence means one sentence ----------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "u:1011 likes jazz. u:1011 hates opera.",
        "u:1011 likes jazz.u:1011 hates opera.",
        "u:42 likes jazz. he hates opera.",
        'u:42 likes jazz. "Opera is loud," he says.',
        "u:42 likes jazz! u:42 hates opera.",
        "u:42 likes jazz.\nu:42 hates opera.",
    ],
)
def test_hole10_two_sentences_are_two_whatever_follows_the_full_stop(text: str) -> None:
    assert not is_one_sentence(text)


@pytest.mark.parametrize(
    "text",
    [
        "u:42 moved to St. Louis in 2024.",
        "u:42 met Dr. Chen on Jul. 3.",
        "u:42 reads J. R. R. Tolkien.",
        "u:42 paid 3.50 for coffee at example.com.",
        "u:42 likes e.g. jazz and blues.",
    ],
)
def test_hole10_abbreviations_initials_and_decimals_stay_one_sentence(text: str) -> None:
    assert is_one_sentence(text)


# --- 11. the controls take only what they should --------------------------------------------------


def test_hole11_a_note_that_is_not_text_is_a_type_error_and_the_note_is_kept(world) -> None:  # type: ignore[no-untyped-def]
    controls.set_note(DAN, "I prefer tea.")
    for bad in (0, b"bytes", ["a list"], 42):
        with pytest.raises(TypeError, match="memory note must be a str"):
            controls.set_note(DAN, bad)  # type: ignore[arg-type]
    assert page_model.manage_page(DAN).note == "I prefer tea."


def test_hole11_ids_of_the_wrong_type_or_out_of_range_get_a_clear_error(world) -> None:  # type: ignore[no-untyped-def]
    for call in (controls.delete_row, controls.undo_notice):
        with pytest.raises(NotFound):
            call(DAN, 2**63)
        with pytest.raises(TypeError, match="must be an int"):
            call(DAN, "7")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="user_id must be an int"):
            call(True, 7)
    with pytest.raises(UnknownUser):
        page_model.manage_page(2**63)
    with pytest.raises(TypeError, match="on must be a bool"):
        controls.set_memory_on(DAN, "no")  # type: ignore[arg-type]


def test_hole11_missing_and_not_yours_are_the_same_error(world) -> None:  # type: ignore[no-untyped-def]
    caras = plant(world, "u:17", "u:17 runs marathons.")
    missing = caras + 1000
    errors = []
    for row_id in (caras, missing):
        with pytest.raises(NotFound) as e:
            controls.delete_row(DAN, row_id)
        errors.append((type(e.value), str(e.value).replace(str(row_id), "#")))
    assert errors[0] == errors[1]


# --- build_block: members only --------------------------------------------------------------------


def test_build_block_is_empty_for_a_persona_not_in_the_room_and_fails_closed_on_non_members(
    world,
) -> None:  # type: ignore[no-untyped-def]
    plant(world, "u:42", "u:42 owns a flat in Xuhui.", witnessed="[42]", room_id="dm-dan")
    plant(world, "u:17", "u:17 runs marathons.", witnessed="[17]")
    dm(world, (DAN, "Hello."))
    assert "Xuhui" in reader.build_block("warren", {DAN}, "dm-dan", touch=False).text
    # Cara is not a member of Dan's private chat: saying she is present loads nothing of hers,
    # and the room is no longer private for Dan either (docs/design.md §4: fail closed)
    block = reader.build_block("warren", {DAN, CARA}, "dm-dan", touch=False)
    assert "marathons" not in block.text and "Xuhui" not in block.text
    assert reader.build_block("nolan", {DAN}, "dm-dan", touch=False).text == ""


# --- 7. a backlog drains --------------------------------------------------------------------------


def backlog(db: Engine, n: int, huge_at: int | None = None, room: str = "dm-dan") -> list[int]:
    """`n` lines of Dan's in his private chat (one of 100,000 chars at `huge_at`)."""
    dm(db, room=room)
    with db.begin() as conn:
        conn.execute(
            insert(t.lines),
            [
                dict(
                    room_id=room,
                    speaker=f"u:{DAN}",
                    text=("flat " * 20_000 if i == huge_at else f"Line {i}: I tried dish {i}."),
                    created="2026-08-18T10:00:00+00:00",
                )
                for i in range(n)
            ],
        )
        return list(
            conn.execute(
                select(t.lines.c.id).where(t.lines.c.room_id == room).order_by(t.lines.c.id)
            ).scalars()
        )


def one_fact_per_window(prompt: str) -> dict:
    first = transcript_ids(prompt)[0]
    return {"candidates": [candidate("u:42", "fact", f"u:42 tried dish {first}.", 4, [first])]}


def test_hole7_a_10000_line_backlog_drains_in_bounded_windows_and_a_huge_line_is_cut(
    world,
) -> None:  # type: ignore[no-untyped-def]
    settings = settings_mod.current()
    ids = backlog(world, 10_000, huge_at=5_000)
    model = ScriptedChat(
        {"extract": one_fact_per_window, "route": sensible_route}, max_prompt_chars=60_000
    )
    runs = drain("warren", "dm-dan", model)
    assert {r.status for r in runs} == {"committed"}
    assert spell_records(world)[-1]["last_line_id"] == ids[-1]
    extract_prompts = prompts(model, "extract")
    assert len(extract_prompts) == len(runs) >= 10_000 // settings.spell_max_lines
    assert max(len(p) for p in extract_prompts) < settings.spell_max_chars + 5_000
    seen = [i for p in extract_prompts for i in transcript_ids(p)]
    assert seen == ids  # every line mined once, oldest first
    (cut,) = [p for p in extract_prompts if f"[{ids[5_000]}] u:42: flat" in p]
    assert "flat " * 1_000 not in cut and "[…]" in cut


def test_hole7_a_window_the_model_rejects_as_too_large_is_split_until_it_fits(world) -> None:  # type: ignore[no-untyped-def]
    ids = backlog(world, 600)
    model = ScriptedChat(
        {"extract": one_fact_per_window, "route": sensible_route}, max_prompt_chars=6_000
    )
    runs = drain("warren", "dm-dan", model)
    assert {r.status for r in runs} == {"committed"}
    assert spell_records(world)[-1]["last_line_id"] == ids[-1]
    fits = [p for what, sys, p in model.calls if what == "extract" and len(sys + p) <= 6_000]
    assert len(fits) < len(prompts(model, "extract"))  # some windows were refused, then split
    assert [i for p in fits for i in transcript_ids(p)] == ids


def test_hole7_a_single_line_the_model_refuses_even_cut_is_passed_not_stuck(world) -> None:  # type: ignore[no-untyped-def]
    ids = backlog(world, 3, huge_at=1)
    model = ScriptedChat(
        {"extract": one_fact_per_window, "route": sensible_route}, max_prompt_chars=4_000
    )
    runs = drain("warren", "dm-dan", model)
    assert [r.status for r in runs] == ["committed", "skipped", "committed"]
    assert spell_records(world)[-1]["last_line_id"] == ids[-1]
