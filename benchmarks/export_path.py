"""How long one human's export takes in a store of many humans: SQLite and PostgreSQL.

The store: `--rows` rows (default 10,000) for `--humans` humans and Dan, of whom `--dan` are
Dan's (by default 3,200, the issue's heaviest human): rows about him, Warren's promises to him
and world rows whose audience holds him, a third of them closed, each citing a line or two of
its room — his private room with Warren, or a group where others speak (their words are
withheld from him) — and 200 toasts of his. The rest are about the others, in their rooms.

Timed: the whole export document, every piece consumed (`web.export.document`, as the route
streams it and `memory-worker export` writes it), as JSON and as Markdown, and the same JSON
through the API (`GET /api/export` on the app in this process). Target: ≤ 2 s. The floor:
every row that concerns Dan, whole, in one read (`memories.rows_about`, the page's floor before
it paged); each round times it and the three cases in an order shuffled each round, and each
case is given as its median over the floor's median (`x`), with its 95th percentile.

    .venv/bin/python benchmarks/export_path.py [--rows 10000] [--dan 3200] [--humans 100]
        [--url postgresql+psycopg://…] [--reps 5] [--json F]

Without --url, SQLite only; with it, a database of its own is made on that server and dropped
after (never the one named). Figures only, no assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import insert, select, text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.page_path import own_database  # noqa: E402
from benchmarks.read_path import p95, timed  # noqa: E402
from memory_worker import app_side  # noqa: E402
from memory_worker.core import settings as settings_mod  # noqa: E402
from memory_worker.core import tables as t  # noqa: E402
from memory_worker.storage import memories, store  # noqa: E402
from memory_worker.web import export  # noqa: E402
from memory_worker.web.app import create_app, page_data  # noqa: E402

DAN = 42
SEEDED = "2026-11-01T10:00:00+00:00"
GROUPS = 5  # group rooms of 20 humans each; Dan is in two
LINES_PER_ROOM = 20


def seed(url: str, rows: int, dan_rows: int, humans: int, rng: random.Random) -> None:
    others = [1000 + i for i in range(humans)]
    with store.transaction(url) as conn:
        app_side.add_user(conn, DAN, "Dan")
        for u in others:
            app_side.add_user(conn, u, f"Ada {u}")
        app_side.add_persona(conn, "warren", "Warren")
        app_side.add_persona(conn, "nolan", "Nolan")
        rooms: dict[str, list[int]] = {f"dm-{u}": [u] for u in [DAN, *others]}
        for g in range(GROUPS):
            rooms[f"group-{g}"] = others[g * 20 : g * 20 + 20] + ([DAN] if g < 2 else [])
        said: dict[str, list[int]] = {}
        for room, people in rooms.items():
            kind = "private" if room.startswith("dm-") else "group"
            app_side.add_room(conn, room, kind, [f"u:{u}" for u in people] + ["warren"])
            said[room] = [
                app_side.say(conn, room, rng.choice([*people, "warren"]), f"{room} said {i}")
                for i in range(LINES_PER_ROOM)
            ]
    pg = not url.startswith("sqlite")
    batch: list[dict] = []
    audiences: list[tuple[int, list[int]]] = []
    for i in range(rows):
        mine = i < dan_rows
        who = DAN if mine else rng.choice(others)
        room = rng.choice([r for r, p in rooms.items() if who in p])
        shape = rng.random()
        subject, counterpart = f"u:{who}", None
        if shape < 0.1:
            subject, counterpart = "self", f"u:{who}"
        elif shape < 0.2:
            subject = "world"
        text_ = f"u:{who} said thing {i}" + (" about Café" if i % 50 == 0 else "")
        batch.append(
            dict(
                persona=rng.choice(["warren", "nolan"]),
                subject=subject,
                counterpart=counterpart,
                witnessed=f"[{who}]",
                room_id=room,
                kind="fact",
                text=text_,
                importance=5,
                evidence=json.dumps(rng.sample(said[room], k=rng.randint(1, 2))),
                created=SEEDED,
                valid_to="2026-11-20" if rng.random() < 0.33 else None,
                private_to=json.dumps(sorted({who, rng.choice(others)}))
                if subject == "world"
                else None,
            )
        )
    with store.transaction(url) as conn:
        if pg:
            conn.execute(text("ALTER TABLE persona_memory DISABLE TRIGGER USER"))
        conn.execute(insert(t.persona_memory), batch)
        pm = t.persona_memory.c
        for row_id, private in conn.execute(
            select(pm.id, pm.private_to).where(pm.subject == "world")
        ):
            audiences.append((int(row_id), json.loads(private)))
        conn.execute(
            insert(t.memory_audience),
            [{"row_id": r, "user_id": u} for r, us in audiences for u in us],
        )
        if pg:
            conn.execute(text("ALTER TABLE persona_memory ENABLE TRIGGER USER"))
        memories.recount(conn)
        dans = [
            int(i) for i in conn.execute(select(pm.id).where(pm.subject == f"u:{DAN}")).scalars()
        ]
        conn.execute(
            insert(t.notices),
            [
                dict(
                    user_id=DAN, persona="warren", room_id=f"dm-{DAN}", kind="memory_toast",
                    text=f"Warren noted: Dan said thing {n} · undo",
                    row_ids=json.dumps(dans[n : n + 1]), spell_key=f"bench/{n}", created=SEEDED,
                )
                for n in range(200)
            ],
        )  # fmt: skip
    if pg:
        with store.engine(url).connect() as conn:
            conn.execute(text("ANALYZE"))
            conn.commit()


def whole(fmt: str) -> tuple[int, int]:
    """The export of Dan in `fmt`, every piece consumed: (characters, lines it holds)."""
    pieces = list(export.document(DAN, fmt, page_data(DAN, None, None, 1), "now"))
    body = "".join(pieces)
    return len(body), (len(json.loads(body)["lines"]) if fmt == "json" else body.count("\n- **"))


def through_the_api() -> object:
    from starlette.testclient import TestClient

    app = create_app(secret_key="b" * 48)
    app.state.exports = export.ExportLimiter(per_window=10**6)  # the benchmark's own loop
    client = TestClient(app, base_url="http://127.0.0.1")
    client.get(f"/login?token={app.state.login_links.mint(DAN)}")
    csrf = client.get("/api/session").json()["csrf_token"]

    def run() -> object:
        answer = client.get("/api/export", headers={"X-CSRF-Token": csrf})
        assert answer.status_code == 200
        return answer.content

    return run


def measure(url: str, args: argparse.Namespace) -> dict:
    started = time.perf_counter()
    seed(url, args.rows, args.dan, args.humans, random.Random(7))
    seeded_s = time.perf_counter() - started
    chars, lines = whole("json")
    api = through_the_api()

    def floor() -> object:
        with store.engine(url).connect() as conn:
            return memories.rows_about(conn, DAN)

    cases: dict[str, Callable[[], object]] = {
        "floor": floor,
        "json": lambda: whole("json"),
        "md": lambda: whole("md"),
        "api_json": api,  # type: ignore[dict-item]
    }
    load_start = os.getloadavg()[0]
    ms: dict[str, list[float]] = {name: [] for name in cases}
    order = list(cases)
    rng = random.Random(11)
    for _ in range(args.reps):
        rng.shuffle(order)
        for name in order:
            ms[name].append(timed(cases[name]))
    out: dict = {
        "rows": args.rows,
        "dan_rows": lines,
        "json_bytes": chars,
        "seeded_s": round(seeded_s, 1),
        "load": [load_start, os.getloadavg()[0]],  # at the start and the end of the timed rounds
    }
    base = statistics.median(ms["floor"])
    for name, got in ms.items():
        med = statistics.median(got)
        out[name] = {"med": med, "p95": p95(got), "max": max(got), "x": med / base}
    return out


def run(server: str | None, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        with own_database(server, Path(tmp), args.rows) as url:
            settings_mod.configure(settings_mod.Settings.from_env({"MW_DATABASE_URL": url}))
            r = measure(url, args)
            r["database"] = "sqlite" if server is None else "postgresql"
            print(json.dumps(r), file=sys.stderr)
            return r


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--dan", type=int, default=3_200, help="of them, the exported human's")
    parser.add_argument("--humans", type=int, default=100, help="humans besides him")
    parser.add_argument("--url", help="a PostgreSQL server (its own database is made)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    results = [run(None, args)]
    if args.url:
        results.append(run(args.url, args))
    for r in results:
        print(
            f"{r['database']:<10} {r['rows']:,} rows, {r['dan_rows']:,} exported "
            f"({r['json_bytes'] / 1e6:.1f} MB JSON): floor {r['floor']['med']:.0f} ms  "
            + "  ".join(
                f"{k} {r[k]['med']:.0f}/{r[k]['max']:.0f} ms ({r[k]['x']:.1f}×)"
                for k in ("json", "md", "api_json")
            )
            + f"  (median/max of {args.reps}; load {r['load'][0]:.1f}–{r['load'][1]:.1f}; "
            f"seeded {r['seeded_s']} s)"
        )
    if args.json:
        args.json.write_text(json.dumps({"results": results}, indent=1))


if __name__ == "__main__":
    main()
