"""docs/architecture.md's walk of a cold open is the one the code makes: traced, stop by stop.

A change that adds a stop, or sends the loader back to the cache once more, fails here until
the doc shows it (and says whether the calls still go down)."""

from __future__ import annotations

import numpy as np
from sqlalchemy import Engine

from memory_worker.reader import build_block, cache_loader, fill
from tests.reader import test_cache
from tests.reader.walk import documented, walk

store_rows = test_cache.store_rows  # Warren's 220 rows, rooms with a topic
DAN, NOW = test_cache.DAN, test_cache.NOW

HEADER = "### The stops of a cold open"


def test_the_docs_walk_of_a_cold_open_is_the_codes(
    store_rows: np.random.Generator, db: Engine
) -> None:
    build_block("warren", {DAN}, "topic", now=NOW, touch=False)  # its pack and topic's cosines
    assert fill.FILLS.wait(30)
    cache_loader.READ_CACHE.clear()  # the persona let go of: the next open is cold
    traced = walk(lambda: build_block("warren", {DAN}, "topic", now=NOW, touch=False))
    assert fill.FILLS.wait(30)
    shown = [f"{s.caller or '-'} → {s}" for s in traced.stops]
    redo = "redo the walk in docs/architecture.md:\n" + "\n".join(shown)
    assert shown == documented(HEADER), redo


def test_the_loader_goes_to_the_cache_once_to_plan_and_once_to_keep(
    store_rows: np.random.Generator, db: Engine
) -> None:
    """The cold open's plan is read from the cache in one call and carried out in one (the
    warm try before it makes a third): no more back and forth between loader and cache."""
    build_block("warren", {DAN}, "topic", now=NOW, touch=False)
    assert fill.FILLS.wait(30)
    cache_loader.READ_CACHE.clear()
    traced = walk(lambda: build_block("warren", {DAN}, "topic", now=NOW, touch=False))
    assert fill.FILLS.wait(30)
    into_cache = [
        s.function
        for s in traced.stops
        if s.caller == "reader.cache_loader" and s.module == "reader.cache"
    ]
    assert into_cache == ["at", "at", "keep"]
    into_loader = [s.function for s in traced.stops if s.module == "reader.cache_loader"]
    assert into_loader == ["held_plan", "read_plan", "finish"]
