"""`memory-worker …`: the operator's and developer's commands.

Each command's one line and its longer help are in COMMANDS; each value is checked where
argparse parses it (`cli_args`), and an error of ours is one line on stderr with exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib.metadata import entry_points
from pathlib import Path

from sqlalchemy.exc import OperationalError, ProgrammingError

from memory_worker import cli_args
from memory_worker.check import unreachable
from memory_worker.core import settings as settings_mod
from memory_worker.core.constants import RAIL_POLL_S
from memory_worker.core.errors import BadValue, ConfigError, MemoryWorkerError, StoreNotReady
from memory_worker.core.settings import EMBEDDED, redact
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
        detail = f.detail.replace("\n", "\n" + " " * 19)  # a block stays under its first line
        print(f"{'ok  ' if f.ok else 'FAIL'}  {f.what:<12} {detail}")
    return 0 if all(f.ok for f in findings) else 1


def _run(a: argparse.Namespace) -> int:
    """Checked before anything starts: the names, the store when a worker is to run, the
    scope (then `runner.run` refuses a second run here). A worker on a missing store dies
    five times at start, so the run would stop on it anyway, but after a dozen tracebacks."""
    from memory_worker import check
    from memory_worker.ops import runner

    listed = runner.parse_procfile(a.procfile)
    for name in a.only:
        cli_args.require_known("process", name, [p.name for p in listed])
    s = settings_mod.current()
    if s.broker_url != EMBEDDED:  # the embedded broker sets its own (ops/embedded.py)
        _broker_memory_at_start(s.broker_url)  # a setting that drops tasks: refused first
    if any(p.is_worker for p in listed if not a.only or p.name in a.only):
        url = s.database_url
        path = _sqlite_file(url)
        if path is not None and not path.exists():  # SQLite would make an empty file
            raise StoreNotReady(f"no store at {path}: run `memory-worker init-db` first")
        check.require_ready(url)
    # Refused as a whole: beat without its workers (or workers without beat) is no deployment.
    check.require_scope(s)
    return runner.run(a.procfile, only=a.only, stop_after=a.stop_timeout)


def _broker_memory_at_start(url: str) -> None:
    """An evicting policy refused (BrokerEvicts); a missing limit or unread settings said
    once; a broker not answering yet is the workers' to wait for."""
    import redis

    from memory_worker import check

    try:
        said = check.broker_memory(url)
    except (redis.RedisError, OSError):
        return
    if said.startswith("warning: "):
        print(f"memory-worker: the broker: {said}", file=sys.stderr)


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
    from memory_worker.storage import users

    _ready_store(must_hold_people=True)
    with store.engine().connect() as conn:
        cli_args.require_known("persona", a.persona, users.persona_slugs(conn))
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

    miss, answer = _json_file(a.miss), _json_file(a.answer)
    if not isinstance(miss, dict) or not {"fingerprint", "purpose"} <= miss.keys():
        raise BadValue(
            f"{a.miss} is not a request a replay miss wrote (no fingerprint and purpose)"
        )
    cassette = a.cassette or settings_mod.current().cassette
    if cassette is None:
        print("error: no cassette: pass --cassette or set MW_CASSETTE", file=sys.stderr)
        return 2
    if not Path(cassette).parent.is_dir():
        print(f"error: --cassette {cassette}: no folder {Path(cassette).parent}", file=sys.stderr)
        return 2
    add_entry(cassette, miss["fingerprint"], miss["purpose"], answer, a.note or "")
    print(f"added {miss['fingerprint']} ({miss['purpose']}) to {cassette}")
    return 0


