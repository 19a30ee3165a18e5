"""The reader end to end on a real SQLite file: blocks, one pass per room, determinism, touch,
a busy writer, import isolation, and the audience rule holding all the way to the block."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, delete, event, insert, select, update

from memory_worker import app_side, reader
from memory_worker.app_side import UnknownRoom
from memory_worker.core import tables as t
from memory_worker.core.audience import Consent, Members, scope_for, visible_memories
from memory_worker.core.constants import KINDS
from memory_worker.core.read_columns import NEVER_WRITTEN, packed, unpacked
from memory_worker.core.rows import Room, Row, human_id, id_json
from memory_worker.core.vectors import quantise
from memory_worker.reader import blocks_for_room, build_block, cache_loader, fill, format_block
from memory_worker.reader import touch as touch_mod
from memory_worker.reader.cache import ReadCache
from memory_worker.storage import read_path, store
from tests.examples import examples

NOW = "2026-12-01T12:00:00+00:00"
DAN, CARA = 42, 17

pytestmark = pytest.mark.store


def add_row(
    conn,  # type: ignore[no-untyped-def]
    persona: str,
    subject: str,
    text: str,
    *,
    kind: str = "fact",
    importance: int = 5,
    witnessed: tuple[int, ...] = (DAN,),
    counterpart: str | None = None,
    valid_from: str | None = None,
    valid_to: str | None = None,
    created: str = "2026-11-20T10:00:00+00:00",
    embedding: bytes | None = None,
) -> int:
    res = conn.execute(
        insert(t.persona_memory).values(
            persona=persona,
            subject=subject,
            counterpart=counterpart,
            witnessed=json.dumps(list(witnessed)),
            room_id="origin",
            kind=kind,
            text=text,
            importance=importance,
            valid_from=valid_from,
            valid_to=valid_to,
            evidence="[1]",
            created=created,
            embedding=embedding,
        )
    )
    return int(res.inserted_primary_key[0])


@pytest.fixture
def cast(db: Engine) -> dict[str, int]:
    """Dan, Cara, Warren and Nolan; a private chat Dan–Warren, a group of all four; rows."""
    with store.transaction() as c:
        app_side.add_user(c, DAN, "Dan")
        app_side.add_user(c, CARA, "Cara")
        c.execute(update(t.users).where(t.users.c.id == DAN).values(memory_note="Call me Dan."))
        app_side.add_persona(c, "warren", "Warren")
        app_side.add_persona(c, "nolan", "Nolan")
        app_side.add_room(c, "origin", "private", ["u:42", "warren"])
        app_side.add_room(c, "dm", "private", ["u:42", "warren"])
        app_side.add_room(c, "group", "group", ["u:42", "u:17", "warren", "nolan"])
        ids = {
            "flat": add_row(
                c, "warren", "u:42", "u:42 owns a flat in Xuhui.", valid_from="2026-07"
            ),
            "shares": add_row(
                c, "warren", "u:42", "u:42 sold his Tesla shares.", witnessed=(DAN, CARA)
            ),
            "letter": add_row(
                c,
                "warren",
                "self",
                "Warren said he would send u:42 the 1988 letter.",
                kind="promise",
                counterpart="u:42",
                importance=7,
            ),
            "interview": add_row(
                c, "warren", "u:42", "u:42 has an interview Thursday.", kind="open_loop"
            ),
            "odyssey": add_row(
                c, "warren", "world", "Nolan's Odyssey opened 2026-07-17.", witnessed=()
            ),
            "pudong": add_row(
                c,
                "warren",
                "u:42",
                "u:42 owned a flat in Pudong.",
                valid_from="2026-01",
                valid_to="2026-07",
            ),
            "nurse": add_row(c, "warren", "u:17", "u:17 is a nurse.", witnessed=(CARA,)),
            "nolan_dan": add_row(c, "nolan", "u:42", "u:42 likes Nolan's films."),
            "nolan_world": add_row(c, "nolan", "world", "Tenet is long.", witnessed=()),
        }
    return ids


def count_memory_selects(eng: Engine) -> list[str]:
    """Collect every SELECT that reads persona_memory on this engine from now on, on the
    caller's thread: what an open costs the app (a cold open's fill runs on its own)."""
    seen: list[str] = []
    caller = threading.get_ident()

    @event.listens_for(eng, "before_cursor_execute")
    def _count(conn, cursor, statement, params, context, executemany):  # type: ignore[no-untyped-def]
        on_path = threading.get_ident() == caller
        if on_path and re.match(r"\s*SELECT\b.*\bFROM persona_memory\b", statement, re.S):
            seen.append(statement)

    return seen


def recall(ids: list[int]) -> dict[int, tuple[str | None, int]]:
    pm = t.persona_memory.c
    with store.transaction() as c:
        found = c.execute(select(pm.id, pm.last_recalled, pm.recall_count).where(pm.id.in_(ids)))
        return {r.id: (r.last_recalled, r.recall_count) for r in found}


# --- blocks -----------------------------------------------------------------------------------


def block_text_cold(persona: str, present: set[int], room: str) -> str:
    """The block as a process that never opened a room would build it."""
    cache_loader.READ_CACHE.clear()
    return build_block(persona, present, room, now=NOW, touch=False).text


def test_a_second_open_reads_no_ranking_columns_and_renders_the_same_bytes(
    cast: dict[str, int], db: Engine
) -> None:
    first = build_block("warren", {DAN}, "dm", now=NOW).text
    assert fill.FILLS.wait(30)  # a cold open's fill lands off the caller's path
    assert reader.flush_touches(timeout=10)  # the touch is in the store and in the cache
    selects = count_memory_selects(db)
    again = build_block("warren", {DAN}, "dm", now=NOW, touch=False).text
    assert selects == [], "the ranking columns, and the winners' rows the cold open kept"
    assert again == block_text_cold("warren", {DAN}, "dm")
    assert first  # the first open built a block, touched its rows and kept the cache true


def test_a_third_open_reads_no_memory_row_at_all_and_renders_the_same_bytes(
    cast: dict[str, int], db: Engine
) -> None:
    build_block("warren", {DAN}, "dm", now=NOW, touch=False)
    assert fill.FILLS.wait(30)
    second = build_block("warren", {DAN}, "dm", now=NOW, touch=False).text
    selects = count_memory_selects(db)
    third = build_block("warren", {DAN}, "dm", now=NOW, touch=False).text
    assert selects == [], "the winners' rows too were kept from the second open"
    assert third == second == block_text_cold("warren", {DAN}, "dm")


def test_the_winners_rows_an_entry_keeps_follow_its_own_touch(
    cast: dict[str, int], db: Engine
) -> None:
    build_block("warren", {DAN}, "dm", now=NOW, touch=False)
    assert fill.FILLS.wait(30)
    block = build_block("warren", {DAN}, "dm", now=NOW)  # keeps the rows, then touches them
    assert reader.flush_touches(timeout=10)
    kept = cache_loader.READ_CACHE.held(str(db.url))["warren"].winners
    assert block.row_ids and set(block.row_ids) <= set(kept)
    assert {i: (kept[i].last_recalled, kept[i].recall_count) for i in block.row_ids} == recall(
        list(block.row_ids)
    ), "as the store has them after the touch"


@pytest.mark.parametrize(
    "change", ["a new row", "a closed row", "a deleted row", "a touch", "a rewritten row"]
)
def test_a_change_made_elsewhere_is_seen_at_the_next_open(
    cast: dict[str, int], db: Engine, change: str
) -> None:
    build_block("warren", {DAN}, "dm", now=NOW, touch=False)  # warm the cache
    assert fill.FILLS.wait(30)  # a cold open's fill lands off the caller's path
    build_block("warren", {DAN}, "dm", now=NOW, touch=False)  # the winners' rows kept too
    pm = t.persona_memory.c
    with store.transaction() as c:  # as another process would: not through the reader
        if change == "a new row":
            add_row(c, "warren", "u:42", "u:42 adopted a dog.", importance=10)
        elif change == "a closed row":
            c.execute(
                update(t.persona_memory)
                .where(pm.id == cast["interview"])
                .values(valid_to="2026-11-30")
            )
        elif change == "a deleted row":
            c.execute(delete(t.persona_memory).where(pm.id == cast["shares"]))
        elif change == "a rewritten row":
            c.execute(
                update(t.persona_memory)
                .where(pm.id == cast["interview"])
                .values(text="u:42 has a second interview on Friday.")
            )
        else:
            c.execute(
                update(t.persona_memory)
                .where(pm.id == cast["flat"])
                .values(last_recalled="2026-12-01T11:00:00+00:00", recall_count=pm.recall_count + 1)
            )
    warm = build_block("warren", {DAN}, "dm", now=NOW, touch=False).text
    assert warm == block_text_cold("warren", {DAN}, "dm")
    if change == "a new row":
        assert "adopted a dog" in warm
    elif change == "a closed row":
        assert "interview" not in warm
    elif change == "a deleted row":
        assert "Tesla" not in warm
    elif change == "a rewritten row":
        assert "second interview on Friday" in warm


def memory_reads(eng: Engine) -> list[tuple[str, object]]:
    """Every SELECT that reads persona_memory on this engine from now on, with its parameters."""
    seen: list[tuple[str, object]] = []

    @event.listens_for(eng, "before_cursor_execute")
    def _note(conn, cursor, statement, params, context, executemany):  # type: ignore[no-untyped-def]
        if re.match(r"\s*SELECT\b.*\bFROM persona_memory\b", statement, re.S):
            seen.append((statement, params))

    return seen


def test_a_process_behind_by_a_few_writes_re_reads_only_the_rows_they_changed(
    cast: dict[str, int], db: Engine
) -> None:
    for i in range(40):  # more than a handful, so "only the changed rows" means something
        with store.transaction() as c:
            add_row(c, "warren", "u:42", f"u:42 mentioned thing {i}.")
    build_block("warren", {DAN}, "dm", now=NOW, touch=False)  # warm the cache
    assert fill.FILLS.wait(30)  # a cold open's fill lands off the caller's path
    pm = t.persona_memory.c
    with store.transaction() as c:  # another process: a new row, a closed one, a deleted one
        add_row(c, "warren", "u:42", "u:42 adopted a dog.", importance=10)
        c.execute(update(t.persona_memory).where(pm.id == cast["interview"]).values(valid_to=NOW))
        c.execute(delete(t.persona_memory).where(pm.id == cast["shares"]))
    reads = memory_reads(db)
    warm = build_block("warren", {DAN}, "dm", now=NOW, touch=False).text
    columns = [(sql, params) for sql, params in reads if "length(" in sql]
    assert len(columns) == 1, "one read of ranking columns"
    listed = re.search(r"persona_memory\.id IN \((.*?)\)(?:\s|$)", columns[0][0], re.S)
    assert listed and listed.group(1).count(",") + 1 == 4, "3 changed rows (an IN list of 4)"
    assert warm == block_text_cold("warren", {DAN}, "dm")
    assert "adopted a dog" in warm and "interview" not in warm and "Tesla" not in warm


def test_a_process_further_behind_than_the_change_log_reads_every_row_again(
    cast: dict[str, int], db: Engine
) -> None:
    build_block("warren", {DAN}, "dm", now=NOW, touch=False)  # warm the cache
    assert fill.FILLS.wait(30)  # a cold open's fill lands off the caller's path
    with store.transaction() as c:
        add_row(c, "warren", "u:42", "u:42 adopted a dog.", importance=10)
        c.execute(delete(t.persona_memory_changes))  # as if pruned past this process's version
    reads = memory_reads(db)
    warm = build_block("warren", {DAN}, "dm", now=NOW, touch=False).text
    columns = [sql for sql, _ in reads if "length(" in sql]
    assert not any("persona_memory.id IN" in sql for sql in columns), "not a patch"
    own = [sql for sql in columns if "persona_memory.subject IN" in sql]
    assert len(own) == 1, "the open read only what this audience can see"
    assert fill.FILLS.wait(30)  # ...and the whole entry again, off the caller's path
    assert any("subject IN" not in sql for sql, _ in reads if "length(" in sql)
    assert warm == block_text_cold("warren", {DAN}, "dm")
    assert "adopted a dog" in warm


def test_a_store_made_anew_at_the_same_url_is_never_ranked_on_what_the_old_one_held(
    cast: dict[str, int], db: Engine
) -> None:
    """Counters that went backwards (a store restored or recreated under a running app) mean
    the cache describes another store: the first open that sees them reads everything again,
    so later writes are patched onto the right rows."""
    for i in range(8):
        with store.transaction() as c:
            add_row(c, "warren", "u:42", f"u:42 mentioned old thing {i}.", importance=9)
    build_block("warren", {DAN}, "dm", now=NOW, touch=False)  # held at the old counter
    assert fill.FILLS.wait(30)
    with store.transaction() as c:  # the same URL, a new store: rows and counters from zero
        for table in (t.persona_memory, t.persona_memory_versions, t.persona_memory_changes):
            c.execute(delete(table))
        add_row(c, "warren", "u:42", "u:42 is new here.")
    assert build_block("warren", {DAN}, "dm", now=NOW, touch=False).text == cold_elsewhere()
    for i in range(20):  # past the old counter: the log now covers it again
        with store.transaction() as c:
            add_row(c, "warren", "u:42", f"u:42 mentioned new thing {i}.", importance=3)
    warm = build_block("warren", {DAN}, "dm", now=NOW, touch=False).text
    assert warm == cold_elsewhere()
    assert "new thing" in warm


def cold_elsewhere() -> str:
    """Warren's block in the dm as a process with an empty cache builds it; this one's kept."""
    saved, cache_loader.READ_CACHE = cache_loader.READ_CACHE, ReadCache()
    try:
        return build_block("warren", {DAN}, "dm", now=NOW, touch=False).text
    finally:
        cache_loader.READ_CACHE = saved


def test_the_readers_own_touch_keeps_the_cache_true_to_the_store(
    cast: dict[str, int], db: Engine
) -> None:
    cache_loader.READ_CACHE.clear()
    selects = count_memory_selects(db)
    for day in range(2, 7):
        build_block("warren", {DAN}, "dm", now=f"2026-12-0{day}T09:00:00+00:00")  # touches
        assert fill.FILLS.wait(30) and reader.flush_touches(timeout=10)
        later = f"2026-12-0{day}T21:00:00+00:00"
        before = len(selects)
        warm = build_block("warren", {DAN}, "dm", now=later, touch=False).text
        read = selects[before:]
        assert all("NULL AS embedding" in q for q in read), (
            "the touch updated the cache: still a hit, at most the winners' rows read"
        )
        cache_loader.READ_CACHE.clear()
        assert warm == build_block("warren", {DAN}, "dm", now=later, touch=False).text


def test_warren_gets_what_he_knows_about_dan_in_their_private_chat(cast: dict[str, int]) -> None:
    block = build_block("warren", {DAN}, "dm", now=NOW)
    want = {cast[k] for k in ("flat", "shares", "letter", "interview", "odyssey")}
    assert set(block.row_ids) == want
    assert set(block.row_ids_by_human["u:42"]) == want - {cast["odyssey"]}
    assert block.row_ids_by_human["world"] == (cast["odyssey"],)
    assert "Dan (u:42)" in block.text and "Call me Dan." in block.text
    assert "- u:42 owns a flat in Xuhui. (told one-to-one · since 2026-07)" in block.text
    assert "- u:42 has an interview Thursday. (told one-to-one · open loop)" in block.text
    assert "- u:42 sold his Tesla shares." + "\n" in block.text  # formed in a group: no tag
    assert block.text.startswith(f"Warren's memory · {block.chars_current}/1200 chars")
    assert "u:17" not in block.text and "Pudong" not in block.text


def test_blocks_for_room_builds_every_persona_member_from_one_query_over_their_rows(
    cast: dict[str, int], db: Engine
) -> None:
    with store.transaction() as c:
        app_side.add_persona(c, "cleo", "Cleo")
        app_side.add_room(c, "trio", "private", ["u:42", "warren", "nolan", "cleo"])
    cache_loader.READ_CACHE.clear()
    selects = count_memory_selects(db)
    blocks = blocks_for_room("trio", {DAN}, now=NOW)
    assert sorted(blocks) == ["cleo", "nolan", "warren"]
    assert len(selects) == 2, "one query for all candidates, one for the winners' full rows"
    assert set(blocks["nolan"].row_ids) == {cast["nolan_dan"], cast["nolan_world"]}
    assert (
        blocks["cleo"].text
        == "Cleo's memory · 0/1200 chars\n\nDan (u:42)\n"
        + ("Dan's own note, in their words: Call me Dan.\n\n")
        + blocks["cleo"].text.split("\n\n")[-1]
    )
    assert blocks["warren"].text == build_block("warren", {DAN}, "trio", now=NOW).text


def test_a_group_room_gives_every_persona_world_facts_only(cast: dict[str, int]) -> None:
    blocks = blocks_for_room("group", {DAN, CARA}, now=NOW)
    assert blocks["warren"].row_ids == (cast["odyssey"],)
    assert blocks["nolan"].row_ids == (cast["nolan_world"],)
    assert "Call me Dan." not in blocks["warren"].text, "nothing personal in a group under v1"


def test_a_mute_hides_dan_from_that_persona_and_no_other(cast: dict[str, int]) -> None:
    with store.transaction() as c:
        app_side.add_room(c, "both", "private", ["u:42", "warren", "nolan"])
        c.execute(insert(t.persona_memory_mute).values(user_id=DAN, persona="warren"))
    blocks = blocks_for_room("both", {DAN}, now=NOW)
    assert blocks["warren"].row_ids == (cast["odyssey"],), "no rows about Dan, no promise to him"
    assert "Call me Dan." not in blocks["warren"].text
    assert set(blocks["nolan"].row_ids) == {cast["nolan_dan"], cast["nolan_world"]}


def test_memory_off_hides_dan_from_every_persona(cast: dict[str, int]) -> None:
    with store.transaction() as c:
        c.execute(update(t.users).where(t.users.c.id == DAN).values(memory_on=0))
    assert build_block("warren", {DAN}, "dm", now=NOW).row_ids == (cast["odyssey"],)


def test_an_incognito_room_gets_empty_blocks_without_reading_a_memory(
    cast: dict[str, int], db: Engine
) -> None:
    with store.transaction() as c:
        app_side.add_room(c, "secret", "private", ["u:42", "warren"], incognito=True)
    selects = count_memory_selects(db)
    block = blocks_for_room("secret", {DAN}, now=NOW)["warren"]
    assert block.text == "" and block.row_ids == () and not selects


def test_a_closed_row_never_reaches_a_block(cast: dict[str, int]) -> None:
    with store.transaction() as c:
        c.execute(
            update(t.persona_memory)
            .where(t.persona_memory.c.id == cast["flat"])
            .values(valid_to="2026-11-30")
        )
    block = build_block("warren", {DAN}, "dm", now=NOW)
    assert cast["flat"] not in block.row_ids and cast["pudong"] not in block.row_ids


def test_the_rooms_topic_vector_reorders_the_block(db: Engine) -> None:
    with store.transaction() as c:
        app_side.add_user(c, DAN, "Dan")
        app_side.add_room(c, "talk", "private", ["u:42", "warren"])
        first = add_row(c, "warren", "u:42", "u:42 sails.", embedding=quantise([1.0, 0.0]))
        second = add_row(c, "warren", "u:42", "u:42 bakes.", embedding=quantise([0.0, 1.0]))
    assert build_block("warren", {DAN}, "talk", now=NOW, touch=False).row_ids == (first, second)
    with store.transaction() as c:
        c.execute(update(t.rooms).values(topic_embedding=quantise([0.1, 1.0])))
    assert build_block("warren", {DAN}, "talk", now=NOW, touch=False).row_ids == (second, first)


def test_a_memory_recalled_lately_outranks_a_newer_one_never_recalled(db: Engine) -> None:
    with store.transaction() as c:
        app_side.add_user(c, DAN, "Dan")
        app_side.add_room(c, "talk", "private", ["u:42", "warren"])
        old = add_row(c, "warren", "u:42", "u:42 sails.", created="2026-01-05T10:00:00+00:00")
        newer = add_row(c, "warren", "u:42", "u:42 bakes.", created="2026-10-01T10:00:00+00:00")
        c.execute(
            update(t.persona_memory)
            .where(t.persona_memory.c.id == old)
            .values(last_recalled="2026-11-30T10:00:00+00:00")
        )
    assert build_block("warren", {DAN}, "talk", now=NOW, touch=False).row_ids == (old, newer)


def test_a_row_with_an_unreadable_timestamp_still_builds_and_ranks_as_old(db: Engine) -> None:
    with store.transaction() as c:
        app_side.add_user(c, DAN, "Dan")
        app_side.add_room(c, "talk", "private", ["u:42", "warren"])
        broken = add_row(c, "warren", "u:42", "u:42 sails.", importance=9, created="someday")
        fine = add_row(c, "warren", "u:42", "u:42 bakes.", importance=9)
    assert build_block("warren", {DAN}, "talk", now=NOW, touch=False).row_ids == (fine, broken)


def test_the_same_store_at_the_same_time_renders_identical_bytes(cast: dict[str, int]) -> None:
    first = build_block("warren", {DAN}, "dm", now=NOW, touch=False)
    again = build_block("warren", {DAN}, "dm", now=NOW, touch=False)
    assert first.text == again.text and first.row_ids == again.row_ids
    touched = build_block("warren", {DAN}, "dm", now=NOW)
    assert touched.text == first.text, "touching happens after rendering"


def test_an_unknown_room_raises_a_clear_error(cast: dict[str, int]) -> None:
    with pytest.raises(UnknownRoom, match="no-such-room"):
        build_block("warren", {DAN}, "no-such-room", now=NOW)
    with pytest.raises(UnknownRoom):
        blocks_for_room("no-such-room", {DAN}, now=NOW)


def test_a_small_store_loads_every_row_the_rule_admits_tagging_one_to_one_ones(
    cast: dict[str, int],
) -> None:
    block = build_block("warren", {DAN}, "dm", now=NOW, touch=False)
    want = {cast[k] for k in ("flat", "shares", "letter", "interview", "odyssey")}
    assert set(block.row_ids) == want
    lines = block.text.splitlines()
    tagged = {ln for ln in lines if ln.startswith("- ") and "told one-to-one" in ln}
    assert {ln.split(" (")[0] for ln in tagged} == {
        "- u:42 owns a flat in Xuhui.",
        "- u:42 has an interview Thursday.",
    }


def test_format_block_prints_the_meter_once_and_the_text(cast: dict[str, int]) -> None:
    block = build_block("warren", {DAN}, "dm", now=NOW, touch=False)
    out = format_block(block)
    assert out.splitlines()[0] == "── warren · 5 rows ──"
    assert out.count("/1200 chars") == 1 and "touched" not in out
    assert out.endswith(block.text)
    empty = build_block("warren", set(), "group", now=NOW, touch=False)
    assert "world" in empty.row_ids_by_human and "(empty" not in format_block(empty)


# --- touch ------------------------------------------------------------------------------------


def test_touch_sets_last_recalled_and_bumps_recall_count_for_loaded_rows_only(
    cast: dict[str, int],
) -> None:
    block = build_block("warren", {DAN}, "dm", now=NOW)
    assert block.touched
    assert reader.flush_touches(timeout=10)
    after = recall(list(cast.values()))
    for name, i in cast.items():
        assert after[i] == ((NOW, 1) if i in block.row_ids else (None, 0)), name
    build_block("warren", {DAN}, "dm", now="2026-12-02T08:00:00+00:00")
    assert reader.flush_touches(timeout=10)
    assert recall([cast["flat"]])[cast["flat"]] == ("2026-12-02T08:00:00+00:00", 2)


def test_no_touch_leaves_the_store_alone(cast: dict[str, int]) -> None:
    block = build_block("warren", {DAN}, "dm", now=NOW, touch=False)
    assert not block.touched
    assert all(v == (None, 0) for v in recall(list(block.row_ids)).values())


def test_a_held_writer_lock_neither_fails_nor_delays_the_read_and_the_touch_lands_after(
    cast: dict[str, int], db: Engine
) -> None:
    if not store.is_sqlite(db):
        pytest.skip("the SQLite writer lock")
    writer = sqlite3.connect(db.url.database, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # what the commit step holds while it writes
    try:
        start = time.perf_counter()
        block = build_block("warren", {DAN}, "dm", now=NOW)
        elapsed_ms = (time.perf_counter() - start) * 1000
        assert not reader.flush_touches(timeout=0.3), "the touch waits for the writer"
        assert all(v == (None, 0) for v in recall_raw(writer, block.row_ids).values())
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    print(f"read under a held writer lock: {elapsed_ms:.1f} ms")
    assert len(block.row_ids) == 5 and block.touched
    # Waiting for the lock would take the whole busy timeout: any read under it did not wait.
    assert elapsed_ms < store.SQLITE_BUSY_TIMEOUT_MS, "it did not wait out the busy timeout"
    assert reader.flush_touches(timeout=10)
    assert all(v == (NOW, 1) for v in recall(list(block.row_ids)).values()), "the promise kept"


def recall_raw(conn: sqlite3.Connection, ids: tuple[int, ...]) -> dict[int, tuple]:
    """last_recalled and recall_count as a connection outside SQLAlchemy reads them."""
    marks = ",".join("?" * len(ids))
    found = conn.execute(
        f"SELECT id, last_recalled, recall_count FROM persona_memory WHERE id IN ({marks})", ids
    )
    return {i: (lr, rc) for i, lr, rc in found}


def test_on_postgresql_a_writer_holding_the_rows_neither_fails_nor_delays_the_read(
    cast: dict[str, int], db: Engine
) -> None:
    if store.is_sqlite(db):
        pytest.skip("PostgreSQL row locks")
    with db.connect() as writer, writer.begin():
        writer.execute(select(t.persona_memory.c.id).with_for_update())  # lock every row
        start = time.perf_counter()
        block = build_block("warren", {DAN}, "dm", now=NOW)
        elapsed_ms = (time.perf_counter() - start) * 1000
    print(f"read under held row locks: {elapsed_ms:.1f} ms")
    assert len(block.row_ids) == 5 and block.touched
    assert elapsed_ms < store.SQLITE_BUSY_TIMEOUT_MS  # the lock timeout (read_path): not waited
    assert reader.flush_touches(timeout=10)
    assert all(v == (NOW, 1) for v in recall(list(block.row_ids)).values())


def test_a_failing_touch_never_fails_the_read_and_is_given_up_by_count(
    cast: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: object) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(read_path, "touch", broken)
    monkeypatch.setattr(touch_mod, "RETRY_PAUSE_S", 0.01)
    dropped = touch_mod.TOUCHES.dropped
    block = build_block("warren", {DAN}, "dm", now=NOW)
    assert len(block.row_ids) == 5
    assert reader.flush_touches(timeout=10)
    assert touch_mod.TOUCHES.dropped == dropped + 1
    assert all(v == (None, 0) for v in recall(list(block.row_ids)).values())


# --- isolation --------------------------------------------------------------------------------


def test_the_reader_imports_no_celery_redis_or_model_sdk() -> None:
    forbidden = ("celery", "redis", "kombu", "google.genai", "memory_worker.models")
    code = (
        "import sys, memory_worker.reader\n"
        f"bad = sorted(m for m in sys.modules if any(m == f or m.startswith(f + '.') "
        f"for f in {forbidden!r}))\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, f"memory_worker.reader pulled in {done.stdout.strip()}"


# --- the audience rule, all the way to the block ----------------------------------------------

PERSONAS = ("warren", "nolan")
HUMANS = (17, 42, 58)


@pytest.fixture(scope="module")
def shared_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One store for the property tests below (hypothesis reuses it, rows reset per example)."""
    url = f"sqlite:///{Path(tmp_path_factory.mktemp('prop')) / 'memory.db'}"
    store.init_db(url)
    with store.transaction(url) as c:
        for u in HUMANS:
            app_side.add_user(c, u, f"H{u}")
        for p in PERSONAS:
            app_side.add_persona(c, p, p.title())
    yield url
    store.engine(url).dispose()


