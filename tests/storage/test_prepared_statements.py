"""The write path's prepared statements store and read exactly what SQLAlchemy's
typed statements would: the same bytes and storage types, the same rows, the same answers at
the edges (an empty audience, a cursor that must not move back, an outcome overwritten, an id
list too long to prepare)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Connection, Engine, insert, select

from memory_worker.core import tables as t
from memory_worker.core.audience import Scope
from memory_worker.core.rows import Candidate, Spell
from memory_worker.storage import embedder, memories, notices, spells, store
from memory_worker.storage.prepared import PREPARED_IN_MAX

pytestmark = pytest.mark.store

NOW, LATER = "2026-08-18T10:00:00+00:00", "2026-08-18T11:00:00+00:00"
VECTOR = bytes(range(256)) + b"\x00\xff"  # int8 bytes, a NUL and 0xff among them
pm = t.persona_memory.c


def _cells(conn: Connection, table: str, where: str, columns: list[str]) -> list[Any]:
    """Each column's value and, on SQLite, its storage class: what the file holds."""
    if store.is_sqlite(conn):
        listed = ", ".join(f"{c}, typeof({c})" for c in columns)
    else:
        listed = ", ".join(f"{c}, pg_typeof({c})::text" for c in columns)
    found = conn.exec_driver_sql(f"SELECT {listed} FROM {table} WHERE {where}").one()
    return [bytes(v) if isinstance(v, memoryview) else v for v in found]


def _row_by_core(conn: Connection, **values: Any) -> int:
    """A row as SQLAlchemy's typed insert writes it (insert_row's statement, unprepared)."""
    new = insert(t.persona_memory).values(
        valid_to=None, closed_by=None, last_recalled=None, recall_count=0, **values
    )
    return int(conn.execute(new.returning(pm.id)).scalar_one())


def test_insert_row_stores_what_a_typed_insert_stores(db: Engine) -> None:
    columns = [c.name for c in t.persona_memory.c if c.name != "id"]
    cand = Candidate("self", "promise", "I'll ask about the exam.", 7, (3, 1), "2026-08-20", "u:2")
    with store.transaction() as conn:
        ours = memories.insert_row(
            conn,
            persona="warren",
            room_id="dm",
            witnessed=[2, 1],
            candidate=cand,
            embedding=VECTOR,
            now=NOW,
        )
        theirs = _row_by_core(
            conn,
            persona="warren",
            subject="self",
            counterpart="u:2",
            witnessed="[1, 2]",
            room_id="dm",
            kind="promise",
            text="I'll ask about the exam.",
            importance=7,
            valid_from="2026-08-20",
            evidence="[3, 1]",
            created=NOW,
            embedding=VECTOR,
            sentence_key="i'll ask about the exam.",  # every sign counts (0022)
        )
        assert _cells(conn, "persona_memory", f"id = {ours}", columns) == _cells(
            conn, "persona_memory", f"id = {theirs}", columns
        )
        no_vector = memories.insert_row(
            conn,
            persona="warren",
            room_id="dm",
            witnessed=[],
            candidate=Candidate("world", "fact", "Bees swarm in May.", 3, ()),
            embedding=None,
            now=NOW,
        )
        got = _cells(conn, "persona_memory", f"id = {no_vector}", ["embedding", "valid_from"])
        assert got[0] is None and got[2] is None
        rows = memories.rows_by_id(conn, [theirs, ours, no_vector, 10**6])
        assert list(rows) == sorted([ours, theirs, no_vector])
        assert rows[ours].embedding == VECTOR and type(rows[ours].embedding) is bytes
        assert rows[ours] == rows[ours].__class__(**{**vars(rows[theirs]), "id": ours})
        assert rows[no_vector].embedding is None


