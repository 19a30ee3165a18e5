"""How long a room takes to open, against the floor: a bare indexed SELECT of the visible rows.

At each size (1k / 10k / 100k rows the persona may see in a private chat with Dan), the store
also holds noise: the same persona's rows about a hundred other humans, closed rows, and nine
other personas with rows of their own. In one run, interleaved so the machine's noise lands
on every case alike, we time:

- floor      — stdlib sqlite3: SELECT * of exactly the visible rows through the same index;
- warm       — `build_block` with the cache warm, touch on and touch off;
- topic      — the same in a room with a topic vector (relevance over every visible row);
- miss       — the first open after another process wrote a row (the cache must refetch);
- cold       — an open with the persona's entry dropped (its first open, or after the LRU let
               it go): it answers from its audience's rows, the fill runs after (not timed);
- fresh      — a fresh process's first open (absolute: imports excluded, engine included);
- prepared   — the same after the app's start called `reader.prepare` (not timed).

Each is printed as median, p95 and the ratio of its median to the floor's median in the same
run, with the bytes the read cache holds after the warm opens.

    .venv/bin/python -m benchmarks.read_path [--sizes 1000 10000 100000] [--quick] [--json F]

Figures only, no assertions. Temp SQLite files, built by the real migrations.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from memory_worker import app_side
from memory_worker.core import tables as t
from memory_worker.core.constants import KINDS
from memory_worker.reader import read_columns
from memory_worker.storage import store

SIZES = (1_000, 10_000, 100_000)
REPS = {1_000: 200, 10_000: 60, 100_000: 12}  # per case, interleaved
QUICK = {1_000: 40, 10_000: 12, 100_000: 4}
FRESH_REPS = {1_000: 3, 10_000: 3, 100_000: 2}
DIMS = 768
NOW = "2026-12-01T12:00:00+00:00"
DAN = 42
PERSONA = "warren"
NOISE_HUMANS = 100  # other humans the persona knows: rows about them never load here
NOISE_PERSONAS = 9
ROOT = Path(__file__).resolve().parent.parent
FLOOR_SQL = (
    "SELECT * FROM persona_memory WHERE persona = ? AND valid_to IS NULL "
    "AND subject IN ('world', 'u:42', 'self') AND (subject != 'self' OR counterpart = 'u:42')"
)


# --- the store --------------------------------------------------------------------------------


def _rows(rng: np.random.Generator, persona: str, n: int, about: Callable[[int], tuple]) -> list:
    days = rng.integers(0, 330, n)
    recalled = rng.integers(0, 60, n)
    blobs = rng.integers(-127, 128, (n, DIMS), dtype=np.int8)
    kinds = rng.integers(0, len(KINDS), n)
    out = []
    for i in range(n):
        subject, counterpart, closed = about(i)
        out.append(
            {
                "persona": persona,
                "subject": subject,
                "counterpart": counterpart,
                "witnessed": json.dumps([DAN] if i % 3 else [DAN, 17]),
                "room_id": "dm",
                "kind": "promise" if subject == "self" else KINDS[int(kinds[i])],
                "text": f"{subject} mentioned thing {i}: " + "x" * int(rng.integers(40, 160)),
                "importance": int(rng.integers(3, 11)),
                "valid_from": None,
                "valid_to": "2026-10-01" if closed else None,
                "evidence": "[1]",
                "created": f"2026-{1 + days[i] // 30:02d}-{1 + days[i] % 28:02d}T10:00:00+00:00",
                "last_recalled": (
                    f"2026-11-{1 + recalled[i] % 28:02d}T09:00:00+00:00" if i % 4 == 0 else None
                ),
                "recall_count": 0,
                "embedding": blobs[i].tobytes(),
            }
        )
    return out


def _visible(i: int) -> tuple:
    """Of the visible rows: 80% about Dan, 15% world, 5% Warren's promises to Dan."""
    if i % 20 == 0:
        return "self", "u:42", False
    if i % 20 < 4:
        return "world", None, False
    return "u:42", None, False


def _noise(i: int) -> tuple:
    """Rows the audience rule keeps out: other humans, promises to them, closed rows."""
    other = f"u:{1000 + i % NOISE_HUMANS}"
    if i % 10 == 0:
        return "u:42", None, True  # a closed row about Dan
    if i % 10 == 1:
        return "self", other, False
    return other, None, False