row_specs = st.tuples(
    st.sampled_from(PERSONAS),
    st.sampled_from(["world", "self", *(f"u:{u}" for u in HUMANS)]),
    st.sampled_from(HUMANS),  # counterpart, for self rows
    st.sets(st.sampled_from(HUMANS), max_size=2),
    st.sampled_from(KINDS),
    st.integers(1, 10),
    st.booleans(),  # closed
    st.sets(st.sampled_from(HUMANS), max_size=2),  # named besides whom it concerns
    st.none() | st.sets(st.sampled_from(HUMANS), min_size=1, max_size=2),  # a world row's sources
)
worlds = st.tuples(
    st.lists(row_specs, max_size=25),
    st.sets(st.sampled_from(HUMANS), max_size=3),  # present (the app's word)
    st.sampled_from(["private", "group"]),
    st.sampled_from([False, False, False, True]),  # incognito, now and then
    st.dictionaries(st.sampled_from(HUMANS), st.booleans()),  # memory_on (missing: on)
    st.sets(st.tuples(st.sampled_from(HUMANS), st.sampled_from(PERSONAS)), max_size=2),  # mutes
    st.none() | st.sets(st.sampled_from(HUMANS), max_size=3),  # members (None: the present)
    st.sets(st.sampled_from(PERSONAS), min_size=1),  # persona members
    # "bring up what I told you privately when I'm in a group" off (the group scope)
    st.sets(st.tuples(st.sampled_from(HUMANS), st.sampled_from(PERSONAS)), max_size=2),
)


