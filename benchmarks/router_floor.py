"""What neighbour floor does the router need, per embedder? LoCoMo's routing decisions.

    .venv/bin/python benchmarks/router_floor.py [--embedders hashing,e5] [--conversations 1-10]

The router (model call B) can only answer NONE or UPDATE about a row it is shown: a floor set
too high hides the row a candidate restates, and the restatement is stored beside it (a
duplicate); set too low, every candidate carries five unrelated rows into the prompt. The first
floor, cosine ≥ 0.6 (docs/design.md §2.2), was set for another model — e5's cosines between
unrelated sentences sit around 0.7–0.8, the hashing embedder's near 0 — so each embedder gets
its own.

The replay (`locomo_replay`): each session's observations about speaker A are the candidates,
in order, embedded the product's way (the human's name in the text), against the rows held so
far. **The replay's truth** decides over *every* open row, no floor and no top-k: NONE if a row
holds the same sentence (the replay's own router rule), UPDATE of the most alike row if one
restates it (at least half the content words of the two are shared: Jaccard ≥ 0.5), else
ADD; the store then follows the truth. The router at a floor decides by the same rule but
only over what `route.neighbours` shows it (top 5, cosine ≥ floor), so every disagreement is
the floor's (or the top-k's). Reported per floor: agreement (the event, and for UPDATE the
row), duplicates stored (truth NONE/UPDATE, router ADD), neighbours shown per candidate and
the share of them unrelated to the candidate.

The floor is chosen on conversations 1–6 — the highest that keeps agreement within one point
of no floor at all (the most it can be) — and reported on 7–10, held out.

LoCoMo: Maharana et al., ACL 2024, CC BY-NC 4.0 — read from ../shared/data/locomo/, never copied.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from benchmarks import locomo_replay  # noqa: E402
from benchmarks.locomo_replay import conversations  # noqa: E402
from memory_worker.core.constants import NEIGHBOUR_MIN_COSINE  # noqa: E402
from memory_worker.core.model_interfaces import Embedder  # noqa: E402
from memory_worker.core.rows import Candidate  # noqa: E402
from memory_worker.core.vectors import from_b64, quantise, to_b64  # noqa: E402
from memory_worker.models import named_embedder  # noqa: E402
from memory_worker.storage.memories import OpenRow  # noqa: E402
from memory_worker.write import route  # noqa: E402
from memory_worker.write.route import neighbour_floor  # noqa: E402

TUNED_ON = 6  # conversations 1–6 choose the floor; 7–10 are held out
FLOORS = tuple(round(f, 2) for f in np.arange(0.0, 0.96, 0.01))
NO_FLOOR = -1.0
KEEP_WITHIN = 0.01  # the chosen floor loses at most this share of decisions to no floor
RESTATES = 0.5  # content-word Jaccard from which a sentence restates another (the truth)
SUBJECT = f"u:{locomo_replay.HUMAN}"
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
# A short list of function words of its own: the truth must not borrow an embedder's tokens.
_FUNCTION = frozenset(
    """a an the and or but of in on at to for from by with about as is are was were be been
    has have had do does did it its this that these those he she his her they them their
    i me my we our you your who which what when where how also very so not no""".split()
)


def content_words(text: str) -> frozenset[str]:
    return frozenset(w for w in _WORD.findall(text.lower()) if w not in _FUNCTION)


def restatement(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 0.0


@dataclass(frozen=True)
class Held:
    id: int
    text: str
    words: frozenset[str]
    vector: str  # int8 base64, as a candidate carries it


def decide(
    text: str, words: frozenset[str], rows: Sequence[Held], restates: int | None = None
) -> tuple[str, int | None]:
    """The replay's rule over `rows`: (NONE|UPDATE|ADD, the row it concerns). `restates` is
    the row an event summary restates (NONE about it when it is among `rows`)."""
    key = text.strip().lower()
    for r in rows:
        if r.text.strip().lower() == key or r.id == restates:
            return "NONE", r.id
    best = max(rows, key=lambda r: (restatement(words, r.words), -r.id), default=None)
    if best is not None and restatement(words, best.words) >= RESTATES:
        return "UPDATE", best.id
    return "ADD", None


@dataclass
class Tally:
    decisions: int = 0
    truth: dict[str, int] = field(default_factory=lambda: {"ADD": 0, "UPDATE": 0, "NONE": 0})
    agree: dict[float, int] = field(default_factory=dict)
    duplicates: dict[float, int] = field(default_factory=dict)
    shown: dict[float, int] = field(default_factory=dict)
    unrelated: dict[float, int] = field(default_factory=dict)

    def add(self, other: Tally) -> None:
        self.decisions += other.decisions
        for k, n in other.truth.items():
            self.truth[k] += n
        for mine, theirs in (
            (self.agree, other.agree),
            (self.duplicates, other.duplicates),
            (self.shown, other.shown),
            (self.unrelated, other.unrelated),
        ):
            for f, n in theirs.items():
                mine[f] = mine.get(f, 0) + n

    def agreement(self, floor: float) -> float:
        return self.agree.get(floor, 0) / self.decisions if self.decisions else float("nan")


def replay(sample: dict, embedder: Embedder, floors: Sequence[float]) -> Tally:
    """Every session's candidates routed at every floor against the truth's store: first the
    session's observations, then its event summaries, which restate them."""
    conv, obs, events = sample["conversation"], sample["observation"], sample["event_summary"]
    a = conv["speaker_a"]
    out = Tally()
    held: list[Held] = []
    for n in locomo_replay.sessions(conv):
        facts = [text for text, _ev in obs.get(f"session_{n}_observation", {}).get(a, [])]
        said = events.get(f"events_session_{n}", {}).get(a, [])
        first_of_session = len(held) + 1 if not held else held[-1].id + 1
        texts = facts + said
        if not texts:
            continue
        vectors = embedder.embed(texts, purpose="candidates")  # the name in the text, as stored
        for i, (text, vec) in enumerate(zip(texts, vectors, strict=True)):
            words = content_words(text.replace(a, " "))
            restates = None
            if i >= len(facts):  # an event: the session's observation most like it
                session = [h for h in held if h.id >= first_of_session]
                restates = max(session, key=lambda h: restatement(words, h.words)).id
            held = _route(
                out,
                Held(0, text.replace(a, SUBJECT), words, to_b64(quantise(vec))),
                held,
                restates,
                floors,
            )
    return out


