"""The reference docs are read from the code, so they cannot drift from it.

Every setting's variable is a row of the settings table, and the table names no variable that
no setting reads; every route of the page's app and every field of its JSON answers is in
docs/api.md; the sweep's cadence and the write chain are stated once, in docs/design.md, as
the code has them; docs/architecture.md walks a commit in the order the code calls its steps.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine
from starlette.routing import Route
from starlette.testclient import TestClient

from memory_worker.core.settings import Settings, variables
from memory_worker.web.app import create_app
from tests.scenes import DAN
from tests.web import test_web_security

ROOT = Path(__file__).resolve().parent.parent
SETTINGS_DOC = ROOT / "docs" / "settings.md"
API_DOC = ROOT / "docs" / "api.md"
DESIGN = ROOT / "docs" / "design.md"
SETTINGS_HEADER = "| variable | default | meaning |"
VARIABLE = re.compile(r"`([A-Z][A-Z0-9_]+)`")


def settings_table() -> list[str]:
    """The first cell of each row of the settings table."""
    lines = SETTINGS_DOC.read_text().splitlines()
    start = lines.index(SETTINGS_HEADER) + 2  # past the header and its |---| line
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append(line.split("|")[1])
    return rows


def variables_of_settings() -> dict[str, list[str]]:
    """Each field of Settings → the environment variables it is read from, in order."""
    return {name: variables(name) for name in Settings.model_fields}


def test_every_setting_s_variable_is_a_row_of_the_settings_table() -> None:
    listed = {v for cell in settings_table() for v in VARIABLE.findall(cell)}
    missing = sorted(
        f"{n} ({v[0]})" for n, v in variables_of_settings().items() if v[0] not in listed
    )
    assert not missing, f"add a row to the settings table of {SETTINGS_DOC.name}: {missing}"


def test_the_settings_table_names_no_variable_that_no_setting_reads() -> None:
    known = {v for vs in variables_of_settings().values() for v in vs}
    listed = {v for cell in settings_table() for v in VARIABLE.findall(cell)}
    assert not listed - known, f"no setting reads {sorted(listed - known)}"


# --- the page's API ---------------------------------------------------------------------------

PARAM = re.compile(r"\{[^}]*\}")
CODE = re.compile(r"`([^`]+)`")
# Fields whose keys are data (a persona's slug → its name), not names of fields.
KEYED_BY_DATA = {"persona_names"}

world = test_web_security.world
rows = test_web_security.rows


def code_spans() -> list[str]:
    """What docs/api.md shows as code inline (its ``` blocks left out)."""
    return CODE.findall(re.sub(r"^```.*?^```", "", API_DOC.read_text(), flags=re.S | re.M))


def documented_paths() -> set[str]:
    """Every path docs/api.md shows in code, its parameters as `{}` and its query dropped."""
    found = set()
    for span in code_spans():
        for path in re.findall(r"(/[\w{}:/.…-]*)", span):
            found.add(PARAM.sub("{}", path.split("?")[0]).rstrip("/") or "/")
    return found


def test_every_route_of_the_page_is_in_the_api_doc(world: Engine) -> None:
    """A form's route is documented by its /api twin (the doc says the forms post there)."""
    documented = documented_paths()
    missing = []
    for route in create_app(secret_key="s" * 48).routes:
        if not isinstance(route, Route):
            continue  # /static
        path = PARAM.sub("{}", route.path)
        if path not in documented and "/api" + path not in documented:
            missing.append(route.path)
    assert not missing, f"routes docs/api.md does not show: {missing}"


def field_names(value: Any, into: set[str]) -> set[str]:
    if isinstance(value, dict):
        for key, inner in value.items():
            into.add(key)
            if key not in KEYED_BY_DATA:
                field_names(inner, into)
    elif isinstance(value, list):
        for inner in value:
            field_names(inner, into)
    return into


@pytest.fixture
def dan(world: Engine, rows: dict[str, int]) -> Iterator[TestClient]:
    app = create_app(secret_key="s" * 48)
    client = TestClient(app, base_url="http://127.0.0.1")
    assert client.get(f"/login?token={app.state.login_links.mint(DAN)}").status_code == 200
    with client:
        yield client


@pytest.mark.parametrize("route", ["/api/page", "/api/notices", "/api/session"])
def test_every_field_of_the_page_s_json_is_in_the_api_doc(dan: TestClient, route: str) -> None:
    answer = dan.get(route).json()
    fields = field_names(answer, set())
    assert len(fields) >= 2, answer
    shown = {word for span in code_spans() for word in re.findall(r"\w+", span)}
    missing = sorted(fields - shown)
    assert not missing, f"fields of {route} docs/api.md does not name: {missing}"


# --- the design doc, as the code has it -------------------------------------------------------


def test_the_design_doc_states_the_sweep_s_cadence_as_the_code_has_it() -> None:
    every = Settings.model_fields["sweep_every_s"].default
    text = DESIGN.read_text()
    assert f"`MW_SWEEP_EVERY_S`, {every:g} s" in text
    for name in ("design.md", "architecture.md", "operations.md"):
        said = (ROOT / "docs" / name).read_text()
        for vague in ("every minute", "every few minutes"):
            assert vague not in said, f"docs/{name} says the sweep runs {vague!r}"


def test_the_design_doc_s_chain_is_the_chain_the_code_sends() -> None:
    from memory_worker.core.rows import Spell
    from memory_worker.tasks.pipeline import spell_chain

    spell = Spell(persona="warren", room_id="dm-dan", after_line_id=0, last_line_id=1)
    steps = [task.name.removeprefix("memory_worker.") for task in spell_chain(spell).tasks]
    chain = " ─► ".join(steps)
    assert f"    {chain}\n" in DESIGN.read_text(), f"docs/design.md §2 should show: {chain}"


ARCHITECTURE = ROOT / "docs" / "architecture.md"
WALKED = re.compile(r"^### `([\w.]+)`$")
STEP = re.compile(r"^\d+\. `([\w.]+)`")


def walks() -> dict[str, list[str]]:
    """docs/architecture.md's walk of a commit: each function it lists → the names its
    numbered steps begin with, in order."""
    lines = ARCHITECTURE.read_text().splitlines()
    start = lines.index("## A commit, step by step")
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in lines[start + 1 :]:
        if line.startswith("## "):
            break
        if heading := WALKED.match(line):
            current = found.setdefault(heading.group(1), [])
        elif (step := STEP.match(line)) and current is not None:
            current.append(step.group(1))
    return found


def calls_of(function: Any) -> list[str]:
    """The functions `function` calls, in source order (classes, named in capitals, left out)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    calls = sorted(
        (n for n in ast.walk(tree) if isinstance(n, ast.Call)),
        key=lambda n: (n.lineno, n.col_offset),
    )
    names = [ast.unparse(c.func) for c in calls]
    return [n for n in names if not n.rpartition(".")[2][:1].isupper()]


def test_the_architecture_doc_walks_a_commit_in_the_order_the_code_calls_it() -> None:
    found = walks()
    assert set(found) == {"tasks.pipeline.commit_steps", "write.commit.commit_spell"}
    for where, said in found.items():
        module, _, name = where.rpartition(".")
        function = getattr(importlib.import_module(f"memory_worker.{module}"), name)
        assert said == calls_of(function), f"docs/architecture.md's walk of {where}"