@dataclass(frozen=True)
class World:
    present: set[int]
    room: Room
    consent: Consent
    members: Members
    rows: list[Row]

    def allowed(self, persona: str, proven: bool = True) -> list[Row]:
        """What the audience rule, with the room's membership, lets `persona` see here."""
        return visible_memories(
            persona,
            self.present,
            self.room,
            self.rows,
            self.consent,
            members=self.members,
            proven_scope=proven,
        )


def load_world(url: str, world: tuple) -> World:  # type: ignore[type-arg]
    """The drawn world in the store: a room "r" whose members may not be who the app says is
    present (a stranger present, a member absent), rows that name humans, private world rows."""
    specs, present, kind, incognito, memory_on, mutes, humans, personas, stays_private = world
    humans = set(present) if humans is None else humans
    with store.transaction(url) as c:
        kept = t.persona_memory_stays_private
        for table in (t.persona_memory, t.persona_memory_mute, kept, t.room_members, t.rooms):
            c.execute(delete(table))
        app_side.add_room(c, "r", kind, [*(f"u:{u}" for u in sorted(humans)), *sorted(personas)])
        c.execute(update(t.rooms).values(incognito=int(incognito)))
        for u in HUMANS:
            on = memory_on.get(u, True)
            c.execute(update(t.users).where(t.users.c.id == u).values(memory_on=int(on)))
        for u, p in mutes:
            c.execute(insert(t.persona_memory_mute).values(user_id=u, persona=p))
        for u, p in stays_private:
            c.execute(insert(kept).values(user_id=u, persona=p))
        for persona, subject, cp, witnessed, kind_, imp, closed, named, sources in specs:
            row_id = add_row(
                c,
                persona,
                subject,
                f"{subject} thing",
                kind=kind_,
                importance=imp,
                witnessed=tuple(sorted(witnessed)),
                counterpart=f"u:{cp}" if subject == "self" else None,
                valid_to="2026-11-01" if closed else None,
            )
            private = sources if subject == "world" else None
            c.execute(
                update(t.persona_memory)
                .where(t.persona_memory.c.id == row_id)
                .values(named=id_json(named) if named else None, private_to=id_json(private))
            )
        rows = [Row.from_mapping(m) for m in c.execute(select(t.persona_memory)).mappings()]
    consent = Consent(
        memory_on={u: memory_on.get(u, True) for u in HUMANS},
        mutes=frozenset(mutes),
        stays_private=frozenset(stays_private),
    )
    room = Room(id="r", kind=kind, incognito=incognito)
    return World(set(present), room, consent, Members(frozenset(humans), frozenset(personas)), rows)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds)
