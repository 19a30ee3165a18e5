"""Every command with bad values: each is refused where it is parsed, with exit 2 and one
line naming the option and what it takes — never a traceback, never silence (an empty
block for a persona the store does not hold)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import Engine

from memory_worker import cli
from memory_worker.core import settings as settings_mod
from memory_worker.storage import store
from tests.scenes import DAN, people, private_chat

pytestmark = pytest.mark.store

BLOCK = ["block", "--persona", "warren", "--present", "42", "--room", "dm-dan"]


def with_(argv: list[str], option: str, value: str) -> list[str]:
    """`argv` with `option`'s value replaced."""
    out = list(argv)
    out[out.index(option) + 1] = value
    return out


# (argv, what the one line must say); "{tmp}" is the test's folder, which holds `folder/`,
# `not.json` and `miss.json`
BAD = [
    (["serve", "--port", "99999"], "argument --port: '99999' is not a port: 0 to 65535"),
    (["serve", "--port", "-1"], "argument --port: '-1' is not a port"),
    (["serve", "--port", "８４２０"], "is not a port"),  # int() would take it
    (["serve", "--user", "dan"], "argument --user: 'dan' is not a human's id: 42 or u:42"),
    (["serve", "--user", "u:"], "is not a human's id"),
    (["serve", "--rail-poll-s", "0"], "argument --rail-poll-s: '0' is not a number of seconds"),
    (["serve", "--rail-poll-s", "nan"], "is not a number of seconds above 0"),
    (["cassette-answer", "/nonexistent", "/nonexistent"], "argument miss: /nonexistent does not"),
    (["cassette-answer", "{tmp}/folder", "{tmp}/folder"], "is a folder, not a file"),
    (["cassette-answer", "{tmp}/not.json", "{tmp}/not.json"], "not.json is not a JSON file"),
    (["cassette-answer", "{tmp}/not.json", "{tmp}/miss.json"], "is not a JSON file"),
    (["cassette-answer", "{tmp}/miss.json", "{tmp}/miss.json"], "not a request a replay miss"),
    (with_(BLOCK, "--persona", "nobody"), "unknown persona 'nobody'; known: nolan, warren"),
    (
        with_(BLOCK, "--persona", "Warren"),
        "unknown persona 'Warren' (did you mean 'warren'?); known: nolan, warren",
    ),
    (with_(BLOCK, "--persona", "u:42"), "argument --persona: 'u:42' is not an id"),
    (with_(BLOCK, "--present", "x42"), "argument --present: 'x42' is not a human's id"),
    (with_(BLOCK, "--room", "nope"), "unknown room 'nope'"),
    (with_(BLOCK, "--room", "two words"), "argument --room: 'two words' is not an id"),
    (["reembed", "--batch", "0"], "argument --batch: '0': a count of 1 or more"),
    (["reembed", "--batch", "-3"], "argument --batch: '-3' is not a count"),
    (["run", "--procfile", "/nonexistent"], "argument --procfile: /nonexistent does not exist"),
    (["run", "--stop-timeout", "-1"], "argument --stop-timeout: '-1' is not a number of seconds"),
    (["run", "--stop-timeout", "inf"], "is not a number of seconds"),
    (["exam", "--n", "0"], "argument --n: '0': a count of 1 or more"),
    (["exam", "--turns", "many"], "argument --turns: 'many' is not a count"),
    (["exam", "--flow-spells", "-1"], "argument --flow-spells: '-1' is not a count"),
    (["init-db", "now"], "unrecognized arguments: now"),
    (["check", "--all"], "unrecognized arguments: --all"),
    (["demo", "again"], "unrecognized arguments: again"),
    (["sweep", "--room", "r"], "unrecognized arguments: --room r"),
    (["parked", "--all"], "unrecognized arguments: --all"),
    (["serve", "--prot", "8420"], "unrecognized arguments: --prot 8420"),
    (["frobnicate"], "argument COMMAND: invalid choice: 'frobnicate'"),
]


@pytest.fixture
def main_of(
    db: Engine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> Callable[[list[str]], tuple[int, str, str]]:
    """`memory-worker` (its `main`) on a store holding Dan, Warren and their chat."""
    people(db)
    private_chat(db)
    (tmp_path / "folder").mkdir()
    (tmp_path / "not.json").write_text("{not json")
    (tmp_path / "miss.json").write_text('{"answer": 1}')

    def run(argv: list[str]) -> tuple[int, str, str]:
        try:
            code = cli.main([a.replace("{tmp}", str(tmp_path)) for a in argv])
        except SystemExit as e:  # argparse's way out
            code = int(e.code or 0)
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.mark.parametrize(("argv", "said"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_a_bad_value_is_refused_in_one_line_with_exit_2(
    main_of: Callable[[list[str]], tuple[int, str, str]], argv: list[str], said: str
) -> None:
    code, out, err = main_of(argv)
    assert code == 2, (out, err)
    lines = [line for line in err.splitlines() if not line.startswith("store: ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert said in lines[0], err
    assert "Traceback" not in err and out == ""


def test_a_human_is_accepted_as_u_42_wherever_42_is(
    main_of: Callable[[list[str]], tuple[int, str, str]],
) -> None:
    bare = main_of(BLOCK)
    as_printed = main_of(with_(BLOCK, "--present", f"u:{DAN}"))
    assert bare[0] == as_printed[0] == 0
    assert bare[1] == as_printed[1] and "── warren · " in bare[1]


def test_the_embedder_setting_never_offers_an_empty_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from memory_worker.core.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        settings_mod.Settings.from_env({"MW_EMBEDDER": "bert"})
    said = str(refused.value)
    assert "MW_EMBEDDER: Input should be 'gemini', 'hashing' or 'e5', or unset" in said
    assert "''" not in said


def test_a_command_falls_back_to_the_demo_store_in_mw_state_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No store here, and `make demo` was run with MW_STATE_DIR set: its store is read."""
    monkeypatch.chdir(tmp_path)
    kept = tmp_path / "elsewhere" / "demo" / "demo.db"
    kept.parent.mkdir(parents=True)
    store.init_db(f"sqlite:///{kept}")
    before = settings_mod.current()
    settings_mod.configure(settings_mod.Settings.from_env({"MW_STATE_DIR": "elsewhere"}))
    try:
        assert cli.main(["parked"]) == 0
    finally:
        settings_mod.configure(before)
    err = capsys.readouterr().err
    assert "reading the demo's store elsewhere/demo/demo.db" in err, err
    assert not (tmp_path / "memory_worker.db").exists()


@pytest.mark.processes  # the installed script, as a user types it
def test_the_installed_command_refuses_a_bad_port_in_one_line(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("memory-worker")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MW_")}
    done = subprocess.run(
        [str(script), "serve", "--port", "99999"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        "error: argument --port: '99999' is not a port: 0 to 65535 "
        "(see `memory-worker serve --help`)\n"
    )


def test_every_help_fits_80_columns_and_the_list_is_one_line_a_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    for argv in (["--help"], *([name, "--help"] for name in cli.COMMANDS)):
        with pytest.raises(SystemExit):
            cli.main(argv)
        shown = capsys.readouterr().out
        wide = [line for line in shown.splitlines() if len(line) > 80]
        assert not wide, f"{argv}: {wide}"
        if argv == ["--help"]:
            for name, (short, _) in cli.COMMANDS.items():
                assert f"    {name:<20}{short}\n" in shown, name
