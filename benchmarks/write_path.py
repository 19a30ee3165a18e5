"""Write-path throughput: spells per second through a real worker with a zero-latency model,
beside a bare chain of five no-op Celery tasks on the same broker, in the same run.

    .venv/bin/python benchmarks/write_path.py [--spells 200] [--concurrency 8]

The model is the local Gemini stub (tests/stub_gemini.py) answering at once: what is left is
our code, the google-genai client's HTTP, Celery, Redis and SQLite. Also prints the tokens a
spell costs on the demo conversation (the replay provider's chars/4 estimate: no key here).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402
from sqlalchemy import func, select  # noqa: E402

from memory_worker import app_side, embedded, local_worker, store  # noqa: E402
from memory_worker import settings as settings_mod  # noqa: E402
from memory_worker import tables as t  # noqa: E402
from tests.fakes import gemini_responder, transcript_ids  # noqa: E402
from tests.stub_gemini import GeminiStub  # noqa: E402

console = Console()


def extract_two(prompt: str) -> dict:
    """Two candidates about the room's one human (one human a room: the daily cap is per human)."""
    ids = transcript_ids(prompt)
    who = re.search(r"^- (u:\d+) ", prompt, flags=re.M).group(1)  # type: ignore[union-attr]
    return {
        "candidates": [
            {
                "subject": who,
                "kind": "fact",
                "importance": 5,
                "evidence": [ids[0]],
                "text": f"{who} keeps bees on a roof in district {ids[0]}.",
            },
            {
                "subject": who,
                "kind": "open_loop",
                "importance": 7,
                "evidence": [ids[-1]],
                "text": f"{who} has an exam on day {ids[-1]} and asked to be asked about it.",
            },
        ]
    }


def seed_rooms(n: int) -> None:
    with store.transaction() as conn:
        app_side.add_persona(conn, "warren", "Warren")
        for i in range(n):
            room, human = f"dm-{i}", 1000 + i
            app_side.add_user(conn, human, f"Ada {i}")
            app_side.add_room(conn, room, "private", [f"u:{human}", "warren"])
            app_side.say(conn, room, human, "I keep bees on my roof.")
            app_side.say(conn, room, "warren", "Bees! Tell me more.")
            app_side.say(conn, room, human, "I have an exam on Friday, ask me how it went.")


def toasted() -> int:
    """Spells through their last step: each posts one toast."""
    with store.engine().connect() as c:
        return int(c.execute(select(func.count()).select_from(t.notices)).scalar() or 0)


def wait_until(count: callable, target: int, timeout: float = 180) -> float:  # type: ignore[valid-type]
    start = time.perf_counter()
    while count() < target:
        if time.perf_counter() - start > timeout:
            raise SystemExit(f"timed out at {count()}/{target}")
        time.sleep(0.01)
    return time.perf_counter() - start


def bench_spells(n: int) -> float:
    from memory_worker import events

    seed_rooms(n)
    start = time.perf_counter()
    for i in range(n):
        events.room_quiet(f"dm-{i}")
    wait_until(toasted, n)
    return n / (time.perf_counter() - start)


def bench_noop(n: int) -> float:
    from celery import chain

    from benchmarks.noop_tasks import DONE_KEY, noop_done, noops
    from memory_worker import broker
    from memory_worker.celery_app import app

    r = broker.client(app.conf.broker_url)
    r.delete(DONE_KEY)
    start = time.perf_counter()
    for i in range(n):
        chain(noops[0].s({"i": i}), *[x.s() for x in noops[1:]], noop_done.s()).apply_async()
    wait_until(lambda: int(r.get(DONE_KEY) or 0), n)
    return n / (time.perf_counter() - start)


def demo_tokens() -> list[tuple[str, int, int]]:
    """Run the demo's two spells in-process through the replay cassette; tokens per spell."""
    from memory_worker import demo, models
    from memory_worker.write import pipeline

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        s = settings_mod.configure(
            settings_mod.Settings(
                database_url=f"sqlite:///{tmp}/demo.db",
                provider="replay",
                cassette=demo.CASSETTE,
                today=demo.DEMO_TODAY,
            )
        )
        models.clear_cache()
        store.init_db()
        demo.seed(store.engine())
        for label, lines in (
            ("demo spell 1", demo.FIRST_SPELL),
            ("demo spell 2", demo.SECOND_SPELL),
        ):
            demo.say_all(store.engine(), lines)
            spell = pipeline.begin("warren", "dm-dan")
            assert spell is not None
            spell = pipeline.run_extract(spell, models.chat_model(s))
            spell = pipeline.run_embed(spell, models.embedder(s))
            spell = pipeline.run_route(spell, models.chat_model(s))
            assert pipeline.run_commit(spell).status == "committed", spell.parked
            out.append((label, spell.tokens_in, spell.tokens_out))
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--spells", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()

    tokens = demo_tokens()
    spell_rates, noop_rates = [], []
    with tempfile.TemporaryDirectory() as tmp, GeminiStub() as stub:
        stub.chat_responder = gemini_responder(extract_two)
        state = Path(tmp) / "redis"
        url = embedded.ensure_running(state)
        base = stub.settings(
            settings_mod.Settings(broker_url=url, state_dir=state),
            model_requests_per_minute=6_000_000,
        )
        settings_mod.configure(base)
        from memory_worker.celery_app import app

        app.conf.broker_url = url
        worker = None
        try:
            for r in range(a.rounds):
                s = settings_mod.configure(base.with_(database_url=f"sqlite:///{tmp}/w{r}.db"))
                store.init_db()
                worker = local_worker.start(
                    s, concurrency=a.concurrency, extra=["--include", "benchmarks.noop_tasks"]
                )
                local_worker.wait_ready(app)
                noop_rates.append(bench_noop(a.spells))
                spell_rates.append(bench_spells(a.spells))
                local_worker.stop(worker)
                worker = None
        finally:
            if worker is not None:
                local_worker.stop(worker)
            embedded.stop(state)

    table = Table(
        title=f"write path · {a.spells} spells x {a.rounds} rounds · "
        f"threads pool, concurrency {a.concurrency}"
    )
    table.add_column("what")
    table.add_column("median /s", justify="right")
    table.add_column("rounds", justify="right")
    sm, nm = statistics.median(spell_rates), statistics.median(noop_rates)
    table.add_row(
        "spells (extract→embed→route→commit→notify)",
        f"{sm:.1f}",
        " ".join(f"{x:.1f}" for x in spell_rates),
    )
    table.add_row(
        "bare chain of five no-op tasks", f"{nm:.1f}", " ".join(f"{x:.1f}" for x in noop_rates)
    )
    table.add_row("ratio spell / no-op chain", f"{sm / nm:.2f}", "")
    console.print(table)
    tt = Table(title="tokens per spell on the demo conversation (replay: chars/4 estimate)")
    for col in ("spell", "tokens in", "tokens out"):
        tt.add_column(col)
    for label, tin, tout in tokens:
        tt.add_row(label, str(tin), str(tout))
    console.print(tt)


if __name__ == "__main__":
    main()
