"""What stamping a line costs: a line's insert with and without the stamp trigger, by room size.

    .venv/bin/python benchmarks/line_insert.py                 # SQLite, temporary files
    .venv/bin/python benchmarks/line_insert.py --url postgresql+psycopg://postgres@127.0.0.1:5432/postgres
        [--lines 400] [--json F]                               # … and PostgreSQL after it

For each room size (2, 10 and 50 members: a tenth of them personas, at least one), two fresh
stores side by side, the same room of that many members in each, and the stamp trigger dropped
in one of them (the floor: the same insert, unstamped). Then `--lines` lines, each inserted in
its own transaction as the app stores a line (`app_side.say`), into both stores in an order
drawn each line, so the two are timed interleaved under the same load; every third line is a
persona's, so the echo rule's look-back runs too. Prints the median and the 95th percentile of
one insert, in milliseconds, with the trigger and without, and the ratio of the medians. With
--url (a server), the same again on PostgreSQL after SQLite: each store a database of its own
made there and dropped after (never the one named). Figures only.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import text  # noqa: E402

from benchmarks.page_path import own_database  # noqa: E402
from benchmarks.read_path import p95  # noqa: E402
from memory_worker import app_side  # noqa: E402
from memory_worker.storage import store  # noqa: E402

SIZES = (2, 10, 50)


def drop_trigger(url: str) -> None:
    with store.engine(url).begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("DROP TRIGGER line_stamp ON lines"))
        else:
            conn.execute(text("DROP TRIGGER line_stamp"))


def room(url: str, members: int) -> list[str | int]:
    """A room of `members` in the store at `url`; who speaks each line, in turn."""
    personas = max(1, members // 10)
    with store.engine(url).begin() as conn:
        for p in range(personas):
            app_side.add_persona(conn, f"p{p}", f"P{p}")
        for h in range(members - personas):
            app_side.add_user(conn, h + 1, f"Human{h}")
        who = [f"u:{h + 1}" for h in range(members - personas)]
        app_side.add_room(conn, "room", "group", who + [f"p{p}" for p in range(personas)])
    return [1 + h for h in range(members - personas)]


@contextmanager
def two_stores(server: str | None, members: int) -> Iterator[dict[bool, str]]:
    """Two fresh stores (a SQLite file each, or a database each on `server`): stamped → url."""
    with ExitStack() as stack:
        urls = {}
        for stamped in (True, False):
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mw-line-insert-")))
            urls[stamped] = stack.enter_context(own_database(server, tmp, members))
        drop_trigger(urls[False])
        yield urls


def paired_run(server: str | None, members: int, lines: int, rng: random.Random) -> dict:
    """Milliseconds of each line's insert, stamped and not, interleaved line by line."""
    took: dict[bool, list[float]] = {True: [], False: []}
    with two_stores(server, members) as urls:
        for url in urls.values():
            humans = room(url, members)  # the same in both
        engines = {stamped: store.engine(url) for stamped, url in urls.items()}
        for n in range(lines):
            speaker: str | int = "p0" if n % 3 == 2 else humans[n % len(humans)]
            order = [True, False]
            rng.shuffle(order)
            for stamped in order:
                start = time.perf_counter()
                with engines[stamped].begin() as conn:
                    app_side.say(conn, "room", speaker, f"line {n}, a sentence of ordinary length.")
                took[stamped].append((time.perf_counter() - start) * 1000)
    on, off = statistics.median(took[True]), statistics.median(took[False])
    return {
        "members": members,
        "on": {"med": on, "p95": p95(took[True])},
        "off": {"med": off, "p95": p95(took[False])},
        "x": on / off,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=None, help="a PostgreSQL server (SQLite, then it)")
    parser.add_argument("--lines", type=int, default=400)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    a = parser.parse_args(argv)
    rng = random.Random(5)
    print(f"{'database':<11}{'members':>8} {'on: median / p95 ms':>20} {'off: median / p95 ms':>21}"
          f" {'×off':>6}")  # fmt: skip
    results = []
    for server in [None, *([a.url] if a.url else [])]:
        database = "sqlite" if server is None else "postgresql"
        for members in SIZES:
            load = os.getloadavg()[0]
            r = {"database": database, **paired_run(server, members, a.lines, rng)}
            r["load"] = [load, os.getloadavg()[0]]  # at the start and the end of this size's run
            results.append(r)
            on, off = r["on"], r["off"]
            print(
                f"{database:<11}{members:>8} {on['med']:>11.3f} / {on['p95']:>6.3f} "
                f"{off['med']:>12.3f} / {off['p95']:>6.3f} {r['x']:>6.2f}"
            )
    if a.json:
        a.json.write_text(json.dumps({"lines": a.lines, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
