"""Regenerate docs/performance.md (and its plot) from runs of the benchmarks.

    make perf                       # = .venv/bin/python -m benchmarks.report
    .venv/bin/python -m benchmarks.report --quick          # fewer repetitions, same sizes
    .venv/bin/python -m benchmarks.report --only read      # the read section alone
    .venv/bin/python -m benchmarks.report --only write     # the write section alone
    .venv/bin/python -m benchmarks.report --only faults    # the faults section alone
    .venv/bin/python -m benchmarks.report --only growth    # the page and commits by store size
    .venv/bin/python -m benchmarks.report --only growth --million   # … and at 1M rows (minutes)
    .venv/bin/python -m benchmarks.report --only export    # a human's export
    .venv/bin/python -m benchmarks.report --only lines     # a line's insert, stamped and not
    .venv/bin/python -m benchmarks.report --only page      # no run: the page from the JSON

Runs `benchmarks/read_path.py` twice (1k / 10k / 100k visible rows: every target must hold in
both), its warm-open profile, `benchmarks/recall_path.py`, `benchmarks/write_path.py`,
`benchmarks/faults.py`, `benchmarks/page_path.py`, `benchmarks/export_path.py` and
`benchmarks/line_insert.py` (the last three on SQLite and on PostgreSQL), each in a
subprocess, reads their JSON, writes the tables, and draws open latency against rows held
(docs/perf/open_latency.png; matplotlib is a bench extra). PostgreSQL is a private server the
run starts and removes (`testing.private_postgres`, fsync off), or the server `--postgres`
names (a database of its own made there for each store); without either, SQLite only. Each
section's time is printed as it ends. Every figure in the page comes from these runs on this
machine, but the warm-open profile of the code before its cuts
(docs/perf/read_profile_before.json, measured once); ratios are the point.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "performance.md"
PERF = ROOT / "docs" / "perf"
PLOT = PERF / "open_latency.png"
WRITE_JSON = PERF / "write_path.json"  # the raw figures; the read's: read_path.1.json, .2.json
FAULTS_JSON = PERF / "faults.json"  # benchmarks/faults.py
PROFILE_JSON = PERF / "read_profile.json"  # read_path --profile 1000
PROFILE_BEFORE_JSON = PERF / "read_profile_before.json"  # the same, once, on the code before
RECALL_JSON = PERF / "recall_path.json"  # recall_path --json
GROWTH_JSON = PERF / "page_path.json"  # page_path --json: the page and a commit as the store grows
EXPORT_JSON = PERF / "export_path.json"  # export_path --json: one human's export
LINES_JSON = PERF / "line_insert.json"  # line_insert --json: a line's insert, stamped and not
SECTIONS_JSON = PERF / "sections.json"  # each section's time in its last run, and when
READ_RUNS = 2  # the read benchmark runs twice: every target must hold in both
PLOTTED = {  # read_path's keys → what the plot calls them
    "floor": "floor: bare SELECT of the visible rows",
    "warm_touch": "warm, touch on",
    "topic": "warm, room with a topic",
    "miss": "first open after another process wrote",
    "cold": "cold: the persona's entry dropped",
    "cold_topic": "cold, room with a topic",
    "cold_no_pack": "cold, no pack kept",
}


def run(cmd: list[str]) -> None:
    print("$", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, cwd=ROOT, check=True)


def plot(read: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    rows = [r["visible"] for r in read]
    for key, label in PLOTTED.items():
        ax.plot(rows, [r[key]["med"] for r in read], marker="o", label=label)
    ax.plot(
        rows, [r["fresh"]["med"] for r in read], marker="x", linestyle=":", label="fresh process"
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("visible rows held by the persona")
    ax.set_ylabel("room open, median ms")
    ax.set_title("build_block against the floor (the first run)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(PLOT)


def read_table(read: list[dict]) -> list[str]:
    """One run of the read benchmark: every case at every size, × its floor (median / p95)."""
    from benchmarks.read_path import LABELS

    head = "| case | " + " | ".join(f"{r['visible']:,} rows" for r in read) + " |"
    out = [head, "|---|" + "---:|" * len(read)]
    out.append(
        "| floor: median / p95 ms | "
        + " | ".join(f"{r['floor']['med']:.2f} / {r['floor']['p95']:.2f}" for r in read)
        + " |"
    )
    out.append(
        "| group floors (proven / group scope): median ms | "
        + " | ".join(
            f"{r['floor_group_proven']['med']:.2f} / {r['floor_group']['med']:.2f}" for r in read
        )
        + " |"
    )
    for key, label in LABELS.items():
        cells = [
            f"**{r[key]['x']:.3f}×** ({r[key]['med']:.2f} / {r[key]['p95']:.2f} ms)"
            if key in r
            else "—"  # a case added since this run
            for r in read
        ]
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    out.append(
        "| first open after a deploy, each persona once in a fresh process: p50 / p95 ms "
        "(× its floor) | "
        + " | ".join(
            f"{r['deploy']['p50_ms']:.1f} / {r['deploy']['p95_ms']:.1f} "
            f"({r['deploy']['p50_x']:.2f}× / {r['deploy']['p95_x']:.2f}×)"
            for r in read
        )
        + " |"
    )
    out.append(
        "| a fresh process: importing the reader / `prepare`, ms | "
        + " | ".join(
            f"{r['fresh']['import_ms']:.0f} / {r['prepared']['prepare_ms']:.0f}" for r in read
        )
        + " |"
    )
    out.append(
        "| read cache after the run: Warren's entry, bytes per visible row | "
        + " | ".join(f"{r['cache_bytes_per_row']:.0f}" for r in read)
        + " |"
    )
    out.append(
        "| load average at the start / after the timed loop / at the end | "
        + " | ".join(" / ".join(f"{x:.1f}" for x in r["load"]) for r in read)
        + " |"
    )
    return out


def targets_table(runs: list[list[dict]]) -> list[str]:
    """Every target of `read_path.TARGETS` at every size, met or missed in each run."""
    from benchmarks.read_path import LABELS, TARGETS

    sizes = [r["size"] for r in runs[0]]
    out = [
        "| case | size | target | " + " | ".join(f"run {n + 1}" for n in range(len(runs))) + " |",
        "|---|---:|---:|" + "---:|" * len(runs),
    ]
    missed = 0
    for case, by_size in TARGETS.items():
        for size in sizes:
            want = by_size.get(size)
            if want is None:
                continue
            cells = []
            for run in runs:
                r = next(r for r in run if r["size"] == size)
                if case not in r:  # a case added since this run
                    cells.append("—")
                    continue
                x = r[case]["x"]
                ok = x <= want
                missed += not ok
                cells.append(f"{x:.3f}× {'met' if ok else '**missed**'}")
            out.append(f"| {LABELS[case]} | {size:,} | ≤ {want}× | " + " | ".join(cells) + " |")
    verdict = "Every target met in every run." if not missed else f"**{missed} missed.**"
    return [*out, "", verdict]


def profile_table(now: dict, before: dict | None) -> list[str]:
    """Where a warm open at 1k rows spends its time, stage by stage, now and before."""
    modes = [("touch", "touch on"), ("no_touch", "touch off")]
    head = "| stage | " + " | ".join(f"now, {label}: µs" for _, label in modes)
    if before:
        head += " | " + " | ".join(f"before, {label}: µs" for _, label in modes)
    labels: list[str] = []
    for got in [now, before] if before else [now]:
        for mode, _ in modes:
            for label, _us in got[mode]["stages"]:
                if label not in labels:
                    labels.append(label)
    cols = len(modes) * (2 if before else 1)
    out = [head + " |", "|---|" + "---:|" * cols]

    def cell(got: dict, mode: str, label: str) -> str:
        us = dict((k, v) for k, v in got[mode]["stages"]).get(label)
        return "—" if us is None else f"{us:.0f}"

    for label in labels:
        cells = [cell(now, m, label) for m, _ in modes]
        if before:
            cells += [cell(before, m, label) for m, _ in modes]
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    totals = [f"**{now[m]['total_us']:.0f}**" for m, _ in modes]
    if before:
        totals += [f"**{before[m]['total_us']:.0f}**" for m, _ in modes]
    out.append("| **the open, median** | " + " | ".join(totals) + " |")
    return out


def recall_table(recall: dict) -> list[str]:
    """`recall_path`'s figures: a message's recall in the private chat and in the group room
    under the group scope, beside the block."""
    names = [k for k in recall["results"][0] if k != "size"]
    out = [
        "| visible rows | " + " | ".join(f"{n}: median / p95 ms" for n in names) + " |",
        "|---:|" + "---:|" * len(names),
    ]
    for r in recall["results"]:
        cells = [f"{r[n]['med']:.2f} / {r[n]['p95']:.2f}" for n in names]
        out.append(f"| {r['size']:,} | " + " | ".join(cells) + " |")
    return out


def write_table(w: dict) -> list[str]:
    steps = w["step_cpu_ms"]
    out = [
        "| figure | value |",
        "|---|---:|",
        f"| spells/s, zero-latency model | {w['spells_per_s']:.1f} |",
        f"| bare chain of six no-op tasks (a spell's count), chains/s | {w['chains_per_s']:.1f} |",
        f"| **ratio spell / bare chain** (target ≥ 0.5) | **{w['ratio']:.2f}** |",
        "| worker CPU ms per spell (all six tasks, Celery included) | "
        f"{w['worker_cpu_ms_per_spell']:.1f} |",
        f"| worker CPU ms per bare chain | {w['worker_cpu_ms_per_chain']:.1f} |",
        f"| a fresh worker's first {w.get('warmup', '?')} spells and chains (imports, "
        "connections; not in the figures above): CPU ms per pair | "
        f"{w.get('worker_cpu_ms_first_spells', 0):.1f} |",
        f"| CPU ms per spell in our steps, in-process | {sum(steps.values()):.1f} |",
    ]
    if "load" in w:  # benchmarks.report notes it around the run
        out.append(
            "| load average at the start / the end of the run | "
            + " / ".join(f"{x:.1f}" for x in w["load"])
            + " |"
        )
    out.append("")
    out.append("| " + " | ".join(steps) + " |")
    out.append("|" + "---:|" * len(steps))
    out.append("| " + " | ".join(f"{v:.2f}" for v in steps.values()) + " |")
    s = w.get("slow") or {}
    if s:
        out += [
            "",
            f"With a {s['latency_s']:.0f} s model on every call, the configured global rate limit "
            f"of {s['rate_limit']:.0f} model calls/s and a model worker of 32 threads, "
            f"{s.get('spells', '?')} spells: {s['spells_per_s']:.2f} spells/s end to end = "
            f"{s['model_calls_per_s']:.1f} model calls/s = "
            f"**{s['fraction_of_limit']:.2f} of the limit** (target ≥ 0.9)"
            + (
                f"; while the pipeline is full (the 10th to the 90th percentile call, the first "
                f"second's extracts and the last seconds' routes left out) "
                f"{s['steady_calls_per_s']:.1f} model calls/s = "
                f"**{s['steady_fraction_of_limit']:.2f} of the limit**."
                if "steady_calls_per_s" in s
                else "."
            ),
        ]
    return out


def faults_table(f: dict) -> list[str]:
    overrides = f.get("overrides") or {}
    sweep = (
        "settings changed: " + ", ".join(f"{k} {v:g}" for k, v in overrides.items())
        if overrides
        else "every setting the shipped default (the sweep every 30 s, its grace 30 s, the "
        "toast lag 10 s, the in-flight claim 60 s), as the Procfile's beat runs it"
    )
    bound = f.get("recovery_bound_s")
    when = (
        f" Measured {f['when']}, load average {f['load']:.1f} at its start." if "when" in f else ""
    )
    calm = next((r.get("model_calls", 0) for r in f["results"] if r["fault"] == "none"), 0)
    out = [
        f"{f['rooms']} rooms × 3 spells each; two workers (2 threads, every queue) and a beat "
        "running the frequent sweep — for the store's outages, `brokerfull` and `none`, the "
        "Procfile's three workers at its concurrency, as a deployer runs them; "
        f"{sweep}; SQLite; the stub model; no supervisor (`restart`: the "
        "embedded Redis SIGKILLed, the workers start it again). *Recovery*: from the last "
        "fault to the last burst read (chaos, twice, garbled, quota: the whole run). *Last "
        "toast*: from the last fault (or the start) to the last toast delivered — the promise "
        "is 120 s"
        + (f", of which the sweep's part is {bound:g} s at these settings" if bound else "")
        + "; *toast p99*: a toast's delay from appearing in the outbox to delivered (the "
        "watcher reads every 50 ms). *At stub*: the most calls the stub received in any "
        "sliding window of the quota, against the quota (`quota`: 120 a minute, 2 a second, "
        "every room at once; `coldstart`: 300 a minute, 5 a second, at the default margin, "
        "three workers of 8 threads started at once onto every room's queued first spell); "
        "*in log*: the most calls the quota's own log in Redis let go in its window and "
        "margin (the figure the tests assert: it holds at any speed, where the stub's moves "
        "with the machine); *used*: calls over what the quota allowed from the first call to "
        "the last. "
        "`pgdown5`, `pgdown30`: the store on a private PostgreSQL stopped abruptly for 5 s "
        "(30 s) mid-run; `sqlitelock`: the SQLite file locked by another process for 30 s; "
        "`diskfull`: the SQLite store full for 45 s (the workers' connections held to the "
        "file's size, so every write that needs a new page fails with `database or disk is "
        "full`), then the cap lifted; their last toast is counted from the end of the "
        "outage, and *held*: from then to the "
        "last toast of the lines said before it (what the outage held up, apart from what was "
        "said after). `brokerfull`: Redis's maxmemory set below what it uses (noeviction) for "
        "45 s, so it refuses every write that grows it; its last toast is counted from when "
        "memory is back. `none`: no fault, the calm run the others' model calls are read "
        "against: *calls* is the requests the stub answered, and × the calm run's in the "
        "same run (the store's and the broker's faults within a tenth of it; chaos and "
        "garbled ask again what failed). *Tracebacks*, *errors*: lines "
        "in the workers' logs; *exits*: workers that exited by themselves; *total*: the run "
        "from the first burst to the last read; *load*: the load average at the fault's start "
        "and end." + when,
        "",
        "| fault | spells | rows | lost | dup rows | dup toasts | missing toasts | undelivered "
        "| reopened | parked | parked for quota | at stub | in log | used | faults | recovery s "
        "| last toast s | toast p99 s | held s | tracebacks | errors | calls (× none) | exits "
        "| total s | load |",
        "|---|" + "---:|" * 24,
    ]

    def calls(r: dict) -> str:
        if "model_calls" not in r:
            return "–"
        return f"{r['model_calls']}" + (f" ({r['model_calls'] / calm:.2f}×)" if calm else "")

    for r in f["results"]:
        load = r.get("load")
        out.append(
            f"| {r['fault']} | {r['spells_committed']} | {r['rows']} | {r['lost']} | "
            f"{r['duplicate_rows']} | {r['duplicate_toasts']} | {r['missing_toasts']} | "
            f"{r['undelivered_toasts']} | {r['reopened']} | {r.get('parked', 0)} | "
            f"{r.get('parked_for_quota', 0)} | "
            f"{r.get('stub_most_in_window', 0)}/{r.get('quota_per_window', 0)} | "
            + (
                f"{r['gate_most_in_window']}/{r.get('quota_per_window', 0)} | "
                if "gate_most_in_window" in r
                else "– | "
            )
            + f"{r.get('quota_used', 0.0):.2f} | {r['faults_injected']} | {r['recovery_s']:.1f} | "
            f"{r.get('last_toast_s', 0.0):.1f} | {r.get('toast_p99_s', 0.0):.2f} | "
            f"{r.get('held_toast_s', '–')} | {r.get('tracebacks', '–')} | "
            f"{r.get('errors_logged', '–')} | {calls(r)} | {r.get('worker_exits', '–')} | "
            f"{r['elapsed_s']:.1f} | "
            + (" / ".join(f"{x:.1f}" for x in load) if load else "–")
            + " |"
        )
    notes = [(r["fault"], n) for r in f["results"] for n in r.get("notes", [])]
    if notes:
        out += ["", *(f"- {fault}: {note}" for fault, note in notes)]
    return out


EXPORT_TARGET_MS = 2000.0  # export_path's target: the whole export of the heaviest human
EXPORT_CASES = {
    "json": "the export as JSON (`export.document`)",
    "md": "as Markdown",
    "api_json": "JSON through `GET /api/export`",
}


def export_table(e: dict) -> list[str]:
    """`export_path`'s figures: each database's floor, and each way out against it."""
    res = e["results"]
    out = [
        "| case | " + " | ".join(r["database"] for r in res) + " |",
        "|---|" + "---:|" * len(res),
        "| rows in the store / Dan's, exported / JSON MB | "
        + " | ".join(
            f"{r['rows']:,} / {r['dan_rows']:,} / {r['json_bytes'] / 1e6:.1f}" for r in res
        )
        + " |",
        "| floor: every row that concerns Dan, whole: median / p95 ms | "
        + " | ".join(f"{r['floor']['med']:.1f} / {r['floor']['p95']:.1f}" for r in res)
        + " |",
    ]
    missed = 0
    for key, label in EXPORT_CASES.items():
        cells = []
        for r in res:
            c = r[key]
            missed += c["p95"] > EXPORT_TARGET_MS
            cells.append(f"**{c['x']:.2f}×** ({c['med']:.0f} / {c['p95']:.0f} ms)")
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    out.append(
        "| load average at the start / the end of the timed rounds | "
        + " | ".join(" / ".join(f"{x:.1f}" for x in r["load"]) for r in res)
        + " |"
    )
    verdict = (
        f"Every case's p95 within the target (≤ {EXPORT_TARGET_MS / 1000:g} s) on every database."
        if not missed
        else f"**{missed} p95 over the target (≤ {EXPORT_TARGET_MS / 1000:g} s).**"
    )
    return [*out, "", verdict + _server(e)]


def _server(got: dict) -> str:
    """Which PostgreSQL server a run's JSON says it measured, as a sentence (or nothing)."""
    return f" PostgreSQL: {got['postgres']}." if got.get("postgres") else ""


