"""The human's side of the New: the page says per persona whether what they told it privately
may follow them into groups, a switch keeps it in private chats, and a toast of a spell in a
group says where what it noted may come up."""

from __future__ import annotations

import itertools

import pytest
from sqlalchemy import Engine

from memory_worker import app_side, controls
from memory_worker.core import settings as settings_mod
from memory_worker.core.errors import NotFound, ScopeNotAllowed, UnknownUser
from memory_worker.models.scripted import ScriptedChat, candidate, sensible_route
from memory_worker.storage import notices, store
from memory_worker.web import page_model
from tests.scenes import CARA, DAN, people
from tests.write_helpers import run_spell

pytestmark = pytest.mark.store


def sections(user: int) -> dict[str, bool]:
    return {s.persona: s.follows_into_groups for s in page_model.manage_page(user).personas}


@pytest.fixture
def world(db: Engine) -> Engine:
    # run_spell embeds with hashing: so does recall here
    settings_mod.configure(settings_mod.current().with_(embedder="hashing"))
    people(db)
    with db.begin() as c:
        app_side.add_room(c, "g", "group", [f"u:{DAN}", f"u:{CARA}", "warren"])
        app_side.add_room(c, "dm", "private", [f"u:{DAN}", "warren"])
    return db


NOTED = itertools.count(5)


def note_in(db: Engine, room: str) -> list[str]:
    """Dan tells Warren a new fact in `room` (a new one each time: the same sentence twice is
    one memory, toasted once)."""
    km = next(NOTED)
    with db.begin() as c:
        line = app_side.say(c, room, DAN, f"I run {km} km every Sunday.")
    fact = candidate(f"u:{DAN}", "preference", f"u:{DAN} runs {km} km every Sunday.", 5, [line])
    run_spell(
        "warren", room, ScriptedChat({"extract": {"candidates": [fact]}, "route": sensible_route})
    )
    with store.engine().connect() as conn:
        return [n.text for n in notices.of_user(conn, DAN, 0, 10)]


def test_the_page_says_per_persona_whether_memories_follow_into_groups(world: Engine) -> None:
    note_in(world, "dm")
    assert sections(DAN) == {"warren": False}  # the proven scope: nothing follows
    settings_mod.configure(settings_mod.current().with_(memory_scope="follow"))
    assert sections(DAN) == {"warren": True} and page_model.manage_page(DAN).group_scope
    controls.set_follows(DAN, "warren", False)
    assert sections(DAN) == {"warren": False}
    assert page_model.manage_page(DAN).private_with == ["warren"]
    controls.set_follows(DAN, "warren", True)
    assert sections(DAN) == {"warren": True}


def test_the_switch_is_the_users_and_checks_its_inputs(world: Engine) -> None:
    with pytest.raises(NotFound):
        controls.set_follows(DAN, "nobody", False)
    with pytest.raises(TypeError):
        controls.set_follows(DAN, "warren", "no")  # type: ignore[arg-type]
    with pytest.raises(UnknownUser):
        controls.set_follows(999, "warren", False)


def test_a_toast_from_a_group_says_where_it_may_come_up(world: Engine) -> None:
    (private,) = note_in(world, "dm")
    assert "group" not in private
    (group, _) = note_in(world, "g")
    assert group.startswith("Warren noted in a group") and "only where everyone present" in group
    settings_mod.configure(settings_mod.current().with_(memory_scope="follow"))
    (follows, *_) = note_in(world, "g")
    assert "may bring this up in groups you're in" in follows
    controls.set_follows(DAN, "warren", False)
    (kept, *_) = note_in(world, "g")
    assert "only where everyone present" in kept


def test_the_reader_follows_the_deployments_scope_only_on_its_verdict_and_the_switch(
    world: Engine,
) -> None:
    from memory_worker import reader
    from memory_worker.storage import verdicts
    from tests.test_scope_gate import passing

    note_in(world, "dm")  # Dan, one-to-one: "u:42 runs every Sunday."
    with world.begin() as c:
        line = app_side.say(c, "g", DAN, "I also swim on Fridays.")
    swim = candidate(f"u:{DAN}", "fact", f"u:{DAN} swims on Fridays.", 5, [line])
    run_spell(
        "warren", "g", ScriptedChat({"extract": {"candidates": [swim]}, "route": sensible_route})
    )
    both = {DAN, CARA}
    assert "Sunday" not in reader.build_block("warren", both, "g", touch=False).text  # proven
    settings_mod.configure(settings_mod.current().with_(memory_scope="follow"))
    with pytest.raises(ScopeNotAllowed, match="memory-worker exam"):
        reader.build_block("warren", both, "g", touch=False)
    with pytest.raises(ScopeNotAllowed):
        reader.prepare()
    settings_mod.configure(settings_mod.current().with_(persona_models="gemini-2.5-flash"))
    with store.transaction() as conn:
        verdicts.record(conn, passing())
    reader.prepare()
    block = reader.build_block("warren", both, "g", touch=False).text
    assert "Sunday" in block and "Fridays" in block  # his rows follow him into the group
    assert "Sunday" not in reader.build_block("warren", {CARA}, "g", touch=False).text
    controls.set_follows(DAN, "warren", False)
    block = reader.build_block("warren", both, "g", touch=False).text
    assert "Sunday" not in block and "Fridays" in block  # what he said one-to-one stays there
    got = reader.recall("warren", both, "g", "Sunday run", block_ids=[], touch=False)
    assert all("Sunday" not in r.text for r in got)
    assert "Sunday" in reader.build_block("warren", {DAN}, "dm", touch=False).text


def test_the_page_and_the_follow_endpoint_say_what_the_reader_would_load(world: Engine) -> None:
    """The follow endpoint answered `"follows_into_groups": true` under the proven scope while
    /api/page said false; the page said "may come up" with "forget me" on or memory off, and
    offered "Keep … out of groups" where nothing could come up."""
    from starlette.testclient import TestClient

    from memory_worker.web.app import create_app

    note_in(world, "dm")
    app = create_app(secret_key="k" * 40)
    client = TestClient(app, base_url="http://127.0.0.1")
    assert client.get(f"/login?token={app.state.login_links.mint(DAN)}").status_code == 200
    csrf = {"X-CSRF-Token": client.get("/api/session").json()["csrf_token"]}

    def said() -> tuple[bool, bool, str]:
        (switch,) = client.get("/api/page").json()["switches"]
        html = client.get("/").text
        state = html.split('id="follow-warren-state">')[1].split("<")[0]
        return switch["follows_into_groups"], "privately out of groups" in html, state

    def follow(on: bool) -> dict[str, object]:
        r = client.post("/api/personas/warren/follow", json={"on": on}, headers=csrf)
        assert r.status_code == 200, r.text
        return dict(r.json())

    answer = follow(True)
    assert answer["follow_switch"] is True and answer["follows_into_groups"] is False
    assert said() == (False, False, "stays private")  # the proven scope: no switch offered
    settings_mod.configure(settings_mod.current().with_(memory_scope="follow"))
    assert said() == (True, True, "may come up")
    assert follow(True)["follows_into_groups"] is True
    controls.mute(DAN, "warren")  # forget me
    assert said() == (False, True, "stays private") and not follow(True)["follows_into_groups"]
    assert "Forget me is on" in client.get("/").text
    controls.unmute(DAN, "warren")
    controls.set_memory_on(DAN, False)
    assert said() == (False, True, "stays private") and not follow(True)["follows_into_groups"]
    controls.set_memory_on(DAN, True)
    assert said() == (True, True, "may come up")
    assert follow(False)["follows_into_groups"] is False and said()[0] is False
