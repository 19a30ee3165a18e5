"""The operator's commands: the block a persona gets, and the parked spells."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from sqlalchemy import Engine

from memory_worker import app_side, cli
from memory_worker.core import settings as settings_mod
from memory_worker.core import tables as t
from memory_worker.write import steps
from tests.scenes import DAN, people, private_chat

pytestmark = pytest.mark.store


def test_block_prints_the_meter_and_the_rows_and_does_not_touch_them(
    db: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    people(db)
    private_chat(db)
    with db.begin() as conn:
        conn.execute(
            t.persona_memory.insert().values(
                persona="warren",
                subject="u:42",
                witnessed="[42]",
                room_id="dm-dan",
                kind="fact",
                text="u:42 owns a flat in Xuhui.",
                importance=6,
                evidence="[1]",
                created="2026-08-18T10:00:00+00:00",
            )
        )
    assert (
        cli.main(["block", "--persona", "warren", "--present", str(DAN), "--room", "dm-dan"]) == 0
    )
    out = capsys.readouterr().out
    assert "/1200 chars" in out and "u:42 owns a flat in Xuhui." in out
    with db.connect() as conn:
        assert conn.execute(t.persona_memory.select()).mappings().one()["recall_count"] == 0


def test_block_for_an_unknown_room_says_so_and_exits_2(
    db: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    people(db)
    assert cli.main(["block", "--persona", "warren", "--present", "42", "--room", "nope"]) == 2
    assert "unknown room 'nope'" in capsys.readouterr().err


def test_a_builtin_raised_by_a_bug_is_a_traceback_never_a_plain_error_line(
    db: Engine, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI says its own errors in one line (exit 2); a bug's KeyError is not one of them."""
    from memory_worker import reader

    people(db)

    def bug(*args: object, **kwargs: object) -> object:
        raise KeyError("a bug's key")

    monkeypatch.setattr(reader, "build_block", bug)
    with pytest.raises(KeyError):
        cli.main(["block", "--persona", "warren", "--present", "42", "--room", "dm-dan"])
    assert "error:" not in capsys.readouterr().err


def test_parked_lists_the_spells_an_operator_must_see(
    db: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    people(db)
    private_chat(db)
    spell = steps.begin("warren", "dm-dan")
    assert spell is not None
    spell.parked = "malformed model answer (asked twice)"
    steps.run_commit(spell)
    with db.begin() as conn:
        app_side.say(conn, "dm-dan", DAN, "One more thing.")
    assert cli.main(["parked"]) == 0
    out = capsys.readouterr().out
    assert "warren/dm-dan/3  malformed model answer (asked twice)" in out
    assert "1 parked spell(s)" in out


def test_a_read_command_creates_no_store_and_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    settings_mod.configure(settings_mod.Settings.from_env({}))  # the default store, here
    try:
        for argv in (
            ["block", "--persona", "warren", "--present", "42", "--room", "r"],
            ["parked"],
        ):
            assert cli.main(argv) == 2
            err = capsys.readouterr().err
            assert "no store at memory_worker.db: run `memory-worker init-db`" in err
            assert "make demo" in err
        assert list(tmp_path.iterdir()) == [], "a read command created a file"
    finally:
        settings_mod.configure(None)


def test_every_command_explains_itself_in_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    for name, (_short, description) in cli.COMMANDS.items():
        with pytest.raises(SystemExit):
            cli.main([name, "--help"])
        shown = " ".join(capsys.readouterr().out.split())
        assert " ".join(description.split()) in shown, name


def test_every_option_of_every_command_says_what_it_does() -> None:
    bare = [
        f"{name} {action.option_strings or action.dest}"
        for name, sub in cli.parser()._subparsers._group_actions[0].choices.items()  # type: ignore[union-attr]
        for action in sub._actions
        if not isinstance(action, argparse._HelpAction) and not action.help
    ]
    assert not bare, f"options without help: {bare}"
