"""The export (GDPR Art. 15 and 20): everything the personas hold about a human — exactly the
rows the page lists them and the evidence they witnessed, never anyone else's — as JSON and as
Markdown, streamed, from the API (signed in, CSRF, rate-limited), the page's form and the CLI.

The oracle is the audience rule written out plainly over the stored rows (a row concerns the
human it is about, a persona's promise to them, or a world row whose audience holds them; they
witnessed a line said in a room they are a member of after they joined), checked in stores of
many humans against the export, the page's walk and the export's own steps."""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass, field

import pytest
from sqlalchemy import Engine, insert
from starlette.testclient import TestClient

from memory_worker import app_side, cli
from memory_worker.core import tables as t
from memory_worker.core.names import search_key
from memory_worker.storage import memories
from memory_worker.web import export, export_model, page_model
from memory_worker.web.app import create_app, page_data
from tests.scenes import DAN
from tests.test_controls import add_notice, add_row
from tests.web import test_web_security

pytestmark = pytest.mark.store

SECRET = "e" * 48
HUMANS = (17, 23, 42, 58, 61, 77)
PERSONAS = ("warren", "nolan")
world = test_web_security.world  # Dan and Cara with their rooms; Dan has a note


@dataclass
class Store:
    """What was written, for the oracle: rows as stored, lines, and who joined what when."""

    rows: dict[int, dict] = field(default_factory=dict)
    lines: dict[int, tuple[str, str, str]] = field(default_factory=dict)  # id → room, speaker, text
    joined: dict[tuple[str, int], int] = field(default_factory=dict)  # (room, human) → since
    audience: dict[int, set[int] | None] = field(default_factory=dict)  # world row → holders