def test_no_row_about_an_absent_muted_or_memory_off_human_ever_reaches_a_block(
    shared_url: str,
    world: tuple,  # type: ignore[type-arg]
) -> None:
    w = load_world(shared_url, world)
    by_id = {r.id: r for r in w.rows}
    present, room, consent = w.present, w.room, w.consent
    blocks = blocks_for_room("r", present, now=NOW, url=shared_url, touch=False)
    assert set(blocks) == set(w.members.personas)
    for persona, block in blocks.items():
        assert set(block.row_ids) <= {r.id for r in w.allowed(persona)}
        audience = present & w.members.humans
        for i in block.row_ids:
            r = by_id[i]
            assert r.persona == persona and r.valid_to is None
            assert set(r.named) <= audience
            if r.private_to is not None:
                assert set(r.private_to) & audience
            about = human_id(r.counterpart or "") if r.subject == "self" else human_id(r.subject)
            if r.subject != "world":
                assert about in audience and consent.allows(about, persona)
                assert room.kind == "private" and present == {about} and not room.incognito


def visible_ids(url: str, scope) -> set[int]:  # type: ignore[no-untyped-def]
    """The rows the reader's audience index selects from the persona's cached columns."""
    with store.engine(url).connect() as c:
        rows = cache_loader.columns_of(read_path.open_rows(c, [scope.persona]), NEVER_WRITTEN)
    return set(rows.ids[cache_loader.visible_index(rows, scope)].tolist())


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds)
def test_the_readers_audience_index_selects_exactly_what_the_rule_admits(
    shared_url: str,
    world: tuple,  # type: ignore[type-arg]
) -> None:
    w = load_world(shared_url, world)
    for persona in PERSONAS:
        for proven in (True, False):
            scope = scope_for(
                persona, w.present, w.room, w.consent, members=w.members, proven_scope=proven
            )
            got, allowed = (
                visible_ids(shared_url, scope),
                {r.id for r in w.allowed(persona, proven)},
            )
            if scope.guarded:
                # the group scope in a group: the index leaves out what it can tell from its
                # columns (one-to-one rows of a present keeper); the gate every winner passes
                # decides the rest (whom a row was formed with, and who has left a world row)
                assert got >= allowed
            else:
                assert got == allowed


