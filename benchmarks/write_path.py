"""Write-path throughput and CPU: spells through a real worker, beside a bare chain of six
no-op Celery tasks (as many as a spell: the fan-out and five steps) on the same broker, in the
same run.

    .venv/bin/python benchmarks/write_path.py [--spells 200] [--rounds 3] [--slow-spells 60]

1. Zero latency: the model is the local Gemini stub (memory_worker/testing/gemini_stub.py)
   answering at once,
   so what is left is our code, the google-genai client's HTTP, Celery, Redis and SQLite.
   Prints spells/s against no-op chains/s, and the worker's CPU ms per spell and per chain
   (from /proc: user + system time of the worker process), in steady state: each round's
   fresh worker first runs a tenth as many of both (its one-off cost is printed apart).
2. CPU per step, in-process (thread CPU time of each step function, the stub excluded).
3. A one-second model: the stub answers every call after 1 s; with the configured global rate
   limit (MW_MODEL_RPM, 600 a minute = 10/s) and a model worker of 32 threads (the Procfile's),
   model calls per second as a fraction of the limit: end to end, and while the pipeline is
   full (`steady_rate`).

Also prints the tokens a spell costs on the demo conversation (the replay provider's chars/4
estimate: no key here). Figures only, no assertions.
"""

from __future__ import annotations

import argparse
import json
import os
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

from memory_worker import app_side, models
from memory_worker.core import settings as settings_mod  # noqa: E402
from memory_worker.core import tables as t  # noqa: E402
from memory_worker.models.scripted import transcript_ids  # noqa: E402
from memory_worker.ops import embedded, local_worker
from memory_worker.storage import store
from memory_worker.testing.gemini_stub import (  # noqa: E402
    GeminiStub,
    default_embed_responder,
    gemini_responder,
)

MODEL_CALLS_PER_SPELL = 3  # extract, embed, route: each takes a slot of the global rate limit

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


def seed_rooms(n: int, first: int = 0) -> None:
    with store.transaction() as conn:
        if not first:
            app_side.add_persona(conn, "warren", "Warren")
        for i in range(first, first + n):
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


