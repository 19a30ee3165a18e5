"""The model providers against a real google-genai client and a stub of the API on loopback.

Nothing in the SDK is mocked: each test drives real HTTP through
`memory_worker/testing/gemini_stub.py`, so a
change in what google-genai sends or raises breaks these tests rather than production.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from pydantic import BaseModel, ConfigDict

from memory_worker import models
from memory_worker.core.errors import (
    MalformedAnswer,
    PermanentModelError,
    ReplayMiss,
    TransientModelError,
)
from memory_worker.core.settings import Settings
from memory_worker.models.gemini import GeminiChat, GeminiEmbedder, parse_duration
from memory_worker.models.hashing import HashingEmbedder, tokens
from memory_worker.models.local import E5Embedder
from memory_worker.models.replay import ReplayChat, add_entry, fingerprint
from memory_worker.models.scripted import ScriptedChat
from memory_worker.testing.gemini_stub import (
    EMBED_SCALE,
    GeminiStub,
    prompt_text,
    system_text,
    token_estimate,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def stub() -> Iterator[GeminiStub]:
    """A started stub per test (the same as the `gemini_stub` fixture the conftest exports)."""
    with GeminiStub() as started:
        yield started


class Fact(BaseModel):
    subject: str
    text: str
    importance: int


GOOD = {"subject": "u:42", "text": "owns a flat in Xuhui", "importance": 6}


def chat(stub: GeminiStub, **changes: object) -> GeminiChat:
    return GeminiChat(stub.settings(**changes))


# --- gemini: answers ------------------------------------------------------------------------


def test_a_good_answer_parses_and_reports_token_usage(stub: GeminiStub) -> None:
    stub.chat_responder = lambda body: GOOD
    result = chat(stub).chat_json("be brief", "what did u:42 say?", Fact, purpose="extract")

    assert result.parsed == Fact(**GOOD)
    assert json.loads(result.raw) == GOOD
    assert result.usage.tokens_in == token_estimate("be brief") + token_estimate(
        "what did u:42 say?"
    )
    assert result.usage.tokens_out == token_estimate(json.dumps(GOOD))
    assert result.usage.estimated is False


def test_the_request_carries_system_prompt_schema_and_temperature_zero(
    stub: GeminiStub,
) -> None:
    stub.chat_responder = lambda body: GOOD
    chat(stub).chat_json("be brief", "what did u:42 say?", Fact, purpose="extract")

    (req,) = stub.of_kind("chat")
    assert req.path.endswith(f"/models/{Settings().chat_model}:generateContent")
    assert system_text(req.body) == "be brief"
    assert prompt_text(req.body) == "what did u:42 say?"
    gen = req.body["generationConfig"]
    assert gen["temperature"] == 0
    assert gen["responseMimeType"] == "application/json"
    assert set(gen["responseSchema"]["required"]) == {"subject", "text", "importance"}
    assert req.headers["x-goog-api-key"]


def test_a_malformed_answer_raises_malformed_answer_carrying_the_raw_text(
    stub: GeminiStub,
) -> None:
    stub.malformed_next('{"subject": "u:42", "importance": "very"}')
    with pytest.raises(MalformedAnswer) as caught:
        chat(stub).chat_json("s", "p", Fact, purpose="extract")

    assert caught.value.raw == '{"subject": "u:42", "importance": "very"}'
    assert "Fact" in str(caught.value) and "text" in str(caught.value)


def test_an_answer_that_is_not_json_at_all_is_malformed_too(stub: GeminiStub) -> None:
    stub.malformed_next("Sure! Here is the JSON you asked for:")
    with pytest.raises(MalformedAnswer) as caught:
        chat(stub).chat_json("s", "p", Fact, purpose="route")
    assert caught.value.raw == "Sure! Here is the JSON you asked for:"


SAID = "Ada told me she is pregnant"  # what a malformed answer quotes back
QUOTING = [
    pytest.param(f"{SAID}, so no JSON today.", id="prose"),
    pytest.param(json.dumps({"subject": SAID, "text": 7, "importance": SAID}), id="values"),
    pytest.param(json.dumps({SAID: 1, "text": "t", "importance": 2}), id="a-made-up-key"),
    pytest.param(json.dumps([SAID]), id="not-an-object"),
    pytest.param(json.dumps({"subject": {"in": SAID}, "text": "t", "importance": 1}), id="nested"),
]  # fmt: skip


class StrictFact(Fact):
    model_config = ConfigDict(extra="forbid")  # a made-up key is an error that names the key


def malformed_from(provider: str, answer: str, tmp_path: Path, stub: GeminiStub) -> MalformedAnswer:
    """The MalformedAnswer one provider raises for `answer`."""
    if provider == "gemini":
        stub.malformed_next(answer)
        model: object = chat(stub)
    elif provider == "replay":
        s = replay_settings(tmp_path)
        add_entry(s.cassette, fingerprint("extract", "s", "p", StrictFact), "extract", answer)  # type: ignore[arg-type]
        model = ReplayChat(s)
    else:
        model = ScriptedChat({"extract": answer})
    with pytest.raises(MalformedAnswer) as caught:
        model.chat_json("s", "p", StrictFact, purpose="extract")  # type: ignore[attr-defined]
    return caught.value


@pytest.mark.parametrize("provider", ["gemini", "replay", "scripted"])
@pytest.mark.parametrize("answer", QUOTING)
def test_a_malformed_answer_names_what_failed_but_never_quotes_the_answer(
    provider: str, answer: str, tmp_path: Path, stub: GeminiStub
) -> None:
    """The message is logged, re-asked with and kept as a parked spell's reason, which a
    human's delete never reaches: the answer (it may repeat what someone said) rides on .raw."""
    err = malformed_from(provider, answer, tmp_path, stub)

    assert "pregnant" not in str(err).lower() and "ada" not in str(err).lower()
    assert err.raw == answer
    assert "error(s)" in str(err)  # still says what was wrong, in the schema's words


