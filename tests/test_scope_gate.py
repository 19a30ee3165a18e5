"""The group scope starts only on a passing leak exam verdict for what is in force: refused
without one, accepted with one, refused again when the tail rule, a prompt or a persona model
changes; a deployer's override starts it and says so in the log at every start. A verdict
counts only if it could have failed: a live model's (never an offline stand-in's), at the
seed's size, against bars no looser than those in force. Every process checks: a worker,
beat, `memory-worker run`, every CLI command but the exam, and the reader, whose argument
narrows the scope but never widens it unchecked."""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import Engine

from memory_worker import check, cli
from memory_worker.core import settings as settings_mod
from memory_worker.core import verdict
from memory_worker.core.errors import ScopeNotAllowed
from memory_worker.storage import store, verdicts
from memory_worker.tasks import startup
from memory_worker.testing.gemini_stub import GeminiStub

pytestmark = pytest.mark.store
CASSETTE = Path(cli.__file__).resolve().parent / "demo_cassette.json"


@pytest.fixture(autouse=True)
def provider_ready(db: Engine) -> None:
    """A worker's provider needs its cassette: the gate is what these tests are about."""
    settings_mod.configure(settings_mod.current().with_(cassette=CASSETTE))


LIVE = "gemini-2.5-flash"  # a model the personas speak with; its verdicts here are forged


def follow(**more: object) -> settings_mod.Settings:
    changes: dict[str, object] = {"memory_scope": "follow", "persona_models": LIVE, **more}
    return settings_mod.configure(settings_mod.current().with_(**changes))


