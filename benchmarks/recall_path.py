"""How long on-demand recall takes per human message, against the floor and the block.

The store is `read_path`'s (1k / 10k rows the persona may see in a private chat with Dan, plus
noise the audience rule keeps out). In one run, interleaved, we time:

- floor          — stdlib sqlite3: SELECT * of exactly the visible rows through the same index;
- block          — `build_block`, cache warm, touch off (what a room open costs);
- recall         — `reader.recall(..., query_vector=v, block_ids=the block's)`, touch off: the
                   app holds the block and the message's vector;
- recall+block   — the same without `block_ids`: recall works out the block's rows itself;
- recall+touch   — the first, touching what it returns (the touch is flushed in the background).

Then the query's embedding alone, per local embedder (no network on either): a message's
recall costs `recall` plus the embedder's row. The aim (issue 9): ≤ 10 ms median at 10k rows.

    .venv/bin/python benchmarks/recall_path.py [--sizes 1000 10000] [--dims 384] [--quick]

Figures only, no assertions. Temp SQLite files, built by the real migrations.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script, too

import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from benchmarks import read_path  # noqa: E402
from benchmarks.read_path import DAN, FLOOR_SQL, NOW, PERSONA, p95, seed, timed  # noqa: E402
from memory_worker import reader, store  # noqa: E402
from memory_worker.models import named_embedder  # noqa: E402
from memory_worker.models.base import Embedder  # noqa: E402
from memory_worker.vectors import quantise  # noqa: E402

REPS = {1_000: 200, 10_000: 60, 100_000: 10}
QUICK = {1_000: 40, 10_000: 15, 100_000: 3}
MESSAGES = [
    "Did you ever fix the boat's engine?",
    "How did the interview at Tencent go on Thursday?",
    "My sister is visiting from Chengdu next week.",
    "I think I'll sell the flat after all.",
]


def floor(path: str) -> int:
    with sqlite3.connect(path) as conn:
        return len(conn.execute(FLOOR_SQL, (PERSONA,)).fetchall())


def measure(size: int, reps: int, tmp: Path) -> dict:
    path = tmp / f"recall{size}.db"
    url = f"sqlite:///{path}"
    store.init_db(url)
    seed(url, size, np.random.default_rng(7))
    rng = np.random.default_rng(11)
    query = rng.integers(-127, 128, read_path.DIMS, dtype=np.int8).tobytes()
    block = reader.build_block(PERSONA, {DAN}, "dm", now=NOW, url=url, touch=False)
    recall = partial(reader.recall, PERSONA, {DAN}, "dm", "", now=NOW, url=url)
    cases: dict[str, Callable[[], object]] = {
        "floor": partial(floor, str(path)),
        "block": partial(reader.build_block, PERSONA, {DAN}, "dm", now=NOW, url=url, touch=False),
        "recall": partial(recall, query_vector=query, block_ids=block.row_ids, touch=False),
        "recall+block": partial(recall, query_vector=query, touch=False),
        "recall+touch": partial(recall, query_vector=query, block_ids=block.row_ids),
    }
    for fn in cases.values():
        fn()  # warm the page cache, the pool and the read cache
    ms: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(reps):
        for name, fn in cases.items():
            ms[name].append(timed(fn))
    reader.close(timeout=60)  # its touches and fills land before the store goes
    store.dispose_all()
    return {"size": size, "reps": reps, "ms": ms}


def embed_times(reps: int) -> dict[str, list[float]]:
    """One message's embedding, per offline embedder (the model loaded once before)."""
    out: dict[str, list[float]] = {}
    for name in ("hashing", "e5"):
        try:
            embedder = named_embedder(name)
        except Exception as e:  # noqa: BLE001 — the local extra may not be installed
            print(f"  {name}: not measured ({e})")
            continue
        embedder.embed(MESSAGES[:1], purpose="query")
        out[name] = [
            timed(partial(_embed_one, embedder, m))
            for _ in range(max(reps // len(MESSAGES), 5))
            for m in MESSAGES
        ]
    return out


def _embed_one(embedder: Embedder, message: str) -> bytes:
    return quantise(embedder.embed([message], purpose="query")[0])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000])
    p.add_argument("--quick", action="store_true", help="fewer repetitions")
    p.add_argument("--dims", type=int, default=768, help="768: gemini's; 384: the local e5")
    a = p.parse_args()
    read_path.DIMS = a.dims  # the seeded vectors' size
    reps = QUICK if a.quick else REPS
    console = Console(width=140)
    with tempfile.TemporaryDirectory() as tmp:
        results = [measure(size, reps.get(size, 20), Path(tmp)) for size in a.sizes]
    table = Table(
        title=f"on-demand recall vs the floor and the block, {a.dims}-dim rows "
        "(ms: median / p95 / × floor)",
        caption="floor: SELECT * of the visible rows, nothing else · recall: query vector given",
    )
    table.add_column("visible rows", justify="right")
    names = list(results[0]["ms"])
    for name in names:
        table.add_column(name, justify="right")
    for r in results:
        f_med = statistics.median(r["ms"]["floor"])
        cells = [f"{r['size']:,}"]
        for name in names:
            med, tail = statistics.median(r["ms"][name]), p95(r["ms"][name])
            cells.append(f"{med:.2f} / {tail:.2f} / {med / f_med:.2f}")
        table.add_row(*cells)
    console.print(table)
    embeds = embed_times(reps.get(10_000, 20))
    et = Table(title="one message's query embedding, in process, no network (ms)")
    for col in ("embedder", "median", "p95"):
        et.add_column(col, justify="right")
    for name, ms in embeds.items():
        et.add_row(name, f"{statistics.median(ms):.2f}", f"{p95(ms):.2f}")
    console.print(et)


if __name__ == "__main__":
    main()
