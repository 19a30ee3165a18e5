"""Does the block hold what a question is about? LoCoMo, measured through the real paths.

    .venv/bin/python benchmarks/locomo_recall.py [--conversations 1-6] [--embedders hashing,e5]
    .venv/bin/python benchmarks/locomo_recall.py --conversations 1-10 --docs docs/recall.md

For each conversation and embedder, the store is built through the real write path
(`locomo_replay.replay`: the data set's observations as the extractor, our guards, embedder,
router and commit). Then, for every question of categories 1–4 whose evidence turns map to a
stored row ("evidence rows"):

* **Hit@block** — the room's topic is the question: is an evidence row in the block? Our rule
  (`ranking.RULE`), the first rule (`SEED_RULE`), relevance only, recency only, importance only
  and random (several seeds) rank the same candidates, and the same `take` (10 rows, 1,200
  chars) cuts. Our rule is also run through `reader.build_block` itself, to prove the pure
  figures are the product's.
* **Hit@k for recall** — the room was opened with no topic; the human's message is the
  question: is an evidence row among `recall`'s k rows (which exclude what the block holds)?
  Beside it, relevance only top-k over every visible row (what a plain vector search returns),
  and the block and recall together.
* **coverage** — the share of questions with an evidence row stored at all (the rest cannot
  be hit by any ranking: the extractor never wrote it, or a guard dropped it).

Rows are embedded with the subject's display name in place of `u:1` (the product's path);
"ids" rows re-embed the stored text as it is, to measure what the names buy.

LoCoMo: Maharana et al., ACL 2024, CC BY-NC 4.0 — read from ../shared/data/locomo/, never copied.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from benchmarks import locomo_replay, router_floor  # noqa: E402
from benchmarks.locomo_replay import conversations  # noqa: E402
from memory_worker import reader  # noqa: E402
from memory_worker.core import settings as settings_mod  # noqa: E402
from memory_worker.core.audience import Consent, Members, visible_memories  # noqa: E402
from memory_worker.core.model_interfaces import Embedder  # noqa: E402
from memory_worker.core.ranking import RULE, SEED_RULE, RankColumns, scores, take  # noqa: E402
from memory_worker.core.rows import Row  # noqa: E402
from memory_worker.core.vectors import quantise  # noqa: E402
from memory_worker.models import named_embedder  # noqa: E402
from memory_worker.reader.recall import top  # noqa: E402
from memory_worker.storage import (
    memories,  # noqa: E402
    store,  # noqa: E402
)
from memory_worker.storage.rooms import load_room, set_topic_embedding  # noqa: E402
from memory_worker.testing import rank_rows  # noqa: E402
from memory_worker.write.embed import embeddable_text  # noqa: E402

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
RANDOM_SEEDS = (0, 1, 2, 3, 4)
RECALL_KS = (3, 5, 10)
PERSONA, HUMAN, ROOM = locomo_replay.PERSONA, locomo_replay.HUMAN, "dm"
_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")

Scorer = Callable[[RankColumns], np.ndarray]


def _random(seed: int) -> Scorer:
    return lambda c: np.random.default_rng(seed).random(len(c))


METHODS: dict[str, Scorer] = {
    f"ours ({RULE.name})": lambda c: scores(c, RULE),
    "seed rule": lambda c: scores(c, SEED_RULE),
    "relevance only": lambda c: c.relevance.copy(),
    "recency only": lambda c: -c.age_days,
    "importance only": lambda c: c.importance.copy(),
    **{f"random (seed {s})": _random(s) for s in RANDOM_SEEDS},
}
OURS = next(iter(METHODS))
RANDOMS = [m for m in METHODS if m.startswith("random")]
RANDOM_MEAN = f"random (mean of {len(RANDOM_SEEDS)} seeds)"
COVERAGE = "coverage (questions with an evidence row stored)"
TUNED_ON = 6  # conversations 1–6 tuned the rule; 7–10 are held out


@dataclass
class Tally:
    """Hits per method and category over the mapped questions."""

    asked: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    mapped: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    hits: dict[str, dict[int, int]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(int))
    )
    ranks: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    reader_mismatches: int = 0
    seconds: float = 0.0
    rows: int = 0  # rows the replay wrote
    held_back: int = 0  # of them, open rows naming a known human (`--known-people`)

    def add(self, other: Tally) -> Tally:
        """This tally with `other`'s counts added (slices of conversations)."""
        for k in CATEGORIES:
            self.asked[k] += other.asked[k]
            self.mapped[k] += other.mapped[k]
        for m, per in other.hits.items():
            for k, n in per.items():
                self.hits[m][k] += n
        for m, ranks in other.ranks.items():
            self.ranks[m].extend(ranks)
        self.reader_mismatches += other.reader_mismatches
        self.seconds += other.seconds
        self.rows += other.rows
        self.held_back += other.held_back
        return self

    def hit(self, method: str, category: int, got: bool) -> None:
        self.hits[method][category] += int(got)

    def rate(self, method: str, category: int | None = None) -> float:
        cats = [category] if category is not None else list(CATEGORIES)
        n = sum(self.mapped[k] for k in cats)
        return sum(self.hits[method][k] for k in cats) / n if n else float("nan")

    def coverage(self, category: int | None = None) -> float:
        cats = [category] if category is not None else list(CATEGORIES)
        n = sum(self.asked[k] for k in cats)
        return sum(self.mapped[k] for k in cats) / n if n else float("nan")


