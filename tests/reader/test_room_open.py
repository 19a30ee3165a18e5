"""The room open's two paths: a warm open from the read cache alone, a cold one in one
transaction, both from one read of the room's context."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine

from memory_worker.reader import build_block, cache_loader, fill
from memory_worker.storage import read_path
from tests.reader import test_reader

cast = test_reader.cast  # Dan, Cara, Warren and Nolan, their rooms and rows
DAN, NOW = test_reader.DAN, test_reader.NOW

pytestmark = pytest.mark.store


def _counting_context_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every read of a room's context from now on, by which statement made it."""
    reads: list[str] = []
    for name in ("context", "context_alone"):
        real = getattr(read_path, name)

        def counted(*a: Any, _real: Any = real, _name: str = name, **k: Any) -> Any:
            reads.append(_name)
            return _real(*a, **k)

        monkeypatch.setattr(read_path, name, counted)
    return reads


def test_a_cold_open_reads_its_rooms_context_once(
    cast: dict[str, int], db: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    warm_text = build_block("warren", {DAN}, "dm", now=NOW, touch=False).text
    assert fill.FILLS.wait(30)
    cache_loader.READ_CACHE.clear()
    reads = _counting_context_reads(monkeypatch)
    cold = build_block("warren", {DAN}, "dm", now=NOW, touch=False)
    assert reads == ["context_alone"], "the cold open took the context its warm try read"
    assert cold.text == warm_text
    assert fill.FILLS.wait(30)
    reads.clear()
    assert build_block("warren", {DAN}, "dm", now=NOW, touch=False).text == warm_text
    assert reads == ["context_alone"]


def test_a_write_between_the_warm_try_and_the_cold_open_is_read_in_the_cold_snapshot(
    cast: dict[str, int], db: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The context read before the transaction no longer matches the store: the cold open
    reads it again there, so its versions, rows and audience are one snapshot's."""
    from memory_worker.reader import room_open
    from memory_worker.storage import store

    cache_loader.READ_CACHE.clear()
    real = room_open._warm

    def warm_then_a_write(*a: Any, **k: Any) -> Any:
        got = real(*a, **k)
        with store.transaction() as c:
            test_reader.add_row(c, "warren", "u:42", "u:42 plays the cello.", importance=9)
        return got

    monkeypatch.setattr(room_open, "_warm", warm_then_a_write)
    reads = _counting_context_reads(monkeypatch)
    block = build_block("warren", {DAN}, "dm", now=NOW, touch=False)
    assert reads == ["context_alone", "context"]
    assert "cello" in block.text
