"""The Gemini provider writes its REST bodies and reads the answers itself: these
tests hold it to what google-genai 3.6 would do with the same call.

* Bodies: the SDK's own converters (`_GenerateContentParameters_to_mldev`,
  `_EmbedContentParametersPrivate_to_mldev`, then `convert_to_dict` and
  `encode_unserializable_types`, as `Models._generate_content` / `_embed_content` run them) are
  pure functions, so they are called here, unmocked, and their body compared with ours as
  canonical JSON (so 0 and 0.0 differ, as they do on the wire).
* The wire: the SDK's `generate_content` / `embed_content` and our providers call the stub
  (memory_worker/testing/gemini_stub.py) through one real client; the stub must record the same
  path, body and headers from both.
* Answers: the same scripted answers (thought parts, several candidates, blocks, continuation
  hops, …) are read by the SDK's response objects, with the provider's pre-issue-10 code
  (`sdk_chat_json` below), and by `GeminiChat`; results and error messages must be equal.
"""

from __future__ import annotations

import base64
import copy
import json
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from google import genai
from google.genai import _common, types
from google.genai import _transformers as genai_transformers
from google.genai import models as sdk_models
from pydantic import BaseModel, Field, ValidationError

from memory_worker.core.constants import EMBEDDING_DIMS
from memory_worker.core.errors import MalformedAnswer
from memory_worker.core.model_interfaces import ChatResult, Usage, describe_invalid
from memory_worker.core.settings import Settings
from memory_worker.models import gemini
from memory_worker.models.gemini import (
    EMBED_TASK_TYPE,
    GeminiChat,
    GeminiEmbedder,
    embed_body,
    generate_content_body,
    make_client,
    model_errors,
    response_schema,
)
from memory_worker.testing.gemini_stub import Fault, GeminiStub
from memory_worker.write.extract import ExtractAnswer
from memory_worker.write.route import RouteAnswer


class Nested(BaseModel):
    """A schema with what the two real ones do not use: a nested object, a float, a bool."""

    name: str
    score: float = 0.5
    tags: list[str] = Field(default_factory=list)
    flag: bool | None = None
    inner: RouteAnswer | None = None


SCHEMAS = [ExtractAnswer, RouteAnswer, Nested]
SYSTEM = 'You extract durable facts.\nAnswer in JSON only — «quotes», "escapes" and ✓.'
PROMPT = '[0] u:42: I moved to Xuhui last spring\n[1] u:7: {"not": "json"} \\n tab\there'


def canonical(body: Any) -> str:
    return json.dumps(body, sort_keys=True, ensure_ascii=False)


def client() -> genai.Client:
    return make_client(Settings().with_(provider="gemini", gemini_api_key="test-key"))


# --- what the SDK itself would send -------------------------------------------------------


def sdk_config(
    system: str, schema: type, continuation_token: bytes | None = None
) -> types.GenerateContentConfig:
    """The config the provider handed `generate_content` before it wrote its own bodies."""
    return types.GenerateContentConfig(
        system_instruction=system,
        response_mime_type="application/json",
        response_schema=response_schema(schema),
        temperature=0,
        continuation_token=continuation_token,
    )


def sdk_generate_request(
    api: Any, model: str, prompt: str, config: types.GenerateContentConfig
) -> tuple[str, dict[str, Any]]:
    """(path, body) as `Models._generate_content` builds them for the Developer API."""
    params = types._GenerateContentParameters(model=model, contents=prompt, config=config)
    request = sdk_models._GenerateContentParameters_to_mldev(api, params, None, params)
    return sdk_sent(request, "{model}:generateContent")


def sdk_embed_request(
    api: Any, model: str, texts: list[str], dims: int
) -> tuple[str, dict[str, Any]]:
    """(path, body) as `Models._embed_content` builds them for the Developer API."""
    config = types.EmbedContentConfig(output_dimensionality=dims, task_type=EMBED_TASK_TYPE)
    params = types._EmbedContentParametersPrivate(model=model, contents=texts, config=config)
    request = sdk_models._EmbedContentParametersPrivate_to_mldev(api, params, None, params)
    return sdk_sent(request, "{model}:batchEmbedContents")


def sdk_sent(request: dict[str, Any], path_template: str) -> tuple[str, dict[str, Any]]:
    """What the SDK sends of a converted request: its path, and the body as `_build_request`
    leaves it (no `config`, converted to plain JSON, the special `_url`/`_query` keys gone)."""
    path = path_template.format_map(request["_url"])
    assert not request.get("_query")
    request.pop("config", None)
    request = _common.convert_to_dict(request)
    request = _common.encode_unserializable_types(request)
    return path, {k: v for k, v in request.items() if not k.startswith("_")}