def passing(model: str = LIVE, variant: str = "plain", **more: object) -> verdict.Verdict:
    """A verdict as `memory-worker exam` records one for a live model at full size, measured
    where the deployment's model answers (Gemini's own API: no MW_GEMINI_BASE_URL)."""
    provider, endpoint = verdict.where_answered(model, settings_mod.current())
    fields: dict[str, object] = dict(
        provider=provider,
        endpoint=endpoint,
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
        flow_spells=verdict.MIN_FLOW_SPELLS,
        flow_flows=0,
        passed=True,
        turns=verdict.MIN_TURNS,
        variants=("plain", "discreet"),
        bar_with_owner=0.0,
        bar_references_per_turn=0.2,
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
    follow(persona_models=f"{LIVE},gemini-2.5-pro")
    record(passing())
    with pytest.raises(ScopeNotAllowed, match="gemini-2.5-pro"):
        check.require_scope(settings_mod.current())
    record(passing("gemini-2.5-pro"))
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


# --- a verdict that could have failed -------------------------------------------------------


def test_a_model_list_that_names_no_model_stops_check_and_every_start_naming_the_variable(
    tmp_path: Path,
) -> None:
    """`MW_PERSONA_MODELS=","` left the gate nothing to check: `check` said "ok scope follow"."""
    env = {"MW_MEMORY_SCOPE": "follow", "MW_PERSONA_MODELS": ","}
    with pytest.raises(settings_mod.ConfigError, match="MW_PERSONA_MODELS: .*names no model"):
        settings_mod.Settings.from_env(env)
    said = subprocess.run(
        [sys.executable, "-m", "memory_worker.cli", "check"],
        env={**os.environ, **env, "MW_DATABASE_URL": f"sqlite:///{tmp_path / 'none.db'}"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert said.returncode == 2 and "MW_PERSONA_MODELS" in said.stderr
    assert "ok" not in said.stdout


def test_an_offline_stand_ins_verdict_never_opens_the_group_scope(db: Engine) -> None:
    follow(persona_models="discreet")
    record(passing("discreet"))
    with pytest.raises(verdicts.ScopeNotAllowed, match="discreet .an offline stand-in"):
        check.require_scope(settings_mod.current())
    follow(persona_models=LIVE)
    record(passing("parrot"))
    with pytest.raises(verdicts.ScopeNotAllowed, match=LIVE):
        check.require_scope(settings_mod.current())
    record(passing())
    check.require_scope(settings_mod.current())  # the live model's own verdict opens it


@pytest.mark.parametrize(
    ("small", "said"),
    [
        ({"n": 1}, "n = 1 runs per variant"),
        ({"n": 7}, "n = 7 runs per variant"),
        ({"variants": ("plain",)}, "tail variant discreet not measured"),
        ({"turns": 1}, "1 probe turns"),
        ({"flow_spells": 1}, "a flow exam of 1 spells"),
        ({"flow_spells": verdict.MIN_FLOW_SPELLS - 1}, "a flow exam of"),
    ],
)
def test_a_verdict_too_small_to_fail_does_not_count_and_the_refusal_says_why(
    db: Engine, small: dict[str, object], said: str
) -> None:
    follow()
    record(passing(**small))
    with pytest.raises(verdicts.ScopeNotAllowed) as refused:
        check.require_scope(settings_mod.current())
    assert "too small to fail" in str(refused.value) and said in str(refused.value)


def test_a_verdict_measured_against_looser_bars_than_those_in_force_does_not_count(
    db: Engine,
) -> None:
    """A stricter ceiling was reported as "a verdict for other words or prompts"."""
    follow()
    record(passing(references_per_turn=0.05))  # measured against 0.2
    check.require_scope(settings_mod.current())
    follow(exam_max_references_per_turn=0.1)
    with pytest.raises(verdicts.ScopeNotAllowed) as refused:
        check.require_scope(settings_mod.current())
    said = str(refused.value)
    assert "stricter bars" in said and "MW_EXAM_MAX_REFERENCES_PER_TURN=0.1" in said
    assert "other words or prompts" not in said and "measured against 0.2" in said
    follow(exam_max_references_per_turn=0.2)
    record(passing(bar_with_owner=None))  # a verdict that never said its bars: not counted
    check.require_scope(settings_mod.current())  # the first still counts at the old bars
    follow(exam_max_with_owner=0.0)  # the same bars said again: a stricter verdict counts
    check.require_scope(settings_mod.current())


def test_a_verdict_that_did_not_record_its_bars_does_not_count(db: Engine) -> None:
    follow()
    record(passing(bar_with_owner=None, bar_references_per_turn=None))
    with pytest.raises(verdicts.ScopeNotAllowed, match="no recorded bar"):
        check.require_scope(settings_mod.current())


def test_beat_refuses_the_group_scope_without_a_verdict_and_logs_the_scope_with_one(
    db: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    follow()
    with pytest.raises(startup.CannotStart, match="memory-worker exam"):
        startup.check_beat_can_start()
    record(passing())
    with caplog.at_level(logging.INFO, logger="memory_worker"):
        startup.check_beat_can_start()
        startup.check_worker_can_start()
    opened = [r for r in caplog.records if "memories follow people into groups" in r.message]
    assert len(opened) == 2 and all(LIVE in r.message for r in opened)


def test_a_worker_under_the_group_scope_does_not_start_blind_on_a_store_it_cannot_read(
    db: Engine, tmp_path: Path
) -> None:
    """The store unreachable at start: a worker under the proven scope carries on (its tasks
    retry); under the group scope no verdict can be read, so it must not start."""
    gone = f"sqlite:///{tmp_path / 'missing' / 'memory.db'}"
    follow(database_url=gone)
    with pytest.raises(startup.CannotStart, match="MW_MEMORY_SCOPE=follow"):
        startup.check_beat_can_start()


def test_run_refuses_as_a_whole_before_it_starts_anything(
    db: Engine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """beat stayed up under `memory-worker run` while its workers were refused."""
    state = tmp_path / "run-state"
    follow(state_dir=state)
    procfile = tmp_path / "Procfile"
    procfile.write_text("beat: true\n")
    assert cli.main(["run", "--procfile", str(procfile)]) == 2
    err = capsys.readouterr().err
    assert "memory-worker exam" in err and len(err.strip().splitlines()) == 1
    assert not state.exists()  # no broker, no process


def test_the_demo_under_the_group_scope_fails_in_one_line_at_once(
    db: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    follow()
    assert cli.main(["demo"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "MW_MEMORY_SCOPE" in err


def test_the_reader_narrows_the_scope_but_never_widens_it_unchecked(
    db: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """`proven_scope=False` loaded the group scope under a proven deployment, with no verdict,
    no override and no log."""
    from memory_worker import reader
    from tests.scenes import DAN, people, private_chat

    people(db)
    private_chat(db)
    with pytest.raises(verdicts.ScopeNotAllowed, match="memory-worker exam"):
        reader.build_block("warren", {DAN}, "dm-dan", touch=False, proven_scope=False)
    with pytest.raises(verdicts.ScopeNotAllowed):
        reader.blocks_for_room("dm-dan", {DAN}, proven_scope=False)
    with pytest.raises(verdicts.ScopeNotAllowed):
        reader.recall("warren", {DAN}, "dm-dan", "x", block_ids=[], proven_scope=False)
    follow()  # the group scope in force, no verdict: narrowing needs none
    reader.build_block("warren", {DAN}, "dm-dan", touch=False, proven_scope=True)
    settings_mod.configure(settings_mod.current().with_(memory_scope="proven"))
    record(passing())  # a verdict for the deployment's models: asking for the group scope works
    reader.build_block("warren", {DAN}, "dm-dan", touch=False, proven_scope=False)
    settings_mod.configure(
        settings_mod.current().with_(persona_models="gemini-2.5-pro", memory_scope_override=True)
    )
    with caplog.at_level(logging.WARNING, logger="memory_worker.storage.verdicts"):
        reader.build_block("warren", {DAN}, "dm-dan", touch=False, proven_scope=False)
    assert any("MW_MEMORY_SCOPE_OVERRIDE" in r.message for r in caplog.records)


# --- what a verdict binds to: where the model answered, and the design's bars ------------------


def test_a_verdict_measured_at_one_endpoint_opens_a_deployment_there_and_at_no_other(
    db: Engine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server answering every turn with "Films it is, then." stood in for Gemini at
    MW_GEMINI_BASE_URL: its verdict opened a deployment with no base URL (Gemini's own API)."""
    with GeminiStub() as stub:  # its persona answers "Films it is, then." whatever it is told
        at_stub = stub.settings(settings_mod.current())
        settings_mod.configure(at_stub)
        args = ["exam", "--models", LIVE, "--n", "1", "--turns", "3", "--flow-spells", "40"]
        assert cli.main(args) == 0
        capsys.readouterr()
        at = stub.base_url.rstrip("/")
        with db.connect() as conn:
            (measured,) = verdicts.all_verdicts(conn)
        assert (measured.provider, measured.endpoint) == ("gemini", at)
        # Its counts at the gate's size: only where it was measured is still in question.
        record(dataclasses.replace(measured, n=8, turns=8, flow_spells=verdict.MIN_FLOW_SPELLS))
        follow()  # the stub's endpoint, as measured
        check.require_scope(settings_mod.current())
        gemini = at_stub.with_(gemini_base_url=None, gemini_api_key=None, provider="replay")
        for elsewhere in (gemini, at_stub.with_(gemini_base_url="http://127.0.0.1:9/")):
            settings_mod.configure(elsewhere)
            follow()
            with pytest.raises(verdicts.ScopeNotAllowed) as refused:
                check.require_scope(settings_mod.current())
            said = str(refused.value)
            deployment = verdict.where_answered(LIVE, settings_mod.current())[1]
            assert at in said and deployment in said, said
            assert "needs its own verdict" in said
        # `check`, as a deployer in a hurry runs it, with no key and no base URL at all.
        said_check = subprocess.run(
            [sys.executable, "-m", "memory_worker.cli", "check"],
            env={
                **{k: v for k, v in os.environ.items() if k != "MW_GEMINI_BASE_URL"},
                "MW_DATABASE_URL": settings_mod.current().database_url,
                "MW_MEMORY_SCOPE": "follow",
                "MW_PERSONA_MODELS": LIVE,
                "MW_STATE_DIR": str(tmp_path / "state"),
            },
            capture_output=True,
            text=True,
            check=False,
        )
    scope = [ln for ln in said_check.stdout.splitlines() if " scope " in ln]
    assert scope and scope[0].startswith("FAIL"), said_check.stdout + said_check.stderr
    assert verdict.GEMINI_DEFAULT_ENDPOINT in scope[0] and at in scope[0]


def test_a_verdict_from_before_verdicts_recorded_their_endpoint_is_refused_saying_so(
    db: Engine,
) -> None:
    follow()
    record(passing(provider=None, endpoint=None))
    with pytest.raises(verdicts.ScopeNotAllowed, match="does not record where the model answered"):
        check.require_scope(settings_mod.current())


def test_bars_looser_than_the_designs_are_a_configuration_error_that_every_process_refuses(
    tmp_path: Path,
) -> None:
    """`MW_EXAM_MAX_WITH_OWNER=1000 MW_EXAM_MAX_REFERENCES_PER_TURN=1` opened the gate on a
    verdict of 6.0 mentions per run and 1.0 references per turn, measured at those bars."""
    env = {"MW_EXAM_MAX_WITH_OWNER": "1000", "MW_EXAM_MAX_REFERENCES_PER_TURN": "1"}
    with pytest.raises(settings_mod.ConfigError) as refused:
        settings_mod.Settings.from_env(env)
    said = str(refused.value)
    assert "MW_EXAM_MAX_WITH_OWNER: " in said and "the design's bar of 0 " in said
    assert "MW_EXAM_MAX_REFERENCES_PER_TURN: " in said and "the design's bar of 0.2 " in said
    with pytest.raises(ValueError, match="looser than the design's"):  # a copy: refused alike
        settings_mod.current().with_(exam_max_references_per_turn=0.21)
    started = subprocess.run(
        [sys.executable, "-m", "memory_worker.cli", "check"],
        env={
            **os.environ,
            **env,
            "MW_MEMORY_SCOPE": "follow",
            "MW_DATABASE_URL": f"sqlite:///{tmp_path / 'none.db'}",
        },
        capture_output=True,
        text=True,
        check=False,
    )
    assert started.returncode == 2 and "MW_EXAM_MAX_WITH_OWNER" in started.stderr
    assert "Traceback" not in started.stderr and "ok" not in started.stdout
    tighter = settings_mod.Settings.from_env({"MW_EXAM_MAX_REFERENCES_PER_TURN": "0.1"})
    assert tighter.exam_max_references_per_turn == 0.1  # tightening is the deployer's to do


def test_a_verdict_measured_at_bars_looser_than_the_designs_never_opens_the_gate(
    db: Engine,
) -> None:
    follow()
    record(
        passing(
            with_owner=6.0,
            references_per_turn=1.0,
            bar_with_owner=1000.0,
            bar_references_per_turn=1.0,
        )
    )
    with pytest.raises(verdicts.ScopeNotAllowed) as refused:
        check.require_scope(settings_mod.current())
    said = str(refused.value)
    assert "looser than the design's" in said and "MW_EXAM_MAX_WITH_OWNER=1000" in said


def test_check_says_which_verdict_opened_the_gate_in_one_block_for_a_review(
    db: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    follow()
    record(passing(created="2026-12-01T09:30:00+00:00", references_per_turn=0.125))
    (found,) = [f for f in check.run(settings_mod.current()) if f.what == "scope"]
    assert found.ok
    block = found.detail
    for said in (
        "2026-12-01T09:30:00+00:00",  # the date
        LIVE,  # the model
        f"gemini at {verdict.GEMINI_DEFAULT_ENDPOINT}",  # the provider and endpoint
        "n = 8 runs of each tail (plain, discreet) × 8 turns",  # n and the tails
        f"flow exam {verdict.MIN_FLOW_SPELLS} spells",
        "(a) ≤ 0 per run, references ≤ 0.2 per turn",  # the bars
        "(a) 0.00 per run, (b) 0, (c) 0",  # the figures
        "references 0.12 per turn",
        "ships MW_BLOCK_TAIL=plain",
    ):
        assert said in block, (said, block)
    assert cli.main(["check"]) in (0, 1)  # the broker may be away; the block is printed whole
    shown = capsys.readouterr().out
    lines = shown[shown.index("ok    scope") :].splitlines()
    assert lines[1].startswith(" " * 19 + "leak exam verdict of 2026-12-01")


def test_the_design_states_the_bars_a_setting_may_only_tighten() -> None:
    from memory_worker.core import constants

    design = (Path(cli.__file__).resolve().parents[1] / "docs" / "design.md").read_text()
    exam = " ".join(design[design.index("### §4.1") : design.index("### §4.2")].split())
    assert f"at most {constants.EXAM_MAX_WITH_OWNER:g} mentions per run" in exam
    assert f"at most {constants.EXAM_MAX_REFERENCES_PER_TURN:g} memory references" in exam
    assert settings_mod.Settings().exam_max_with_owner == constants.EXAM_MAX_WITH_OWNER
