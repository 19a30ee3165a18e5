"""Tests written from `make mutate` (docs/mutation.md): each kills mutants of the privacy core
that the other tests let live. The mutants each one kills are named in its docstring."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, select, update

from memory_worker import app_side, reader
from memory_worker.core import settings as settings_mod
from memory_worker.core import tables as t
from memory_worker.core.constants import DAILY_CAP_PER_HUMAN
from memory_worker.core.errors import EmbedderMismatch, UnknownRoom
from memory_worker.models.hashing import HashingEmbedder
from memory_worker.storage import embedder as store_embedder
from memory_worker.storage import read_path, store
from memory_worker.write import guards
from memory_worker.write.extract import CandidateOut
from tests.reader.test_reader import CARA, DAN, NOW, add_row
from tests.reader.test_recall import SAIL, talk

PM = t.persona_memory.c


def group_of_dan_and_cara(url: str | None = None) -> dict[str, int]:
    """A group of Dan, Cara and Warren; Warren's important row about Dan and a minor world row,
    both about sailing."""
    with store.transaction(url) as c:
        app_side.add_user(c, DAN, "Dan")
        app_side.add_user(c, CARA, "Cara")
        app_side.add_persona(c, "warren", "Warren")
        app_side.add_room(c, "group", "group", ["u:42", "u:17", "warren"])
        return {
            "dan": add_row(c, "warren", "u:42", "u:42 sails.", importance=10, embedding=SAIL),
            "world": add_row(
                c, "warren", "world", "A regatta is on.", importance=3, witnessed=(), embedding=SAIL
            ),
        }


# --- the reader's SQL -------------------------------------------------------------------------


def private_chat_of_dan_and_warren() -> None:
    with store.transaction() as c:
        app_side.add_user(c, DAN, "Dan")
        app_side.add_persona(c, "warren", "Warren")
        app_side.add_persona(c, "nolan", "Nolan")
        app_side.add_room(c, "dm", "private", ["u:42", "warren"])


def test_a_personas_block_is_ranked_over_its_own_rows_only(db: Engine) -> None:
    """Another persona's rows never compete for a block's places (x__open_rows_statement
    __mutmut_4: without the persona filter Nolan's important rows take Warren's places, and the
    gate then drops them, leaving Warren's block empty)."""
    private_chat_of_dan_and_warren()
    with store.transaction() as c:
        own = add_row(c, "warren", "u:42", "u:42 sails.", importance=3)
        for i in range(40):
            add_row(c, "nolan", "u:42", f"u:42 did thing number {i} today.", importance=10)
    assert reader.build_block("warren", {DAN}, "dm", now=NOW, touch=False).row_ids == (own,)


def test_the_first_row_of_a_persona_reaches_a_block_the_same_process_opened_empty(
    db: Engine,
) -> None:
    """A persona with no rows is at version 0 (x_context__mutmut_83: read as 1, the empty
    columns cached then would answer for its first row)."""
    private_chat_of_dan_and_warren()
    assert reader.build_block("warren", {DAN}, "dm", now=NOW, touch=False).row_ids == ()
    with store.transaction() as c:
        first = add_row(c, "warren", "u:42", "u:42 sails.")
    assert reader.build_block("warren", {DAN}, "dm", now=NOW, touch=False).row_ids == (first,)


def test_a_cold_opens_sql_reads_only_the_rows_about_the_humans_asked_for_and_the_world(
    db: Engine,
) -> None:
    """`visible_open_rows` is the audience rule's subject test pushed into SQL: the rows about
    Dan, Warren's own rows with Dan, the world's; never a row about Cara, nor Warren's promise to
    her, nor another persona's row (x__open_rows_statement__mutmut_39: any row whose
    counterpart is Dan, whoever it is about; _40: every self row, whoever it was with)."""
    private_chat_of_dan_and_warren()
    with store.transaction() as c:
        app_side.add_user(c, CARA, "Cara")
        wanted = {
            add_row(c, "warren", "u:42", "u:42 sails."),
            add_row(c, "warren", "self", "Warren promised to call.", counterpart="u:42"),
            add_row(c, "warren", "world", "A regatta is on.", witnessed=()),
        }
        add_row(c, "warren", "u:17", "u:17 sails.", counterpart="u:42")
        add_row(c, "warren", "self", "Warren promised to write.", counterpart="u:17")
        add_row(c, "nolan", "u:42", "u:42 bakes.")
    with store.engine().connect() as c:
        got = {row[0] for row in read_path.visible_open_rows(c, ["warren"], ["u:42"])}
    assert got == wanted


# --- recall ---------------------------------------------------------------------------------


def test_recall_under_the_proven_scope_fills_k_with_what_the_room_may_see(db: Engine) -> None:
    """The candidates are ranked under the block's scope, not a wider one that the gate then
    empties (x_recall__mutmut_38: the candidates' scope without the proven scope)."""
    ids = group_of_dan_and_cara()
    got = reader.recall(
        "warren", {DAN, CARA}, "group", "sailing?", k=1, query_vector=SAIL, block_ids=(),
        now=NOW, touch=False,
    )  # fmt: skip
    assert [r.id for r in got] == [ids["world"]]


@pytest.mark.usefixtures("group_scope_measured")
def test_recall_with_the_group_scope_off_finds_a_present_humans_row_in_a_group(
    db: Engine,
) -> None:
    """`proven_scope=False` reaches both the candidates and the gate (x_recall__mutmut_43 and
    _109: either one left at the default hides Dan's row)."""
    ids = group_of_dan_and_cara()
    got = reader.recall(
        "warren", {DAN, CARA}, "group", "sailing?", k=2, query_vector=SAIL, block_ids=(),
        now=NOW, touch=False, proven_scope=False,
    )  # fmt: skip
    assert [r.id for r in got] == [ids["dan"], ids["world"]]


def test_recall_in_a_room_the_store_never_saw_names_that_room(db: Engine) -> None:
    """The app's error says which room it asked for (x_recall__mutmut_20: UnknownRoom(None))."""
    private_chat_of_dan_and_warren()
    with pytest.raises(UnknownRoom) as raised:
        reader.recall("warren", {DAN}, "nowhere", "sailing?", query_vector=SAIL, now=NOW)
    assert raised.value.room_id == "nowhere" and "'nowhere'" in str(raised.value)


def count_touched(url: str | None = None) -> dict[int, int]:
    with store.engine(url).connect() as c:
        return dict(c.execute(select(PM.id, PM.recall_count).where(PM.recall_count > 0)).all())


def test_recall_without_touch_leaves_every_row_as_it_was(db: Engine) -> None:
    """x_recall__mutmut_110: `touch or got` would touch what it returns anyway."""
    talk(db)
    got = reader.recall("warren", {DAN}, "dm", "s", k=2, query_vector=SAIL, now=NOW, touch=False)
    assert got
    assert reader.flush_touches(timeout=10)
    assert count_touched() == {}


def test_recall_stamps_what_it_returns_with_the_moment_it_was_given(db: Engine) -> None:
    """x_recall__mutmut_6: `now` dropped for the store's clock."""
    talk(db)
    got = reader.recall("warren", {DAN}, "dm", "s", k=1, query_vector=SAIL, now=NOW)
    assert reader.flush_touches(timeout=10)
    with store.engine().connect() as c:
        stamp = c.execute(select(PM.last_recalled).where(PM.id == got[0].id)).scalar_one()
    assert stamp == NOW


def test_recall_leaves_out_the_block_the_rooms_topic_built(db: Engine) -> None:
    """Without `block_ids`, the block recall leaves out is built on the room's topic
    (x_recall__mutmut_57: built without it, it would not hold the old row about sailing)."""
    ids = talk(db)
    with store.transaction() as c:
        c.execute(update(t.rooms).where(t.rooms.c.id == "dm").values(topic_embedding=SAIL))
    block = reader.build_block("warren", {DAN}, "dm", now=NOW, touch=False)
    assert ids["sail"] in block.row_ids
    got = reader.recall("warren", {DAN}, "dm", "s", k=3, query_vector=SAIL, now=NOW, touch=False)
    assert got and ids["sail"] not in {r.id for r in got}


def test_recall_reads_embeds_and_touches_the_store_it_is_given(db: Engine, tmp_path: Path) -> None:
    """`url` reaches every step, never the configured store (x_recall__mutmut_49/_50/_51/_111,
    x_embed_query__mutmut_2): the configured store here holds nothing of Warren's and records
    another embedder."""
    with store.transaction() as c:
        store_embedder.check(c, "another-model", 7)
    other = f"sqlite:///{tmp_path / 'other.db'}"
    store.init_db(other)
    try:
        ids = group_of_dan_and_cara(other)
        got = reader.recall(
            "warren", {DAN, CARA}, "group", "A regatta?", k=1, block_ids=(), now=NOW, url=other
        )
        assert [r.id for r in got] == [ids["world"]]
        assert reader.flush_touches(timeout=10)
        assert count_touched(other) == {ids["world"]: 1}
        assert count_touched() == {}
    finally:
        reader.close(timeout=30)
        store.engine(other).dispose()


def test_recall_refuses_a_store_whose_vectors_another_embedder_made(db: Engine) -> None:
    """A cosine between two models' vectors means nothing: the message names both
    (x_embed_query__mutmut_3/_7: the check skipped or turned; _8 to _14: the message)."""
    settings_mod.configure(settings_mod.current().with_(embedder="hashing"))  # restored by `db`
    group_of_dan_and_cara()
    with store.transaction() as c:
        store_embedder.check(c, "another-model", 7)
    with pytest.raises(EmbedderMismatch) as caught:
        reader.recall("warren", {DAN, CARA}, "group", "A regatta?", block_ids=(), now=NOW)
    assert "another-model's (7 dims)" in str(caught.value)
    assert f"embedder is {HashingEmbedder().name} ({HashingEmbedder().dims} dims)" in str(
        caught.value
    )


# --- the write guards ------------------------------------------------------------------------


def test_a_promise_may_cite_its_counterparts_line() -> None:
    """x_evidence_problem__mutmut_11: `counterpart and ""` would refuse Dan's own words."""
    speakers = {1: "u:42", 2: "warren", 3: "u:17"}
    assert guards.evidence_problem("self", "u:42", "warren", [1, 2], speakers) is None
    assert guards.evidence_problem("self", "u:42", "warren", [3], speakers) is not None


def test_each_refusal_of_evidence_says_why() -> None:
    """The reason a candidate was dropped is what a developer reads (x_evidence_problem__mutmut_2
    /_3/_6/_15/_16: the reasons rewritten)."""
    speakers = {1: "u:42", 2: "u:17"}
    assert guards.evidence_problem("u:42", None, "warren", [], speakers) == "cites no line"
    outside = guards.evidence_problem("u:42", None, "warren", [9], speakers)
    assert outside == "cites lines outside this spell"
    assert guards.evidence_problem("self", "u:42", "warren", [2], speakers) == (
        "a self row cites a line that is neither the persona's nor the counterpart's"
    )


def test_a_self_row_without_a_counterpart_counts_towards_no_cap_and_is_dropped() -> None:
    """x_cap_key__mutmut_11 ('u:None' as a cap), x_over_caps__mutmut_17 (None dropped instead of
    the index) and _18 (`break`: the candidates after it escape their cap)."""
    assert guards.cap_key("self", None) is None
    orphan = CandidateOut(subject="self", kind="promise", text="x", importance=9)
    about_dan = [
        CandidateOut(subject="u:42", kind="fact", text=f"u:42 did {i}.", importance=5)
        for i in range(DAILY_CAP_PER_HUMAN + 1)
    ]
    over = guards.over_caps([orphan, *about_dan], {})
    assert over == {0, DAILY_CAP_PER_HUMAN + 1}  # the orphan, and the thirteenth about Dan


def test_rows_written_today_count_towards_their_humans_and_the_worlds_caps() -> None:
    """A promise counts towards its counterpart, a counterpart-less self row towards no one
    (x_counts_by_cap__mutmut_2/_4/_7/_9/_10/_14)."""
    written = [("u:42", None, 3), ("self", "u:42", 2), ("world", None, 1), ("self", None, 5)]
    assert guards.counts_by_cap(written) == {"u:42": 5, "world": 1}


def test_a_line_break_or_a_lower_case_start_after_a_stop_is_two_sentences() -> None:
    """x_is_one_sentence__mutmut_1/_2/_4: a bare \\n or \\r."""
    assert not guards.is_one_sentence("u:42 sails\nand bakes")
    assert not guards.is_one_sentence("u:42 sails\rand bakes")
    assert not guards.is_one_sentence("u:42 sails. he bakes too")


def test_an_abbreviation_or_an_ellipsis_does_not_end_the_check_for_a_later_sentence() -> None:
    """x_is_one_sentence__mutmut_30/_34: `break` where the stop is skipped would wave through
    whatever follows it."""
    assert not guards.is_one_sentence("u:42 met Dr. Wu. He sails.")
    assert not guards.is_one_sentence("u:42 paused... then left. He sails.")


def test_an_ellipsis_before_lower_case_and_an_initial_stay_one_sentence() -> None:
    """x_is_one_sentence__mutmut_17/_18/_20/_33: what follows an ellipsis, misread."""
    assert guards.is_one_sentence("u:42 paused... then sailed on.")
    assert guards.is_one_sentence("u:42 met J. Smith in Qingdao.")
    assert guards.is_one_sentence("u:42 met J. and K. Smith in Qingdao.")


def test_a_human_the_store_knows_is_named_by_any_distinctive_part_of_their_name() -> None:
    """Someone who is not in the room is named by their whole name, however many words it has,
    and by each distinctive part of it (the name normaliser: before it, a first name alone
    named only a room member, and "Cara" in a row of Dan's showed where she was absent)."""
    known = {42: "Dan", 17: "Cara Wu", 9: "Nolan"}
    assert guards.humans_named("u:42 met Cara Wu at the market.", "u:42", None, known) == {17}
    assert guards.humans_named("u:42 met Cara at the market.", "u:42", None, known) == {17}
    assert guards.humans_named("u:42 met Ms Wu there.", "u:42", None, known) == {17}
    assert guards.humans_named("u:42 met Nolan there.", "u:42", None, known) == {9}
    assert guards.humans_named("u:42 met nobody there.", "u:42", None, known) == set()
