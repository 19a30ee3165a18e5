"""How long a room takes to open: `build_block` latency against the floor, a bare SELECT.

A persona holds 100, 1,000, 10,000 and 100,000 open rows, all about the one present human
(the worst case: every row is visible). For each size, in the same run and interleaved, we time
the floor (a bare indexed SELECT of those same rows through SQLAlchemy Core), `build_block` in
a private room without a topic vector, and `build_block` in one with a topic vector (relevance
needs every visible row's embedding). The aim (issue 3): well under 5 ms at 10,000 rows.

    .venv/bin/python benchmarks/read_path.py [--quick]

Figures only, no assertions. A temp SQLite file, built by the real migrations.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table
from sqlalchemy import insert, select, update

from memory_worker import app_side, store
from memory_worker import tables as t
from memory_worker.constants import KINDS
from memory_worker.reader import build_block

SIZES = {100: 300, 1_000: 150, 10_000: 40, 100_000: 6}  # rows held → repetitions
QUICK = {100: 30, 1_000: 20, 10_000: 8, 100_000: 2}
DIMS = 768
NOW = "2026-12-01T12:00:00+00:00"
DAN = 42


def seed(url: str, sizes: list[int], rng: np.random.Generator) -> None:
    """One persona per size (`p<size>`), every row about u:42; two private rooms with Dan."""
    with store.transaction(url) as conn:
        app_side.add_user(conn, DAN, "Dan")
        app_side.add_room(conn, "plain", "private", [f"u:{DAN}"])
        app_side.add_room(conn, "topic", "private", [f"u:{DAN}"])
        topic = rng.integers(-127, 128, DIMS, dtype=np.int8).tobytes()
        conn.execute(update(t.rooms).where(t.rooms.c.id == "topic").values(topic_embedding=topic))
    for size in sizes:
        persona = f"p{size}"
        with store.transaction(url) as conn:
            app_side.add_persona(conn, persona, persona.upper())
        for start in range(0, size, 10_000):
            n = min(10_000, size - start)
            days = rng.integers(0, 330, n)
            created = [f"2026-{1 + d // 30:02d}-{1 + d % 28:02d}T10:00:00+00:00" for d in days]
            recalled = rng.integers(0, 60, n)
            blobs = rng.integers(-127, 128, (n, DIMS), dtype=np.int8)
            rows = [
                {
                    "persona": persona,
                    "subject": f"u:{DAN}",
                    "counterpart": None,
                    "witnessed": json.dumps([DAN] if i % 3 else [DAN, 17]),
                    "room_id": "plain",
                    "kind": KINDS[int(rng.integers(0, len(KINDS)))],
                    "text": f"u:{DAN} mentioned thing {start + i}: "
                    + "x" * int(rng.integers(40, 160)),
                    "importance": int(rng.integers(3, 11)),
                    "valid_from": None,
                    "evidence": "[1]",
                    "created": created[i],
                    "last_recalled": (
                        f"2026-11-{1 + recalled[i] % 28:02d}T09:00:00+00:00" if i % 4 == 0 else None
                    ),
                    "recall_count": 0,
                    "embedding": blobs[i].tobytes(),
                }
                for i in range(n)
            ]
            with store.transaction(url) as conn:
                conn.execute(insert(t.persona_memory), rows)


def floor(url: str, persona: str) -> int:
    """The floor: the same rows, selected whole through the same index, nothing else."""
    pm = t.persona_memory.c
    query = select(t.persona_memory).where(
        pm.persona == persona, pm.valid_to.is_(None), pm.subject.in_(["world", f"u:{DAN}", "self"])
    )
    with store.engine(url).connect() as conn:
        return len(conn.execute(query).all())


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000.0


def summary(ms: list[float]) -> tuple[float, float]:
    """Median and 99th percentile (with few repetitions, p99 is close to the max)."""
    return statistics.median(ms), float(np.percentile(ms, 99))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    reps = QUICK if args.quick else SIZES
    console = Console(width=132)  # the whole table, even when piped
    rng = np.random.default_rng(7)

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'bench.db'}"
        store.init_db(url)
        started = time.perf_counter()
        seed(url, list(reps), rng)
        console.print(f"seeded {sum(reps):,} rows in {time.perf_counter() - started:.1f} s")

        table = Table(
            title="read path: build_block vs the floor (ms)",
            caption="floor: the same rows through the same index, SELECT *, nothing else · "
            "× floor: median / floor median · build_block includes the touch",
        )
        for col in ("rows held", "reps", "floor med", "floor p99"):
            table.add_column(col, justify="right")
        for label in ("no topic", "topic"):
            for col in ("med", "p99", "× floor"):
                table.add_column(f"{label} {col}", justify="right")
        for size, n in reps.items():
            persona = f"p{size}"
            runs: dict[str, Callable[[], object]] = {
                "floor": partial(floor, url, persona),
                "plain": partial(build_block, persona, {DAN}, "plain", now=NOW, url=url),
                "topic": partial(build_block, persona, {DAN}, "topic", now=NOW, url=url),
            }
            for fn in runs.values():
                fn()  # warm the page cache and the connection pool
            ms: dict[str, list[float]] = {name: [] for name in runs}
            for _ in range(n):  # interleaved, so noise lands on all three alike
                for name, fn in runs.items():
                    ms[name].append(timed(fn))
            f_med, f_p99 = summary(ms["floor"])
            cells = [f"{size:,}", str(n), f"{f_med:.2f}", f"{f_p99:.2f}"]
            for name in ("plain", "topic"):
                med, p99 = summary(ms[name])
                cells += [f"{med:.2f}", f"{p99:.2f}", f"{med / f_med:.2f}"]
            table.add_row(*cells)
        console.print(table)
        store.dispose_all()


if __name__ == "__main__":
    main()
