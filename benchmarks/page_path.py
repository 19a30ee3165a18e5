"""How long the human's page takes, and a commit, as the store grows: SQLite and PostgreSQL.

The page: a human with N rows about them (a fifth of them closed) beside the same again about
others, one page of 50 lines (`page_model.manage_page(..., limit=50)`: open ones newest first,
with every persona's counts), the page one cursor down, and a search by text — against the
floor: a bare SELECT of every row about the human, which is what the page read before it paged.

The commit: a commit-shaped write transaction at each store size — the persona's writer lock
(`store.writer`), three rows inserted and an older one closed (`memories.insert_row`,
`memories.close`), the version triggers bumping and logging each — and the persona's version
read after, each timed whole. Flat within 20 % of the smallest store is the target.

The whole commit: `steps.run_commit` on real spells, each in a private room of its own, run up
to the commit beforehand (extract → embed → route with the google-genai client against the
local stub, two candidates each, as benchmarks/commit_scaling.py prepares them), for a new
human (`commit_new`: the store is big, the rows about them are not) and for the human with N
rows about them (`commit_dan`), with the persona's version bump each made.

    .venv/bin/python benchmarks/page_path.py [--sizes 1000 100000 1000000]
        [--url postgresql+psycopg://…] [--reps 30] [--json F]

Without --url, SQLite only; with it, a database of its own is made on that server and dropped
after (never the one named). Figures only, no assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, insert, select, text, update
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.read_path import p95, timed  # noqa: E402
from benchmarks.write_path import extract_two  # noqa: E402
from memory_worker import app_side, models  # noqa: E402
from memory_worker.core import settings as settings_mod  # noqa: E402
from memory_worker.core import tables as t  # noqa: E402
from memory_worker.core.names import sentence_key  # noqa: E402
from memory_worker.core.rows import Candidate, Spell  # noqa: E402
from memory_worker.ops import embedded  # noqa: E402
from memory_worker.storage import memories, read_path, store  # noqa: E402
from memory_worker.testing.gemini_stub import GeminiStub, gemini_responder  # noqa: E402
from memory_worker.web import page_model
from memory_worker.write import steps  # noqa: E402

DAN = 42
PERSONAS = ("warren", "nolan")
PAGE = 50
BATCH = 5_000
NOW = "2026-12-06T10:00:00+00:00"
# Past this store size the floor is timed once: it reads every row about Dan, half a minute at
# 1M rows. (Dan's whole commit no longer reads his rows: it is timed as often as the rest.)
BIG = 100_000
SEEDED = "2026-11-01T10:00:00+00:00"  # not today: the seed fills no daily cap of the commits'


def _row(i: int, subject: str) -> dict:
    text = f"{subject} said thing number {i}" + (" about tea" if i % 97 == 0 else "")
    return {
        "persona": PERSONAS[i % 2],
        "subject": subject,
        "witnessed": "[42]",
        "room_id": "dm",
        "kind": "fact",
        "text": text,
        "sentence_key": sentence_key(text),  # as `memories.insert_row` writes it
        "importance": 5,
        "evidence": "[]",
        "created": SEEDED,
        "valid_to": "2026-11-20" if i % 5 == 0 else None,
    }


def seed(url: str, size: int) -> None:
    """`size` rows about Dan and as many about others. On PostgreSQL the per-row version
    triggers are off while loading (they slow a bulk load: docs/performance.md), then the
    personas' versions and the page's counters are set as they would have counted."""
    with store.transaction(url) as conn:
        app_side.add_user(conn, DAN, "Dan")
        for p in PERSONAS:
            app_side.add_persona(conn, p, p.title())
    pg = not url.startswith("sqlite")
    with store.transaction(url) as conn:
        if pg:
            conn.execute(text("ALTER TABLE persona_memory DISABLE TRIGGER USER"))
        for start in range(0, 2 * size, BATCH):
            rows = [
                _row(i, f"u:{DAN}" if i % 2 == 0 else f"u:{1000 + i % 50}")
                for i in range(start, min(2 * size, start + BATCH))
            ]
            conn.execute(insert(t.persona_memory), rows)
        if pg:
            conn.execute(text("ALTER TABLE persona_memory ENABLE TRIGGER USER"))
            memories.recount(conn)  # the page's counters, as the triggers would have kept them
            for p in PERSONAS:
                conn.execute(
                    insert(t.persona_memory_versions).values(persona=p, version=size, stamp=1)
                )
    with store.engine(url).connect() as conn:
        if pg:
            conn.execute(text("ANALYZE"))
            conn.commit()


def floor(url: str) -> Callable[[], object]:
    """Every row about Dan, open and closed, whole: what the page read before it paged."""

    def run() -> object:
        with store.engine(url).connect() as conn:
            return memories.rows_about(conn, DAN)

    return run


def commit_once(url: str, n: int) -> None:
    """A commit-shaped transaction: three rows in, an older one closed, the version read."""
    persona = PERSONAS[n % 2]
    with store.writer(persona, url) as conn:
        ids = [
            memories.insert_row(
                conn,
                persona=persona,
                room_id="dm",
                witnessed=[DAN],
                candidate=Candidate(f"u:{DAN}", "fact", f"u:{DAN} said new thing {n}.{k}", 5, (1,)),
                embedding=None,
                now=SEEDED,  # not today: these fill no daily cap of the whole commits'
            )
            for k in range(3)
        ]
        pm = t.persona_memory.c
        older = conn.execute(
            select(pm.id).where(pm.persona == persona, pm.valid_to.is_(None)).limit(1)
        ).scalar_one()
        memories.close(conn, older, NOW[:10], ids[0])
        read_path.versions(conn, [persona])


def prepared_spell(human: int, n: int) -> Spell:
    """A spell of Warren's in a private room of its own with `human` (three lines said), run
    up to its commit in this process against the stub."""
    s = settings_mod.current()
    room = f"dm-bench-{n}"
    with store.transaction() as conn:
        if human != DAN:
            app_side.add_user(conn, human, f"Ada {human}")
        app_side.add_room(conn, room, "private", [f"u:{human}", "warren"])
        app_side.say(conn, room, human, "I keep bees on my roof.")
        app_side.say(conn, room, "warren", "Bees! Tell me more.")
        app_side.say(conn, room, human, "I have an exam on Friday, ask me how it went.")
    spell = steps.begin("warren", room)
    assert spell is not None
    spell = steps.run_extract(spell, models.chat_model(s))
    spell = steps.run_embed(spell, models.embedder(s))
    return steps.run_route(spell, models.chat_model(s))


def whole_commits(humans: list[int], first: int) -> tuple[list[float], list[int], float]:
    """A spell with each human prepared (untimed: a commit changes what the next routes
    against), then its `run_commit` timed; and the persona's version bump each made, and the
    seconds spent preparing."""
    ms, bumps, preparing = [], [], 0.0
    for n, human in enumerate(humans, start=first):
        started = time.perf_counter()
        spell = prepared_spell(human, n)
        with store.engine().connect() as conn:
            before = read_path.versions(conn, ["warren"])["warren"].counter
        preparing += time.perf_counter() - started
        started = time.perf_counter()
        outcome = steps.run_commit(spell)
        ms.append((time.perf_counter() - started) * 1000)
        assert outcome.status == "committed", outcome.status
        with store.engine().connect() as conn:
            bumps.append(read_path.versions(conn, ["warren"])["warren"].counter - before)
        backdated(outcome.row_ids)
    return ms, bumps, preparing


def backdated(row_ids: list[int]) -> None:
    """Rows a timed commit wrote, dated as the seed: the daily cap (12 a human) would drop
    the next spells' candidates about the same human, and they would commit nothing."""
    if row_ids:
        pm = t.persona_memory.c
        with store.transaction() as conn:
            conn.execute(update(t.persona_memory).where(pm.id.in_(row_ids)).values(created=SEEDED))