def test_the_audience_index_for_dan_skips_promises_to_anyone_else(shared_url: str) -> None:
    specs = [
        ("warren", "self", DAN, set(), "promise", 5, False),
        ("warren", "self", CARA, set(), "promise", 5, False),
        ("warren", "u:17", DAN, {CARA}, "fact", 5, False),
        ("warren", "world", DAN, set(), "event", 5, False),
    ]
    specs = [(*spec, set(), None) for spec in specs]
    world = (specs, {DAN}, "private", False, {}, set(), None, set(PERSONAS), set())
    w = load_world(shared_url, world)
    got = visible_ids(
        shared_url, scope_for("warren", w.present, w.room, w.consent, members=w.members)
    )
    by_id = {r.id: (r.subject, r.counterpart) for r in w.rows}
    assert sorted((by_id[i] for i in got), key=str) == [("self", "u:42"), ("world", None)]


def test_under_the_group_scope_the_audience_index_leaves_out_what_a_human_keeps_private(
    shared_url: str,
) -> None:
    """Dan keeps what he told warren one-to-one out of groups: the index must leave those rows
    out before the take, or the gate drops them after it and the block comes out short."""
    specs = [  # persona, subject, counterpart, witnessed, kind, importance, closed, named, sources
        ("warren", "u:42", DAN, {DAN}, "fact", 5, False, set(), None),  # Dan's, one-to-one
        ("warren", "u:42", DAN, {DAN, CARA}, "fact", 5, False, set(), None),  # said in company
        ("warren", "self", DAN, {DAN}, "promise", 5, False, set(), None),  # promised him alone
        ("warren", "world", DAN, {DAN}, "event", 5, False, set(), {DAN}),  # his, one-to-one
        ("warren", "u:17", DAN, {CARA}, "fact", 5, False, set(), None),  # Cara's: she said nothing
    ]
    world = (specs, {DAN, CARA}, "group", False, {}, set(), None, set(PERSONAS), {(DAN, "warren")})
    w = load_world(shared_url, world)
    scope = scope_for("warren", w.present, w.room, w.consent, members=w.members, proven_scope=False)
    assert scope.private_only == {DAN}
    got = visible_ids(shared_url, scope)
    assert got == {r.id for r in w.allowed("warren", proven=False)}
    seen = sorted((r.subject, tuple(r.witnessed)) for r in w.rows if r.id in got)
    assert seen == [("u:17", (CARA,)), ("u:42", (CARA, DAN))]
    with store.engine(shared_url).connect() as c:  # a cold open's pack knows it too
        rows = cache_loader.columns_of(read_path.open_rows(c, ["warren"]), NEVER_WRITTEN)
    again = unpacked(packed(rows), NEVER_WRITTEN)
    assert again.alone.tolist() == rows.alone.tolist() == [1, 0, 1, 1, 1]
    assert again.ids[cache_loader.visible_index(again, scope)].tolist() == sorted(got)