# --- 1. the bodies ---------------------------------------------------------------------------


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: s.__name__)
@pytest.mark.parametrize(
    ("system", "prompt"),
    [(SYSTEM, PROMPT), ("be brief", "what did u:42 say?"), ("", ""), ("x" * 20_000, "p")],
    ids=["unicode", "short", "empty", "long-system"],
)
@pytest.mark.parametrize("model", ["gemini-2.5-flash", "models/gemini-2.5-flash"])
def test_the_generate_content_body_is_the_one_the_sdk_builds(
    schema: type, system: str, prompt: str, model: str
) -> None:
    api = client()._api_client
    path, expected = sdk_generate_request(api, model, prompt, sdk_config(system, schema))

    body = generate_content_body(system, prompt, schema)

    assert canonical(body) == canonical(expected)
    assert f"{gemini._model_path(client(), model)}:generateContent" == path
    assert body["systemInstruction"]["parts"][0]["text"] == system  # not vacuous
    assert body["generationConfig"]["temperature"] == 0


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: s.__name__)
def test_the_schema_sent_is_what_the_sdk_makes_of_the_answer_class_itself(schema: type) -> None:
    """Handing the SDK the pydantic class (what callers once did) gives the same body too."""
    api = client()._api_client
    config = types.GenerateContentConfig(
        system_instruction=SYSTEM,
        response_mime_type="application/json",
        response_schema=schema,
        temperature=0,
    )
    _, expected = sdk_generate_request(api, "gemini-2.5-flash", PROMPT, config)
    assert canonical(generate_content_body(SYSTEM, PROMPT, schema)) == canonical(expected)


@pytest.mark.parametrize("token", [b"abc", b"\xfb\xff\xfe", bytes(range(40))])
def test_a_continuation_hop_body_is_the_one_the_sdk_builds(token: bytes) -> None:
    api = client()._api_client
    _, expected = sdk_generate_request(
        api, "gemini-2.5-flash", PROMPT, sdk_config(SYSTEM, RouteAnswer, token)
    )
    # The server's token, in the standard alphabet without padding: the SDK re-encodes it.
    answer = {
        "candidates": [
            {
                "finishReason": "CONTINUATION",
                "continuationToken": base64.b64encode(token).decode().rstrip("="),
            }
        ]
    }
    sent = gemini._continuation_token(answer)
    body = {**generate_content_body(SYSTEM, PROMPT, RouteAnswer), "continuationToken": sent}
    assert canonical(body) == canonical(expected)


def test_the_generation_config_is_built_once_per_schema() -> None:
    first = generate_content_body("a", "b", ExtractAnswer)["generationConfig"]
    again = generate_content_body("c", "d", ExtractAnswer)["generationConfig"]
    assert first is again
    assert generate_content_body("a", "b", RouteAnswer)["generationConfig"] is not first


@pytest.mark.parametrize(
    "model", ["gemini-embedding-001", "models/gemini-embedding-001", "text-embedding-004"]
)
@pytest.mark.parametrize(
    "texts", [["a flat in Xuhui"], [f'u:{i} likes tea ✓ "{i}"' for i in range(7)], [""]]
)
def test_the_batch_embed_body_is_the_one_the_sdk_builds(model: str, texts: list[str]) -> None:
    c = client()
    path, expected = sdk_embed_request(c._api_client, model, texts, EMBEDDING_DIMS)

    model_path = gemini._model_path(c, model)
    body = embed_body(model_path, texts, EMBEDDING_DIMS)

    assert canonical(body) == canonical(expected)
    assert f"{model_path}:batchEmbedContents" == path
    assert len(body["requests"]) == len(texts)


def test_for_a_multimodal_embedding_model_each_text_stays_its_own_request() -> None:
    """The one difference from the SDK, on purpose (gemini.embed_body): for a multimodal model
    the SDK folds the list into one content, so one embedding would come back for N texts."""
    model, texts = "gemini-embedding-2", ["a", "b", "c"]
    assert genai_transformers.t_is_multimodal_embedding_model(model)
    folded: Any = genai_transformers.t_contents(texts)  # what SDK's embed_content does first
    _, sdk_body = sdk_embed_request(client()._api_client, model, folded, EMBEDDING_DIMS)
    assert len(sdk_body["requests"]) == 1

    ours = embed_body(gemini._model_path(client(), model), texts, EMBEDDING_DIMS)
    assert [r["content"]["parts"][0]["text"] for r in ours["requests"]] == texts


# --- 2. the wire: the stub hears the same request from the SDK and from us ----------------------