def measure(url: str, size: int, reps: int) -> dict:
    started = time.perf_counter()
    seed(url, size)
    seeded_s = time.perf_counter() - started
    first = page_model.manage_page(DAN, limit=PAGE)
    assert first.next_cursor is not None
    walk = [first.next_cursor]
    cases: dict[str, Callable[[], object]] = {
        "floor": floor(url),
        "first_page": lambda: page_model.manage_page(DAN, limit=PAGE),
        "next_page": lambda: page_model.manage_page(DAN, cursor=walk[0], limit=PAGE),
        "search": lambda: page_model.manage_page(DAN, query="about tea", limit=PAGE),
    }
    ms: dict[str, list[float]] = {name: [] for name in [*cases, "commit"]}
    big = size > BIG
    for n in range(reps):
        # A walk begun now (untimed): the commit-shaped writes below close a row about Dan, and
        # a walk begun before that says the list changed (`page_model.page_lines`).
        walk[0] = page_model.manage_page(DAN, limit=PAGE).next_cursor
        for name, fn in cases.items():
            if not (big and name == "floor" and n):
                ms[name].append(timed(fn))
        ms["commit"].append(timed(lambda n=n: commit_once(url, n)))
    ms["commit_new"], new_bumps, new_s = whole_commits([5000 + n for n in range(reps)], 0)
    ms["commit_dan"], dan_bumps, dan_s = whole_commits([DAN] * reps, reps)
    base = statistics.median(ms["floor"])
    out: dict = {
        "size": size,
        "seeded_s": round(seeded_s, 1),
        "prepared_s": round(new_s + dan_s, 1),
        "load": os.getloadavg()[0],
        "bump": {
            "commit_new": statistics.median(new_bumps),
            "commit_dan": statistics.median(dan_bumps),
        },
    }
    for name, got in ms.items():
        med = statistics.median(got)
        out[name] = {"med": med, "p95": p95(got), "x": med / base}
    return out