def evidence_lines(question: dict, line_of: dict[str, int]) -> set[int]:
    ids = {f"D{a}:{b}" for e in question.get("evidence", []) for a, b in _EVIDENCE.findall(e)}
    return {line_of[i] for i in ids if i in line_of}


def best_rank(order: np.ndarray, ids: np.ndarray, wanted: set[int]) -> int:
    """1-based rank of the first wanted id in `order` (indexes into `ids`)."""
    for rank, i in enumerate(order, 1):
        if int(ids[i]) in wanted:
            return rank
    return len(order) + 1


def measure(
    sample: dict,
    embedder: Embedder,
    url: str,
    tallies: dict[str, Tally],
    known_people: list[str] = (),
) -> None:
    """Replay one conversation into `url`, then score every question into `tallies`."""
    started = time.perf_counter()
    replayed = locomo_replay.replay(sample, url, embedder=embedder, known_people=known_people)
    for tally in tallies.values():
        tally.rows += replayed.rows
        tally.held_back += replayed.held_back
    now = datetime.fromisoformat(replayed.last_day).replace(tzinfo=UTC) + timedelta(days=1)
    with store.engine(url).connect() as conn:
        room = load_room(conn, ROOM)
        held = memories.all_rows(conn)
    consent, members = (
        Consent(memory_on={HUMAN: True}),
        Members(frozenset({HUMAN}), frozenset({PERSONA})),
    )
    rows = visible_memories(PERSONA, {HUMAN}, room, held, consent, members=members)
    variants = {"names": rows, "ids": _reembedded(rows, embedder, {})}
    questions = [q for q in sample["qa"] if q.get("category") in CATEGORIES]
    vectors = embedder.embed([q["question"] for q in questions], purpose="topic")
    for variant, vrows in variants.items():
        tally = tallies[variant]
        opened = rank_rows.columns(vrows, now, None)  # the room opened with no topic
        block0 = {i for ids in take(opened, scores(opened)).values() for i in ids}
        for q, vec in zip(questions, vectors, strict=True):
            cat = q["category"]
            tally.asked[cat] += 1
            lines = evidence_lines(q, replayed.line_of)
            wanted = {r.id for r in vrows if lines & set(r.evidence)}
            if not wanted:
                continue
            tally.mapped[cat] += 1
            topic = quantise(vec)
            c = rank_rows.columns(vrows, now, topic)
            for method, scorer in METHODS.items():
                s = scorer(c)
                block = {i for ids in take(c, s).values() for i in ids}
                tally.hit(method, cat, bool(block & wanted))
                order = np.lexsort((c.ids, -s))
                tally.ranks[method].append(best_rank(order, c.ids, wanted))
            if variant == "names":  # the stored vectors are the product's: check the reader
                tally.reader_mismatches += _reader_disagrees(url, topic, now, c)
            by_relevance = np.lexsort((c.ids, -c.relevance))
            for k in RECALL_KS:
                got = set(top(c, scores(c), exclude=block0, k=k))
                tally.hit(f"recall@{k}", cat, bool(got & wanted))
                tally.hit(f"block + recall@{k}", cat, bool((got | block0) & wanted))
                plain = {int(c.ids[i]) for i in by_relevance[:k]}
                tally.hit(f"relevance top-{k}", cat, bool(plain & wanted))
    for tally in tallies.values():
        tally.seconds += time.perf_counter() - started
    reader.close(timeout=60)  # its touches and fills land before the store goes
    store.dispose_all()


