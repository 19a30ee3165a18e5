"""A commit's reads do not grow with what the persona holds about the spell's humans.

Each row keeps its sentence's key (`persona_memory.sentence_key`, schema/versions/0020) equal
to `names.sentence_key(text)` after every kind of write, and the migration fills it for the
rows stored before; the exactly-once check across audiences reads only the candidates'
sentences, and the check that the router's view still holds reads only the rows written
since the route (`write.view`) — with the same outcomes: stale when the set of open rows the
router read changed, committed when only rows it never holds did.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import Engine, event, insert, select

from memory_worker import app_side, controls
from memory_worker.core import tables as t
from memory_worker.core.names import sentence_key
from memory_worker.core.rows import Candidate, Spell
from memory_worker.models.hashing import HashingEmbedder
from memory_worker.models.scripted import ScriptedChat, sensible_route
from memory_worker.storage import memories, read_path, store
from memory_worker.write import reembed, steps
from tests import scenes
from tests.scenes import CARA, DAN, extract_answer, people, private_chat

pytestmark = pytest.mark.store

MANY = 1_500  # rows about Dan already stored: the old commit read each of them twice
READ_AT_MOST = 40  # rows a commit of two candidates reads, however many rows Dan has


def keys_hold(db: Engine) -> list[tuple[int, str, str | None]]:
    """Every row whose stored key is not its text's: (id, text, key)."""
    pm = t.persona_memory.c
    with db.connect() as c:
        found = c.execute(select(pm.id, pm.text, pm.sentence_key)).all()
    return [(i, text, key) for i, text, key in found if key != sentence_key(text)]


def routed(chat: ScriptedChat, room: str = "dm-dan") -> Spell:
    spell = steps.begin("warren", room)
    assert spell is not None
    spell = steps.run_extract(spell, chat)
    spell = steps.run_embed(spell, HashingEmbedder())
    return steps.run_route(spell, chat)


def said(db: Engine, *texts: str) -> list[int]:
    with db.begin() as conn:
        return [app_side.say(conn, "dm-dan", DAN, text) for text in texts]


@pytest.fixture
def world(db: Engine) -> tuple[Engine, list[int]]:
    people(db)
    return db, private_chat(db)


def test_the_sentence_key_is_the_text_s_after_every_kind_of_write(world) -> None:  # type: ignore[no-untyped-def]
    db, lines = world
    added = steps.run_commit(
        routed(ScriptedChat({"extract": extract_answer(lines), "route": sensible_route}))
    )
    assert added.status == "committed" and len(added.row_ids) == 2
    assert keys_hold(db) == []
    (moved,) = said(db, "I own a flat in Xuhui and a house in Hangzhou now!")
    update = {
        "candidates": [
            {
                "subject": "u:42",
                "kind": "fact",
                "text": "u:42 owns a flat in Xuhui and a ＨＯＵＳＥ in Hangzhou — now.",
                "importance": 6,
                "evidence": [moved],
            }
        ]
    }
    updated = steps.run_commit(routed(ScriptedChat({"extract": update, "route": sensible_route})))
    assert updated.status == "committed" and updated.closed_ids, "an UPDATE: one row closed"
    assert keys_hold(db) == []
    reembed.reembed_rows_naming(HashingEmbedder(), DAN)  # a rename re-embeds, text untouched
    assert keys_hold(db) == []
    with db.connect() as c:
        undo = c.execute(
            select(t.notices.c.id).where(t.notices.c.row_ids.contains(str(updated.row_ids[0])))
        ).scalar_one()
    assert controls.undo_notice(DAN, undo) == 1  # the undo deletes the new row, reopens the old
    with db.connect() as c:
        open_ids = {r.id for r in memories.rows_about(c, DAN) if r.valid_to is None}
    assert set(updated.closed_ids) <= open_ids
    assert keys_hold(db) == []


def test_the_migration_keys_the_rows_stored_before_it(db: Engine) -> None:
    """A store upgraded to 0020 with rows in it, of every odd spelling: each gets its key, and
    the store's triggers (off on PostgreSQL while it keys them) run again after."""
    from alembic import command

    cfg = store.alembic_config(str(db.url))
    with db.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0019")
    texts = ["u:42 owns a flat in Xuhui.", "Ｃａｒａ’s cat — is called Zoë!", "Wu's tea", ""]
    with db.begin() as conn:
        for i, text in enumerate(texts * 3):
            scenes.row_as_stored_before(conn, f"u:{DAN}", text, closed=i % 2 == 1)
    store.init_db(str(db.url))
    assert keys_hold(db) == []
    pm = t.persona_memory.c
    with db.connect() as c:
        assert c.execute(select(pm.sentence_key).where(pm.text == texts[1])).scalars().first() == (
            "cara’s cat — is called zoë!"  # width and case only: every sign stays (0022)
        )
        before = read_path.versions(c, ["warren"])["warren"].counter
    with db.begin() as conn:
        scenes.row_as_stored_before(conn, f"u:{DAN}", "u:42 is written after the migration.")
    with db.connect() as c:
        assert read_path.versions(c, ["warren"])["warren"].counter == before + 1


