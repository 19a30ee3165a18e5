"""The group scope starts only on a passing leak exam verdict for what is in force: refused
without one, accepted with one, refused again when the tail rule, a prompt or a persona model
changes; a deployer's override starts it and says so in the log at every start."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from sqlalchemy import Engine

from memory_worker import check, cli
from memory_worker.core import settings as settings_mod
from memory_worker.core import verdict
from memory_worker.core.errors import ScopeNotAllowed
from memory_worker.storage import store, verdicts
from memory_worker.tasks import startup

pytestmark = pytest.mark.store
CASSETTE = Path(cli.__file__).resolve().parent / "demo_cassette.json"


@pytest.fixture(autouse=True)
def provider_ready(db: Engine) -> None:
    """A worker's provider needs its cassette: the gate is what these tests are about."""
    settings_mod.configure(settings_mod.current().with_(cassette=CASSETTE))


def follow(**more: object) -> settings_mod.Settings:
    changes: dict[str, object] = {"memory_scope": "follow", "persona_models": "discreet", **more}
    return settings_mod.configure(settings_mod.current().with_(**changes))


def passing(model: str = "discreet", variant: str = "plain", **more: object) -> verdict.Verdict:
    fields: dict[str, object] = dict(
        created="2026-12-04T12:00:00+00:00",
        model=model,
        variant=variant,
        tail_hash=verdict.tail_hash(variant),
        prompts_hash=verdict.prompts_hash(),
        n=8,
        with_owner=0.0,
        without_owner=0,
        by_other_persona=0,
        references_per_turn=0.0,
        flow_spells=200,
        flow_flows=0,
        passed=True,
    )
    fields.update(more)
    return verdict.Verdict(**fields)  # type: ignore[arg-type]


def record(v: verdict.Verdict) -> None:
    with store.transaction() as conn:
        verdicts.record(conn, v)


def test_the_proven_scope_needs_no_verdict(db: Engine) -> None:
    check.require_scope(settings_mod.current())
    startup.check_worker_can_start()


def test_follow_is_refused_without_a_verdict_naming_the_command(
    db: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    follow()
    with pytest.raises(ScopeNotAllowed, match="memory-worker exam"):
        check.require_scope(settings_mod.current())
    with pytest.raises(startup.CannotStart, match="MW_MEMORY_SCOPE=follow"):
        startup.check_worker_can_start()
    assert cli.main(["parked"]) == 2
    err = capsys.readouterr().err
    assert "memory-worker exam" in err and len(err.strip().splitlines()) == 1


def test_follow_starts_on_a_passing_verdict_for_every_persona_model(db: Engine) -> None:
    follow(persona_models="discreet,gemini-2.5-flash")
    record(passing())
    with pytest.raises(ScopeNotAllowed, match="gemini-2.5-flash"):
        check.require_scope(settings_mod.current())
    record(passing("gemini-2.5-flash"))
    check.require_scope(settings_mod.current())
    startup.check_worker_can_start()


def test_a_failing_verdict_or_one_over_the_bar_does_not_count(db: Engine) -> None:
    follow()
    record(passing(passed=False))
    record(passing(without_owner=1))
    record(passing(flow_flows=2))
    with pytest.raises(ScopeNotAllowed):
        check.require_scope(settings_mod.current())


def test_another_tail_rule_voids_the_verdict(db: Engine) -> None:
    follow()
    record(passing(variant="plain"))
    check.require_scope(settings_mod.current())
    follow(block_tail="discreet")
    with pytest.raises(ScopeNotAllowed, match="MW_BLOCK_TAIL=plain"):
        check.require_scope(settings_mod.current())


def test_a_changed_prompt_voids_the_verdict(
    db: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    follow()
    record(passing())
    check.require_scope(settings_mod.current())
    copy = tmp_path / "package"
    shutil.copytree(verdict.PACKAGE / "write", copy / "write")
    path = copy / verdict.PROMPT_FILES[0]
    path.write_text(path.read_text() + "\nBe chatty about secrets.\n")
    monkeypatch.setattr(verdict, "PACKAGE", copy)
    with pytest.raises(ScopeNotAllowed):
        check.require_scope(settings_mod.current())


def test_the_override_starts_follow_and_says_so_at_every_start(
    db: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    follow(memory_scope_override=True)
    with caplog.at_level(logging.WARNING, logger="memory_worker.storage.verdicts"):
        startup.check_worker_can_start()
        startup.check_worker_can_start()
    said = [r for r in caplog.records if "MW_MEMORY_SCOPE_OVERRIDE" in r.getMessage()]
    assert len(said) == 2


def test_check_reports_the_scope(db: Engine) -> None:
    (found,) = [f for f in check.run(settings_mod.current()) if f.what == "scope"]
    assert found.ok and "proven" in found.detail
    follow()
    (found,) = [f for f in check.run(settings_mod.current()) if f.what == "scope"]
    assert not found.ok and "memory-worker exam" in found.detail