def test_rows_by_id_long_lists_and_audiences_read_the_same(db: Engine) -> None:
    base = dict(
        persona="warren",
        room_id="dm",
        kind="fact",
        importance=5,
        valid_from=None,
        evidence="[1]",
        created=NOW,
        embedding=VECTOR,
        counterpart=None,
        witnessed="[1]",
    )
    with store.transaction() as conn:
        ids = [
            _row_by_core(conn, **base, subject="world" if i % 3 == 0 else "u:1", text=f"t{i}")
            for i in range(PREPARED_IN_MAX + 6)
        ]
        world = ids[0]
        memories.set_audience(conn, world, [3, 1, 3])
        memories.set_audience(conn, ids[3], [2])
        short = memories.rows_by_id(conn, ids[:5])
        long = memories.rows_by_id(conn, ids[::-1])  # past PREPARED_IN_MAX: built per call
        assert list(short) == ids[:5] and list(long) == ids
        assert all(short[i] == long[i] for i in short)
        assert short[world].private_to == (1, 3) and short[ids[3]].private_to == (2,)
        assert short[ids[1]].private_to is None
        memories.set_audience(conn, world, [1], was=[1, 3])
        held = select(t.memory_audience.c.row_id, t.memory_audience.c.user_id)
        assert sorted(conn.execute(held).all()) == [(world, 1), (ids[3], 2)]


def test_the_audience_rule_holds_for_no_one_present_and_for_many(db: Engine) -> None:
    rows = [
        ("u:1", None),
        ("u:2", None),
        ("self", "u:1"),
        ("self", "u:9"),
        ("self", None),  # a promise with no counterpart: no present set allows it
        ("world", None),
    ]
    with store.transaction() as conn:
        made = {}
        for i, (subject, cp) in enumerate(rows):
            c = Candidate(subject, "fact", f"{subject} {cp} {i}", i, (1,), counterpart=cp)
            made[(subject, cp)] = memories.insert_row(
                conn,
                persona="warren",
                room_id="dm",
                witnessed=[1],
                candidate=c,
                embedding=VECTOR,
                now=NOW,
            )
        every = {s for s, _ in rows}

        def pool(present: list[int]) -> list[int]:
            scope = Scope("warren", True, frozenset(present))
            return [r.id for r in memories.open_rows(conn, scope, every)]

        assert pool([]) == [made[("world", None)]]
        assert pool([1]) == sorted(
            made[k] for k in [("u:1", None), ("self", "u:1"), ("world", None)]
        )
        many = [1, 2, 3, 4, 5]  # five refs: padded to eight
        assert pool(many) == sorted(
            made[k] for k in [("u:1", None), ("u:2", None), ("self", "u:1"), ("world", None)]
        )

        def known(humans: list[int], limit: int) -> list[str]:
            return memories.known_texts(conn, Scope("warren", True, frozenset(humans)), limit)

        assert known([], 10) == [f"world None {len(rows) - 1}"]
        texts = known(many, 10)
        assert texts == ["world None 5", "self u:1 2", "u:2 None 1", "u:1 None 0"]
        assert known(many, 2) == texts[:2]
        assert memories.open_rows(conn, Scope("warren", True, frozenset([1])), []) == []
        (first,) = memories.open_rows(conn, Scope("warren", True, frozenset([1])), ["u:1"])
        assert first.embedding == VECTOR and type(first.embedding) is bytes
        memories.close(conn, made[("u:1", None)], "2026-08-19", None)
        memories.close(conn, made[("u:1", None)], "2026-08-30", 7)  # closed: no change
        assert memories.open_rows(conn, Scope("warren", True, frozenset([1])), ["u:1"]) == []
        closed = memories.rows_by_id(conn, [made[("u:1", None)]])[made[("u:1", None)]]
        assert (closed.valid_to, closed.closed_by) == ("2026-08-19", None)
        counted = {(s, cp, 1) for s, cp in rows if s != "self" or cp == "u:1"}
        assert set(memories.written_since(conn, "warren", NOW, [1, 2])) == counted
        assert set(memories.written_since(conn, "warren", NOW, [])) == {("world", None, 1)}
        assert set(memories.written_since(conn, "warren", NOW, [9])) == {
            ("self", "u:9", 1),
            ("world", None, 1),
        }
        assert memories.written_since(conn, "warren", LATER, [1, 2]) == []