EXPORT_PROSE = (
    "A store of 10,000 rows for a hundred humans and Dan, of whom 3,200 are Dan's (the "
    "heaviest human): rows about him, Warren's promises to him and world rows whose audience "
    "holds him, a third of them closed, each citing a line or two of its room (another "
    "human's words withheld from him), and 200 toasts of his. Timed: his whole export, every "
    "piece consumed, as JSON and as Markdown, and the JSON through the page's route on the "
    "app in the process. The floor is every row that concerns Dan, whole, in one read (the "
    "page's floor before it paged); each round times the floor and the three cases in an "
    "order shuffled each round, and each case is given as its median over the floor's "
    "median, with its median and p95 in ms. The target: ≤ 2 s."
)


def lines_table(li: dict) -> list[str]:
    """`line_insert`'s figures: a line's insert with the stamp trigger against without."""
    out = [
        "| database | members | with the trigger: median / p95 ms | floor, no trigger: "
        "median / p95 ms | × the floor | load average at the start / the end |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in li["results"]:
        out.append(
            f"| {r['database']} | {r['members']} | {r['on']['med']:.3f} / {r['on']['p95']:.3f} "
            f"| {r['off']['med']:.3f} / {r['off']['p95']:.3f} | **{r['x']:.2f}×** | "
            + " / ".join(f"{x:.1f}" for x in r["load"])
            + " |"
        )
    return [*out, *(["", _server(li).strip()] if _server(li) else [])]


LINES_PROSE = (
    "A line's label (who may read it) is stamped by a trigger as the line is stored. For each "
    "room size (2, 10, 50 members, a tenth of them personas), two fresh stores side by side "
    "with the same room, the trigger dropped in one (the floor: the same insert, unstamped); "
    "{lines} lines, each in its own transaction as the app stores a line (`app_side.say`), "
    "go into both in an order drawn each line, so the two are timed interleaved under the "
    "same load. Every third line is a persona's, so the echo rule's look-back runs too."
)


READ_PROSE = (
    "One persona holding *N* rows visible in a private chat with one human, plus noise: its "
    "rows about a hundred other humans (N/4), closed rows, and nine other personas (N/10 "
    "each). The floor is stdlib sqlite3 selecting exactly the visible rows, whole, through "
    "the same index; every case is timed interleaved with it, in an order shuffled each "
    "round, and is given as its median over the floor's median in the same run. A warm open "
    "reads one statement (the room's context, with the store's id and the personas' "
    "versions) on a pooled driver connection and answers from the read cache: the persona's "
    "ranking columns (and, past 4,096 rows, the rows its latest audiences may see), and the "
    "full rows of its recent winners; the touch is gathered and written by a background "
    "thread. A miss (another "
    "process wrote) re-reads only the rows the change log names. A cold open (the persona "
    "not held: its first open in a process, after the LRU let it go, every process after a "
    "deploy) reads the persona's pack — its ranking columns in one blob, and each room "
    "topic's cosine of every row — and the rows changed since; the fill thread reads the "
    "whole entry after the open returns, stepping aside while any open is in flight. "
    "*No pack kept* is the persona's first open in the store (a delete keeps the pack, "
    "less its rows): it reads the rows its audience may see, as every cold open used to. The group "
    "room holds three personas and three present humans; under the proven scope (the "
    "default) a group sees world facts only, under the group scope (`proven_scope=False`, "
    "what the New's `follow` passes) rows about each present human too — each against the "
    "floor of the rows its scope lets it see. Bytes per row include the vector store's "
    "spare slots, the views and the winners' rows."
)

PROFILE_PROSE = (
    "Each stage timed around the reader's own functions over 2,000 warm opens of the 1k "
    "private chat, one after another (`python -m benchmarks.read_path --profile 1000`), the "
    "garbage collector off while each is timed. *The rest* is the pool's checkout (with the "
    "stat that notices a replaced store file), the Python between the stages, and what the "
    "reader's own threads took from the open meanwhile. *Before* is the same profile, run "
    "once on the code as it was at 4d4a3c8. Cut since: the winners' rows are kept with "
    "the entry (before: a second statement every open); the context is read alone, with no "
    "transaction around it (before: BEGIN and ROLLBACK); the audience's rows are found by one "
    "pass per present human, not a sort; the take sorts up to 4,096 rows once (before: a "
    "pass per group and kind); the touch tells the cache what it wrote before it commits "
    "(before: an open landing between its commit and the cache taking it re-read the touched "
    "rows), and folds a burst of opens' touches into one write. A persona of more rows also "
    "keeps each of its latest three audiences' rows in (group, kind) order. What stays is the "
    "audience rule on every winner (`audience.visible_memories`, a copy of each row) and the "
    "take's own Python."
)


def page(
    runs: list[list[dict]],
    write: dict,
    meta: dict,
    command: str,
    faults: dict | None = None,
    extra: dict | None = None,
) -> str:
    extra = extra or {}
    run_sections = []
    for n, got in enumerate(runs):
        run_sections += [f"### Run {n + 1}", "", *read_table(got), ""]
    profile = extra.get("profile")
    recall = extra.get("recall")
    return "\n".join(
        [
            "# Performance",
            "",
            f"Generated by `{command}` on {meta['when']} — {meta['host']}, "
            f"{meta['cpus']} CPUs, load average {meta['load']:.1f} at the start. "
            "This machine is shared and noisy: compare the ratios (each case against the floor "
            "measured in the same run, interleaved), not the milliseconds; each run gives the "
            "load beside it. No figure here is hand-edited.",
            "",
            "## Opening a room (`benchmarks/read_path.py`)",
            "",
            READ_PROSE,
            "",
            f"### The targets: met or missed in each of {len(runs)} runs",
            "",
            *targets_table(runs),
            "",
            *run_sections,
            "![open latency against rows held](perf/open_latency.png)",
            "",
            *(
                [
                    f"### Where a warm open at {profile['size']:,} rows spends its time",
                    "",
                    PROFILE_PROSE,
                    "",
                    *profile_table(profile, extra.get("profile_before")),
                    "",
                ]
                if profile
                else []
            ),
            *(
                [
                    "### A message's recall under each scope (`benchmarks/recall_path.py`)",
                    "",
                    "The same store; the message's vector given, touch off. *group recall* is "
                    "Warren's recall in the group room under the group scope, its pool his rows "
                    "about all three present humans and the world.",
                    "",
                    *recall_table(recall),
                    "",
                ]
                if recall
                else []
            ),
            *(
                [
                    "## The page and a commit as the store grows (`benchmarks/page_path.py`)",
                    "",
                    GROWTH_PROSE,
                    "",
                    *growth_table(extra["growth"]),
                    "",
                ]
                if extra.get("growth")
                else []
            ),
            *(
                [
                    "## A human's export (`benchmarks/export_path.py`)",
                    "",
                    EXPORT_PROSE,
                    "",
                    *export_table(extra["export"]),
                    "",
                ]
                if extra.get("export")
                else []
            ),
            *(
                [
                    "## Storing a line: the stamp trigger (`benchmarks/line_insert.py`)",
                    "",
                    LINES_PROSE.format(lines=extra["lines"]["lines"]),
                    "",
                    *lines_table(extra["lines"]),
                    "",
                ]
                if extra.get("lines")
                else []
            ),
            "## Writing (`benchmarks/write_path.py`)",
            "",
            "A real Celery worker (threads pool, concurrency 8) on the embedded Redis, the real "
            "google-genai client against the local stub of the API answering at once, SQLite. "
            "CPU is the worker process's user + system time from /proc over the same spells.",
            "",
            *write_table(write),
            "",
            *(
                ["## Faults (`benchmarks/faults.py`)", "", *faults_table(faults), ""]
                if faults
                else []
            ),
            "## Reproduce",
            "",
            "```",
            command,
            "```",
            "",
            "One section alone: `python -m benchmarks.report --only read` (two runs, the "
            "profile and recall), and likewise `--only write`, `faults`, `growth`, `export` or "
            "`lines`; the page is written from the others' JSON as they are.",
            "",
            *sections_table(extra.get("sections") or {}),
        ]
    )


def sections_table(took: dict) -> list[str]:
    """How long each section took in its last run, on this machine."""
    if not took:
        return []
    out = [
        "Each section's time in its last run timed here (a section not listed has not run "
        "since the report began keeping its time):",
        "",
        "| section | its last run | minutes | load average at its start |",
        "|---|---|---:|---:|",
    ]
    for name, t in took.items():
        out.append(f"| {name} | {t['when']} | {t['seconds'] / 60:.1f} | {t['load']:.1f} |")
    return [*out, ""]


@contextmanager
def postgres(url: str | None) -> Iterator[tuple[str, str] | None]:
    """The PostgreSQL server the runs make their databases on, and what the page calls it:
    `url` if it answers, else (no `url`) a private server of the run's own, removed after;
    None when there is neither (SQLite only)."""
    from memory_worker.testing import private_postgres

    if url is not None:
        yield (url, "the server `--postgres` named") if _answers(url) else None
        return
    if not private_postgres.available():
        yield None
        return
    pg = private_postgres.PrivatePostgres()
    try:
        pg.start()
        yield pg.url, "a private server the run started (`testing.private_postgres`, fsync off)"
    finally:
        pg.remove()


def _noted(path: Path, server: tuple[str, str] | None) -> None:
    """Note in a run's JSON which PostgreSQL server it measured, if any."""
    if server is not None and path.exists():
        got = json.loads(path.read_text())
        path.write_text(json.dumps({**got, "postgres": server[1]}, indent=1))


def _answers(url: str) -> bool:
    """Whether a PostgreSQL server answers at `url` (the runs then measure it too)."""
    from sqlalchemy import create_engine

    eng = create_engine(url)
    try:
        with eng.connect():
            return True
    except Exception:  # noqa: BLE001 — no server: SQLite only
        return False
    finally:
        eng.dispose()


WHOLE_COMMITS = ("commit_new", "commit_dan")  # page_path's whole `run_commit` cases


def growth_table(g: dict) -> list[str]:
    """The page and a commit at each store size, on each database (`benchmarks/page_path.py`):
    the commit-shaped transaction and, when the run measured them, the whole commit step."""
    whole = all(k in r for r in g["results"] for k in WHOLE_COMMITS)
    out = [
        "| database | rows about the human | floor: every row, ms | first page (50) | "
        "next page | search | commit: median / p95 ms (× the smallest store's) |"
        + (
            " whole commit, a new human | whole commit, the human with N rows | bump |"
            if whole
            else ""
        ),
        "|---|---:|---:|---:|---:|---:|---:|" + ("---:|---:|---:|" if whole else ""),
    ]
    smallest: dict[tuple[str, str], float] = {}

    def commit_cell(r: dict, k: str) -> str:
        first = smallest.setdefault((r["database"], k), r[k]["med"])
        return f"{r[k]['med']:.2f} / {r[k]['p95']:.2f} (×{r[k]['med'] / first:.2f})"

    for r in g["results"]:
        cells = [
            f"**{r[k]['med']:.1f} ms** ({r[k]['x']:.3f}×, p95 {r[k]['p95']:.1f})"
            for k in ("first_page", "next_page", "search")
        ]
        cells += [commit_cell(r, "commit")]
        if whole:
            cells += [commit_cell(r, k) for k in WHOLE_COMMITS]
            cells += [" / ".join(f"{r['bump'][k]:g}" for k in WHOLE_COMMITS)]
        out.append(
            f"| {r['database']} | {r['size']:,} | {r['floor']['med']:.1f} | "
            + " | ".join(cells)
            + " |"
        )
    return [*out, "", f"Load average at the end: {g['load']:.1f}.{_server(g)}"]


GROWTH_PROSE = (
    "A human with *N* rows about them (a fifth closed) beside as many about others. The page "
    "answers 50 lines at a time (`GET /api/page`: open ones newest first, then closed ones, "
    "with a cursor, a search by text and every persona's counts, which the store's triggers "
    "keep); its floor is what the page read before it paged: every row about the human, "
    "whole. The target: the first page ≤ 100 ms at 100k rows. The commit is a commit-shaped "
    "transaction (the persona's writer lock, three rows inserted and one closed with the "
    "version triggers, the version read); the whole commit is `steps.run_commit` on a real "
    "spell (extract, embed and route run before it against the local stub, untimed), in a "
    "private room with a new human or with the human who has *N* rows, and *bump* is the "
    "persona's version change each made (new / that human). The target: flat within 20 % "
    "from the smallest store. On PostgreSQL the store is loaded with the per-row triggers off "
    "(they slow a bulk load of one persona's rows in one transaction), then on for the timed "
    "commits."
)


def read_runs() -> list[list[dict]]:
    return [json.loads(f.read_text())["results"] for f in _read_files()]


def _read_files() -> list[Path]:
    return [PERF / f"read_path.{n + 1}.json" for n in range(READ_RUNS)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer repetitions (same sizes)")
    p.add_argument("--sizes", type=int, nargs="*", default=[1_000, 10_000, 100_000])
    p.add_argument(
        "--only",
        choices=("read", "write", "faults", "growth", "export", "lines", "page"),
        help="re-run one, reuse the others' JSON (page: re-run none, only write the page)",
    )
    p.add_argument(
        "--postgres",
        help="a server for page_path, export_path and line_insert (default: a private one)",
    )
    p.add_argument(
        "--million", action="store_true", help="the growth runs at 1M rows too (minutes more)"
    )
    a = p.parse_args()
    command = (
        "make perf"
        if not (a.quick or a.only)
        else " ".join(["python -m benchmarks.report", *sys.argv[1:]])
    )
    if a.only == "page":
        command += " (the figures: the runs' JSON in docs/perf/, each with its own load)"
    meta = {
        "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "host": f"{platform.system()} {platform.machine()}, Python {platform.python_version()}",
        "cpus": os.cpu_count(),
        "load": os.getloadavg()[0],
    }
    PERF.mkdir(parents=True, exist_ok=True)
    quick = ["--quick"] if a.quick else []

    @contextmanager
    def section(name: str) -> Iterator[None]:
        when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        load, started = os.getloadavg()[0], time.monotonic()
        yield
        seconds = time.monotonic() - started
        print(f"section {name}: {seconds / 60:.1f} min", file=sys.stderr)
        got = json.loads(SECTIONS_JSON.read_text()) if SECTIONS_JSON.exists() else {}
        got[name] = {"when": when, "seconds": round(seconds, 1), "load": round(load, 2)}
        order = ("read", "write", "faults", "growth", "export", "lines")
        SECTIONS_JSON.write_text(json.dumps({k: got[k] for k in order if k in got}, indent=1))

    if a.only in (None, "read"):
        with section("read"):
            sizes = ["--sizes", *map(str, a.sizes)]
            for path in _read_files():
                run([sys.executable, "-m", "benchmarks.read_path", *sizes, *quick]
                    + ["--json", str(path)])  # fmt: skip
            run(
                [sys.executable, "-m", "benchmarks.read_path", "--profile", "1000", *quick]
                + ["--json", str(PROFILE_JSON)]
            )
            run(
                [sys.executable, "-m", "benchmarks.recall_path", "--sizes", "1000", "10000"]
                + [*quick, "--json", str(RECALL_JSON)]
            )
    if a.only in (None, "write"):
        with section("write"):
            spells = ["--spells", "120", "--rounds", "2"] if a.quick else []
            before = os.getloadavg()[0]
            run([sys.executable, "benchmarks/write_path.py", *spells, "--json", str(WRITE_JSON)])
            got = json.loads(WRITE_JSON.read_text())
            got["load"] = [round(before, 2), round(os.getloadavg()[0], 2)]
            WRITE_JSON.write_text(json.dumps(got, indent=1))
    if a.only in (None, "faults"):
        with section("faults"):
            rooms = ["--rooms", "6" if a.quick else "12"]
            run([sys.executable, "benchmarks/faults.py", *rooms, "--json", str(FAULTS_JSON)])
    sizes = ["1000", "100000", *(["1000000"] if a.million else [])]
    on_both = {  # the sections measured on SQLite and PostgreSQL: script, arguments, JSON
        "growth": (
            "page_path.py",
            ["--sizes", *sizes, "--reps", "8" if a.quick else "20"],
            GROWTH_JSON,
        ),
        "export": ("export_path.py", ["--reps", "5" if a.quick else "15"], EXPORT_JSON),
        "lines": ("line_insert.py", ["--lines", "200" if a.quick else "600"], LINES_JSON),
    }
    if a.only in (None, *on_both):
        with postgres(a.postgres) as server:
            url = ["--url", server[0]] if server else []
            for name, (script, args, path) in on_both.items():
                if a.only in (None, name):
                    with section(name):
                        run([sys.executable, f"benchmarks/{script}", *args, *url]
                            + ["--json", str(path)])  # fmt: skip
                        _noted(path, server)
    runs = read_runs()
    write = json.loads(WRITE_JSON.read_text())
    faults = json.loads(FAULTS_JSON.read_text()) if FAULTS_JSON.exists() else None
    extra = {
        name: json.loads(path.read_text())
        for name, path in (
            ("profile", PROFILE_JSON),
            ("profile_before", PROFILE_BEFORE_JSON),
            ("recall", RECALL_JSON),
            ("growth", GROWTH_JSON),
            ("export", EXPORT_JSON),
            ("lines", LINES_JSON),
            ("sections", SECTIONS_JSON),
        )
        if path.exists()
    }
    if a.only in (None, "read"):
        plot(runs[0])  # the read figures' plot: unchanged by a run of the others
    DOC.write_text(page(runs, write, meta, command, faults, extra))
    print(f"wrote {DOC.relative_to(ROOT)} and {PLOT.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