def _json_file(path: Path) -> object:
    """A JSON file's value, or one line saying why it is not one."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadValue(f"{path} is not a JSON file ({e})") from None


def _serve(a: argparse.Namespace) -> int:
    empty = _ready_store(must_hold_people=a.user is not None, named=False)  # its banner names it
    return serve.run(a.host, a.port, a.user, a.rail_poll_s, empty=empty)


# --- export: everything about one human (an operator answering an access request) ----------


def _export(a: argparse.Namespace) -> int:
    from memory_worker.core.rows import now_iso
    from memory_worker.web import app as web_app
    from memory_worker.web import export

    _ready_store(must_hold_people=True)
    head = web_app.page_data(a.user, None, None, 1)  # UnknownUser: one line, exit 2
    pieces = export.document(a.user, a.format, head, now_iso())
    if a.out is None:
        sys.stdout.writelines(pieces)
        return 0
    try:
        with a.out.open("w", encoding="utf-8") as out:
            out.writelines(pieces)
    except OSError as e:
        print(f"error: cannot write {a.out}: {e.strerror}", file=sys.stderr)
        return 2
    print(f"exported u:{a.user} to {a.out}", file=sys.stderr)
    return 0


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
    from memory_worker.demo import demo_store

    kept = demo_store(settings_mod.current())
    demo = f"; the demo's store is MW_DATABASE_URL=sqlite:///{kept}"
    return EMPTY_HINT + (demo if kept.exists() else " (or run `make demo` for one)")


def _existing_store() -> None:
    """A SQLite store that is not there is not made by a reading command.

    With the default file missing and `make demo` run in this folder, read the demo's store
    and say so; with neither, say exactly what to do.
    """
    from memory_worker.demo import demo_store

    s = settings_mod.current()
    path = _sqlite_file(s.database_url)
    if path is None or path.exists():
        return
    default = settings_mod.Settings.model_fields["database_url"].default
    kept = demo_store(s)  # in MW_STATE_DIR, where the demo left it
    if s.database_url == default and kept.exists():
        settings_mod.configure(s.with_(database_url=f"sqlite:///{kept}"))
        print(
            f"note: no {path} here; reading the demo's store {kept} "
            "(MW_DATABASE_URL chooses another)",
            file=sys.stderr,
        )
        return
    raise StoreNotReady(
        f"no store at {path}: run `memory-worker init-db` to create it, or `make demo` "
        f"(which leaves its store in {kept}), or set MW_DATABASE_URL"
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
        "create the store, or bring it up to date",
        "Apply every migration under schema/ to the store (MW_DATABASE_URL, default "
        "sqlite:///memory_worker.db in this folder), creating it if needed.",
    ),
    "check": (
        "check the settings, store, broker and model",
        "Check the settings, the store, the broker, the model provider and the rate limits; "
        "print one line each and exit 1 if any is wrong.",
    ),
    "run": (
        "run the workers, beat and Flower until Ctrl+C",
        "Start every Procfile line (or those named), restart one that exits, and stop them "
        "all cleanly on Ctrl+C or SIGTERM. Refuses to start without a store, or when a run "
        "is already going in this folder; stops everything when a process keeps failing.",
    ),
    "demo": (
        "watch Dan talk and Warren remember (offline)",
        "Dan tells Warren about his flat; a real worker writes the memories; the demo prints "
        "the rows, the toasts and the blocks. Offline: scripted model answers, an embedded "
        "Redis, a SQLite store kept in the state folder (MW_STATE_DIR, default "
        ".memory_worker) under demo/demo.db.",
    ),
    "block": (
        "print what a persona remembers in a room",
        "Print the memory block PERSONA gets when ROOM opens with these humans present, with "
        "its meter (characters used / limit). Reads only: no row's recall count changes.",
    ),
    "sweep": (
        "queue the rooms with lines no spell has read yet",
        "Queue every room where a persona's cursor is behind the room's last line (what the "
        "daily beat runs); a worker must be running to take them.",
    ),
    "parked": (
        "list the spells waiting for an operator",
        "List the spells parked for an operator (a model that kept failing, or answered "
        "malformed twice); the sweep retries them.",
    ),
    "reembed": (
        "re-embed every memory after MW_EMBEDDER changed",
        "Re-embed every row, then every room topic, with the configured embedder "
        "(MW_EMBEDDER), in batches and resumably; a store already on it is left alone.",
    ),
    "cassette-answer": (
        "add an answer the offline model was missing",
        "Add an answer for a request the replay provider missed (a file under "
        "MW_REPLAY_MISSES_DIR) to the cassette.",
    ),
    "serve": (
        "serve a human's page on this machine",
        "Serve the human's page (their memories, with delete, the note and the switches) "
        "and the toast rail over HTTP on loopback. It reads the store MW_DATABASE_URL "
        "names, and says which as it starts.",
    ),
    "export": (
        "everything the personas hold about one human",
        "Write everything the personas hold about one human — every row they are in the "
        "audience of, open and closed, the evidence lines they witnessed, their toasts, note "
        "and switches — as JSON (docs/api.md, Export) or as Markdown to read.",
    ),
    "exam": (
        "test that personas keep secrets in group rooms",
        "Run the leak exam under the group scope (n runs of plant and probe, both tail "
        "variants, each persona model) and the flow exam; record each model's verdict in the "
        "store (MW_MEMORY_SCOPE=follow needs a passed one); exit 1 unless every verdict "
        "passed. Offline models: parrot, discreet; any other name is a Gemini model (needs "
        "GEMINI_API_KEY).",
    ),
}


def parser() -> argparse.ArgumentParser:
    p = cli_args.Parser(
        prog="memory-worker",
        description="The operator's and developer's commands of memory_worker.",
        epilog="`memory-worker COMMAND --help` says more about each.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")

    def command(name: str) -> argparse.ArgumentParser:
        short, long = COMMANDS[name]
        return sub.add_parser(name, help=short, description=long)

    command("init-db").set_defaults(run=_init_db)
    command("check").set_defaults(run=_check)
    r = command("run")
    r.add_argument(
        "--procfile",
        type=cli_args.existing_file,
        default=Path("Procfile"),
        help="the processes to run, one `name: command` a line (default: ./Procfile)",
    )
    r.add_argument(
        "--stop-timeout",
        type=cli_args.positive_seconds,
        default=None,
        help="seconds a stop waits before SIGKILL (default: soft shutdown + model timeout + 10)",
    )
    r.add_argument("only", nargs="*", help="process names to run (default: all)")
    r.set_defaults(run=_run)
    command("demo").set_defaults(run=_demo)
    b = command("block")
    b.add_argument(
        "--persona", required=True, type=cli_args.slug, help="the persona's id, e.g. warren"
    )
    b.add_argument(
        "--present",
        required=True,
        nargs="+",
        type=cli_args.human,
        metavar="HUMAN",
        help="the humans present, as 42 or u:42",
    )
    b.add_argument("--room", required=True, type=cli_args.slug, help="the room's id, e.g. dm-dan")
    b.set_defaults(run=_block)
    command("sweep").set_defaults(run=_sweep)
    command("parked").set_defaults(run=_parked)
    e = command("reembed")
    e.add_argument(
        "--batch", type=cli_args.positive_count, default=128, help="texts per embedding call"
    )
    e.set_defaults(run=_reembed)
    c = command("cassette-answer")
    c.add_argument(
        "miss",
        type=cli_args.existing_file,
        help="the request file a replay miss wrote (MW_REPLAY_MISSES_DIR)",
    )
    c.add_argument("answer", type=cli_args.existing_file, help="a JSON file holding the answer")
    c.add_argument(
        "--cassette", type=Path, help="the cassette to add the answer to (default: MW_CASSETTE)"
    )
    c.add_argument("--note", help="a note kept beside the answer: what it is for, who wrote it")
    c.set_defaults(run=_cassette_answer)
    w = command("serve")
    w.add_argument(
        "--user",
        type=cli_args.human,
        metavar="HUMAN",
        help="print a one-time sign-in link for this human (42 or u:42)",
    )
    w.add_argument("--host", default=serve.DEFAULT_HOST, help="bind address (default: loopback)")
    w.add_argument(
        "--port",
        type=cli_args.port,
        default=serve.DEFAULT_PORT,
        help=f"port to listen on; 0 takes any free one (default: {serve.DEFAULT_PORT})",
    )
    w.add_argument(
        "--rail-poll-s",
        type=cli_args.positive_seconds,
        default=RAIL_POLL_S,
        metavar="SECONDS",
        help="how often the rail reads the store between Redis nudges (default: 5)",
    )
    w.set_defaults(run=_serve)
    o = command("export")
    o.add_argument("--user", required=True, type=cli_args.human, help="the human: 42 or u:42")
    o.add_argument("--format", choices=("json", "md"), default="json", help="default: json")
    o.add_argument("--out", type=Path, help="a file to write (default: standard output)")
    o.set_defaults(run=_export)
    x = command("exam")
    x.add_argument("--models", help="persona models, comma-separated (default: MW_PERSONA_MODELS)")
    x.add_argument(
        "--n", type=cli_args.positive_count, help="runs per model and tail variant (default: 8)"
    )
    x.add_argument(
        "--turns",
        type=cli_args.positive_count,
        help="probe turns per room in each run (default: 8)",
    )
    x.add_argument(
        "--flow-spells",
        type=cli_args.count,
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
