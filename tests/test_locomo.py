"""A real long conversation (LoCoMo, CC BY-NC 4.0, read from ../shared/data/locomo/, never
copied) through the write path: the guards hold on real text, and the block at the end stays in
its limits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select

from benchmarks import locomo_replay
from memory_worker.core import tables as t
from memory_worker.core.constants import BLOCK_CHARS_LIMIT, TAKE_PER_HUMAN
from memory_worker.storage import store

pytestmark = [
    pytest.mark.skipif(
        not locomo_replay.DATA.exists(), reason="LoCoMo is not beside this checkout"
    ),
    pytest.mark.slow,  # a long real conversation through the write path: make test
]


def test_a_long_real_conversation_keeps_every_guard_and_a_bounded_block(
    db,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    sample = json.loads(locomo_replay.DATA.read_text())[1]
    result = locomo_replay.replay(sample, f"sqlite:///{tmp_path / 'locomo.db'}")
    assert result.sessions == 19 and result.rows > 50
    assert result.rows + sum(result.rejected.values()) <= result.proposed
    assert result.rejected["no evidence line was spoken by u:1"] >= 1  # real cross-talk
    with store.engine().connect() as conn:
        rows = conn.execute(select(t.persona_memory)).mappings().all()
        spoken = dict(conn.execute(select(t.lines.c.id, t.lines.c.speaker)).all())
    for r in rows:
        assert r["subject"] == "u:1" and len(r["text"]) <= 200
        assert any(spoken[i] == "u:1" for i in json.loads(r["evidence"]))
    assert result.block_chars <= BLOCK_CHARS_LIMIT and result.block_rows <= TAKE_PER_HUMAN
