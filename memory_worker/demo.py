"""`make demo`: Dan tells Warren about his flat, and Warren remembers — through a real worker.

Runs on the embedded default: a private Redis started here, a fresh SQLite file, and the
`replay` provider answering from the scripted cassette beside this file (no network, no key).
With MW_PROVIDER=gemini and GEMINI_API_KEY set, the same demo runs on the live model.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from sqlalchemy import Engine

from memory_worker import app_side
from memory_worker.core import clock
from memory_worker.core import settings as settings_mod
from memory_worker.core.block import span
from memory_worker.ops import embedded
from memory_worker.storage import memories, notices, spells, store

CASSETTE = Path(__file__).resolve().parent / "demo_cassette.json"
DEMO_TODAY = "2026-08-18"  # the design's first date: the cassette's prompts hold it
SPELL_TIMEOUT_S = 120.0
DAN, CARA = 42, 17

console = Console()

Script = list[tuple[int | str, str]]  # (human id or persona slug, what they said)

FIRST_SPELL: Script = [
    (DAN, "Warren, big news: I bought a flat in Xuhui last July."),
    ("warren", "Congratulations, Dan. Property is a long-term holding; so is a good home."),
    (DAN, "I'm interviewing at Tencent on Thursday. Ask me how it went, please."),
    (DAN, "Also, I sold all my Tesla shares in July."),
    ("warren", "I'll send you the 1988 shareholder letter, it has a section on patience."),
    (DAN, "Did you see that Nolan's Odyssey opened on July 17?"),
]
SECOND_SPELL: Script = [
    (DAN, "Update: I sold the flat in Xuhui this month. Too far from the office."),
    ("warren", "Selling a home is never a small decision. Where to now?"),
]


def demo_dir(s: settings_mod.Settings) -> Path:
    """The demo's folder, in the state folder the settings name (MW_STATE_DIR)."""
    return s.state_dir / "demo"


def demo_store(s: settings_mod.Settings) -> Path:
    """The demo's store, kept after the run: the reading commands fall back to it."""
    return demo_dir(s) / "demo.db"


def _folder() -> Path:
    """The demo's folder (its settings' state folder is `redis` in it), as the reader would
    type it from here: relative to this folder when it is under it."""
    folder = settings_mod.current().state_dir.parent
    return folder.relative_to(Path.cwd()) if folder.is_relative_to(Path.cwd()) else folder


def settings_for_demo() -> settings_mod.Settings:
    s = settings_mod.Settings.from_env()
    folder = demo_dir(s)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    changes: dict[str, object] = {
        "database_url": f"sqlite:///{demo_store(s).resolve()}",
        "state_dir": (folder / "redis").resolve(),
        "today": s.today or DEMO_TODAY,
    }
    if s.provider == "replay" and s.cassette is None:
        changes["cassette"] = CASSETTE
    return s.with_(**changes)


def seed(eng: Engine) -> None:
    with eng.begin() as conn:
        app_side.add_user(conn, DAN, "Dan")
        app_side.add_user(conn, CARA, "Cara")
        app_side.add_persona(conn, "warren", "Warren")
        app_side.add_room(conn, "dm-dan", "private", [f"u:{DAN}", "warren"])
        app_side.add_room(conn, "lunch", "group", [f"u:{DAN}", f"u:{CARA}", "warren"])


def say_all(eng: Engine, lines: list[tuple[int | str, str]]) -> int:
    with eng.begin() as conn:
        # The lines take the write path's clock (MW_TODAY, else today): the rows it writes
        # say "noted" on the same day their evidence lines were said.
        return max(app_side.say(conn, "dm-dan", who, text, at=clock.now()) for who, text in lines)


def wait_for_spell(eng: Engine, last_line_id: int, label: str) -> Mapping[str, Any]:
    """Watch the store (the source of truth) until the commit records this spell."""
    started = time.monotonic()
    with console.status(f"[bold]{label}[/]: extract → embed → route → commit") as status:
        while time.monotonic() - started < SPELL_TIMEOUT_S:
            with eng.connect() as c:
                row = spells.latest(c, "warren", "dm-dan")
            if row is not None and row["last_line_id"] >= last_line_id:
                return row
            status.update(
                f"[bold]{label}[/]: waiting for the worker ({time.monotonic() - started:.1f}s)"
            )
            time.sleep(0.05)
    raise SystemExit(
        f"the worker did not finish {label} within {SPELL_TIMEOUT_S}s: see {_folder()}/worker.log"
    )