def cpu_ms(pid: int) -> float:
    """User + system CPU time of a process so far, in ms (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000.0 / os.sysconf("SC_CLK_TCK")


def bench_spells(n: int, first: int = 0) -> float:
    from memory_worker import events

    seed_rooms(n, first)
    start = time.perf_counter()
    for i in range(first, first + n):
        events.room_quiet(f"dm-{i}")
    wait_until(toasted, first + n)
    return n / (time.perf_counter() - start)


def bench_noop(n: int) -> float:
    from celery import chain

    from benchmarks.noop_tasks import DONE_KEY, noop_done, noops
    from memory_worker.ops import broker
    from memory_worker.tasks.celery_app import app

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
    from memory_worker.write import steps

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
            spell = steps.begin("warren", "dm-dan")
            assert spell is not None
            spell = steps.run_extract(spell, models.chat_model(s))
            spell = steps.run_embed(spell, models.embedder(s))
            spell = steps.run_route(spell, models.chat_model(s))
            assert steps.run_commit(spell).status == "committed", spell.parked
            out.append((label, spell.tokens_in, spell.tokens_out))
    return out


def step_cpu(n: int) -> dict[str, float]:
    """CPU ms of each step function per spell, in this thread (the stub's threads excluded)."""
    from memory_worker import models
    from memory_worker.write import steps

    s = settings_mod.current()
    seed_rooms(n)
    spent = dict.fromkeys(("begin", "extract", "embed", "route", "commit", "notify"), 0.0)
    for i in range(n):
        clock = time.thread_time
        t0 = clock()
        spell = steps.begin("warren", f"dm-{i}")
        t1 = clock()
        spell = steps.run_extract(spell, models.chat_model(s))  # type: ignore[arg-type]
        t2 = clock()
        spell = steps.run_embed(spell, models.embedder(s))
        t3 = clock()
        spell = steps.run_route(spell, models.chat_model(s))
        t4 = clock()
        steps.run_commit(spell)
        t5 = clock()
        steps.mark_delivered(steps.place_toasts(spell.persona, spell.room_id))  # no channel
        t6 = clock()
        if i >= n // 5:  # the first fifth warms caches and connections
            for k, a, b in zip(
                spent, (t0, t1, t2, t3, t4, t5), (t1, t2, t3, t4, t5, t6), strict=True
            ):
                spent[k] += (b - a) * 1000.0
    counted = n - n // 5
    return {k: v / counted for k, v in spent.items()}


def slow_model(stub: GeminiStub, latency_s: float, arrivals: list[float]) -> None:
    """Every model call answers after `latency_s` (the stub serves each request in a thread);
    the moment each call arrives is appended to `arrivals`."""
    chat = gemini_responder(extract_two)

    def slow_chat(body: dict) -> object:
        arrivals.append(time.perf_counter())
        time.sleep(latency_s)
        return chat(body)

    def slow_embed(texts: list[str], dims: int) -> list[list[float]]:
        arrivals.append(time.perf_counter())
        time.sleep(latency_s)
        return default_embed_responder(texts, dims)

    stub.chat_responder = slow_chat
    stub.embed_responder = slow_embed


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--spells", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--slow-spells", type=int, default=120, help="0 skips the 1 s model run")
    p.add_argument("--latency", type=float, default=1.0)
    p.add_argument("--json", type=Path, help="also write the figures here")
    a = p.parse_args()

    tokens = demo_tokens()
    spell_rates, noop_rates, spell_cpu, noop_cpu, warm_cpu = [], [], [], [], []
    warm = max(8, a.spells // 10)
    slow: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp, GeminiStub() as stub:
        stub.chat_responder = gemini_responder(extract_two)
        state = Path(tmp) / "redis"
        url = embedded.ensure_running(state)
        base = stub.settings(
            settings_mod.Settings(broker_url=url, state_dir=state),
            model_requests_per_minute=6_000_000,
        )
        settings_mod.configure(base.with_(database_url=f"sqlite:///{tmp}/steps.db"))
        models.clear_cache()
        store.init_db()
        steps = step_cpu(60)
        from memory_worker.tasks.celery_app import app

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
                # A fresh worker's first tasks pay once for imports (google-genai: ~0.5 s),
                # per-thread connections and compiled statements: steady state is measured after.
                cold = cpu_ms(worker.pid)
                bench_noop(warm)
                bench_spells(warm)
                warm_cpu.append((cpu_ms(worker.pid) - cold) / warm)
                before = cpu_ms(worker.pid)
                noop_rates.append(bench_noop(a.spells))
                middle = cpu_ms(worker.pid)
                spell_rates.append(bench_spells(a.spells, first=warm))
                noop_cpu.append((middle - before) / a.spells)
                spell_cpu.append((cpu_ms(worker.pid) - middle) / a.spells)
                local_worker.stop(worker)
                worker = None
            if a.slow_spells:
                slow = bench_slow(stub, base, tmp, a.slow_spells, a.latency)
        finally:
            if worker is not None:
                local_worker.stop(worker)
            embedded.stop(state)

    median = statistics.median
    sm, nm = median(spell_rates), median(noop_rates)
    figures = {
        "spells_per_s": sm,
        "chains_per_s": nm,
        "ratio": sm / nm,
        "worker_cpu_ms_per_spell": median(spell_cpu),
        "worker_cpu_ms_per_chain": median(noop_cpu),
        "warmup": warm,
        "worker_cpu_ms_first_spells": median(warm_cpu),
        "step_cpu_ms": steps,
        "slow": slow,
        "tokens": tokens,
    }
    print_tables(a, figures, spell_rates, noop_rates)
    if a.json:
        a.json.write_text(json.dumps(figures, indent=1))


def bench_slow(stub: GeminiStub, base, tmp: str, n: int, latency: float) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Spells through a model worker of 32 threads (the Procfile's) with a slow model, under
    the default global rate limit: model calls per second against that limit."""
    from memory_worker.tasks.celery_app import app

    per_minute = settings_mod.Settings().model_requests_per_minute
    rate = per_minute / 60.0
    arrivals: list[float] = []
    slow_model(stub, latency, arrivals)
    s = settings_mod.configure(
        base.with_(database_url=f"sqlite:///{tmp}/slow.db", model_requests_per_minute=per_minute)
    )
    store.init_db()
    worker = local_worker.start(s, concurrency=32)
    try:
        local_worker.wait_ready(app)
        warm = max(4, n // 6)
        bench_spells(warm)  # fill the pipeline's threads and connections first
        started = time.perf_counter()
        spells_per_s = bench_spells(n, first=warm)
    finally:
        local_worker.stop(worker)
    calls_per_s = spells_per_s * MODEL_CALLS_PER_SPELL
    steady = steady_rate([t for t in arrivals if t >= started])
    return {
        "latency_s": latency,
        "rate_limit": rate,
        "spells": n,
        "spells_per_s": spells_per_s,
        "model_calls_per_s": calls_per_s,
        "fraction_of_limit": calls_per_s / rate,
        "steady_calls_per_s": steady,
        "steady_fraction_of_limit": steady / rate,
    }


def steady_rate(arrivals: list[float]) -> float:
    """Model calls per second from the tenth to the ninetieth percentile call: how much of the
    quota the pipeline uses while it has work. End to end also counts the run's first second
    (only extracts can go) and its last two (only the last spells' embeds and routes are
    left), which a longer run spreads thinner."""
    a = sorted(arrivals)
    lo, hi = len(a) // 10, len(a) - 1 - len(a) // 10
    return (hi - lo) / (a[hi] - a[lo])


def print_tables(a, f: dict, spell_rates: list[float], noop_rates: list[float]) -> None:  # type: ignore[no-untyped-def]
    table = Table(
        title=f"write path · {a.spells} spells x {a.rounds} rounds · "
        f"threads pool, concurrency {a.concurrency} · zero-latency model"
    )
    for col, justify in (("what", "left"), ("median", "right"), ("rounds", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    table.add_row(
        "spells/s (extract→embed→route→commit→notify)",
        f"{f['spells_per_s']:.1f}",
        " ".join(f"{x:.1f}" for x in spell_rates),
    )
    table.add_row(
        "chains/s, six no-op tasks",
        f"{f['chains_per_s']:.1f}",
        " ".join(f"{x:.1f}" for x in noop_rates),
    )
    table.add_row("ratio spell / no-op chain", f"{f['ratio']:.2f}", "")
    table.add_row("worker CPU ms per spell", f"{f['worker_cpu_ms_per_spell']:.1f}", "")
    table.add_row("worker CPU ms per no-op chain", f"{f['worker_cpu_ms_per_chain']:.1f}", "")
    table.add_row(
        f"a fresh worker's first {f['warmup']} spells + chains: CPU ms per pair (not above)",
        f"{f['worker_cpu_ms_first_spells']:.1f}",
        "",
    )
    console.print(table)
    st = Table(title="CPU ms per spell by step, in-process (the stub's threads excluded)")
    for k in f["step_cpu_ms"]:
        st.add_column(k, justify="right")
    st.add_column("total", justify="right")
    st.add_row(
        *(f"{v:.2f}" for v in f["step_cpu_ms"].values()), f"{sum(f['step_cpu_ms'].values()):.1f}"
    )
    console.print(st)
    if f["slow"]:
        s = f["slow"]
        console.print(
            f"{s['latency_s']:.1f} s model, rate limit {s['rate_limit']:.0f} calls/s, model worker "
            f"of 32 threads, {s['spells']} spells: end to end {s['spells_per_s']:.2f} spells/s = "
            f"{s['model_calls_per_s']:.1f} model calls/s = {s['fraction_of_limit']:.2f} of the "
            f"limit; steady (10th to 90th percentile call) {s['steady_calls_per_s']:.1f} model "
            f"calls/s = {s['steady_fraction_of_limit']:.2f} of the limit"
        )
    tt = Table(title="tokens per spell on the demo conversation (replay: chars/4 estimate)")
    for col in ("spell", "tokens in", "tokens out"):
        tt.add_column(col)
    for label, tin, tout in f["tokens"]:
        tt.add_row(label, str(tin), str(tout))
    console.print(tt)


if __name__ == "__main__":
    main()
