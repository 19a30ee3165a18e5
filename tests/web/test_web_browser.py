"""The page in a real browser: headless Chromium (Debian's package, driven by Playwright)
against `memory-worker serve` in a subprocess, with rows written by real spells through a real
Celery worker. Each control is used as a person would, then checked in the store.

Screenshots (desktop and phone width) are kept under artefacts/screenshots/ (gitignored).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, insert, select

from memory_worker import events
from memory_worker.core import settings as settings_mod
from memory_worker.core import tables as t
from memory_worker.models.scripted import candidate
from memory_worker.testing.gemini_stub import gemini_responder
from tests.scenes import DAN, extract_answer, people, private_chat
from tests.web.test_web_paging import row as paging_row
from tests.web_server import Served, serve
from tests.worker import Pipeline

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTEFACTS = Path(__file__).resolve().parents[2] / "artefacts" / "screenshots"
ARRIVAL_TIMEOUT_MS = 60_000  # a spell through the worker on a loaded machine
STEP_TIMEOUT_MS = 20_000  # one click and the page it leads to, on a loaded machine
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="no Chromium at /usr/bin/chromium: `apt-get install -y chromium` runs the "
        "browser tests (.ci/run installs it)",
    ),
]


@pytest.fixture(scope="module")
def browser():  # type: ignore[no-untyped-def]
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=STEP_TIMEOUT_MS)  # a loaded CI machine: 5 s is Playwright's default
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def dm(pipeline: Pipeline) -> list[int]:
    """Dan's private chat with Warren, and a model that notes his flat and his interview."""
    people(pipeline.db)
    lines = private_chat(pipeline.db)
    pipeline.stub.chat_responder = gemini_responder(extract_answer(lines))
    return lines


@pytest.fixture
def served(pipeline: Pipeline) -> Iterator[Served]:
    """The rail as served: the worker's Redis announcement nudges it, and it reads the store
    every RAIL_POLL_S too. Which of the two brought a toast is test_web_rail's question (the
    nudge alone: `test_a_toast_arrives_on_the_channel_nudge_not_the_poll`); here it is what
    the page does with it, without a reload. With the nudge as the only way in, the toast
    twice failed to arrive within 60 s on a loaded machine (cause not
    found), which a user would see as a toast up to RAIL_POLL_S late."""
    with serve(settings_mod.current(), "--user", str(DAN)) as s:
        yield s


@pytest.fixture
def page(browser, served: Served):  # type: ignore[no-untyped-def]
    context = browser.new_context(viewport=DESKTOP)
    p = context.new_page()
    p.set_default_timeout(STEP_TIMEOUT_MS)
    assert served.login_url
    p.goto(served.login_url)
    yield p
    context.close()


def spell(pipeline: Pipeline, last_line: int) -> None:
    events.room_quiet("dm-dan")
    outcome = pipeline.wait_for_spell("warren", "dm-dan", last_line)
    assert outcome["status"] == "committed", outcome["reason"]


def rows(db: Engine) -> list[dict]:
    with db.connect() as c:
        q = select(t.persona_memory).order_by(t.persona_memory.c.id)
        return [dict(r) for r in c.execute(q).mappings()]


def user(db: Engine) -> dict:
    with db.connect() as c:
        return dict(c.execute(select(t.users).where(t.users.c.id == DAN)).mappings().one())


def wait_for_stream(page) -> None:  # type: ignore[no-untyped-def]
    """The rail's EventSource is open: a toast posted from now on arrives live."""
    page.wait_for_selector("#rail[data-connected='1']", state="attached")


# --- the rail ---------------------------------------------------------------------------------


def test_a_toast_arrives_without_a_reload_and_its_undo_deletes_the_rows(
    pipeline: Pipeline, dm, page
) -> None:  # type: ignore[no-untyped-def]
    from playwright.sync_api import expect

    expect(page.locator("#rail-empty")).to_be_visible()
    wait_for_stream(page)
    page.evaluate("window.__sameDocument = true")  # gone if the page reloads
    spell(pipeline, dm[-1])
    toast = page.locator("#rail-list .toast").first
    expect(toast).to_contain_text(
        "Warren noted: Dan owns a flat in Xuhui", timeout=ARRIVAL_TIMEOUT_MS
    )
    assert page.evaluate("window.__sameDocument === true")
    # the new lines appear on the page too, still without a reload
    expect(page.locator("#memories")).to_contain_text("Dan owns a flat in Xuhui.")
    assert page.evaluate("window.__sameDocument === true")
    assert len(rows(pipeline.db)) == 2

    toast.get_by_role("button", name="Undo").click()
    expect(toast).to_contain_text("Undone: 2 lines deleted")  # in place, still no reload
    assert page.evaluate("window.__sameDocument === true")
    assert rows(pipeline.db) == []
    with pipeline.db.connect() as c:
        assert c.execute(select(t.notices.c.undone)).scalar() == 1
    expect(page.locator("#memories")).not_to_contain_text("owns a flat")


