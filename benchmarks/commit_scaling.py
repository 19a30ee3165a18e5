"""Does the commit step scale out? Commits per second with 1 and with 2 commit processes.

    .venv/bin/python -m benchmarks.commit_scaling --url postgresql+psycopg://postgres@127.0.0.1:5432/bench
    .venv/bin/python -m benchmarks.commit_scaling            # SQLite, for comparison

For each process count, a fresh store: 40 personas, each in private rooms with its own human;
every room says three lines. Spells are prepared in-process up to the commit (the real
extract → embed → route with the google-genai client against the local stub), then committed by
`steps.run_commit` — the commit task's whole body — split round-robin over the processes,
which start together. SQLite has one writer at a time (BEGIN IMMEDIATE); PostgreSQL takes a
per-persona advisory lock, so commits of different personas may run side by side.

The database named in --url is emptied (every table dropped) before each run. Figures only.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memory_worker import app_side, models  # noqa: E402
from memory_worker.core import settings as settings_mod  # noqa: E402
from memory_worker.core.rows import Spell  # noqa: E402
from memory_worker.core.tables import metadata  # noqa: E402
from memory_worker.storage import store  # noqa: E402

PERSONAS = 40


def reset(url: str) -> None:
    eng = store.engine(url)
    with eng.begin() as conn:
        metadata.drop_all(conn)
        conn.exec_driver_sql("DROP TABLE IF EXISTS alembic_version")
    store.init_db(url)


def seed(n: int) -> list[tuple[str, str]]:
    """n private rooms, persona i % PERSONAS in each; returns (persona, room) pairs."""
    pairs = []
    with store.transaction() as conn:
        for p in range(PERSONAS):
            app_side.add_persona(conn, f"p{p}", f"Persona {p}")
        for i in range(n):
            persona, room, human = f"p{i % PERSONAS}", f"dm-{i}", 1000 + i
            app_side.add_user(conn, human, f"Ada {i}")
            app_side.add_room(conn, room, "private", [f"u:{human}", persona])
            app_side.say(conn, room, human, "I keep bees on my roof.")
            app_side.say(conn, room, persona, "Bees! Tell me more.")
            app_side.say(conn, room, human, "I have an exam on Friday, ask me how it went.")
            pairs.append((persona, room))
    return pairs


def prepare(pairs: list[tuple[str, str]]) -> list[dict]:
    """Each spell run up to its commit, in this process, against the stub."""
    from memory_worker.write import steps

    s = settings_mod.current()
    out = []
    for persona, room in pairs:
        spell = steps.begin(persona, room)
        assert spell is not None
        spell = steps.run_extract(spell, models.chat_model(s))
        spell = steps.run_embed(spell, models.embedder(s))
        spell = steps.run_route(spell, models.chat_model(s))
        out.append(spell.to_json())
    return out


def committer(url: str, spells: list[dict], start: mp.Event, out: mp.Queue) -> None:  # type: ignore[type-arg]
    from memory_worker.write import steps

    settings_mod.configure(settings_mod.Settings(database_url=url))
    store.engine(url).connect().close()  # imported and connected before the clock starts
    out.put("ready")
    start.wait()
    t0 = time.perf_counter()
    statuses = [steps.run_commit(Spell.from_json(s)).status for s in spells]
    out.put((time.perf_counter() - t0, statuses))


def run(url: str, spells: list[dict], processes: int) -> dict:
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    shares = [spells[i::processes] for i in range(processes)]
    procs = [ctx.Process(target=committer, args=(url, s, start, out)) for s in shares]
    for p in procs:
        p.start()
    for _ in procs:
        assert out.get(timeout=120) == "ready"
    t0 = time.perf_counter()
    start.set()
    results = [out.get(timeout=600) for _ in procs]
    wall = time.perf_counter() - t0
    for p in procs:
        p.join()
    statuses = [s for _, got in results for s in got]
    return {
        "processes": processes,
        "spells": len(spells),
        "wall_s": wall,
        "commits_per_s": len(spells) / wall,
        "committed": statuses.count("committed"),
        "stale": statuses.count("stale"),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", help="the store (default: a temp SQLite file)")
    p.add_argument("--spells", type=int, default=400)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json", type=Path)
    a = p.parse_args()
    from benchmarks.write_path import extract_two
    from memory_worker.testing.gemini_stub import GeminiStub, gemini_responder

    results: dict[int, list[dict]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory() as tmp, GeminiStub() as stub:
        url = a.url or f"sqlite:///{tmp}/commit.db"
        stub.chat_responder = gemini_responder(extract_two)
        base = stub.settings(settings_mod.Settings(database_url=url))
        for _ in range(a.rounds):
            for processes in (1, 2):
                settings_mod.configure(base)
                models.clear_cache()
                reset(url)
                spells = prepare(seed(a.spells))
                store.dispose_all()
                results[processes].append(run(url, spells, processes))
                print(json.dumps(results[processes][-1]), file=sys.stderr)
    summary = {
        str(k): {
            "commits_per_s": statistics.median(r["commits_per_s"] for r in v),
            "rounds": [round(r["commits_per_s"], 1) for r in v],
            "stale": sum(r["stale"] for r in v),
        }
        for k, v in results.items()
    }
    dialect = "postgresql" if (a.url or "").startswith("postgresql") else "sqlite"
    speedup = summary["2"]["commits_per_s"] / summary["1"]["commits_per_s"]
    print(
        f"{dialect}: 1 commit process {summary['1']['commits_per_s']:.0f} commits/s, "
        f"2 processes {summary['2']['commits_per_s']:.0f} commits/s ({speedup:.2f}x); "
        f"rounds {summary['1']['rounds']} / {summary['2']['rounds']}"
    )
    if a.json:
        a.json.write_text(json.dumps({"dialect": dialect, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
