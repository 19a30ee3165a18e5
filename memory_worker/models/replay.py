"""The offline provider: scripted answers from a cassette file, keyed by the request itself.

The demo, the exams and CI run the whole write path with no network and no key. Each answer is
looked up by a fingerprint of what was asked (purpose, system prompt, user prompt, schema name),
so a changed prompt is a *miss*, never a stale answer silently reused. A miss is permanent (a
retry asks the same thing) and, when `replay_misses_dir` is set, leaves the request on disk so a
developer can author the answer and add it with `add_entry`.

Answers go through the same schema validation as Gemini's, so a cassette can also script a
malformed answer (an answer given as a string is used as the raw text verbatim).

Cassette format::

    {"version": 1,
     "entries": {"<fingerprint>": {"purpose": "...", "answer": <JSON object or string>,
                                   "note": "..."}}}
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from memory_worker.core.errors import MalformedAnswer, PermanentModelError, ReplayMiss
from memory_worker.core.model_interfaces import ChatResult, T, Usage, describe_invalid
from memory_worker.core.settings import Settings

CASSETTE_VERSION = 1


def fingerprint(purpose: str, system: str, prompt: str, schema: type[BaseModel] | str) -> str:
    """First 16 hex of sha256 over the canonical JSON of what was asked.

    Canonical means sorted keys, compact separators (",", ":") and UTF-8 without escaping.
    `schema` may be the model class or its name; only the name is hashed, so renaming a schema
    is a miss but editing a field's description is not.
    """
    name = schema if isinstance(schema, str) else schema.__name__
    canonical = json.dumps(
        {"purpose": purpose, "prompt": prompt, "schema": name, "system": system},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def estimate_tokens(text: str) -> int:
    """The chars/4 rule of thumb, for usage when no model counted."""
    return math.ceil(len(text) / 4)


def _write_json_atomically(path: Path, data: Any) -> None:
    """Sorted, indented, newline-terminated JSON, replaced in one step (workers may race)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def load_cassette(path: Path) -> dict[str, Any]:
    """The cassette's entries, or a PermanentModelError saying what is wrong with the file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise PermanentModelError(f"replay cassette not found: {path} (MW_CASSETTE)") from err
    except (OSError, UnicodeDecodeError) as err:
        raise PermanentModelError(f"replay cassette unreadable: {path}: {err}") from err
    except json.JSONDecodeError as err:
        raise PermanentModelError(f"replay cassette is not valid JSON: {path}: {err}") from err
    if not isinstance(data, dict) or data.get("version") != CASSETTE_VERSION:
        raise PermanentModelError(
            f'replay cassette {path} must be a JSON object with "version": {CASSETTE_VERSION}'
        )
    entries = data.get("entries", {})
    if not isinstance(entries, dict):
        raise PermanentModelError(f'replay cassette {path}: "entries" must be an object')
    return entries


def add_entry(
    cassette_path: Path | str, fingerprint: str, purpose: str, answer: Any, note: str = ""
) -> None:
    """Record (or replace) one answer, creating the cassette if needed; output is deterministic."""
    path = Path(cassette_path)
    entries = load_cassette(path) if path.exists() else {}
    entries[fingerprint] = {"purpose": purpose, "answer": answer, "note": note}
    _write_json_atomically(path, {"version": CASSETTE_VERSION, "entries": entries})


class ReplayChat:
    """`ChatModel` answering from a cassette; re-reads the file when it changes on disk."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.cassette = settings.cassette
        self.misses_dir = settings.replay_misses_dir
        self._lock = threading.Lock()
        self._loaded: tuple[tuple[int, int], dict[str, Any]] | None = None

    def chat_json(
        self, system: str, prompt: str, schema: type[T], *, purpose: str
    ) -> ChatResult[T]:
        fp = fingerprint(purpose, system, prompt, schema)
        entry = self._entries().get(fp)
        if not isinstance(entry, dict) or "answer" not in entry:
            raise self._miss(fp, purpose, system, prompt, schema)
        answer = entry["answer"]
        raw = answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)
        try:
            parsed = schema.model_validate_json(raw)
        except ValidationError as err:
            raise MalformedAnswer(
                f"replay {fp} ({purpose}): the recorded answer does not fit {schema.__name__}: "
                f"{describe_invalid(err, schema)}",
                raw=raw,
            ) from err
        usage = Usage(
            tokens_in=estimate_tokens(system) + estimate_tokens(prompt),
            tokens_out=estimate_tokens(raw),
            estimated=True,
        )
        return ChatResult(parsed=parsed, usage=usage, raw=raw)

    def _entries(self) -> dict[str, Any]:
        """The cassette's entries, cached until its mtime or size changes."""
        if self.cassette is None:
            raise PermanentModelError(
                "the replay provider needs a cassette: set MW_CASSETTE to its path"
            )
        try:
            st = self.cassette.stat()
        except FileNotFoundError as err:
            raise PermanentModelError(
                f"replay cassette not found: {self.cassette} (MW_CASSETTE)"
            ) from err
        except OSError as err:
            raise PermanentModelError(
                f"replay cassette unreadable: {self.cassette}: {err}"
            ) from err
        stamp = (st.st_mtime_ns, st.st_size)
        with self._lock:
            if self._loaded is None or self._loaded[0] != stamp:
                self._loaded = (stamp, load_cassette(self.cassette))
            return self._loaded[1]

    def _miss(
        self, fp: str, purpose: str, system: str, prompt: str, schema: type[BaseModel]
    ) -> ReplayMiss:
        request_file: Path | None = None
        message = f"replay miss: no answer for fingerprint {fp} ({purpose}) in {self.cassette}"
        if self.misses_dir is not None:
            request_file = self.misses_dir / f"{fp}.json"
            _write_json_atomically(
                request_file,
                {
                    "fingerprint": fp,
                    "purpose": purpose,
                    "system": system,
                    "prompt": prompt,
                    "schema_name": schema.__name__,
                    "schema": schema.model_json_schema(),
                },
            )
            message += f"; the request is in {request_file}: author the answer, then add_entry()"
        return ReplayMiss(
            message,
            fingerprint=fp,
            purpose=purpose,
            cassette=self.cassette,
            request_file=request_file,
        )