@contextmanager
def own_database(server: str | None, tmp: Path, size: int) -> Iterator[str]:
    """A fresh store for one size: a SQLite file, or a database of its own on `server`."""
    if server is None:
        url = f"sqlite:///{tmp / f'page_{size}.db'}"
        store.init_db(url)
        yield url
        store.dispose_all()
        return
    name = f"mw_bench_page_{uuid.uuid4().hex[:8]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = make_url(server).set(database=name).render_as_string(hide_password=False)
    try:
        store.init_db(url)
        yield url
    finally:
        store.dispose_all()
        with admin.connect() as c:
            c.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


def run(server: str | None, sizes: list[int], reps: int) -> list[dict]:
    results = []
    with tempfile.TemporaryDirectory() as tmp, GeminiStub() as stub:
        stub.chat_responder = gemini_responder(extract_two)
        try:
            for size in sizes:
                with own_database(server, Path(tmp), size) as url:
                    base = settings_mod.Settings.from_env({"MW_DATABASE_URL": url})
                    settings_mod.configure(stub.settings(base, state_dir=Path(tmp) / "state"))
                    models.clear_cache()
                    started = time.perf_counter()
                    r = measure(url, size, reps)
                    r["run_s"] = round(time.perf_counter() - started, 1)
                    r["database"] = "sqlite" if server is None else "postgresql"
                    print(json.dumps(r), file=sys.stderr)
                    results.append(r)
        finally:  # the rate limiter's embedded Redis, started by the first model call
            embedded.stop(Path(tmp) / "state")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[1_000, 100_000])
    parser.add_argument("--url", help="a PostgreSQL server (its own database is made)")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    results = run(None, args.sizes, args.reps)
    if args.url:
        results += run(args.url, args.sizes, args.reps)
    smallest: dict[tuple[str, str], float] = {}
    for r in results:
        grew = {
            k: r[k]["med"] / smallest.setdefault((r["database"], k), r[k]["med"])
            for k in ("commit", "commit_new", "commit_dan")
        }
        print(
            f"{r['database']:<10} {r['size']:>9,}  floor {r['floor']['med']:8.2f} ms  "
            + "  ".join(
                f"{k} {r[k]['med']:.2f}/{r[k]['p95']:.2f} ms ({r[k]['x']:.3f}×)"
                for k in ("first_page", "next_page", "search")
            )
            + "".join(
                f"  {k} {r[k]['med']:.2f}/{r[k]['p95']:.2f} ms (×{grew[k]:.2f} of the first)"
                for k in ("commit", "commit_new", "commit_dan")
            )
            + f"  bump {r['bump']['commit_new']}/{r['bump']['commit_dan']}"
            + f"  seeded {r['seeded_s']} s, run {r['run_s']} s"
        )
    if args.json:
        args.json.write_text(json.dumps({"load": os.getloadavg()[0], "results": results}, indent=1))


if __name__ == "__main__":
    main()