@pytest.mark.parametrize("body", [b"<html>proxy login</html>", b"[1, 2]"])
def test_a_200_that_is_not_a_json_object_is_transient_not_a_crash(
    stub: GeminiStub, body: bytes
) -> None:
    """A proxy in the way answers 200 with a page: a retry may find the API, a crash never."""
    import http.server
    import threading

    class Proxy(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the stdlib's naming
            self.rfile.read(int(self.headers["content-length"]))
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with pytest.raises(TransientModelError, match="not"):
            chat(stub, gemini_base_url=url).chat_json("s", "p", Fact, purpose="extract")
    finally:
        server.shutdown()
        server.server_close()


# --- gemini: faults -------------------------------------------------------------------------


def test_a_429_with_retry_delay_raises_transient_with_retry_after(stub: GeminiStub) -> None:
    stub.fail_next(status=429, retry_delay="2s")
    with pytest.raises(TransientModelError) as caught:
        chat(stub).chat_json("s", "p", Fact, purpose="extract")

    assert caught.value.status == 429
    assert caught.value.retry_after == 2.0


def test_a_429_without_retry_info_falls_back_to_the_retry_after_header(
    stub: GeminiStub,
) -> None:
    stub.fail_next(status=429, retry_after="7")
    with pytest.raises(TransientModelError) as caught:
        chat(stub).chat_json("s", "p", Fact, purpose="extract")
    assert caught.value.retry_after == 7.0


def test_retry_delays_parse_as_protobuf_durations() -> None:
    assert parse_duration("12s") == 12.0
    assert parse_duration("1.5s") == 1.5
    assert parse_duration({"seconds": 3, "nanos": 500_000_000}) == 3.5
    assert parse_duration("soon") is None


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_a_server_error_raises_transient(stub: GeminiStub, status: int) -> None:
    stub.fail_next(status=status)
    with pytest.raises(TransientModelError) as caught:
        chat(stub).chat_json("s", "p", Fact, purpose="extract")
    assert caught.value.status == status


@pytest.mark.parametrize("status", [400, 403, 404])
def test_a_client_error_raises_permanent(stub: GeminiStub, status: int) -> None:
    stub.fail_next(status=status, message="bad request")
    with pytest.raises(PermanentModelError) as caught:
        chat(stub).chat_json("s", "p", Fact, purpose="extract")
    assert str(status) in str(caught.value)


def test_a_hang_longer_than_the_timeout_raises_transient_before_the_answer(
    stub: GeminiStub,
) -> None:
    hang_s = 120.0  # until the stub stops: only the client's own timeout can end the call first
    stub.hang_next(hang_s)
    started = time.monotonic()
    with pytest.raises(TransientModelError) as caught:
        chat(stub, model_timeout_ms=300).chat_json("s", "p", Fact, purpose="extract")

    assert time.monotonic() - started < hang_s  # the timeout ended it, however busy the host
    assert "Timeout" in str(caught.value)


def test_a_refused_connection_raises_transient() -> None:
    with GeminiStub() as stub:
        settings = stub.settings()
    # the stub is stopped: its port now refuses connections
    with pytest.raises(TransientModelError):
        GeminiChat(settings).chat_json("s", "p", Fact, purpose="extract")


@pytest.mark.parametrize("status", [429, 500, 503])
def test_the_sdk_does_not_retry_on_its_own(stub: GeminiStub, status: int) -> None:
    stub.fail_next(status=status, retry_delay="0s", times=3)
    with pytest.raises(TransientModelError):
        chat(stub).chat_json("s", "p", Fact, purpose="extract")
    assert stub.count("chat") == 1


def test_a_missing_api_key_is_permanent_and_names_gemini_api_key(stub: GeminiStub) -> None:
    with pytest.raises(PermanentModelError, match="GEMINI_API_KEY"):
        GeminiChat(stub.settings(gemini_api_key=None))
    with pytest.raises(PermanentModelError, match="GEMINI_API_KEY"):
        models.embedder(stub.settings(gemini_api_key=""))
    assert stub.count() == 0


# --- gemini: embeddings ---------------------------------------------------------------------


def test_embeddings_are_one_batched_request_and_come_back_unit_length(
    stub: GeminiStub,
) -> None:
    texts = [f"u:{i} likes tea number {i}" for i in range(7)]
    vectors = GeminiEmbedder(stub.settings()).embed(texts, purpose="candidates")

    assert stub.count("embed") == 1
    (req,) = stub.of_kind("embed")
    assert req.path.endswith(f"/models/{Settings().embed_model}:batchEmbedContents")
    assert req.texts == 7
    assert {r["outputDimensionality"] for r in req.body["requests"]} == {768}
    assert {r["taskType"] for r in req.body["requests"]} == {"SEMANTIC_SIMILARITY"}
    assert len(vectors) == 7
    hashing = HashingEmbedder()
    for text, v in zip(texts, vectors, strict=True):
        a = np.asarray(v)
        assert a.shape == (768,)
        assert np.linalg.norm(a) == pytest.approx(1.0, abs=1e-6)  # the stub sent norm 3.0
        assert a @ hashing.vector(text) == pytest.approx(1.0, abs=1e-5)  # same direction, in order
    assert EMBED_SCALE != 1.0


def test_embedding_nothing_makes_no_request(stub: GeminiStub) -> None:
    assert GeminiEmbedder(stub.settings()).embed([], purpose="candidates") == []
    assert stub.count() == 0


def test_embedding_errors_map_like_chat_errors(stub: GeminiStub) -> None:
    embedder = GeminiEmbedder(stub.settings())
    stub.fail_next(status=429, retry_delay="1.5s", kind="embed")
    with pytest.raises(TransientModelError) as caught:
        embedder.embed(["a flat"], purpose="candidates")
    assert caught.value.retry_after == 1.5

    stub.fail_next(status=400, kind="embed")
    with pytest.raises(PermanentModelError):
        embedder.embed(["a flat"], purpose="candidates")


def test_a_wrong_number_of_embeddings_is_a_malformed_answer(stub: GeminiStub) -> None:
    stub.embed_responder = lambda texts, dims: [[1.0] * dims]
    with pytest.raises(MalformedAnswer, match="asked for 2"):
        GeminiEmbedder(stub.settings()).embed(["a", "b"], purpose="candidates")


def test_faults_filtered_by_kind_wait_for_their_kind(stub: GeminiStub) -> None:
    stub.chat_responder = lambda body: GOOD
    stub.fail_next(status=500, kind="embed")
    chat(stub).chat_json("s", "p", Fact, purpose="extract")  # not consumed by chat
    with pytest.raises(TransientModelError):
        GeminiEmbedder(stub.settings()).embed(["x"], purpose="candidates")
    assert stub.pending_faults == 0


# --- the factories --------------------------------------------------------------------------


def test_the_factories_choose_by_provider(stub: GeminiStub, tmp_path: Path) -> None:
    replay = Settings(provider="replay", cassette=tmp_path / "c.json")
    assert isinstance(models.chat_model(replay), ReplayChat)
    assert isinstance(models.embedder(replay), E5Embedder)  # semantic with no key
    assert isinstance(models.embedder(replay.with_(embedder="hashing")), HashingEmbedder)
    live = stub.settings()
    assert isinstance(models.chat_model(live).inner, GeminiChat)  # behind the global quota
    assert isinstance(models.embedder(live).inner, GeminiEmbedder)
    assert models.embedder(live).dims == 768


def test_an_unknown_provider_is_refused_when_the_settings_are_read() -> None:
    from memory_worker.core.errors import ConfigError

    with pytest.raises(ConfigError, match="MW_PROVIDER: Input should be 'replay' or 'gemini'"):
        Settings.from_env({"MW_PROVIDER": "openai"})


def test_providers_are_built_once_per_settings_and_again_after_a_fork(
    stub: GeminiStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    live = stub.settings()
    first = models.chat_model(live)
    assert models.chat_model(live) is first
    assert models.embedder(live)._client is first._client  # one SDK client per settings

    child_pid = os.getpid() + 100_000
    monkeypatch.setattr(models.os, "getpid", lambda: child_pid)  # as if in a forked child
    in_child = models.chat_model(live)
    assert in_child is not first
    assert in_child._client is not first._client
    assert models.chat_model(live) is in_child


def test_the_factories_read_the_settings_in_force_when_given_none(tmp_path: Path) -> None:
    from memory_worker.core import settings as settings_mod

    before = settings_mod.current()
    try:
        settings_mod.configure(Settings(provider="replay", cassette=tmp_path / "c.json"))
        assert isinstance(models.chat_model(), ReplayChat)
    finally:
        settings_mod.configure(before)


def test_importing_the_models_package_does_not_import_the_sdk() -> None:
    code = "import sys, memory_worker.models; print('google.genai' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert out.stdout.strip() == "False"


# --- replay ---------------------------------------------------------------------------------


def replay_settings(tmp_path: Path, misses: bool = True) -> Settings:
    return Settings(
        provider="replay",
        cassette=tmp_path / "cassette.json",
        replay_misses_dir=(tmp_path / "misses") if misses else None,
    )


def test_replay_answers_a_recorded_fingerprint(tmp_path: Path) -> None:
    s = replay_settings(tmp_path)
    fp = fingerprint("extract", "be brief", "what did u:42 say?", Fact)
    add_entry(s.cassette, fp, "extract", GOOD, note="the flat")

    result = ReplayChat(s).chat_json("be brief", "what did u:42 say?", Fact, purpose="extract")

    assert result.parsed == Fact(**GOOD)
    assert result.usage.estimated is True
    assert result.usage.tokens_in == token_estimate("be brief") + token_estimate(
        "what did u:42 say?"
    )


def test_the_fingerprint_is_sha256_of_the_canonical_request() -> None:
    import hashlib

    canonical = json.dumps(
        {"purpose": "route", "system": "s", "prompt": "p", "schema": "Fact"},
        sort_keys=True,
        separators=(",", ":"),
    )
    assert (
        fingerprint("route", "s", "p", Fact) == hashlib.sha256(canonical.encode()).hexdigest()[:16]
    )
    assert fingerprint("route", "s", "p", Fact) != fingerprint("extract", "s", "p", Fact)


def test_a_replay_miss_names_the_fingerprint_and_writes_the_request(tmp_path: Path) -> None:
    s = replay_settings(tmp_path)
    add_entry(s.cassette, "0000000000000000", "extract", GOOD, note="someone else's")
    fp = fingerprint("route", "sys", "new prompt", Fact)

    with pytest.raises(ReplayMiss) as caught:
        ReplayChat(s).chat_json("sys", "new prompt", Fact, purpose="route")

    message = str(caught.value)
    assert fp in message and "route" in message and str(s.cassette) in message
    assert isinstance(caught.value, PermanentModelError)
    written = json.loads((tmp_path / "misses" / f"{fp}.json").read_text())
    assert written["purpose"] == "route"
    assert written["system"] == "sys"
    assert written["prompt"] == "new prompt"
    assert written["schema"]["title"] == "Fact"


def test_an_authored_miss_answers_on_the_next_call(tmp_path: Path) -> None:
    s = replay_settings(tmp_path)
    add_entry(s.cassette, "0000000000000000", "extract", GOOD)
    replay = ReplayChat(s)
    with pytest.raises(ReplayMiss) as caught:
        replay.chat_json("sys", "p", Fact, purpose="extract")

    add_entry(s.cassette, caught.value.fingerprint, "extract", GOOD, note="authored")
    assert replay.chat_json("sys", "p", Fact, purpose="extract").parsed == Fact(**GOOD)


def test_replay_validates_answers_like_gemini(tmp_path: Path) -> None:
    s = replay_settings(tmp_path)
    fp = fingerprint("extract", "s", "p", Fact)
    add_entry(s.cassette, fp, "extract", {"subject": "u:42"}, note="missing fields")
    with pytest.raises(MalformedAnswer) as caught:
        ReplayChat(s).chat_json("s", "p", Fact, purpose="extract")
    assert caught.value.raw == '{"subject": "u:42"}'

    add_entry(s.cassette, fp, "extract", "not json", note="a scripted garbled answer")
    with pytest.raises(MalformedAnswer) as caught:
        ReplayChat(s).chat_json("s", "p", Fact, purpose="extract")
    assert caught.value.raw == "not json"


def test_a_missing_or_broken_cassette_is_a_clear_permanent_error(tmp_path: Path) -> None:
    s = replay_settings(tmp_path)
    with pytest.raises(PermanentModelError, match="cassette not found"):
        ReplayChat(s).chat_json("s", "p", Fact, purpose="extract")
    s.cassette.write_text("{not json")
    with pytest.raises(PermanentModelError, match="not valid JSON"):
        ReplayChat(s).chat_json("s", "p", Fact, purpose="extract")
    with pytest.raises(PermanentModelError, match="MW_CASSETTE"):
        ReplayChat(Settings(provider="replay")).chat_json("s", "p", Fact, purpose="extract")


def test_add_entry_writes_sorted_indented_deterministic_json(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    add_entry(a, "ff", "route", {"z": 1, "a": 2}, note="n")
    add_entry(a, "00", "extract", GOOD, note="n")
    add_entry(b, "00", "extract", GOOD, note="n")
    add_entry(b, "ff", "route", {"a": 2, "z": 1}, note="n")

    assert a.read_text() == b.read_text()
    text = a.read_text()
    assert text.index('"00"') < text.index('"ff"') and text.endswith("}\n")
    assert json.loads(text)["version"] == 1


# --- the hashing embedder -------------------------------------------------------------------


def test_the_hashing_embedder_is_deterministic_across_processes() -> None:
    text = "u:42 owns a flat in Xuhui, near the river!"
    code = (
        "import json, sys; from memory_worker.models.hashing import HashingEmbedder; "
        "print(json.dumps(HashingEmbedder().embed([sys.argv[1]], purpose='t')[0]))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}  # a different salt for Python's hash()
    out = subprocess.run(
        [sys.executable, "-c", code, text],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env=env,
    )
    assert json.loads(out.stdout) == HashingEmbedder().embed([text], purpose="t")[0]


def test_the_hashing_embedder_ranks_shared_words_higher() -> None:
    e = HashingEmbedder()
    owns = e.vector("u:42 owns a flat in Xuhui")
    sold = e.vector("u:42 sold the flat in Xuhui")
    film = e.vector("Nolan's film opened in July")

    assert float(owns @ sold) >= 0.6
    assert float(owns @ film) < 0.3
    assert float(sold @ film) < 0.3


def test_the_hashing_embedder_gives_unit_vectors_even_for_empty_text() -> None:
    e = HashingEmbedder()
    for text in ["", "the a of", "u:7", "Flat!"]:
        assert np.linalg.norm(e.vector(text)) == pytest.approx(1.0, abs=1e-6)
    assert np.array_equal(e.vector(""), e.vector("..."))


def test_tokens_keep_ids_and_drop_punctuation_and_stopwords() -> None:
    assert tokens("u:42 owns a flat in Xuhui!") == ["u:42", "own", "flat", "xuhui"]
    assert tokens("Nolan's film opened in July.") == ["nolan", "film", "opened", "july"]