def two_columns(pairs: list[tuple[str, str]], *, indent: int = 0) -> Table:
    """Label and text side by side; the text wraps under itself, not under the label."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True, style="dim")
    grid.add_column(ratio=1)
    for label, text in pairs:
        grid.add_row(" " * indent + label, text)
    return grid


def show_transcript(lines: Script) -> None:
    names = [("Dan:" if who == DAN else "Warren:", text) for who, text in lines]
    console.print(two_columns(names, indent=2))


def show_rows(eng: Engine, title: str) -> None:
    """The rows as stored, readable at 80 columns: the text wraps, when it held and what
    closed it go under the text, the evidence is the transcript line ids."""
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, expand=True)
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("about", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("memory", ratio=1)
    table.add_column("imp", justify="right", no_wrap=True)
    table.add_column("lines", no_wrap=True)
    with eng.connect() as c:
        rows = memories.all_rows(c)
    for r in rows:
        memory = Text(r.text, style="strike" if r.valid_to else "")
        held = span(r.valid_from, r.valid_to)
        closed = f"closed by #{r.closed_by}" if r.closed_by else None
        if held or closed:
            memory.append("\n" + " · ".join(x for x in (held, closed) if x), style="dim")
        table.add_row(
            str(r.id),
            r.subject,
            r.kind.replace("_", " "),
            memory,
            str(r.importance),
            ",".join(map(str, r.evidence)),
            style="dim" if r.valid_to else "",
        )
    console.print(table)


def show_toasts(eng: Engine, spell_key_suffix: str) -> None:
    """The spell's toasts, once its commit has written them (and told them: `tasks.delivery`)."""
    started = time.monotonic()
    found: list[notices.Notice] = []
    while not found and time.monotonic() - started < SPELL_TIMEOUT_S:
        with eng.connect() as c:
            found = [n for n in notices.all_notices(c) if n.spell_key.endswith(spell_key_suffix)]
        if not found:
            time.sleep(0.05)
    for n in found:
        console.print(Panel(n.text, title=f"toast to u:{n.user_id}", expand=False))


def show_block(title: str, room_id: str, present: set[int]) -> None:
    from memory_worker import reader

    block = reader.build_block("warren", present, room_id)
    console.print(Panel(reader.format_block(block), title=title, expand=False))


def run() -> None:
    s = settings_mod.configure(settings_for_demo())
    console.rule("[bold]memory_worker demo")
    mode = (
        "replay: scripted model answers from the demo cassette (offline, no key)"
        if s.provider == "replay"
        else f"gemini: the live model {s.chat_model}"
    )
    broker_url = embedded.ensure_running(s.state_dir)
    s = settings_mod.configure(s.with_(broker_url=broker_url))
    about = [
        ("model", mode),
        ("broker", f"an embedded redis-server on 127.0.0.1, state in {_folder()}/redis"),
        ("store", f"SQLite (WAL) {_folder()}/demo.db"),
    ]
    console.print(two_columns(about))
    store.init_db()
    eng = store.engine()
    seed(eng)

    from memory_worker import events
    from memory_worker.ops import local_worker
    from memory_worker.tasks.celery_app import app

    worker = local_worker.start(s, log=_folder() / "worker.log")
    try:
        with console.status(
            "starting a Celery worker (queues model, embed, commit, notify, events)"
        ):
            local_worker.wait_ready(app)
        console.rule("spell 1 · a private chat")
        show_transcript(FIRST_SPELL)
        last = say_all(eng, FIRST_SPELL)
        events.room_quiet("dm-dan")
        outcome = wait_for_spell(eng, last, "spell 1")
        report(outcome)
        show_rows(eng, "Warren's memories after spell 1")
        show_toasts(eng, f"/{last}")

        console.rule("spell 2 · Dan sold the flat")
        show_transcript(SECOND_SPELL)
        last = say_all(eng, SECOND_SPELL)
        events.room_quiet("dm-dan")
        report(wait_for_spell(eng, last, "spell 2"))
        show_rows(eng, "after spell 2: the flat is a closed arc, not deleted")
        show_toasts(eng, f"/{last}")

        console.rule("the read path · room open")
        show_block("Warren's block, next private chat with Dan", "dm-dan", {DAN})
        show_block("Warren's block, group room with Dan and Cara", "lunch", {DAN, CARA})
        # Prose is one string: rich wraps it to the terminal's width.
        console.print(
            "A group gets world facts only (v1's proven scope), and the Odyssey fact came from "
            "Dan's line: it stays with Dan. Repeating it never makes it public: someone else "
            "joins its audience only by stating it in a line of their own."
        )
        console.rule("the human's side")
        console.print(
            "Dan's page (what Warren remembers, the toasts with undo, the note, the switches): "
            "run the line below, then open the one-time sign-in link it prints (it reads the "
            f"demo's store).\n  {serve_command()}"
        )
    finally:
        local_worker.stop(worker)
        embedded.stop(s.state_dir)


def serve_command() -> str:
    """`memory-worker serve --user 42` as it works from this folder: the script by the name
    the shell finds it by (else its path), and the demo's store named when `serve` would not
    fall back to it (a store of this folder's own, or MW_DATABASE_URL set)."""
    script = Path(sys.executable).with_name("memory-worker")
    found = shutil.which("memory-worker")
    if found is not None and Path(found).resolve() == script.resolve():
        program = "memory-worker"
    elif script.is_relative_to(Path.cwd()):
        program = str(script.relative_to(Path.cwd()))
    else:
        program = str(script)
    store_here = Path("memory_worker.db").exists() or "MW_DATABASE_URL" in os.environ
    named = f"MW_DATABASE_URL=sqlite:///{_folder()}/demo.db " if store_here else ""
    return f"{named}{program} serve --user {DAN}"


def report(outcome: Mapping[str, Any]) -> None:
    if outcome["status"] != "committed":
        raise SystemExit(f"spell {outcome['status']}: {outcome['reason']}")
    console.print(
        f"[green]committed[/] rows {json.loads(outcome['row_ids'])} · "
        f"tokens in {outcome['tokens_in']} / out {outcome['tokens_out']}"
    )