def many_rows_about_dan(db: Engine, n: int = MANY) -> None:
    """`n` open rows about Dan, Warren's, written as `memories.insert_row` writes them."""
    rows = [
        dict(
            persona="warren",
            subject=f"u:{DAN}",
            witnessed=f"[{DAN}]",
            room_id="dm-old",
            kind="fact",
            text=f"u:42 said thing number {i}.",
            sentence_key=sentence_key(f"u:42 said thing number {i}."),
            importance=5,
            evidence="[]",
            created="2026-11-01T10:00:00+00:00",
        )
        for i in range(n)
    ]
    with db.begin() as conn:
        conn.execute(insert(t.persona_memory), rows)


@contextmanager
def rows_read(db: Engine) -> Iterator[list[int]]:
    """The rows each SELECT run on `db` returns, counted in its own transaction as it runs."""
    counts: list[int] = []

    def count(
        conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool
    ) -> None:
        if many or not statement.lstrip().upper().startswith("SELECT"):
            return
        if "FOR UPDATE" in statement.upper():
            return  # the version lock: one row per persona asked about
        counter = conn.connection.dbapi_connection.cursor()
        counter.execute(f"SELECT count(*) FROM ({statement}) AS counted", params)
        counts.append(int(counter.fetchone()[0]))
        counter.close()

    event.listen(db, "after_cursor_execute", count)
    try:
        yield counts
    finally:
        event.remove(db, "after_cursor_execute", count)


def test_a_commit_for_a_human_with_many_rows_reads_a_bounded_number_of_rows(world) -> None:  # type: ignore[no-untyped-def]
    db, lines = world
    many_rows_about_dan(db)
    spell = routed(ScriptedChat({"extract": extract_answer(lines), "route": sensible_route}))
    with rows_read(db) as counts:
        outcome = steps.run_commit(spell)
    assert outcome.status == "committed" and len(outcome.row_ids) == 2
    assert sum(counts) <= READ_AT_MOST, counts


def test_rows_written_since_the_route_about_someone_else_leave_the_view_current(world) -> None:  # type: ignore[no-untyped-def]
    """Cara's rows written, closed and recalled between Dan's route and commit are not in the
    set the router read: the commit goes ahead, reading only those rows, not every row about
    Dan."""
    db, lines = world
    many_rows_about_dan(db)
    caras = [cara_row(db, text) for text in ("u:17 swims at dawn.", "u:17 keeps bees.")]
    spell = routed(ScriptedChat({"extract": extract_answer(lines), "route": sensible_route}))
    pm = t.persona_memory.c
    with db.begin() as conn:
        memories.close(conn, caras[0], "2026-12-06", None)
        conn.execute(t.persona_memory.update().where(pm.id == caras[1]).values(recall_count=2))
    cara_row(db, "u:17 plays go.")
    with rows_read(db) as counts:
        outcome = steps.run_commit(spell)
    assert outcome.status == "committed" and len(outcome.row_ids) == 2
    assert sum(counts) <= READ_AT_MOST, counts


def cara_row(db: Engine, text: str) -> int:
    with db.begin() as conn:
        return memories.insert_row(
            conn,
            persona="warren",
            room_id="dm-cara",
            witnessed=[CARA],
            candidate=Candidate(f"u:{CARA}", "fact", text, 5, (1,)),
            embedding=None,
            now="2026-12-06T10:00:00+00:00",
        )


def commit_after(db: Engine, lines: list[int], change: str) -> str:
    """A spell for Dan routed, then one of his open rows closed or recalled, then committed."""
    many_rows_about_dan(db, 3)
    spell = routed(ScriptedChat({"extract": extract_answer(lines), "route": sensible_route}))
    pm = t.persona_memory.c
    with db.begin() as conn:
        first = conn.execute(select(pm.id).order_by(pm.id).limit(1)).scalar_one()
        if change == "closed":
            memories.close(conn, first, "2026-12-06", None)
        else:
            conn.execute(t.persona_memory.update().where(pm.id == first).values(recall_count=3))
    return steps.run_commit(spell).status


def test_a_row_of_the_view_closed_since_the_route_makes_the_spell_stale(world) -> None:  # type: ignore[no-untyped-def]
    """A row the router read was closed in between (another spell, a human's delete): the set
    changed, so the spell routes again, as when every open row was read to check."""
    db, lines = world
    assert commit_after(db, lines, "closed") == "stale"


def test_a_row_about_the_human_recalled_since_the_route_keeps_the_spell_current(world) -> None:  # type: ignore[no-untyped-def]
    """A row the router read was touched (recalled) in between: the set did not change, and the
    commit finds that out (reading the set again) and goes ahead."""
    db, lines = world
    assert commit_after(db, lines, "recalled") == "committed"