def test_undo_works_without_javascript_too(pipeline: Pipeline, dm, browser, served) -> None:  # type: ignore[no-untyped-def]
    from playwright.sync_api import expect

    spell(pipeline, dm[-1])
    context = browser.new_context(viewport=DESKTOP, java_script_enabled=False)
    page = context.new_page()
    page.goto(served.login_url)
    page.locator("#rail-list .toast").first.get_by_role("button", name="Undo").click()
    expect(page.locator(".flash")).to_contain_text("Undone: 2 lines deleted")
    expect(page.locator("#rail-list .toast.undone")).to_contain_text("Undone")
    assert rows(pipeline.db) == []
    context.close()


# --- the page ---------------------------------------------------------------------------------


def test_deleting_a_line_on_the_page_deletes_it_in_the_store(pipeline: Pipeline, dm, page) -> None:  # type: ignore[no-untyped-def]
    from playwright.sync_api import expect

    spell(pipeline, dm[-1])
    page.reload()
    flat = page.locator(".line", has_text="Dan owns a flat in Xuhui.")
    flat.get_by_text("Where this came from").click()  # the evidence, on demand
    expect(flat.locator(".evidence")).to_contain_text("I bought a flat in Xuhui last July.")
    flat.get_by_role("button", name="Delete: Dan owns a flat in Xuhui.").click()
    expect(page.locator(".flash")).to_contain_text("Deleted.")
    assert [r["text"] for r in rows(pipeline.db)] == [
        "u:42 has a job interview on Thursday and asked to be asked about it."
    ]
    expect(page.locator("#memories")).not_to_contain_text("owns a flat")


def test_scrolling_down_the_page_loads_every_line_to_the_last(pipeline: Pipeline, dm, page) -> None:  # type: ignore[no-untyped-def]
    """130 lines: the page shows the first 50 (open ones, newest first), and scrolling loads
    the rest until the oldest closed line is the last one on the page."""
    from playwright.sync_api import expect

    with pipeline.db.begin() as c:
        for i in range(130):
            c.execute(insert(t.persona_memory).values(**paging_row("warren", "u:42", i, i < 40)))
    closed = [r["id"] for r in rows(pipeline.db) if r["valid_to"] is not None]
    page.reload()
    lines = page.locator("#memories .line")
    expect(lines).to_have_count(50)
    for _ in range(10):  # three pages at most: each scroll to the end loads one
        if not page.locator("#more").count():
            break
        shown = lines.count()
        page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
        page.wait_for_function(
            "n => document.querySelectorAll('#memories .line').length > n || "
            "!document.getElementById('more')",
            arg=shown,
        )
    expect(lines).to_have_count(130)
    expect(lines.last).to_have_id(f"line-{min(closed)}")
    expect(page.locator("#more")).to_have_count(0)


def test_clear_all_asks_first_and_then_deletes_only_that_personas_lines(
    pipeline: Pipeline, dm, page
) -> None:  # type: ignore[no-untyped-def]
    from playwright.sync_api import expect

    spell(pipeline, dm[-1])
    page.reload()
    page.get_by_role("link", name="Clear all Warren remembers…").click()
    expect(page.locator("h1")).to_contain_text("Clear everything Warren remembers about you?")
    page.get_by_role("link", name="No, keep them").click()
    assert len(rows(pipeline.db)) == 2  # asking changed nothing
    page.get_by_role("link", name="Clear all Warren remembers…").click()
    page.get_by_role("button", name="Yes, delete 2 lines").click()
    expect(page.locator(".flash")).to_contain_text("Cleared: 2 lines deleted")
    assert rows(pipeline.db) == []


# --- the field --------------------------------------------------------------------------------


def test_the_field_keeps_400_characters_and_refuses_401_on_the_page(
    pipeline: Pipeline, dm, page
) -> None:  # type: ignore[no-untyped-def]
    from playwright.sync_api import expect

    field = page.get_by_label("Your note to every persona")
    field.fill("x" * 400)
    expect(page.locator("#note-count")).to_have_text("400 / 400")
    page.get_by_role("button", name="Save note").click()
    expect(page.locator(".flash")).to_contain_text("Your note is saved.")
    assert user(pipeline.db)["memory_note"] == "x" * 400

    field.fill("y" * 401)
    expect(page.locator("#note-count")).to_have_text("401 / 400 (1 too many)")
    page.get_by_role("button", name="Save note").click()
    expect(page.get_by_role("alert")).to_contain_text(
        "Not saved: the note is 401 characters; the limit is 400."
    )
    assert user(pipeline.db)["memory_note"] == "x" * 400
    expect(field).to_have_value("y" * 401)  # what they typed is still there to trim


# --- the switches -----------------------------------------------------------------------------


