"""What the app imports at room open, join and leave (docs/design.md §3).

filter → rank → take → render → touch, straight from the store: SQLite (or PostgreSQL through
the same Core code) and numpy. It imports no Celery, Redis or model SDK, and calls no model:
the room's topic vector was computed off the floor.

The reader as a story, a module each: the room open (room_open.py) reads its context and
ranks on the plan the cache loader gives it (cache_loader.py: the read cache first — cache.py:
its LRU, forwarding by touches and vector slots — then a persona's pack, then the rows its
audience can see, bringing each up from the change log; the plan kept as the open ends); the
fill (fill.py) reads a cold persona's whole entry after the open returns, the sweep
(sweep.py) catches what is held up with the store every `read_cache_sweep_s`, and the touch
(touch.py) writes `last_recalled` back, each on a daemon thread that steps aside while a room
open is in flight (threads.py). Recall per message: recall.py. This module holds the public
names and a process's start and end.
"""

from __future__ import annotations

from memory_worker.core import settings as settings_mod
from memory_worker.core.block import Block
from memory_worker.core.errors import UnknownRoom
from memory_worker.reader import cache_loader, fill, room_open, sweep, touch
from memory_worker.reader.recall import recall
from memory_worker.reader.room_open import blocks_for_room, build_block
from memory_worker.reader.sweep import catch_up
from memory_worker.storage import read_packs, read_path, store

__all__ = [
    "Block",
    "UnknownRoom",
    "blocks_for_room",
    "build_block",
    "catch_up",
    "close",
    "flush_touches",
    "format_block",
    "metrics",
    "prepare",
    "recall",
]


WINNER_SHAPES = (1, 2, 4, 8, 16, 32, 64)  # the IN lists of a block's winners (`Prepared`)


def prepare(url: str | None = None) -> None:
    """At an app process's start (the README's app calls it): read the settings, connect to
    the store, compile a room open's statements for its dialect in the shapes opens use and
    run each once on the pooled connection (the driver prepares them too), and start the
    reader's threads, so a process's first room open pays for none of it. Reads nothing but
    empty results (and, with `MW_MEMORY_SCOPE=follow`, the leak exam's verdicts:
    `ScopeNotAllowed`, naming the command to run, when none passes for what is in force).
    Importing the reader compiles nothing: a process that never calls this pays at its
    first opens instead."""
    settings = settings_mod.current()  # parsed once, here, even when `url` is given
    url = url or settings.database_url
    eng = store.engine(url)
    read_path.compile_for(eng.dialect)
    read_packs.compile_for(eng.dialect)
    with eng.connect() as conn:
        for present in ([0], [0, -1]):
            read_path.context(conn, "", present, [""])
        read_packs.packs(conn, [""], None)
        for n in WINNER_SHAPES:
            read_path.winners(conn, [-i for i in range(n)])
    raw = eng.raw_connection()  # the pool's connection for a warm open, made now
    raw.close()
    room_open.scope_in_force(None, url)  # MW_MEMORY_SCOPE=follow: its verdict, or no start
    sweep.SWEEP.start()
    fill.FILLS.start()
    touch.TOUCHES.start()


def flush_touches(timeout: float | None = None) -> bool:
    """Wait until every touch promised so far is in the store. True when drained."""
    return touch.TOUCHES.flush(timeout)


def close(timeout: float | None = None) -> bool:
    """Before a store goes away (a test's, the leak exam's): wait for the promised touches,
    wait out a sweep under way, and forget everything cached. True when the touches drained."""
    drained = flush_touches(timeout)
    fill.FILLS.wait(timeout)
    with sweep.SWEEP.paused():
        cache_loader.READ_CACHE.clear()
    room_open.forget_scope_checks()
    return drained


def metrics() -> dict[str, int]:
    """What the reader's background threads gave up on in this process, as counts for the
    app to export with its own metrics (the reader serves none, and pays for no client): a
    persona whose fill keeps failing opens cold every time, which no room open shows."""
    return {
        "fill_failures": fill.FILLS.failures,
        "sweep_failures": sweep.SWEEP.failures,
        "touches_dropped": touch.TOUCHES.dropped,
    }


def format_block(block: Block) -> str:
    """The block as the CLI prints it: a rule naming the persona and its rows, then the text,
    whose first line is the meter (an empty block has no text: its meter is said here)."""
    n = len(block.row_ids)
    rule = f"── {block.persona} · {n} row{'s' if n != 1 else ''} ──"
    empty = f"(empty: nothing this persona may recall here · 0/{block.chars_limit} chars)"
    return f"{rule}\n{block.text or empty}"