GOOD_EXTRACT = {
    "candidates": [{"subject": "u:42", "kind": "fact", "text": "lives in Xuhui", "importance": 6}]
}
GOOD_ROUTE = {"decisions": [{"candidate": 0, "event": "ADD"}]}


@pytest.fixture
def stub() -> Iterator[GeminiStub]:
    with GeminiStub() as started:
        yield started


def same_request(a: Any, b: Any) -> None:
    assert (a.kind, a.path, a.model) == (b.kind, b.path, b.model)
    assert canonical(a.body) == canonical(b.body)
    assert a.headers == b.headers  # content-length included: the same bytes, not just values


@pytest.mark.parametrize(
    ("schema", "answer"), [(ExtractAnswer, GOOD_EXTRACT), (RouteAnswer, GOOD_ROUTE)]
)
def test_the_stub_receives_the_same_chat_request_from_the_sdk_and_from_us(
    stub: GeminiStub, schema: type[BaseModel], answer: dict[str, Any]
) -> None:
    stub.chat_responder = lambda body: answer
    settings = stub.settings()
    c = make_client(settings)

    sdk = c.models.generate_content(
        model=settings.chat_model, contents=PROMPT, config=sdk_config(SYSTEM, schema)
    )
    ours = GeminiChat(settings, client=c).chat_json(SYSTEM, PROMPT, schema, purpose="extract")

    sdk_req, our_req = stub.of_kind("chat")
    same_request(sdk_req, our_req)
    assert ours.raw == sdk.text
    assert ours.parsed == schema.model_validate(answer)


def test_the_stub_receives_the_same_embed_request_from_the_sdk_and_from_us(
    stub: GeminiStub,
) -> None:
    settings = stub.settings()
    c = make_client(settings)
    texts = [f"u:{i} likes tea number {i}" for i in range(5)]
    config = types.EmbedContentConfig(
        output_dimensionality=EMBEDDING_DIMS, task_type=EMBED_TASK_TYPE
    )
    contents: Any = texts

    sdk = c.models.embed_content(model=settings.embed_model, contents=contents, config=config)
    ours = GeminiEmbedder(settings, client=c).embed(texts, purpose="candidates")

    sdk_req, our_req = stub.of_kind("embed")
    same_request(sdk_req, our_req)
    for emb, vector in zip(sdk.embeddings or [], ours, strict=True):
        values = np.asarray(emb.values)
        assert np.allclose(values / np.linalg.norm(values), vector, atol=1e-12)


# --- 3. the answers: read as the SDK reads them ---------------------------------------------


@dataclass
class ScriptedStub(GeminiStub):
    """The stub, answering chat requests with whole scripted response bodies, in order."""

    script: deque[dict[str, Any]] = field(default_factory=deque)

    def _chat(self, body: dict[str, Any], model: str, fault: Fault | None) -> dict[str, Any]:
        return self.script.popleft()


def sdk_chat_json(
    c: genai.Client, model: str, system: str, prompt: str, schema: type[BaseModel]
) -> ChatResult[Any]:
    """`GeminiChat.chat_json` as it was before the provider wrote its own bodies: the SDK's
    call and response objects."""
    what = f"gemini {model} (extract)"
    with model_errors(what):
        response = c.models.generate_content(
            model=model, contents=prompt, config=sdk_config(system, schema)
        )
    raw = response.text
    reasons = []
    feedback = response.prompt_feedback
    if feedback is not None and feedback.block_reason is not None:
        reasons.append(f"prompt blocked: {feedback.block_reason}")
    for cand in response.candidates or []:
        if cand.finish_reason is not None:
            reasons.append(f"finish reason {cand.finish_reason}")
    finish = "; ".join(reasons) or "no candidates"
    if raw is None:
        raise MalformedAnswer(f"{what}: the answer had no text ({finish})")
    try:
        parsed = schema.model_validate_json(raw)
    except ValidationError as err:
        raise MalformedAnswer(
            f"{what}: the answer does not fit {schema.__name__} ({finish}): "
            f"{describe_invalid(err, schema)}",
            raw=raw,
        ) from err
    meta = response.usage_metadata
    usage = Usage(0, 0)
    if meta is not None:
        out = (meta.candidates_token_count or 0) + (meta.thoughts_token_count or 0)
        usage = Usage(tokens_in=meta.prompt_token_count or 0, tokens_out=out)
    return ChatResult(parsed=parsed, usage=usage, raw=raw)


def text_part(text: str, **more: Any) -> dict[str, Any]:
    return {"text": text, **more}


def candidate(*parts: dict[str, Any], finish: str | None = "STOP", **more: Any) -> dict[str, Any]:
    cand: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)}, "index": 0}
    if finish is not None:
        cand["finishReason"] = finish
    return {**cand, **more}