def test_after_prepare_a_processs_first_open_pays_nothing_prepare_could_have_paid(
    cast: dict[str, int], db: Engine
) -> None:
    """`reader.prepare` at an app's start: the first room open then parses no settings,
    builds no engine and compiles no statement (a fresh process's first open at 1k rows cost
    5x the floor: settings read from the environment, the engine built). Importing the
    reader compiles nothing at all."""
    code = f"""
import sys, threading
from memory_worker.core import settings
from memory_worker.storage import prepared, store
paid = []
real_compile, real_env = prepared.Prepared._compile, settings.Settings.from_env
real_engine = store._build_engine
def compiling(self, dialect, sizes):
    if (dialect.name, dialect.paramstyle, sizes) not in self._compiled:
        if threading.current_thread() is threading.main_thread():  # the open's own path
            paid.append(("compiled", self._build.__qualname__, sizes))
    return real_compile(self, dialect, sizes)
def parsing(*a, **k):
    paid.append(("settings parsed",))
    return real_env(*a, **k)
def building(url):
    paid.append(("engine built",))
    return real_engine(url)
prepared.Prepared._compile = compiling
settings.Settings.from_env = parsing
store._build_engine = building
from memory_worker import reader
imported = [p for p in paid if p[0] == "compiled"]
reader.prepare({str(db.url)!r})
paid.clear()
block = reader.build_block("warren", {{{DAN}}}, "dm", now={NOW!r}, url={str(db.url)!r}, touch=False)
reader.close(timeout=30)
print(len(imported), len(paid), len(block.row_ids), imported, paid, file=sys.stderr)
print(len(imported), len(paid), len(block.row_ids))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    imported, paid, rows = map(int, out.stdout.split())
    assert rows > 0 and imported == 0 and paid == 0, out.stderr


def test_ids_past_32_bits_rank_and_render_as_any_other(db: Engine) -> None:
    """An entry holds ids in 32 bits while they fit (fewer bytes a row), and in 64 once one
    does not: a human and a row numbered past 2**31 load, warm and cold alike."""
    if not store.is_sqlite(db):
        pytest.skip("PostgreSQL's integer ids are 32 bits: they always fit")
    big = 2**33 + 7
    with store.transaction() as c:
        app_side.add_user(c, big, "Bea")
        app_side.add_persona(c, "warren", "Warren")
        app_side.add_room(c, "dm-bea", "private", [f"u:{big}", "warren"])
        add_row(c, "warren", f"u:{big}", f"u:{big} keeps bees.", witnessed=(big,))
        c.execute(
            insert(t.persona_memory).values(
                id=2**33,
                persona="warren",
                subject=f"u:{big}",
                witnessed=json.dumps([big]),
                room_id="origin",
                kind="fact",
                text=f"u:{big} sells honey.",
                importance=9,
                evidence="[1]",
                created="2026-11-21T10:00:00+00:00",
            )
        )
    cold = build_block("warren", {big}, "dm-bea", now=NOW, touch=False)
    assert fill.FILLS.wait(30)
    warm = build_block("warren", {big}, "dm-bea", now=NOW, touch=False)
    assert "sells honey" in cold.text and "keeps bees" in cold.text and warm.text == cold.text
    held = cache_loader.READ_CACHE.held(str(db.url))["warren"]
    assert held.ids.dtype == held.groups.dtype == np.int64
