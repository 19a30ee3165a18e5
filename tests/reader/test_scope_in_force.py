"""The group scope's gate at a room open costs a check once per process, store and settings,
not a copy of the settings at every open: a validated Settings costs more than a warm open's
whole work (the read benchmark's busy process, `proven_scope=False`)."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from memory_worker import reader
from memory_worker.core import settings as settings_mod
from tests.scenes import DAN, people, private_chat

pytestmark = pytest.mark.store


def test_a_group_scope_open_makes_no_settings_once_its_scope_was_checked(
    db: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    people(db)
    private_chat(db)
    settings_mod.configure(settings_mod.current().with_(memory_scope_override=True))
    first = reader.build_block("warren", {DAN}, "dm-dan", touch=False, proven_scope=False)

    def no_copies(self: settings_mod.Settings, **changes: object) -> settings_mod.Settings:
        raise AssertionError(f"a room open copied the settings: {sorted(changes)}")

    monkeypatch.setattr(settings_mod.Settings, "with_", no_copies)
    again = reader.build_block("warren", {DAN}, "dm-dan", touch=False, proven_scope=False)
    assert again.text == first.text
    follow = settings_mod.current().model_copy(update={"memory_scope": "follow"})
    monkeypatch.setattr(settings_mod, "current", lambda: follow)  # the group scope in force
    assert reader.build_block("warren", {DAN}, "dm-dan", touch=False).text == first.text
