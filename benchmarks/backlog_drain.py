"""The cost of draining a 10,000-line backlog: spells, model calls, characters per prompt.

    .venv/bin/python benchmarks/backlog_drain.py [--lines 10000]

A room fell 10,000 lines behind (a lost quiet event, a worker down for a day), one of them a
100,000-character paste. Before spells were bounded (docs/design.md §10.9) all of it went into
one extraction prompt: the model refused it, the spell parked, and every later spell resent it —
the room was never remembered again. Now the backlog is mined in bounded windows
(`spell_max_lines`, `spell_max_chars`), each its own spell. This drains the same backlog
in-process with the scripted model (one
candidate per window, then the router), at the default window and at two others, side by
side, and prints what each costs. The model's context is simulated at 100,000 characters: a
window past it is refused and split. Figures are counts (deterministic) and wall time (noisy:
medians).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402
from sqlalchemy import insert  # noqa: E402

from memory_worker import app_side  # noqa: E402
from memory_worker.core import settings as settings_mod  # noqa: E402
from memory_worker.core import tables as t  # noqa: E402
from memory_worker.models.hashing import HashingEmbedder  # noqa: E402
from memory_worker.models.scripted import (  # noqa: E402
    ScriptedChat,
    candidate,
    sensible_route,
    transcript_ids,
)
from memory_worker.storage import store  # noqa: E402
from memory_worker.write import steps  # noqa: E402
from memory_worker.write.extract import prompt_line  # noqa: E402

console = Console(width=160)
CONTEXT_CHARS = 100_000  # the simulated model context: a longer prompt is refused
HUGE_LINE_CHARS = 100_000
WINDOWS = [(200, 24_000), (50, 6_000), (1_000, 120_000)]  # (lines, chars); the first is default


def drain(persona: str, room_id: str, chat: ScriptedChat) -> list[str]:
    """Spells until the cursor reaches the last line, as the worker chains them: the outcomes."""
    outcomes = []
    while (spell := steps.begin(persona, room_id)) is not None:
        spell = steps.run_extract(spell, chat)
        spell = steps.run_embed(spell, HashingEmbedder())
        spell = steps.run_route(spell, chat)
        outcomes.append(steps.run_commit(spell).status)
    return outcomes


def one_fact(prompt: str) -> dict:
    first = transcript_ids(prompt)[0]
    return {"candidates": [candidate("u:42", "fact", f"u:42 mentioned topic {first}.", 4, [first])]}


def backlog_text(i: int) -> str:
    if i == 5_000:
        return "paste " * (HUGE_LINE_CHARS // 6)
    return f"Line {i}: " + "we talked about the weather and the bakery " * (1 + i % 6)


def drain_once(n_lines: int, max_lines: int, max_chars: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'backlog.db'}"
        before = settings_mod.current()
        settings_mod.configure(
            before.with_(database_url=url, spell_max_lines=max_lines, spell_max_chars=max_chars)
        )
        try:
            store.init_db(url)
            eng = store.engine(url)
            with eng.begin() as conn:
                app_side.add_user(conn, 42, "Dan")
                app_side.add_persona(conn, "warren", "Warren")
                app_side.add_room(conn, "dm-dan", "private", ["u:42", "warren"])
                conn.execute(
                    insert(t.lines),
                    [
                        dict(room_id="dm-dan", speaker="u:42", text=backlog_text(i), created="x")
                        for i in range(n_lines)
                    ],
                )
            chat = ScriptedChat(
                {"extract": one_fact, "route": sensible_route}, max_prompt_chars=CONTEXT_CHARS
            )
            started = time.perf_counter()
            runs = drain("warren", "dm-dan", chat)
            elapsed = time.perf_counter() - started
            eng.dispose()
        finally:
            settings_mod.configure(before)
    extract = [len(s) + len(p) for what, s, p in chat.calls if what == "extract"]
    refused = [n for n in extract if n > CONTEXT_CHARS]
    return dict(
        window=f"{max_lines} lines / {max_chars:,} chars",
        spells=len(runs),
        committed=sum(status == "committed" for status in runs),
        extract_calls=len(extract),
        refused=len(refused),
        route_calls=sum(1 for what, _, _ in chat.calls if what == "route"),
        median=statistics.median(extract),
        p95=sorted(extract)[int(0.95 * (len(extract) - 1))],
        max=max(n for n in extract if n <= CONTEXT_CHARS),
        total=sum(extract),
        ms_per_spell=1000 * elapsed / max(1, len(runs)),
    )


def one_prompt_chars(n_lines: int) -> int:
    """What the whole backlog made as one prompt before spells were bounded (the lines alone)."""
    return sum(len(f"[{i}] u:42: ") + len(backlog_text(i)) + 1 for i in range(n_lines))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lines", type=int, default=10_000)
    args = p.parse_args(argv)
    console.rule(f"draining a {args.lines:,}-line backlog (one line of {HUGE_LINE_CHARS:,} chars)")
    console.print(
        f"unbounded: one prompt of {one_prompt_chars(args.lines):,} chars "
        f"(> the {CONTEXT_CHARS:,}-char context): refused, parked, resent by every later spell"
    )
    console.print(
        f"an oversize line is cut for the prompt to {len(prompt_line('x' * 10**6)):,} chars"
    )
    table = Table("window", "spells", "committed", "extract calls", "refused+split", "route calls",
                  "prompt chars median", "p95", "max", "total chars", "ms/spell")  # fmt: skip
    for max_lines, max_chars in WINDOWS:
        r = drain_once(args.lines, max_lines, max_chars)
        cells = [r["window"], *(str(r[k]) for k in ("spells", "committed", "extract_calls"))]
        cells += [str(r["refused"]), str(r["route_calls"]), f"{r['median']:,.0f}"]
        cells += [f"{r['p95']:,}", f"{r['max']:,}", f"{r['total']:,}", f"{r['ms_per_spell']:.1f}"]
        table.add_row(*cells)
    console.print(table)
    console.print(
        "prompt chars include the system prompt; route calls stop at the daily cap (12 rows per "
        "human per day): later windows' candidates are dropped before routing"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
