"""What stamping a line costs: a line's insert with and without the stamp trigger, by room size.

    .venv/bin/python benchmarks/line_insert.py                 # SQLite, a temporary file
    .venv/bin/python benchmarks/line_insert.py --url postgresql+psycopg://postgres@127.0.0.1:5432/bench

For each room size (2, 10 and 50 members: a tenth of them personas, at least one), a fresh
store, a room of that many members and `--lines` lines, each inserted in its own transaction
as the app stores a line (`app_side.say`); every third line is a persona's, so the echo rule's
look-back runs too. The same again with the trigger dropped. Prints the median and the 95th
percentile of one insert, in milliseconds. The database named in --url is emptied (every table
dropped) before each run. Figures only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import text  # noqa: E402

from memory_worker import app_side  # noqa: E402
from memory_worker.core.tables import metadata  # noqa: E402
from memory_worker.storage import store  # noqa: E402

SIZES = (2, 10, 50)


def reset(url: str) -> None:
    with store.engine(url).begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
        else:
            metadata.drop_all(conn)
            conn.execute(text("DROP TABLE IF EXISTS alembic_version"))


def drop_trigger(url: str) -> None:
    with store.engine(url).begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("DROP TRIGGER line_stamp ON lines"))
        else:
            conn.execute(text("DROP TRIGGER line_stamp"))


def one_run(url: str, members: int, lines: int, stamped: bool) -> list[float]:
    """Milliseconds of each line's insert, in a fresh store."""
    reset(url)
    store.init_db(url)
    if not stamped:
        drop_trigger(url)
    personas = max(1, members // 10)
    eng = store.engine(url)
    with eng.begin() as conn:
        for p in range(personas):
            app_side.add_persona(conn, f"p{p}", f"P{p}")
        for h in range(members - personas):
            app_side.add_user(conn, h + 1, f"Human{h}")
        who = [f"u:{h + 1}" for h in range(members - personas)]
        app_side.add_room(conn, "room", "group", who + [f"p{p}" for p in range(personas)])
    took: list[float] = []
    for n in range(lines):
        speaker: str | int = "p0" if n % 3 == 2 else 1 + n % (members - personas)
        start = time.perf_counter()
        with eng.begin() as conn:
            app_side.say(conn, "room", speaker, f"line {n}, a sentence of ordinary length.")
        took.append((time.perf_counter() - start) * 1000)
    return took


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=None, help="a PostgreSQL store (default: SQLite)")
    parser.add_argument("--lines", type=int, default=400)
    a = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mw-line-insert-") as tmp:
        url = a.url or f"sqlite:///{Path(tmp) / 'bench.db'}"
        print(f"{'members':>8} {'trigger':>8} {'median ms':>10} {'p95 ms':>8}")
        for members in SIZES:
            for stamped in (True, False):
                took = sorted(one_run(url, members, a.lines, stamped))
                p95 = took[int(0.95 * (len(took) - 1))]
                median = statistics.median(took)
                on = "on" if stamped else "off"
                print(f"{members:>8} {on:>8} {median:>10.3f} {p95:>8.3f}")
        store.dispose_all()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