def _reembedded(rows: list[Row], embedder: Embedder, names: dict[int, str]) -> list[Row]:
    """The same rows with vectors of their text as stored (`names` empty: `u:1` stays)."""
    texts = [embeddable_text(r.text, names) for r in rows]
    vectors = embedder.embed(texts, purpose="rows") if texts else []
    return [_with(r, quantise(v)) for r, v in zip(rows, vectors, strict=True)]


def _with(row: Row, embedding: bytes) -> Row:
    from dataclasses import replace

    return replace(row, embedding=embedding)


def _reader_disagrees(url: str, topic: bytes, now: datetime, c: RankColumns) -> int:
    """1 when `reader.build_block` with this topic on the room picks other rows than the
    pure take over the same candidates (it never should)."""
    with store.transaction(url) as conn:
        set_topic_embedding(conn, ROOM, topic)
    block = reader.build_block(PERSONA, {HUMAN}, ROOM, now=now, url=url, touch=False)
    pure = {i for ids in take(c, scores(c)).values() for i in ids}
    return int(set(block.row_ids) != pure)


# --- the report -------------------------------------------------------------------------------


def _pct(x: float) -> str:
    return "—" if x != x else f"{x:.2f}"


def report_rows(tally: Tally, methods: Iterable[str]) -> list[list[str]]:
    out = []
    for m in methods:
        ranks = tally.ranks.get(m)
        med = f"{statistics.median(ranks):.0f}" if ranks else ""
        out.append([m, *(_pct(tally.rate(m, k)) for k in CATEGORIES), _pct(tally.rate(m)), med])
    return out


