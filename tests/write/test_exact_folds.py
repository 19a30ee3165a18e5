"""Only the same sentence folds, through the real write path: exactly-once across audiences
(`write/copies.py`) never takes one fact for another, an UPDATE that says something else is
always written, and a delete never takes a row whose text differs (docs/design.md §12).

The reproductions are Dan's: he corrects "HIV+" to "HIV-" in his own chat; the group's "HIV-"
meets his private "HIV+"; the group's world row "written in C#" is deleted beside his private
"written in C++". Then the whole corpus of minimal pairs (exams/integrity/pairs.py) along
ADD, UPDATE, the fold and the deletes, as the integrity exam runs it.
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import Engine, select

from exams.integrity import run as integrity
from memory_worker import controls
from memory_worker.core import tables as t
from memory_worker.core.names import sentence_key
from memory_worker.storage import notices, read_path, store
from tests import scenes
from tests.write_helpers import rows

pytestmark = [pytest.mark.store, pytest.mark.usefixtures("hashing_embedder")]

DAN, CARA = integrity.DAN, integrity.CARA
PLUS, MINUS = "u:42 tested HIV+ in March.", "u:42 tested HIV- in March."
CPP, CSHARP = "The tool is written in C++.", "The tool is written in C#."


@pytest.fixture
def world(db: Engine) -> Engine:
    """Dan and Cara, Dan's private chat with Warren (dm-dan) and their group (g-dc)."""
    integrity.build()
    return db


def open_texts() -> list[str]:
    return sorted(r["text"] for r in rows(store.engine()) if r["valid_to"] is None)


def toasted(user_id: int) -> set[int]:
    with store.engine().connect() as conn:
        return {i for n in notices.of_user(conn, user_id, 0, 100) for i in n.row_ids}


def test_dan_s_correction_of_a_sign_in_his_own_chat_is_written_and_closes_the_old_row(
    world: Engine,
) -> None:
    integrity.write("dm-dan", "u:42", PLUS)
    integrity.write("dm-dan", "u:42", MINUS, "UPDATE", target=PLUS)
    assert open_texts() == [MINUS]
    old, new = integrity.row_of(PLUS), integrity.row_of(MINUS)
    assert old["closed_by"] == new["id"] and new["id"] in toasted(DAN)


def test_an_update_into_a_sentence_another_row_says_still_closes_the_row_it_replaces(
    world: Engine,
) -> None:
    """The old row says "HIV+"; another open row already says "HIV-". The correction must
    not be held back by that copy: "HIV+" would stay open beside it."""
    integrity.write("dm-dan", "u:42", PLUS)
    integrity.write("dm-dan", "u:42", MINUS)  # an ADD: both open
    integrity.write("dm-dan", "u:42", MINUS.upper(), "UPDATE", target=PLUS)
    assert open_texts() == [MINUS.upper()]
    assert integrity.row_of(PLUS)["closed_by"] == integrity.row_of(MINUS.upper())["id"]


def test_an_update_into_the_same_sentence_writes_nothing(world: Engine) -> None:
    integrity.write("dm-dan", "u:42", PLUS)
    integrity.write("dm-dan", "u:42", PLUS.upper(), "UPDATE", target=PLUS)
    assert open_texts() == [PLUS]


@pytest.mark.parametrize("group_first", [False, True])
def test_the_group_s_hiv_minus_and_dan_s_private_hiv_plus_are_two_rows_each_toasted(
    world: Engine, group_first: bool
) -> None:
    said = (
        [("g-dc", MINUS), ("dm-dan", PLUS)] if group_first else [("dm-dan", PLUS), ("g-dc", MINUS)]
    )
    for room, text in said:
        integrity.write(room, "u:42", text)
    assert open_texts() == [PLUS, MINUS]
    assert {integrity.row_of(PLUS)["id"], integrity.row_of(MINUS)["id"]} <= toasted(DAN)


@pytest.mark.parametrize("stored_fold", [False, True])
def test_deleting_the_group_s_c_sharp_row_leaves_dan_s_private_c_plus_plus(
    world: Engine, stored_fold: bool
) -> None:
    """With `stored_fold`, the store holds the link the old folding wrote (Dan's row closed
    by the group's): the delete reads the text, not the link, and reopens it."""
    integrity.write("dm-dan", "world", CPP)
    integrity.write("g-dc", "world", CSHARP)
    mine, shared = integrity.row_of(CPP)["id"], integrity.row_of(CSHARP)["id"]
    if stored_fold:
        integrity.stored_fold(mine, shared)
    controls.delete_row(CARA, shared)
    controls.delete_row(DAN, shared)
    (left,) = rows(world)
    assert (left["id"], left["text"], left["valid_to"]) == (mine, CPP, None)
    assert json.loads(left["private_to"]) == [DAN]


def test_deleting_the_wider_copy_of_the_same_sentence_still_takes_the_copy_it_closed(
    world: Engine,
) -> None:
    integrity.write("dm-dan", "world", CPP)
    integrity.write("g-dc", "world", CPP.upper())
    shared = integrity.row_of(CPP.upper())["id"]
    assert integrity.row_of(CPP)["closed_by"] == shared
    controls.delete_row(CARA, shared)
    controls.delete_row(DAN, shared)
    assert rows(world) == []


def test_the_migration_gives_the_rows_stored_before_it_their_exact_keys(db: Engine) -> None:
    """A store back at 0020 (its rows keyed by word characters: "HIV+" and "HIV-" one key),
    upgraded: each row gets its own sentence's key, and its persona's triggers run again."""
    from alembic import command

    with db.begin() as conn:
        for text in (PLUS, MINUS, CPP, CSHARP):
            scenes.row_as_stored_before(conn, "u:42", text)
    cfg = store.alembic_config(str(db.url))
    with db.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0020")  # 0022's downgrade writes 0020's keys back
    keys = stored_keys(db)
    assert keys[PLUS] is not None
    assert keys[PLUS] == keys[MINUS] and keys[CPP] == keys[CSHARP]  # the old key's fold
    store.init_db(str(db.url))
    assert stored_keys(db) == {text: sentence_key(text) for text in (PLUS, MINUS, CPP, CSHARP)}
    with db.connect() as c:
        before = read_path.versions(c, ["warren"])["warren"].counter
    with db.begin() as conn:
        scenes.row_as_stored_before(conn, "u:42", "u:42 is written after the migration.")
    with db.connect() as c:
        assert read_path.versions(c, ["warren"])["warren"].counter == before + 1


def stored_keys(db: Engine) -> dict[str, str]:
    pm = t.persona_memory.c
    with db.connect() as c:
        return {text: key for text, key in c.execute(select(pm.text, pm.sentence_key))}


# --- the corpus ---------------------------------------------------------------------------

# ADD, UPDATE and the fold both ways, one order (the integrity exam runs both orders and the
# deletes too; the deletes are the tests above)
CASES = [c for c in integrity.cases(both_orders=False) if c.path not in integrity.WORLD_PATHS]


@pytest.mark.parametrize("case", CASES, ids=[f"{c.path}-{n}" for n, c in enumerate(CASES)])
def test_a_minimal_pair_stays_two_facts_and_one_sentence_stays_one(
    world: Engine, case: integrity.Case
) -> None:
    got = integrity.run_case(case, built=True)
    assert got.failures == 0, got