USAGE = {"promptTokenCount": 120, "candidatesTokenCount": 30, "thoughtsTokenCount": 7}
ROUTE_TEXT = json.dumps(GOOD_ROUTE)
TOKEN = base64.b64encode(b"\xfb\xff\xfe-resume-here").decode()  # has '+' and '/'

ANSWERS: dict[str, list[dict[str, Any]]] = {
    "plain": [{"candidates": [candidate(text_part(ROUTE_TEXT))], "usageMetadata": USAGE}],
    "thoughts-left-out": [
        {
            "candidates": [
                candidate(
                    text_part("let me think: {", thought=True),
                    text_part(ROUTE_TEXT[:10]),
                    text_part(ROUTE_TEXT[10:]),
                )
            ],
            "usageMetadata": USAGE,
        }
    ],
    "second-candidate-ignored": [
        {
            "candidates": [
                candidate(text_part(ROUTE_TEXT)),
                candidate(text_part("nonsense"), finish="MAX_TOKENS"),
            ]
        }
    ],
    "no-usage": [{"candidates": [candidate(text_part(ROUTE_TEXT))]}],
    "does-not-fit": [
        {
            "candidates": [candidate(text_part('{"decisions": "x' * 40), finish="MAX_TOKENS")],
            "usageMetadata": {"promptTokenCount": 3},
        }
    ],
    "empty-text": [{"candidates": [candidate(text_part(""))]}],
    "prompt-blocked": [{"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": USAGE}],
    "candidate-blocked": [{"candidates": [{"finishReason": "SAFETY", "index": 0}]}],
    "only-a-function-call": [
        {"candidates": [candidate({"functionCall": {"name": "f", "args": {}}})]}
    ],
    "nothing": [{}],
    "continued": [
        {
            "candidates": [
                candidate(
                    text_part(ROUTE_TEXT[:12]), finish="CONTINUATION", continuationToken=TOKEN
                )
            ],
            "usageMetadata": USAGE,
        },
        {
            "candidates": [candidate(text_part("hm", thought=True), text_part(ROUTE_TEXT[12:]))],
            "usageMetadata": {"promptTokenCount": 130, "candidatesTokenCount": 9},
        },
    ],
    "continued-without-finish-reason-then-nothing": [
        {
            "candidates": [candidate(text_part(ROUTE_TEXT), finish=None, continuationToken="YWJj")],
        },
        {"promptFeedback": {"blockReason": "OTHER"}},
    ],
    "continued-then-blocked-half-way": [
        {
            "candidates": [
                candidate(text_part("{"), finish="CONTINUATION", continuationToken=TOKEN),
                candidate(text_part("{}"), finish="STOP"),
            ]
        },
        {"promptFeedback": {"blockReason": "OTHER"}, "usageMetadata": USAGE},
    ],
    "continued-then-cut-short": [
        {
            "candidates": [
                candidate(text_part("{"), finish="CONTINUATION", continuationToken="YWJj"),
                candidate(text_part("{}"), finish="STOP"),
            ]
        },
        {"candidates": [candidate(text_part('"decisions": ['), finish="MAX_TOKENS")]},
    ],
    "token-but-finished": [
        {"candidates": [candidate(text_part(ROUTE_TEXT), continuationToken=TOKEN)]}
    ],
}


def outcome(call: Any) -> tuple[Any, ...]:
    try:
        result = call()
    except MalformedAnswer as err:
        return ("malformed", str(err), err.raw)
    return ("ok", result.parsed, result.usage, result.raw)


@pytest.mark.parametrize("name", list(ANSWERS))
def test_answers_read_as_the_sdk_reads_them(name: str) -> None:
    hops = ANSWERS[name]
    stub = ScriptedStub()
    with stub:
        settings = stub.settings()
        c = make_client(settings)
        stub.script = deque(copy.deepcopy(hops))
        expected = outcome(
            lambda: sdk_chat_json(c, settings.chat_model, SYSTEM, PROMPT, RouteAnswer)
        )
        sdk_requests = stub.of_kind("chat")
        stub.requests.clear()
        stub.script = deque(copy.deepcopy(hops))
        got = outcome(
            lambda: GeminiChat(settings, client=c).chat_json(
                SYSTEM, PROMPT, RouteAnswer, purpose="extract"
            )
        )
        our_requests = stub.of_kind("chat")

    assert got == expected
    assert len(our_requests) == len(sdk_requests) == len(hops)  # every hop the SDK followed
    for sdk_req, our_req in zip(sdk_requests, our_requests, strict=True):
        same_request(sdk_req, our_req)