def test_each_switch_flips_in_the_store(pipeline: Pipeline, dm, page) -> None:  # type: ignore[no-untyped-def]
    from playwright.sync_api import expect

    page.get_by_role("button", name="Turn off").click()
    expect(page.locator("#memory-on-state")).to_have_text("off")
    assert user(pipeline.db)["memory_on"] == 0
    page.get_by_role("button", name="Turn on").click()
    expect(page.locator("#memory-on-state")).to_have_text("on")
    assert user(pipeline.db)["memory_on"] == 1

    page.get_by_role("button", name="Warren, forget me").click()
    expect(page.locator("#forget-warren-state")).to_have_text("on")
    with pipeline.db.connect() as c:
        assert c.execute(select(t.persona_memory_mute)).all() == [(DAN, "warren")]
    page.get_by_role("button", name="Let Warren remember me").click()
    expect(page.locator("#forget-warren-state")).to_have_text("off")
    with pipeline.db.connect() as c:
        assert c.execute(select(t.persona_memory_mute)).all() == []

    expect(page.locator("#incognito-means")).to_contain_text("nothing said in this room is noted")
    page.get_by_label("Start a private chat with").select_option("nolan")
    page.get_by_label("Incognito").check()
    page.get_by_role("button", name="Start").click()
    expect(page.locator(".flash")).to_contain_text("Room started.")
    with pipeline.db.connect() as c:
        started = c.execute(select(t.rooms).where(t.rooms.c.id != "dm-dan")).mappings().one()
        members = set(
            c.execute(
                select(t.room_members.c.member).where(t.room_members.c.room_id == started["id"])
            ).scalars()
        )
    assert started["incognito"] == 1 and members == {f"u:{DAN}", "nolan"}
    expect(page.locator(f"#room-{started['id']} .badge")).to_have_text("incognito")


def test_the_controls_are_reachable_by_keyboard(pipeline: Pipeline, dm, page) -> None:  # type: ignore[no-untyped-def]
    """Tab reaches the note, the switches and Start; Enter on a focused button uses it."""
    from playwright.sync_api import expect

    reached = set()
    for _ in range(40):
        page.keyboard.press("Tab")
        reached.add(
            page.evaluate("document.activeElement.id || document.activeElement.textContent.trim()")
        )
    assert {
        "note-text",
        "memory-on-toggle",
        "forget-warren",
        "room-persona",
        "room-incognito",
    } <= reached
    page.focus("#memory-on-toggle")
    page.keyboard.press("Enter")
    expect(page.locator(".flash")).to_have_text("Switch saved.")
    assert user(pipeline.db)["memory_on"] == 0


UNNAMED_CONTROLS_JS = """
() => [...document.querySelectorAll(
    'button, a[href], input:not([type=hidden]), select, textarea, meter, summary')]
  .filter(el => {
    const labelled = (el.labels && el.labels.length > 0) || el.getAttribute('aria-label')
      || el.getAttribute('aria-labelledby');
    const text = ['BUTTON', 'A', 'SUMMARY'].includes(el.tagName) && el.textContent.trim();
    return !(labelled || text);
  })
  .map(el => el.outerHTML.slice(0, 120))
"""


def test_every_control_has_a_name_for_screen_readers(pipeline: Pipeline, dm, page) -> None:  # type: ignore[no-untyped-def]
    spell(pipeline, dm[-1])
    page.reload()
    assert page.evaluate(UNNAMED_CONTROLS_JS) == []
    assert page.locator("html").get_attribute("lang") == "en"
    assert page.locator("h1").count() == 1
    page.get_by_role("link", name="Clear everything…").click()
    assert page.evaluate(UNNAMED_CONTROLS_JS) == []


# --- how it looks -----------------------------------------------------------------------------


def test_screenshots_at_desktop_and_phone_width(pipeline: Pipeline, dm, page, browser) -> None:  # type: ignore[no-untyped-def]
    """Two spells (the second closes the flat: a greyed arc), the note, then the page at
    1280 px and at 390 px; the phone layout must not scroll sideways."""
    from playwright.sync_api import expect

    spell(pipeline, dm[-1])
    with pipeline.db.begin() as conn:
        from memory_worker import app_side

        sold = app_side.say(conn, "dm-dan", DAN, "I sold the flat in Xuhui this month.")
    flat = next(r for r in rows(pipeline.db) if "flat" in r["text"])
    pipeline.stub.chat_responder = gemini_responder(
        {"candidates": [candidate("u:42", "fact", "u:42 sold his flat in Xuhui.", 6, [sold])]}
    )
    spell(pipeline, sold)
    page.get_by_label("Your note to every persona").fill("Vegetarian. Call me Dan, not Daniel.")
    page.get_by_role("button", name="Save note").click()
    expect(page.locator(".flash")).to_be_visible()
    page.goto(page.url.split("?")[0])  # the page as it opens: not scrolled to an anchor
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTEFACTS / "page-desktop.png"), full_page=True)
    closed = [r for r in rows(pipeline.db) if r["valid_to"] is not None]
    if closed:  # the router closed the flat: it stays on the page, greyed, with its arc
        assert closed[0]["id"] == flat["id"]
        expect(page.locator(f"#line-{flat['id']}.closed .arc")).to_be_visible()

    phone = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    p = phone.new_page()
    p.context.add_cookies(page.context.cookies())
    p.goto(page.url)
    expect(p.locator("#memories")).to_contain_text("Dan")
    p.screenshot(path=str(ARTEFACTS / "page-phone.png"), full_page=True)
    assert p.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    phone.close()
