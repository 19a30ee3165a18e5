"""An offline embedder: the hashing trick over content words, numpy only (`MW_EMBEDDER=hashing`;
the offline default is e5, `models.local`).

Where a model is not wanted (tests of the pure parts, a box without cores to spare) vectors
still come without a network. They are not good vectors, but *honest* ones: deterministic
across processes and machines (so a cassette recorded on one host routes the same on another),
and closer for texts that share content words than for texts that don't (so the router's
neighbour search, at this embedder's own floor, still means something). Each content word adds
±1 to one of `dims` buckets; the sum is L2-normalised.

The bucket and sign come from blake2b, never Python's `hash()`, which is salted per process.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

from memory_worker.core.constants import EMBEDDING_DIMS

# `u:42`-style ids are kept whole (they name humans); otherwise runs of letters and digits,
# with inner apostrophes ("don't", "nolan's") kept so the possessive can be cut below.
_TOKEN = re.compile(r"u:\w+|[^\W_]+(?:'[^\W_]+)*")

# Words that carry no content: matching on them would make every pair of sentences look alike.
STOPWORDS: frozenset[str] = frozenset(
    """
    a an the and or but if then else of in on at to for from by with without about into over
    under as is are was were be been being am do does did done have has had having i me my
    mine we us our you your yours he him his she her hers it its they them their this that
    these those there here so not no yes very just also too than can could will would shall
    should may might must up down out off again once all any both each few more most other
    some such only same what which who whom whose when where why how
    """.split()
)

# Buckets per token (see `_buckets`); blake2b gives up to 64 bytes, 8 per bucket.
PROBES = 4

# A text with no content words still needs a unit vector; this token's buckets are it.
_EMPTY_TOKEN = "\x00empty"


def tokens(text: str) -> list[str]:
    """Lowercased content words of `text`: punctuation and stopwords gone, `u:` ids kept.

    A possessive "'s" and a plural "s" are cut, so "Nolan's" matches "Nolan" and "flats"
    matches "flat": the cheapest stemming that helps short memory lines match each other.
    """
    out: list[str] = []
    for tok in _TOKEN.findall(text.lower()):
        if tok in STOPWORDS:  # before the cuts below, so "does" goes rather than becoming "doe"
            continue
        if not tok.startswith("u:"):
            if tok.endswith("'s"):
                tok = tok[:-2]
            tok = tok.replace("'", "")
            if len(tok) > 3 and tok.endswith("s") and not tok.endswith("ss"):
                tok = tok[:-1]
        if tok:
            out.append(tok)
    return out


def _buckets(token: str, dims: int) -> list[tuple[int, float]]:
    """Stable (index, sign) pairs for a token: the same on every process and machine.

    A token lands in `PROBES` buckets, so two different words that share one bucket by bad
    luck overlap by 1/PROBES of a word, not a whole word ("own" and "opened" do, at 768).
    """
    digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8 * PROBES).digest()
    out: list[tuple[int, float]] = []
    for k in range(PROBES):
        h = int.from_bytes(digest[8 * k : 8 * k + 8], "big")
        out.append((h % dims, 1.0 if (h >> 63) & 1 else -1.0))
    return out


class HashingEmbedder:
    """Deterministic, offline `Embedder`: the same text gives the same unit vector everywhere."""

    name = "hashing"  # what the store records (storage.embedder)

    def __init__(self, dims: int = EMBEDDING_DIMS):
        if dims <= 0:
            raise ValueError(f"dims must be positive, got {dims}")
        self.dims = dims

    def vector(self, text: str) -> np.ndarray:
        """One text's unit vector as float32 (a fixed one for a text with no content words)."""
        v = self._sum(tokens(text) or [_EMPTY_TOKEN])
        n = float(np.linalg.norm(v))
        if n == 0.0:  # the signs cancelled out exactly: fall back to the fixed vector
            v = self._sum([_EMPTY_TOKEN])
            n = float(np.linalg.norm(v))
        return v / n

    def _sum(self, toks: list[str]) -> np.ndarray:
        v = np.zeros(self.dims, dtype=np.float32)
        for tok in toks:
            for i, sign in _buckets(tok, self.dims):
                v[i] += sign
        return v

    def embed(self, texts: list[str], *, purpose: str = "embed") -> list[list[float]]:
        """A unit vector per text, in order. `purpose` is accepted for the interface only."""
        return [[float(x) for x in self.vector(t)] for t in texts]