def seed(url: str, size: int, rng: np.random.Generator) -> None:
    with store.transaction(url) as conn:
        app_side.add_user(conn, DAN, "Dan")
        for h in range(NOISE_HUMANS):
            app_side.add_user(conn, 1000 + h, f"Human {h}")
        app_side.add_persona(conn, PERSONA, "Warren")
        for p in range(NOISE_PERSONAS):
            app_side.add_persona(conn, f"noise{p}", f"Noise {p}")
        app_side.add_room(conn, "dm", "private", [f"u:{DAN}", PERSONA])
        app_side.add_room(conn, "topic", "private", [f"u:{DAN}", PERSONA])
        topic = rng.integers(-127, 128, DIMS, dtype=np.int8).tobytes()
        conn.execute(t.rooms.update().where(t.rooms.c.id == "topic").values(topic_embedding=topic))
    batches = [(PERSONA, size, _visible), (PERSONA, size // 4, _noise)]
    batches += [(f"noise{p}", size // 10, _visible) for p in range(NOISE_PERSONAS)]
    for persona, n, about in batches:
        for start in range(0, n, 10_000):
            rows = _rows(rng, persona, min(10_000, n - start), about)
            with store.transaction(url) as conn:
                conn.execute(t.persona_memory.insert(), rows)


# --- the cases --------------------------------------------------------------------------------


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000.0


def p95(ms: list[float]) -> float:
    return float(np.percentile(ms, 95))


class OtherProcess:
    """A second process that writes one row for the persona each time it is asked."""

    def __init__(self, path: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.read_path", "--writer", path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )

    def write(self) -> None:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write("w\n")
        self.proc.stdin.flush()
        if self.proc.stdout.readline().strip() != "ok":
            raise SystemExit("the writer process failed")

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


def writer_main(path: str) -> None:
    """The other process: one INSERT per line on stdin (the version triggers fire)."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=5)
    n = 0
    for _ in sys.stdin:
        n += 1
        conn.execute(
            "INSERT INTO persona_memory (persona, subject, witnessed, room_id, kind, text, "
            "importance, evidence, created, recall_count) VALUES "
            "(?, 'u:42', '[42]', 'dm', 'fact', ?, 5, '[1]', ?, 0)",
            (PERSONA, f"u:42 said another thing, number {n}.", NOW),
        )
        print("ok", flush=True)


def fresh_main(url: str) -> None:
    """A fresh process: imports first (not timed), then its first open (timed); with
    --prepared, the app's start calls `reader.prepare` first (not timed either)."""
    from memory_worker import reader
    from memory_worker.reader import build_block

    if "--prepared" in sys.argv:
        reader.prepare(url)
    ms = timed(lambda: build_block(PERSONA, {DAN}, "dm", now=NOW, url=url, touch=False))
    print(json.dumps({"fresh_ms": ms}))


def fresh_open(url: str, prepared: bool = False) -> float:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.read_path", "--fresh", url]
        + (["--prepared"] if prepared else []),
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1])["fresh_ms"])


def cache_bytes() -> int:

    return int(getattr(read_columns.READ_CACHE, "bytes", 0))


def flush() -> None:
    from memory_worker import reader

    getattr(reader, "flush_touches", lambda **_: None)()


def measure(size: int, reps: int, fresh_reps: int, tmp: Path) -> dict:
    from memory_worker import reader
    from memory_worker.reader import build_block

    path = tmp / f"read_{size}.db"
    url = f"sqlite:///{path}"
    store.init_db(url)
    started = time.perf_counter()
    seed(url, size, np.random.default_rng(size))
    seeded_s = time.perf_counter() - started
    floor_conn = sqlite3.connect(path)
    visible = len(floor_conn.execute(FLOOR_SQL, (PERSONA,)).fetchall())

    def floor() -> None:
        floor_conn.execute(FLOOR_SQL, (PERSONA,)).fetchall()

    other = OtherProcess(str(path))

    def miss() -> None:
        other.write()  # not timed: another process moves the persona's version
        ms["miss"].append(timed(lambda: build_block(PERSONA, {DAN}, "dm", now=NOW, url=url)))

    def cold() -> None:
        read_columns.READ_CACHE.clear()  # not timed: the entry is gone
        ms["cold"].append(
            timed(lambda: build_block(PERSONA, {DAN}, "dm", now=NOW, url=url, touch=False))
        )
        fills = getattr(read_columns, "FILLS", None)
        if fills is not None:
            fills.wait(60)  # the fill lands off the caller's path, before the next case

    cases: dict[str, Callable[[], object]] = {
        "floor": floor,
        "warm_touch": lambda: build_block(PERSONA, {DAN}, "dm", now=NOW, url=url),
        "warm": lambda: build_block(PERSONA, {DAN}, "dm", now=NOW, url=url, touch=False),
        "topic": lambda: build_block(PERSONA, {DAN}, "topic", now=NOW, url=url),
    }
    ms: dict[str, list[float]] = {name: [] for name in [*cases, "miss", "cold"]}
    read_columns.READ_CACHE.clear()
    for fn in cases.values():
        fn()  # warm the page cache, the pool and the read cache
    flush()
    try:
        for _ in range(reps):
            for name, fn in cases.items():
                ms[name].append(timed(fn))
            miss()
            for fn in cases.values():
                fn()  # back to warm after the miss (untimed)
            cold()
            for fn in cases.values():
                fn()  # back to warm after the cold open (untimed)
    finally:
        other.close()
    flush()
    held = cache_bytes()
    fresh = [fresh_open(url) for _ in range(fresh_reps)]
    prepared = [fresh_open(url, prepared=True) for _ in range(fresh_reps)]
    floor_conn.close()
    reader.close(timeout=60)  # its touches and fills land before the store goes
    store.dispose_all()
    f = statistics.median(ms["floor"])
    out: dict = {
        "size": size,
        "visible": visible,
        "reps": reps,
        "seeded_s": round(seeded_s, 1),
        "cache_bytes": held,
        "cache_bytes_per_row": round(held / visible, 1) if held else 0,
        "fresh_ms": statistics.median(fresh),
        "fresh_x": statistics.median(fresh) / f,
        "prepared_ms": statistics.median(prepared),
        "prepared_x": statistics.median(prepared) / f,
    }
    for name, got in ms.items():
        out[name] = {
            "med": statistics.median(got),
            "p95": p95(got),
            "x": statistics.median(got) / f,
        }
    return out


def print_table(results: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title="read path: a room open against the floor (ms · × floor = median / floor median)",
        caption="floor: stdlib sqlite3 SELECT * of the visible rows · one run, interleaved",
    )
    table.add_column("visible rows", justify="right")
    table.add_column("floor med / p95", justify="right")
    for label in ("warm touch", "warm", "topic", "miss", "cold"):
        table.add_column(f"{label}\nmed / p95 / ×", justify="right")
    table.add_column("fresh\nms / ×", justify="right")
    table.add_column("prepared\nms / ×", justify="right")
    table.add_column("cached MB\n(B/row)", justify="right")
    for r in results:
        cells = [f"{r['visible']:,}", f"{r['floor']['med']:.2f} / {r['floor']['p95']:.2f}"]
        for key in ("warm_touch", "warm", "topic", "miss", "cold"):
            c = r[key]
            cells.append(f"{c['med']:.2f} / {c['p95']:.2f} / {c['x']:.2f}")
        cells.append(f"{r['fresh_ms']:.1f} / {r['fresh_x']:.2f}")
        cells.append(f"{r['prepared_ms']:.1f} / {r['prepared_x']:.2f}")
        cells.append(f"{r['cache_bytes'] / 1e6:.1f} ({r['cache_bytes_per_row']:.0f})")
        table.add_row(*cells)
    Console(width=190).print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=list(SIZES))
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--writer", help=argparse.SUPPRESS)
    parser.add_argument("--fresh", help=argparse.SUPPRESS)
    parser.add_argument("--prepared", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.writer:
        return writer_main(args.writer)
    if args.fresh:
        return fresh_main(args.fresh)
    reps = QUICK if args.quick else REPS
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            r = measure(size, reps.get(size, 10), FRESH_REPS.get(size, 2), Path(tmp))
            print(f"{size:,}: seeded in {r['seeded_s']} s", file=sys.stderr)
            results.append(r)
    print_table(results)
    if args.json:
        meta = {"cpus": os.cpu_count(), "load": os.getloadavg()[0], "results": results}
        args.json.write_text(json.dumps(meta, indent=1))


if __name__ == "__main__":
    main()