def test_the_cursor_only_moves_forward_and_keeps_its_stamp_otherwise(db: Engine) -> None:
    c = t.cursors.c
    with store.transaction() as conn:

        def held() -> list[Any]:
            return _cells(conn, "cursors", "persona = 'warren'", ["last_line_id", "updated"])

        assert spells.cursor(conn, "warren", "dm") == 0
        spells.advance_cursor(conn, "warren", "dm", 5, NOW)
        assert spells.cursor(conn, "warren", "dm") == 5
        first = held()
        spells.advance_cursor(conn, "warren", "dm", 3, LATER)  # an older spell, late
        spells.advance_cursor(conn, "warren", "dm", 5, LATER)  # the same line again
        assert held() == first
        spells.advance_cursor(conn, "warren", "dm", 9, LATER)
        assert conn.execute(select(c.last_line_id, c.updated)).all() == [(9, LATER)]
        assert held()[1] == "integer"
        assert spells.cursor(conn, "warren", "other") == 0


def test_an_outcome_is_written_then_overwritten_under_its_key(db: Engine) -> None:
    columns = [c.name for c in t.spells.c]
    spell = Spell("warren", "dm", 0, 7, tokens_in=120, tokens_out=30, dropped={"cap": 1, "a": 2})
    with store.transaction() as conn:
        assert spells.outcome(conn, spell) is None
        spells.record(conn, spell, "parked", "the model timed out", [], NOW)
        assert spells.outcome(conn, spell) == ("parked", [])
        parked = _cells(conn, "spells", "last_line_id = 7", columns)
        conn.execute(
            insert(t.spells).values(
                persona="warren",
                room_id="dm",
                last_line_id=8,
                status="parked",
                reason="the model timed out",
                row_ids="[]",
                tokens_in=120,
                tokens_out=30,
                dropped='{"a": 2, "cap": 1}',
                created=NOW,
            )
        )
        by_core = _cells(conn, "spells", "last_line_id = 8", columns)
        assert parked[4:6] == [7, "integer"]
        assert parked[:4] + parked[6:] == by_core[:4] + by_core[6:]  # the same storage
        spells.record(conn, spell, "committed", None, [4, 2], LATER)
        assert spells.outcome(conn, spell) == ("committed", [4, 2])
        got = spells.latest(conn, "warren", "dm")
        assert got is not None and got["last_line_id"] == 8
        mine = conn.execute(select(t.spells).where(t.spells.c.last_line_id == 7)).mappings().one()
        assert dict(mine) == {
            "persona": "warren",
            "room_id": "dm",
            "last_line_id": 7,
            "status": "committed",
            "reason": None,
            "row_ids": "[4, 2]",
            "tokens_in": 120,
            "tokens_out": 30,
            "created": LATER,
            "dropped": '{"a": 2, "cap": 1}',
        }
        assert spells.resolve_parked(conn, "warren", "dm", 7) == 0  # 7 is committed now
        assert spells.resolve_parked(conn, "warren", "other", 99) == 0
        assert spells.resolve_parked(conn, "warren", "dm", 8) == 1
        resolved = spells.latest(conn, "warren", "dm")
        assert resolved is not None
        assert (resolved["status"], resolved["reason"]) == (
            "resolved",
            "covered by a later spell (through 8)",
        )