def _route(
    out: Tally, cand: Held, held: list[Held], restates: int | None, floors: Sequence[float]
) -> list[Held]:
    """Tally one candidate at every floor; the store after the truth's decision."""
    truth = decide(cand.text, cand.words, held, restates)
    out.decisions += 1
    out.truth[truth[0]] += 1
    routed = Candidate(SUBJECT, "fact", cand.text, 5, (), embedding=cand.vector)
    rows = [OpenRow(h.id, SUBJECT, h.text, from_b64(h.vector), None) for h in held]
    by_id = {h.id: h for h in held}
    for floor in floors:
        (ids,) = route.neighbours([routed], rows, floor)
        shown = [by_id[i] for i in ids]
        got = decide(cand.text, cand.words, shown, restates)
        out.agree[floor] = out.agree.get(floor, 0) + int(got == truth)
        dup = truth[0] != "ADD" and got[0] == "ADD"
        out.duplicates[floor] = out.duplicates.get(floor, 0) + int(dup)
        out.shown[floor] = out.shown.get(floor, 0) + len(shown)
        far = sum(1 for h in shown if decide(cand.text, cand.words, [h], restates)[0] == "ADD")
        out.unrelated[floor] = out.unrelated.get(floor, 0) + far
    if truth[0] == "NONE":
        return held
    kept = [h for h in held if h.id != truth[1]]  # an UPDATE closes the row it restates
    return [*kept, Held(held[-1].id + 1 if held else 1, cand.text, cand.words, cand.vector)]


def choose(tally: Tally, floors: Sequence[float]) -> float:
    """The highest floor within KEEP_WITHIN of no floor's agreement."""
    best = tally.agreement(NO_FLOOR)
    ok = [f for f in floors if f != NO_FLOOR and tally.agreement(f) >= best - KEEP_WITHIN]
    return max(ok) if ok else NO_FLOOR


def row(tally: Tally, floor: float) -> list[str]:
    n = tally.decisions
    shown = tally.shown.get(floor, 0)
    return [
        "none" if floor == NO_FLOOR else f"{floor:.2f}",
        f"{tally.agreement(floor):.3f}",
        str(tally.duplicates.get(floor, 0)),
        f"{shown / n:.2f}" if n else "—",
        f"{tally.unrelated.get(floor, 0) / shown:.2f}" if shown else "—",
    ]


HEADER = [
    "floor",
    "agreement",
    "duplicates stored",
    "neighbours per candidate",
    "unrelated share",
]


def run(
    data: list[dict], names: list[str], picked: list[int]
) -> tuple[dict[str, float], list[tuple[str, list[str], list[list[str]]]]]:
    """(the chosen floor per embedder, report tables (title, header, rows))."""
    floors = (NO_FLOOR, *FLOORS)
    chosen: dict[str, float] = {}
    tables = []
    for name in names:
        embedder = named_embedder(name)
        per = {i: replay(data[i], embedder, floors) for i in picked}
        tuned, held = Tally(), Tally()
        for i, t in per.items():
            (tuned if i < TUNED_ON else held).add(t)
        pick = choose(tuned if tuned.decisions else held, FLOORS)
        chosen[name] = pick
        near = {f for f in FLOORS if abs(f - pick) <= 0.025}
        now = neighbour_floor(embedder.name)
        shown = sorted({NO_FLOOR, NEIGHBOUR_MIN_COSINE, now, *near, *FLOORS[::10]})
        for label, t in (("1–6 (chosen on)", tuned), ("7–10 (held out)", held)):
            if not t.decisions:
                continue
            truth = ", ".join(f"{k} {v}" for k, v in t.truth.items())
            title = (
                f"Router floor · {name} · conversations {label} · {t.decisions} decisions "
                f"(truth: {truth}) · chosen on 1–6: {pick:.2f}"
            )
            tables.append((title, HEADER, [row(t, f) for f in shown]))
    return chosen, tables


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=locomo_replay.DATA, help="locomo10.json")
    p.add_argument("--conversations", default="1-10")
    p.add_argument("--embedders", default="hashing,e5")
    a = p.parse_args()
    if not a.data.exists():
        raise SystemExit(f"LoCoMo is not at {a.data} (../shared/data/locomo/locomo10.json)")
    data = json.loads(a.data.read_text())
    picked = conversations(a.conversations, len(data))
    names = [e.strip() for e in a.embedders.split(",") if e.strip()]
    chosen, tables = run(data, names, picked)
    console = Console(width=max(Console().width, 120))
    for title, header, rows in tables:
        table = Table(title=title)
        for col in header:
            table.add_column(col, justify="right")
        for r in rows:
            table.add_row(*r)
        console.print(table)
    for name, floor in chosen.items():
        console.print(f"  {name}: floor {floor:.2f}")


if __name__ == "__main__":
    main()
