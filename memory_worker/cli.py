"""`memory-worker …`: the operator's and developer's commands.

init-db                     apply the migrations under schema/
check                       settings, store, broker, provider, rate limits: exit 1 on a problem
run                         the Procfile's processes, supervised, with a clean stop
demo                        the main job on the embedded default (make demo)
block --persona P --present 42 [43 …] --room R
                            print the block a persona gets at room open, with its meter
sweep                       enqueue every room whose cursor lags its last line
parked                      list spells parked for an operator
reembed [--batch N]         re-embed every row and room topic with the configured embedder
                            (after a switch of MW_EMBEDDER); resumable, in batches
cassette-answer MISS ANSWER add an authored answer for a replay miss to the cassette
serve [--user 42] [--host 127.0.0.1] [--port 8420]
                            the human's page and toast rail on loopback (--user prints a
                            one-time sign-in link)
exam [--models a,b] [--n 8] the leak exam and its verdict, which MW_MEMORY_SCOPE=follow needs
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib.metadata import entry_points
from pathlib import Path

from sqlalchemy.exc import OperationalError, ProgrammingError

from memory_worker.check import unreachable
from memory_worker.core import settings as settings_mod
from memory_worker.core.constants import RAIL_POLL_S
from memory_worker.core.errors import ConfigError, MemoryWorkerError, StoreNotReady
from memory_worker.core.settings import redact
from memory_worker.storage import store
from memory_worker.web import serve


def _init_db(_: argparse.Namespace) -> int:
    store.init_db()
    print(f"migrated {redact(settings_mod.current().database_url)}")
    return 0


def _check(_: argparse.Namespace) -> int:
    from memory_worker import check

    findings = check.run(settings_mod.current())
    for f in findings:
        print(f"{'ok  ' if f.ok else 'FAIL'}  {f.what:<12} {f.detail}")
    return 0 if all(f.ok for f in findings) else 1


def _run(a: argparse.Namespace) -> int:
    from memory_worker import check
    from memory_worker.ops import runner

    # Refused as a whole: beat without its workers (or workers without beat) is no deployment.
    check.require_scope(settings_mod.current())
    return runner.run(Path(a.procfile), only=a.only, stop_after=a.stop_timeout)


def _demo(_: argparse.Namespace) -> int:
    from memory_worker import demo

    if settings_mod.current().memory_scope == "follow":
        raise ConfigError(
            "MW_MEMORY_SCOPE=follow: the demo shows the proven scope on a fresh store that holds "
            "no leak exam verdict; unset MW_MEMORY_SCOPE (or set it to proven) to run it"
        )

    demo.run()
    return 0


def _block(a: argparse.Namespace) -> int:
    from memory_worker import reader

    _ready_store(must_hold_people=True)
    block = reader.build_block(a.persona, set(a.present), a.room, touch=False)
    print(reader.format_block(block))
    return 0


def _sweep(_: argparse.Namespace) -> int:
    from memory_worker.tasks.rooms import sweep_lagging_rooms

    _ready_store()
    rooms = sweep_lagging_rooms()
    print(f"enqueued {len(rooms)} room(s): {', '.join(rooms) or '-'}")
    return 0


def _parked(_: argparse.Namespace) -> int:
    from memory_worker.storage import spells

    _ready_store()
    with store.engine().connect() as conn:
        rows = spells.parked(conn)
    for r in rows:
        print(f"{r.created}  {r.persona}/{r.room_id}/{r.last_line_id}  {r.reason}")
    print(f"{len(rows)} parked spell(s)")
    return 0


def _reembed(a: argparse.Namespace) -> int:
    from memory_worker import models
    from memory_worker.write.reembed import reembed_store

    _ready_store()
    embedder = models.embedder()
    print(f"re-embedding {redact(settings_mod.current().database_url)} with {embedder.name}")
    done = reembed_store(
        embedder,
        batch=a.batch,
        on_batch=lambda p: print(f"  {p.rows} rows, {p.rooms} room topics", flush=True),
    )
    if done.done and not done.batches:
        print(f"nothing to do: the store's vectors are already {embedder.name}'s")
    else:
        print(f"done: {done.rows} rows and {done.rooms} room topics are {embedder.name}'s")
    return 0


def _cassette_answer(a: argparse.Namespace) -> int:
    from memory_worker.models.replay import add_entry

    miss = json.loads(Path(a.miss).read_text())
    answer = json.loads(Path(a.answer).read_text())
    cassette = a.cassette or settings_mod.current().cassette
    if cassette is None:
        print("no cassette: pass --cassette or set MW_CASSETTE", file=sys.stderr)
        return 2
    add_entry(cassette, miss["fingerprint"], miss["purpose"], answer, a.note or "")
    print(f"added {miss['fingerprint']} ({miss['purpose']}) to {cassette}")
    return 0


def _serve(a: argparse.Namespace) -> int:
    if a.rail_poll_s <= 0:
        print("error: --rail-poll-s must be a positive number of seconds", file=sys.stderr)
        return 2
    empty = _ready_store(must_hold_people=a.user is not None, named=False)  # its banner names it
    return serve.run(a.host, a.port, a.user, a.rail_poll_s, empty=empty)


def _exam(a: argparse.Namespace) -> int:
    exam = entry_points(group="memory_worker.commands")["exam"].load()  # exams/ plugs in

    s = settings_mod.current()
    if a.store:
        url = a.store if "://" in a.store else f"sqlite:///{a.store}"
        settings_mod.configure(s.with_(database_url=url))
    _ready_store(scope=False)  # the verdict's store, there and migrated; under any scope
    url = settings_mod.current().database_url
    names = a.models.split(",") if a.models else list(s.persona_model_names)
    names = [m.strip() for m in names if m.strip()]
    try:
        result = exam.exam(
            names,
            n=exam.N if a.n is None else a.n,
            turns=exam.TURNS if a.turns is None else a.turns,
            flow_spells=exam.FLOW_SPELLS if a.flow_spells is None else a.flow_spells,
            url=url,
            progress=lambda said: print(said, file=sys.stderr, flush=True),
        )
    except exam.ExamError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(exam.table(result, settings_mod.current(), url))
    return 0 if result.passed else 1


def _ready_store(*, must_hold_people: bool = False, named: bool = True, scope: bool = True) -> bool:
    """The store a reading command opens, checked, named, and never created (SQLite would
    create it on connect); True when it holds no one yet.

    Refused connection, unknown database, not migrated: `StoreNotReady`, each with its
    fix. Empty: an error when the command needs people (`block`, `serve --user`, which would
    otherwise say "unknown room" about a store the reader did not know they had switched to),
    else a note. The store's name goes to stderr, so `block`'s output stays the block.
    `scope`: the group scope's gate is checked (every command but the exam, which makes the
    verdict the gate needs).
    """
    from memory_worker import check

    _existing_store()
    url = settings_mod.current().database_url
    check.require_ready(url)
    if scope:
        check.require_scope(settings_mod.current())  # MW_MEMORY_SCOPE=follow needs its verdict
    empty = check.is_empty(url)
    if empty and must_hold_people:
        raise StoreNotReady(f"the store {redact(url)} is empty: {_empty_fix()}")
    if named:
        print(f"store: {redact(url)}{' (empty)' if empty else ''}", file=sys.stderr)
    return empty


def _empty_fix() -> str:
    from memory_worker.check import EMPTY_HINT
    from memory_worker.demo import DEMO_STORE

    demo = f"; the demo's store is MW_DATABASE_URL=sqlite:///{DEMO_STORE}"
    return EMPTY_HINT + (demo if DEMO_STORE.exists() else " (or run `make demo` for one)")


def _existing_store() -> None:
    """A SQLite store that is not there is not made by a reading command.

    With the default file missing and `make demo` run in this folder, read the demo's store
    and say so; with neither, say exactly what to do.
    """
    from memory_worker.demo import DEMO_STORE

    s = settings_mod.current()
    path = _sqlite_file(s.database_url)
    if path is None or path.exists():
        return
    default = settings_mod.Settings.model_fields["database_url"].default
    if s.database_url == default and DEMO_STORE.exists():
        settings_mod.configure(s.with_(database_url=f"sqlite:///{DEMO_STORE}"))
        print(
            f"note: no {path} here; reading the demo's store {DEMO_STORE} "
            "(MW_DATABASE_URL chooses another)",
            file=sys.stderr,
        )
        return
    raise StoreNotReady(
        f"no store at {path}: run `memory-worker init-db` to create it, or `make demo` "
        f"(which leaves its store in {DEMO_STORE}), or set MW_DATABASE_URL"
    )


def _sqlite_file(url: str) -> Path | None:
    """The file a SQLite URL names (None for another database, or in memory)."""
    from sqlalchemy import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


COMMANDS = {  # name: (one line for the list, what `memory-worker NAME --help` says)
    "init-db": (
        "apply the migrations",
        "Apply every migration under schema/ to the store (MW_DATABASE_URL, default "
        "sqlite:///memory_worker.db in this folder), creating it if needed.",
    ),
    "check": (
        "check the deployment: exit 1 on a problem",
        "Check the settings, the store, the broker, the model provider and the rate limits; "
        "print one line each and exit 1 if any is wrong.",
    ),
    "run": (
        "run the Procfile's processes, supervised",
        "Start every Procfile line (or those named), restart one that exits, and stop them "
        "all cleanly on Ctrl+C or SIGTERM.",
    ),
    "demo": (
        "run the demo on the embedded default",
        "Dan tells Warren about his flat; a real worker writes the memories; the demo prints "
        "the rows, the toasts and the blocks. Offline: scripted model answers, an embedded "
        "Redis, a SQLite store kept in .memory_worker/demo/demo.db.",
    ),
    "block": (
        "print a persona's block for a room",
        "Print the memory block PERSONA gets at room open in ROOM with these humans present, "
        "with its meter (chars used / limit). Reads only: nothing is touched.",
    ),
    "sweep": (
        "enqueue rooms whose cursor lags",
        "Enqueue every room where a persona's cursor is behind the room's last line (what the "
        "daily beat runs); a worker must be running to take them.",
    ),
    "parked": (
        "list parked spells",
        "List the spells parked for an operator (a model that kept failing, or answered "
        "malformed twice); the sweep retries them.",
    ),
    "reembed": (
        "re-embed rows and room topics with the configured embedder",
        "Re-embed every row, then every room topic, with the configured embedder "
        "(MW_EMBEDDER), in batches and resumably; a store already on it is left alone.",
    ),
    "cassette-answer": (
        "author a replay answer for a recorded miss",
        "Add an answer for a request the replay provider missed (a file under "
        "MW_REPLAY_MISSES_DIR) to the cassette.",
    ),
    "serve": (
        "the human's page and toast rail (loopback by default)",
        "Serve the human's page (their memories, with delete, the note and the switches) "
        "and the toast rail over HTTP on loopback.",
    ),
    "exam": (
        "the leak exam: the verdict MW_MEMORY_SCOPE=follow needs",
        "Run the leak exam under the group scope (n runs of plant and probe, both tail "
        "variants, each persona model) and the flow exam; record each model's verdict in the "
        "store; exit 1 unless every verdict passed. Offline models: parrot, discreet; any "
        "other name is a Gemini model (needs GEMINI_API_KEY).",
    ),
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="memory-worker", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    def command(name: str) -> argparse.ArgumentParser:
        short, long = COMMANDS[name]
        return sub.add_parser(name, help=short, description=long)

    command("init-db").set_defaults(run=_init_db)
    command("check").set_defaults(run=_check)
    r = command("run")
    r.add_argument(
        "--procfile",
        default="Procfile",
        help="the processes to run, one `name: command` a line (default: ./Procfile)",
    )
    r.add_argument(
        "--stop-timeout",
        type=float,
        default=None,
        help="seconds a stop waits before SIGKILL (default: soft shutdown + model timeout + 10)",
    )
    r.add_argument("only", nargs="*", help="process names to run (default: all)")
    r.set_defaults(run=_run)
    command("demo").set_defaults(run=_demo)
    b = command("block")
    b.add_argument("--persona", required=True, help="the persona's slug, e.g. warren")
    b.add_argument("--present", required=True, nargs="+", type=int, help="human ids present")
    b.add_argument("--room", required=True, help="the room's id, e.g. dm-dan")
    b.set_defaults(run=_block)
    command("sweep").set_defaults(run=_sweep)
    command("parked").set_defaults(run=_parked)
    e = command("reembed")
    e.add_argument("--batch", type=int, default=128, help="texts per embedding call")
    e.set_defaults(run=_reembed)
    c = command("cassette-answer")
    c.add_argument("miss", help="the request file a replay miss wrote (MW_REPLAY_MISSES_DIR)")
    c.add_argument("answer", help="a JSON file holding the answer")
    c.add_argument(
        "--cassette", type=Path, help="the cassette to add the answer to (default: MW_CASSETTE)"
    )
    c.add_argument("--note", help="a note kept beside the answer: what it is for, who wrote it")
    c.set_defaults(run=_cassette_answer)
    w = command("serve")
    w.add_argument("--user", type=int, help="print a one-time sign-in link for this user id")
    w.add_argument("--host", default=serve.DEFAULT_HOST, help="bind address (default: loopback)")
    w.add_argument(
        "--port",
        type=int,
        default=serve.DEFAULT_PORT,
        help=f"port to listen on; 0 takes any free one (default: {serve.DEFAULT_PORT})",
    )
    w.add_argument(
        "--rail-poll-s",
        type=float,
        default=RAIL_POLL_S,
        help="how often the rail reads the store between Redis nudges (default: 5)",
    )
    w.set_defaults(run=_serve)
    x = command("exam")
    x.add_argument("--models", help="persona models, comma-separated (default: MW_PERSONA_MODELS)")
    x.add_argument("--n", type=int, help="runs per model and tail variant (default: 8)")
    x.add_argument("--turns", type=int, help="probe turns per room in each run (default: 8)")
    x.add_argument(
        "--flow-spells",
        type=int,
        help="spells of the flow exam under the group scope (default: 2000, about a minute)",
    )
    x.add_argument(
        "--store",
        help="where the verdicts go: a URL or a SQLite file (default: MW_DATABASE_URL)",
    )
    x.set_defaults(run=_exam)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        settings_mod.current()  # bad settings fail here, naming the variable
        return int(args.run(args))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except MemoryWorkerError as e:  # ours, said plainly (an unknown room, a store not ready)
        print(f"error: {redact(str(e))}", file=sys.stderr)
        return 2
    except (OperationalError, ProgrammingError) as e:
        url = settings_mod.current().database_url
        if _missing_table(e):
            shown = f"the store {redact(url)} is not initialised: run `memory-worker init-db`"
        else:
            shown = unreachable(url, e)
        print(f"error: {shown}", file=sys.stderr)
        return 2


def _missing_table(e: Exception) -> bool:
    said = str(getattr(e, "orig", e)).lower()
    return "no such table" in said or ("relation" in said and "does not exist" in said)


if __name__ == "__main__":
    raise SystemExit(main())
