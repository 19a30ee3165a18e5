"""The page has an icon: a browser that asks for /favicon.ico (every load, when a page
names none) gets one, and the page names it, so no request ends in a 404."""

from __future__ import annotations

from starlette.testclient import TestClient

from memory_worker.web.app import create_app


def test_the_favicon_is_served_where_browsers_look_and_the_page_names_it() -> None:
    client = TestClient(create_app(secret_key="k" * 40), base_url="http://127.0.0.1")
    asked = client.get("/favicon.ico")
    assert asked.status_code == 200, asked.status_code
    assert asked.headers["content-type"].startswith("image/svg+xml")
    named = client.get("/static/favicon.svg")
    assert named.status_code == 200 and named.content == asked.content
    page = client.get("/")  # signed out: the same template head
    assert '<link rel="icon" href="/static/favicon.svg"' in page.text
