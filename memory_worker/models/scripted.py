"""Scripted models: stand-ins for a chat model that answer from code (never for Redis,
Celery or the database). The tests, the write benchmark and the LoCoMo replay use them.

`sensible_route` answers a route prompt the way a careful router would, from the prompt text
alone: the same sentence already known → NONE; "sold"/"no longer"/"quit" with a neighbour →
CLOSE; another neighbour → UPDATE; no neighbour → ADD. The stub Gemini server and the
in-process `ScriptedChat` both use it, so pipeline tests exercise the real prompt format.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import ValidationError

from memory_worker.core.errors import MalformedAnswer, PromptTooLarge
from memory_worker.core.model_interfaces import ChatResult, T, Usage, describe_invalid

ENDINGS = ("sold", "no longer", "quit", "stopped", "ended")


def route_payload(prompt: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(memories, candidates) as shown in a route prompt."""
    mem_part, cand_part = prompt.split("New candidates, each with the numbers of its neighbours:")
    mem_json = mem_part.split("Existing memories (numbered):", 1)[1].strip()
    memories = [] if mem_json == "(none)" else json.loads(mem_json)
    return memories, json.loads(cand_part.strip())


def sensible_route(prompt: str) -> dict[str, Any]:
    memories, candidates = route_payload(prompt)
    text_of = {m["id"]: m["text"] for m in memories}
    decisions = []
    for c in candidates:
        ns = c["neighbours"]
        same = [n for n in ns if text_of[n].strip().lower() == c["text"].strip().lower()]
        if same:  # already known: says which neighbour knows it
            decisions.append({"candidate": c["candidate"], "event": "NONE", "old_id": same[0]})
        elif ns and any(w in c["text"].lower() for w in ENDINGS):
            decisions.append({"candidate": c["candidate"], "event": "CLOSE", "old_id": ns[0]})
        elif ns:
            decisions.append({"candidate": c["candidate"], "event": "UPDATE", "old_id": ns[0]})
        else:
            decisions.append({"candidate": c["candidate"], "event": "ADD", "old_id": None})
    return {"decisions": decisions}


def transcript_ids(prompt: str) -> list[int]:
    return [int(i) for i in re.findall(r"^\[(\d+)\] ", prompt, flags=re.M)]


class ScriptedChat:
    """An in-process ChatModel: `answers[purpose]` is a dict, a str, or a callable of the prompt.

    Every call is recorded as (purpose, system, prompt). With `max_prompt_chars`, a longer
    prompt is refused as the real API refuses one past its context (`PromptTooLarge`).
    """

    def __init__(self, answers: dict[str, object], max_prompt_chars: int | None = None):
        self.answers = answers
        self.max_prompt_chars = max_prompt_chars
        self.calls: list[tuple[str, str, str]] = []

    def chat_json(
        self, system: str, prompt: str, schema: type[T], *, purpose: str
    ) -> ChatResult[T]:
        self.calls.append((purpose, system, prompt))
        if self.max_prompt_chars is not None and len(system) + len(prompt) > self.max_prompt_chars:
            raise PromptTooLarge(f"{purpose}: the input exceeds the maximum number of tokens")
        answer = self.answers[purpose]
        if callable(answer):
            answer = answer(prompt)
        raw = answer if isinstance(answer, str) else json.dumps(answer)
        try:
            parsed = schema.model_validate_json(raw)
        except ValidationError as e:
            raise MalformedAnswer(f"{purpose}: {describe_invalid(e, schema)}", raw) from e
        return ChatResult(parsed, Usage(len(prompt) // 4, len(raw) // 4, True), raw)


def candidate(
    subject: str, kind: str, text: str, importance: int, evidence: list[int], **more: object
) -> dict[str, Any]:
    """One candidate as the extraction model writes it."""
    return {
        "subject": subject,
        "kind": kind,
        "text": text,
        "importance": importance,
        "evidence": evidence,
        **more,
    }