def many_humans(db: Engine, seed: int, n_rows: int = 160) -> Store:
    """Six humans, two personas, their private rooms and two groups some joined late; lines in
    each; rows about anyone — promises, world rows private to some or public — citing lines
    of their room, some closed."""
    rng = random.Random(seed)
    out = Store()
    with db.begin() as conn:
        for u in HUMANS:
            app_side.add_user(conn, u, f"Human{u}")
        for p in PERSONAS:
            app_side.add_persona(conn, p, p.title())
        rooms: dict[str, list[int]] = {}
        for u in HUMANS:
            for p in PERSONAS:
                rooms[f"dm-{p}-{u}"] = [u]
        rooms["group-a"] = list(HUMANS[:4])
        rooms["group-b"] = list(HUMANS[2:])
        for room, humans in rooms.items():
            kind = "group" if room.startswith("group") else "private"
            early = humans if kind == "private" else humans[: len(humans) // 2]
            app_side.add_room(conn, room, kind, [f"u:{u}" for u in early] + list(PERSONAS))
            for u in early:
                out.joined[(room, u)] = 0
            for i in range(6):
                if i == 3 and kind == "group":  # the rest join now: they missed lines 0-2
                    for u in humans[len(humans) // 2 :]:
                        app_side.join(conn, room, f"u:{u}")
                        out.joined[(room, u)] = max(out.lines) if out.lines else 0
                speaker: str | int = rng.choice([*humans, *PERSONAS])
                text = f"line {i} in {room} by {speaker}: secret-{rng.randrange(10**9)}"
                line = app_side.say(conn, room, speaker, text)
                who = f"u:{speaker}" if isinstance(speaker, int) else speaker
                out.lines[line] = (room, who, text)
    by_room: dict[str, list[int]] = {}
    for line, (room, _, _) in out.lines.items():
        by_room.setdefault(room, []).append(line)
    for i in range(n_rows):
        room = rng.choice(sorted(rooms))
        kind = rng.choice(["about", "about", "self", "world"])
        subject, counterpart = f"u:{rng.choice(HUMANS)}", None
        if kind == "self":
            subject, counterpart = "self", f"u:{rng.choice(HUMANS)}"
        elif kind == "world":
            subject = "world"
        text = f"row {i} {kind}: fact-{rng.randrange(10**9)}"
        evidence = rng.sample(by_room[room], k=rng.randint(0, 3))
        closed = rng.random() < 0.3
        row_id = add_row(
            db, subject, text, counterpart=counterpart, room_id=room, persona=rng.choice(PERSONAS),
            evidence=tuple(evidence), valid_to="2026-11-01" if closed else None,
        )  # fmt: skip
        out.rows[row_id] = dict(subject=subject, counterpart=counterpart, text=text)
        out.rows[row_id] |= dict(evidence=evidence, room=room)
        if subject == "world":
            holders = None if rng.random() < 0.2 else set(rng.sample(HUMANS, k=2))
            out.audience[row_id] = holders
            with db.begin() as c2:
                memories.set_audience(c2, row_id, holders)
    return out


def concerns(s: Store, row_id: int, u: int) -> bool:
    """The oracle: whom a row is about, plainly."""
    r = s.rows[row_id]
    if r["subject"] == "world":
        return u in (s.audience[row_id] or set())
    if r["subject"] == "self":
        return r["counterpart"] == f"u:{u}"
    return r["subject"] == f"u:{u}"


def witnessed(s: Store, line: int, u: int) -> bool:
    room = s.lines[line][0]
    return (room, u) in s.joined and line > s.joined[(room, u)]


def expected_evidence(s: Store, row_id: int, u: int) -> list[tuple[int, str | None]]:
    said = []
    for line in s.rows[row_id]["evidence"]:
        if witnessed(s, line, u):
            _, speaker, text = s.lines[line]
            mine_or_persona = speaker == f"u:{u}" or not speaker.startswith("u:")
            said.append((line, text if mine_or_persona else None))
    return said


def exported(user_id: int, fmt: str = "json") -> str:
    return "".join(export.document(user_id, fmt, page_data(user_id, None, None, 1), "now"))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_an_export_holds_exactly_the_rows_the_page_lists_and_the_evidence_they_witnessed(
    db: Engine, seed: int
) -> None:
    s = many_humans(db, seed)
    for u in HUMANS:
        text = exported(u)
        got = json.loads(text)
        ids = [x["id"] for x in got["lines"]]
        wanted = {i for i in s.rows if concerns(s, i, u)}
        assert set(ids) == wanted and len(ids) == len(wanted), u
        for x in got["lines"]:
            said = [(e["id"], e["text"]) for e in x["evidence_lines"]]
            assert said == expected_evidence(s, x["id"], u), (u, x["id"])
            assert x["room_id"] in (s.rows[x["id"]]["room"], None)
        # nothing outside: no other row's text, no unwitnessed line's words, anywhere in it
        for i, r in s.rows.items():
            assert (r["text"] in text) == (i in wanted), (u, i)
        for line, (_, speaker, words) in s.lines.items():
            if words in text:
                assert witnessed(s, line, u) and (
                    speaker == f"u:{u}" or not speaker.startswith("u:")
                ), (u, line)
        # the page's own walk lists the same rows, and so do the export's steps, however short
        page = page_model.manage_page(u)
        assert {line.id for sec in page.personas for line in sec.lines} == wanted
        before, stepped = None, []
        while True:
            step, before = export_model.export_lines(u, before, limit=7)
            stepped += [x.line.id for x in step]
            if before is None:
                break
        assert stepped == ids
        md = exported(u, "md")
        for i, r in s.rows.items():
            assert (r["text"] in md) == (i in wanted), (u, i)


# --- the routes ----------------------------------------------------------------------------


def signed_in(user_id: int = DAN) -> tuple[TestClient, str]:
    app = create_app(secret_key=SECRET)
    client = TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False)
    assert client.get(f"/login?token={app.state.login_links.mint(user_id)}").status_code == 200
    return client, client.get("/api/session").json()["csrf_token"]


@pytest.fixture
def dans(world: Engine) -> list[int]:
    rows = [add_row(world, f"u:{DAN}", f"u:42 drinks tea number {i}.") for i in range(3)]
    memories_closed = add_row(world, f"u:{DAN}", "u:42 lived in Xuhui.", valid_to="2026-11-01")
    add_notice(world, DAN, rows[:1])
    add_row(world, "u:17", "u:17 runs marathons.", room_id="dm-cara")
    return [*rows, memories_closed]


def test_the_api_export_needs_the_session_and_its_csrf_token(dans: list[int]) -> None:
    client, csrf = signed_in()
    assert client.get("/api/export").status_code == 403  # a plain GET, no token
    assert client.get("/api/export", headers={"X-CSRF-Token": "wrong"}).status_code == 403
    answer = client.get("/api/export", headers={"X-CSRF-Token": csrf})
    assert answer.status_code == 200 and answer.headers["x-export-lines"] == "4"
    assert answer.headers["content-disposition"].startswith('attachment; filename="memories-u42-')
    got = answer.json()
    assert got["schema"] == export.SCHEMA and got["user_id"] == DAN
    assert got["note"] == "Call me Dan." and got["counts"] == {"lines": 4, "notices": 1}
    assert {x["id"] for x in got["lines"]} == set(dans)
    closed = next(x for x in got["lines"] if x["closed"])
    assert closed["valid_to"] == "2026-11-01" and closed["arc"]
    assert "marathons" not in answer.text
    signed_out = TestClient(create_app(secret_key=SECRET), base_url="http://127.0.0.1")
    assert signed_out.get("/api/export", headers={"X-CSRF-Token": csrf}).status_code == 401


def test_the_readable_export_is_markdown_a_person_can_open(world: Engine, dans: list[int]) -> None:
    add_row(world, f"u:{DAN}", "u:42 typed <script>x</script> and [a](javascript:x).")
    client, csrf = signed_in()
    answer = client.get("/api/export", params={"format": "md"}, headers={"X-CSRF-Token": csrf})
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/markdown")
    assert answer.text.startswith("# What personas remember about you")
    assert "Dan drinks tea number 0." in answer.text  # names, as the page shows them
    assert "no longer true" in answer.text and "marathons" not in answer.text
    # what someone typed stays text in a Markdown viewer: no HTML, no link
    assert "Dan typed \\<script\\>x\\</script\\> and \\[a\\](javascript:x)." in answer.text
    assert "<script>" not in answer.text
    bad = client.get("/api/export", params={"format": "xml"}, headers={"X-CSRF-Token": csrf})
    assert bad.status_code == 400 and "json, md" in bad.json()["error"]


def test_the_page_form_exports_and_refuses_without_its_token_or_from_elsewhere(
    dans: list[int],
) -> None:
    client, csrf = signed_in()
    assert 'action="/export"' in client.get("/").text
    answer = client.post("/export", data={"csrf": csrf, "format": "json"})
    assert answer.status_code == 200 and len(answer.json()["lines"]) == 4
    assert client.post("/export", data={"csrf": "x", "format": "json"}).status_code == 403
    foreign = {"Origin": "http://evil.example"}
    assert client.post("/export", data={"csrf": csrf}, headers=foreign).status_code == 403


def test_exports_are_rate_limited_per_user_and_logged_without_content(
    dans: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    client, csrf = signed_in()
    with caplog.at_level(logging.INFO):
        for _ in range(export.EXPORTS_PER_WINDOW):
            assert client.get("/api/export", headers={"X-CSRF-Token": csrf}).status_code == 200
        refused = client.get("/api/export", headers={"X-CSRF-Token": csrf})
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) > 0
    from_the_page = client.post("/export", data={"csrf": csrf, "format": "json"})
    assert from_the_page.status_code == 429 and "Too many exports" in from_the_page.text
    said = [r.getMessage() for r in caplog.records if "export" in r.getMessage()]
    assert "export: user 42, json, 4 lines, 1 toasts" in said
    assert any("export refused: user 42" in m for m in said)
    everything = " ".join(r.getMessage() for r in caplog.records)
    assert "tea" not in everything and "Call me Dan" not in everything


def test_the_cli_exports_a_human_given_as_42_or_u42(
    dans: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["export", "--user", "u:42"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert {x["id"] for x in got["lines"]} == set(dans)
    assert cli.main(["export", "--user", "42", "--format", "md"]) == 0
    assert "Dan drinks tea number 2." in capsys.readouterr().out
    assert cli.main(["export", "--user", "999"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == "error: unknown user 999" and "Traceback" not in err
    with pytest.raises(SystemExit) as bad:
        cli.main(["export", "--user", "u:¹"])
    assert bad.value.code == 2


def test_a_big_export_streams_in_steps(db: Engine) -> None:
    """More rows than a step: the document comes in pieces, each step read on its own."""
    s = Store()
    with db.begin() as conn:
        app_side.add_user(conn, DAN, "Dan")
        app_side.add_persona(conn, "warren", "Warren")
        rows = [
            dict(
                persona="warren", subject="u:42", witnessed="[42]", room_id="dm", kind="fact",
                text=f"u:42 line {i}.", importance=5, evidence="[]",
                created="2026-11-01T10:00:00+00:00", search_text=search_key(f"u:42 line {i}."),
            )
            for i in range(2 * export_model.EXPORT_PAGE_ROWS + 3)
        ]  # fmt: skip
        conn.execute(insert(t.persona_memory), rows)
    pieces = list(export.document(DAN, "json", page_data(DAN, None, None, 1), "now"))
    got = json.loads("".join(pieces))
    assert len(got["lines"]) == len(rows) == got["counts"]["lines"] and not s.rows
    assert len(pieces) >= 3 + 2  # the head, three steps of lines, the notices, the tail
