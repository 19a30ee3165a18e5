"""The page's messages, its search and its export in a real browser (headless Chromium
against `memory-worker serve`): a search too long or finding nothing says so, a toast arriving
during a search keeps the search, a walk whose lines changed says so, and the export button
downloads everything with its progress shown."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, insert

from memory_worker.core import settings as settings_mod
from memory_worker.core import tables as t
from memory_worker.storage import memories
from tests.scenes import DAN, people
from tests.web.test_web_browser import (  # noqa: F401  (fixtures)
    ARRIVAL_TIMEOUT_MS,
    CHROMIUM,
    DESKTOP,
    STEP_TIMEOUT_MS,
    browser,
    dm,
    page,
    rows,
    served,
    spell,
    wait_for_stream,
)
from tests.web.test_web_paging import row as paging_row
from tests.web_server import Served, serve
from tests.worker import Pipeline

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="no Chromium at /usr/bin/chromium"),
]


@pytest.fixture
def lines(db: Engine) -> Engine:
    """Dan with 130 lines about him (40 closed; every tenth likes tea), no worker needed."""
    people(db)
    with db.begin() as c:
        for i in range(130):
            c.execute(insert(t.persona_memory).values(**paging_row("warren", "u:42", i, i < 40)))
    return db


@pytest.fixture
def quiet_page(browser, lines: Engine) -> Iterator:  # type: ignore[no-untyped-def]  # noqa: F811
    """Dan signed in on a server with no worker behind it."""
    with serve(settings_mod.current(), "--user", str(DAN)) as s:
        context = browser.new_context(viewport=DESKTOP, accept_downloads=True)
        p = context.new_page()
        p.set_default_timeout(STEP_TIMEOUT_MS)
        assert s.login_url
        p.goto(s.login_url)
        p.served = s
        yield p
        context.close()


def test_a_search_too_long_or_finding_nothing_says_so(quiet_page) -> None:  # type: ignore[no-untyped-def]
    from playwright.sync_api import expect

    base: Served = quiet_page.served
    quiet_page.goto(f"{base.base_url}/?q={'t' * 201}")
    expect(quiet_page.get_by_role("alert")).to_have_text(
        "Not searched: a search is at most 200 characters; this one has 201."
    )
    quiet_page.get_by_role("link", name="Back to your page").click()
    quiet_page.get_by_label("Find a line").fill("zzznothing")
    quiet_page.get_by_role("button", name="Find").click()
    expect(quiet_page.locator("#no-match")).to_have_text("No line holds “zzznothing”.")
    expect(quiet_page.locator("#memories .line")).to_have_count(0)
    expect(quiet_page.locator("#end")).to_have_count(0)
    quiet_page.get_by_label("Find a line").fill("LIKES TEA")
    quiet_page.get_by_role("button", name="Find").click()
    expect(quiet_page.locator("#memories .line")).to_have_count(13)
    expect(quiet_page.locator("#end")).to_contain_text("Every line holding “LIKES TEA” is above.")


def test_a_walk_whose_lines_changed_says_so_and_offers_the_top(  # type: ignore[no-untyped-def]
    quiet_page, lines: Engine
) -> None:
    from playwright.sync_api import expect

    shown = quiet_page.locator("#memories .line").first.get_attribute("id")
    assert shown is not None
    with lines.begin() as conn:
        memories.close(conn, int(shown.removeprefix("line-")), "2026-12-07", None)
    quiet_page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    changed = quiet_page.locator("#changed")
    expect(changed).to_contain_text("The lines changed while you scrolled.")
    changed.get_by_role("link", name="Show them again from the top").click()
    expect(quiet_page.locator("#memories .line")).to_have_count(50)


def test_the_export_button_downloads_everything_and_shows_its_progress(quiet_page) -> None:  # type: ignore[no-untyped-def]
    from playwright.sync_api import expect

    with quiet_page.expect_download() as got:
        quiet_page.get_by_role("button", name="Download as JSON").click()
    download = got.value
    assert download.suggested_filename.startswith("memories-u42-")
    document = json.loads(Path(download.path()).read_text())
    assert len(document["lines"]) == 130 and document["user_id"] == DAN
    status = quiet_page.locator("#export-status")
    expect(status).to_have_text(f"Downloaded {download.suggested_filename}: 130 lines.")
    assert quiet_page.locator("#export-progress").evaluate("bar => bar.value") == 1
    assert quiet_page.locator("#export-progress").is_visible()
    with quiet_page.expect_download() as got:
        quiet_page.get_by_role("button", name="Download a copy to read").click()
    readable = Path(got.value.path()).read_text()
    assert readable.startswith("# What personas remember about you")
    assert readable.count("\n- **Warren**") == 130


def test_the_export_downloads_without_javascript_too(browser, lines: Engine) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    with serve(settings_mod.current(), "--user", str(DAN)) as s:
        context = browser.new_context(java_script_enabled=False, accept_downloads=True)
        p = context.new_page()
        assert s.login_url
        p.goto(s.login_url)
        with p.expect_download() as got:
            p.get_by_role("button", name="Download as JSON").click()
        assert len(json.loads(Path(got.value.path()).read_text())["lines"]) == 130
        context.close()


def test_a_toast_during_a_search_keeps_the_search(  # type: ignore[no-untyped-def]
    pipeline: Pipeline,
    dm,  # noqa: F811
    page,  # noqa: F811
) -> None:
    """The toast's refresh of the lines used to load the unfiltered list and empty the box."""
    from playwright.sync_api import expect

    with pipeline.db.begin() as c:
        for i in range(30):
            c.execute(insert(t.persona_memory).values(**paging_row("warren", "u:42", i, False)))
    page.get_by_label("Find a line").fill("likes tea")
    page.get_by_role("button", name="Find").click()
    expect(page.locator("#memories .line")).to_have_count(3)
    wait_for_stream(page)
    page.evaluate("document.getElementById('memories').dataset.before = '1'")
    spell(pipeline, dm[-1])
    expect(page.locator("#rail-list .toast").first).to_contain_text(
        "Warren noted", timeout=ARRIVAL_TIMEOUT_MS
    )
    page.wait_for_selector("#memories:not([data-before])", state="attached")  # refreshed
    expect(page.get_by_label("Find a line")).to_have_value("likes tea")
    expect(page.locator("#memories .line")).to_have_count(3)
    expect(page.locator("#memories")).not_to_contain_text("owns a flat")
    assert len(rows(pipeline.db)) == 32