def tables(label: str, tally: Tally) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) for the block table and the recall table of one run."""
    cats = [f"{k} {v} (n={tally.mapped[k]})" for k, v in CATEGORIES.items()]
    n = sum(tally.mapped.values())
    block_rows = report_rows(tally, [m for m in METHODS if not m.startswith("random")])
    randoms = [tally.rate(m) for m in METHODS if m.startswith("random")]
    per_cat = [
        _pct(statistics.mean(tally.rate(m, k) for m in METHODS if m.startswith("random")))
        for k in CATEGORIES
    ]
    mean = _pct(statistics.mean(randoms))
    block_rows.append([f"random (mean of {len(RANDOM_SEEDS)} seeds)", *per_cat, mean, ""])
    recall_methods = [
        f"{what}{k}" for k in RECALL_KS for what in ("recall@", "relevance top-", "block + recall@")
    ]
    cover = ["coverage (questions with an evidence row stored)"]
    cover += [_pct(tally.coverage(k)) for k in CATEGORIES] + [_pct(tally.coverage()), ""]
    return [
        (
            f"Hit@block · {label} · {n} mapped questions",
            ["method", *cats, "all", "median rank"],
            [*block_rows, cover],
        ),
        (
            f"Hit@k, on-demand recall · {label}",
            ["method", *cats, "all", ""],
            report_rows(tally, recall_methods),
        ),
    ]


def markdown(title: str, header: list[str], rows: list[list[str]]) -> str:
    lines = [f"**{title}**", "", "| " + " | ".join(header) + " |"]
    lines.append("|" + "---|" + "---:|" * (len(header) - 1))
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def slices(picked: list[int]) -> dict[str, list[int]]:
    """The tuning conversations (1–6), the held-out ones (7–10) and all, as far as picked."""
    tuned = [i for i in picked if i < TUNED_ON]
    held = [i for i in picked if i >= TUNED_ON]
    if tuned and held:
        return {"1–6 (tuned on)": tuned, "7–10 (held out)": held, "all": picked}
    return {"1–6 (tuned on)" if tuned else "7–10 (held out)": picked}


def merged(runs: dict[int, Tally], convs: list[int]) -> Tally:
    out = Tally()
    for i in convs:
        out.add(runs[i])
    return out


def summary(
    results: dict[tuple[str, str], dict[int, Tally]],
    cuts: dict[str, list[int]],
    methods: list[str],
    variant: str = "names",
) -> tuple[list[str], list[list[str]]]:
    """Overall hit rates: a row per method, a column per (embedder, slice)."""
    embedders = [e for e, v in results if v == variant]
    header = ["method", *(f"{e} · {cut}" for e in embedders for cut in cuts)]
    rows = []
    for m in methods:
        cells = []
        for e in embedders:
            for convs in cuts.values():
                t = merged(results[(e, variant)], convs)
                if m == RANDOM_MEAN:
                    cells.append(_pct(statistics.mean(t.rate(r) for r in RANDOMS)))
                elif m == COVERAGE:
                    cells.append(_pct(t.coverage()))
                else:
                    cells.append(_pct(t.rate(m)))
        rows.append([m, *cells])
    counts = [
        str(sum(merged(results[(e, variant)], convs).mapped.values()))
        for e in embedders
        for convs in cuts.values()
    ]
    rows.append(["mapped questions", *counts])
    return header, rows


def names_vs_ids(
    results: dict[tuple[str, str], dict[int, Tally]], convs: list[int]
) -> tuple[list[str], list[list[str]]]:
    header = ["embedder", "rows embedded with", OURS, "relevance only", "recall@5"]
    rows = []
    for (e, variant), runs in results.items():
        t = merged(runs, convs)
        rows.append([e, variant, *(_pct(t.rate(m)) for m in (OURS, "relevance only", "recall@5"))])
    return header, rows


def show(console: Console, sections: list[str], title: str, header: list[str], rows) -> None:  # type: ignore[no-untyped-def]
    table = Table(title=title)
    for col in header:
        table.add_column(col, justify="left" if col in ("method", "embedder") else "right")
    for r in rows:
        table.add_row(*r)
    console.print(table)
    sections.append(markdown(title, header, rows))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=locomo_replay.DATA, help="locomo10.json")
    p.add_argument("--conversations", default="1-6", help="e.g. 1-6 (tuning), 7-10, 1-10")
    p.add_argument(
        "--embedders",
        default="hashing,e5",
        help="comma-separated: e5 (the offline default), hashing, gemini",
    )
    p.add_argument("--detail", action="store_true", help="per-category tables for every run")
    p.add_argument("--docs", type=Path, help="also write the tables as markdown here")
    p.add_argument(
        "--router-floor",
        action="store_true",
        help="also measure the router's neighbour floor per embedder (benchmarks/router_floor.py)",
    )
    p.add_argument(
        "--recall-under-load",
        action="store_true",
        help="also time a message's e5 recall beside a busy write path (recall_path --under-load)",
    )
    p.add_argument(
        "--known-people",
        action="store_true",
        help="the store also knows every other LoCoMo speaker as a human: rows naming one are "
        "held back in the private chat (what the names rule costs, fail closed)",
    )
    a = p.parse_args()
    if not a.data.exists():
        raise SystemExit(
            f"LoCoMo is not at {a.data}.\nThe data lives in the shared folder beside the "
            "checkout: ../shared/data/locomo/locomo10.json (CC BY-NC 4.0, never committed "
            "here); pass --data PATH if yours is elsewhere."
        )
    data = json.loads(a.data.read_text())
    picked = conversations(a.conversations, len(data))
    console = Console(width=max(Console().width, 150))
    results: dict[tuple[str, str], dict[int, Tally]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in [e.strip() for e in a.embedders.split(",") if e.strip()]:
            embedder = named_embedder(name)
            for i in picked:
                per = {"names": Tally(), "ids": Tally()}
                others = [
                    n
                    for s in data
                    for n in (s["conversation"]["speaker_a"], s["conversation"]["speaker_b"])
                    if n != data[i]["conversation"]["speaker_a"]
                ]
                known = sorted(set(others)) if a.known_people else []
                measure(data[i], embedder, f"sqlite:///{tmp}/{name}-{i}.db", per, known)
                for variant, tally in per.items():
                    results.setdefault((name, variant), {})[i] = tally
    cuts = slices(picked)
    sections: list[str] = []
    block_methods = [m for m in METHODS if m not in RANDOMS] + [RANDOM_MEAN, COVERAGE]
    show(
        console,
        sections,
        "Hit@block — the room's topic is the question",
        *summary(results, cuts, block_methods),
    )
    recall_methods = [
        f"{w}{k}" for k in RECALL_KS for w in ("recall@", "relevance top-", "block + recall@")
    ]
    show(
        console,
        sections,
        "Hit@k — on-demand recall, the room opened with no topic",
        *summary(results, cuts, recall_methods),
    )
    show(
        console,
        sections,
        f"Names or ids in the embedded text — conversations {a.conversations}",
        *names_vs_ids(results, picked),
    )
    for (name, variant), runs in results.items():
        whole = merged(runs, picked)
        console.print(
            f"  {name} · {variant}: reader.build_block disagreed with the pure take on "
            f"{whole.reader_mismatches} questions · {whole.seconds:.0f} s · "
            f"{whole.held_back} of {whole.rows} rows held back by the names rule"
        )
        if a.detail or (a.docs and variant == "names"):
            label = (
                f"{name} embedder · rows embedded with {variant} · conversations {a.conversations}"
            )
            for title, header, rows in tables(label, whole):
                show(console, sections, title, header, rows)
    if a.router_floor:
        names = [e.strip() for e in a.embedders.split(",") if e.strip()]
        chosen, floor_tables = router_floor.run(data, names, picked)
        for title, header, rows in floor_tables:
            show(console, sections, title, header, rows)
        for name, floor in chosen.items():
            console.print(f"  router floor chosen on 1–6 for {name}: {floor:.2f}")
    if a.recall_under_load:
        from benchmarks import recall_path

        nice, writers = settings_mod.current().worker_nice, 2
        with tempfile.TemporaryDirectory() as tmp:
            figures = recall_path.under_load(400, writers, a.data, Path(tmp), nice)
        title = "Recall under load — " + recall_path.load_title(writers, nice)
        show(console, sections, title, *recall_path.load_rows(figures))
    if a.docs:
        a.docs.parent.mkdir(parents=True, exist_ok=True)
        a.docs.write_text(render_doc(a, sections))
        console.print(f"wrote {a.docs}")


def render_doc(a: argparse.Namespace, sections: list[str]) -> str:
    head = Path(__file__).with_name("locomo_recall_doc.md").read_text()
    args = sys.argv[1:]
    if "--data" in args:  # where this machine keeps the data is not part of the run
        i = args.index("--data")
        args = args[:i] + args[i + 2 :]
    command = " ".join(["python benchmarks/locomo_recall.py", *args])
    return head.format(command=command, tables="\n".join(sections))


if __name__ == "__main__":
    main()