def test_a_toast_posts_once_and_is_delivered_once(db: Engine) -> None:
    with store.transaction() as conn:
        kw: dict[str, Any] = dict(persona="warren", room_id="dm", text="Warren will remember.")
        first = notices.post(conn, user_id=1, spell_key="k", row_ids=[3, 1], now=NOW, **kw)
        again = notices.post(conn, user_id=1, spell_key="k", row_ids=[9], now=LATER, **kw)
        other = notices.post(conn, user_id=2, spell_key="k", row_ids=[3], now=NOW, **kw)
        elsewhere = notices.post(conn, user_id=1, spell_key="k2", row_ids=[], now=NOW, **kw)
        assert first is not None and other is not None and elsewhere is not None
        assert again is None and first < other < elsewhere
        waiting = notices.undelivered(conn, "k")
        assert [n.id for n in waiting] == [first, other]
        assert waiting[0] == notices.get(conn, first)
        assert waiting[0].row_ids == [3, 1] and waiting[0].created == NOW
        assert waiting[0].undone is False and waiting[0].spell_key == "k"
        stored = _cells(conn, "notices", f"id = {first}", ["kind", "row_ids", "delivered"])
        assert stored[::2] == ["memory_toast", "[3, 1]", 0]
        notices.mark_delivered(conn, [])
        notices.mark_delivered(conn, [first])
        assert [n.id for n in notices.undelivered(conn, "k")] == [other]
        notices.mark_delivered(conn, [other, elsewhere, 10**6])
        assert notices.undelivered(conn, "k") == notices.undelivered(conn, "k2") == []
        assert notices.waiting_spells(conn, LATER) == []


def test_identity_reads_the_one_row(db: Engine) -> None:
    with store.transaction() as conn:
        assert embedder.identity(conn) is None
        embedder.check(conn, "hash", 256)
        assert embedder.identity(conn) == embedder.Identity("hash", 256)
        started = embedder.begin_reembed(conn, "gemini", 768)
        embedder.advance(conn, after_row_id=40, after_room_id="dm-3")
        assert embedder.identity(conn) == embedder.Identity(
            "hash", 256, "gemini", 768, after_row_id=40, after_room_id="dm-3"
        )
        assert started.pending_name == "gemini"


def test_the_daily_caps_read_todays_rows_about_the_spells_people_as_index_ranges(
    db: Engine,
) -> None:
    """Each branch of the caps' count is a range on ix_persona_memory_day: what others said
    today, however much, is never read (SQLite's plan; PostgreSQL plans by its statistics)."""
    if not store.is_sqlite(db):
        pytest.skip("the plan asked for is SQLite's")
    params = {"persona": "warren", "since": NOW}
    with db.connect() as conn:
        memories.written_since(conn, "warren", NOW, [1, 2])  # compiles the statement
        (sql, order, constants) = next(
            v for k, v in memories.WRITTEN_SINCE._compiled.items() if k[-1] == (4, 2)
        )  # three subjects (the world's and two humans') padded to four, two refs
        values = {**constants, **params, **{n: "u:1" for n in order if n not in params}}
        plan = conn.exec_driver_sql(
            "EXPLAIN QUERY PLAN " + sql, tuple(values[n] for n in order)
        ).all()
    searches = [row[-1] for row in plan if "persona_memory" in row[-1]]
    assert (
        searches
        == [
            "SEARCH persona_memory USING COVERING INDEX ix_persona_memory_day "
            "(persona=? AND subject=? AND counterpart=? AND created>?)"
        ]
        * 2
    )


def test_a_quiet_rooms_fan_out_reads_the_room_and_its_members_as_the_app_wrote_them(
    db: Engine,
) -> None:
    from memory_worker import app_side
    from memory_worker.storage.spell_context import room_members

    with store.transaction() as conn:
        app_side.add_persona(conn, "warren", "Warren")
        app_side.add_persona(conn, "ada", "Ada")
        for uid in (42, 7):
            app_side.add_user(conn, uid, f"human {uid}")
        app_side.add_room(conn, "g1", "group", ["warren", "u:42", "ada", "u:7"])
        app_side.add_room(conn, "hush", "private", ["warren", "u:7"], incognito=True)
    with db.connect() as conn:
        g1, hush = room_members(conn, "g1"), room_members(conn, "hush")
        assert room_members(conn, "nowhere") is None
        expected = app_side.load_room(conn, "g1")
    assert g1 is not None and hush is not None
    assert (g1.room, g1.personas, g1.humans) == (expected, ["ada", "warren"], [7, 42])
    assert hush.room.incognito and (hush.personas, hush.humans) == (["warren"], [7])
