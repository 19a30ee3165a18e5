"""Replay LoCoMo conversations through the write path, session by session, then open a room.

    .venv/bin/python benchmarks/locomo_replay.py [--conversations 10]

LoCoMo (Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM Agents",
ACL 2024; CC BY-NC 4.0) is read from ../shared/data/locomo/, never copied here. Speaker A is
the human (u:1); speaker B's lines are the persona's. Each session is one spell. The "model"
is scripted from the data set's own annotations: extraction proposes the session's
observations about speaker A, with their evidence turns; the router answers NONE for a sentence
already held and ADD otherwise. Everything else is the product's code on real text: the guards,
the embedder (the offline default, e5, unless one is given), the neighbour search, the commit,
the daily cap, and the reader's block.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402
from sqlalchemy import select  # noqa: E402

from memory_worker import app_side, models, reader  # noqa: E402
from memory_worker.core import settings as settings_mod  # noqa: E402
from memory_worker.core import tables as t  # noqa: E402
from memory_worker.core.model_interfaces import Embedder  # noqa: E402
from memory_worker.models.scripted import ScriptedChat, route_payload  # noqa: E402
from memory_worker.storage import store  # noqa: E402
from memory_worker.write import extract, steps  # noqa: E402

DATA = (
    Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "locomo" / "locomo10.json"
)
HUMAN = 1
KNOWN_FROM = 1000  # the ids of `replay`'s other known humans
PERSONA = "b"
IMPORTANCE = 5  # LoCoMo rates nothing; mid-scale, above the bar


@dataclass
class Replay:
    sample: str
    sessions: int = 0
    lines: int = 0
    proposed: int = 0
    rows: int = 0
    rejected: Counter = field(default_factory=Counter)
    spell_ms: list[float] = field(default_factory=list)
    block_chars: int = 0
    block_rows: int = 0
    line_of: dict[str, int] = field(default_factory=dict)  # LoCoMo dia_id → our line id
    held_back: int = 0  # open rows naming a known human: held to their presence
    last_day: str = ""  # the last session's date


def known_or_new(prompt: str) -> dict:
    """The router: NONE for a sentence the persona already holds, else ADD."""
    memories, shown = route_payload(prompt)
    text_of = {m["id"]: m["text"].lower() for m in memories}
    return {
        "decisions": [
            {
                "candidate": c["candidate"],
                "event": "NONE"
                if any(text_of[n] == c["text"].lower() for n in c["neighbours"])
                else "ADD",
                "old_id": None,
            }
            for c in shown
        ]
    }


def session_date(stamp: str) -> str:
    """'1:56 pm on 8 May, 2023' → '2023-05-08'."""
    return session_time(stamp)[:10]


def session_time(stamp: str) -> str:
    """'1:56 pm on 8 May, 2023' → '2023-05-08T13:56:00+00:00': the store takes a line's time
    only with its offset; LoCoMo gives none, so UTC."""
    when = datetime.strptime(stamp.strip(), "%I:%M %p on %d %B, %Y")
    return when.replace(tzinfo=UTC).isoformat()


def sessions(conv: dict) -> list[int]:
    keys = [k for k in conv if re.fullmatch(r"session_\d+", k) and conv[k]]
    return sorted(int(k.split("_")[1]) for k in keys)


def replay(
    sample: dict, url: str, embedder: Embedder | None = None, known_people: list[str] = ()
) -> Replay:
    """The conversation through the write path into a fresh store at `url`; `embedder`
    defaults to the offline one the replay provider uses. `known_people`: display names of
    other humans the store knows (ids from 1000): a row naming one of them is held to their
    presence, so in the private chat it is held back (the names rule's cost, fail closed)."""
    conv, obs = sample["conversation"], sample["observation"]
    a, b = conv["speaker_a"], conv["speaker_b"]
    out = Replay(sample["sample_id"])
    annotated: dict = {"candidates": []}
    model = ScriptedChat({"extract": lambda _prompt: annotated, "route": known_or_new})
    base = settings_mod.current().with_(database_url=url)
    settings_mod.configure(base)
    store.init_db(url)
    embedder = embedder or models.embedder(base.with_(provider="replay"))
    with store.transaction() as c:
        app_side.add_user(c, HUMAN, a)
        for n, name in enumerate(known_people):
            app_side.add_user(c, KNOWN_FROM + n, name)
        app_side.add_persona(c, PERSONA, b)
        app_side.add_room(c, "dm", "private", [f"u:{HUMAN}", PERSONA])
    for n in sessions(conv):
        at = session_time(conv[f"session_{n}_date_time"])
        day = at[:10]
        settings_mod.configure(base.with_(today=day))
        line_of: dict[str, int] = {}
        with store.transaction() as c:
            for turn in conv[f"session_{n}"]:
                who = HUMAN if turn["speaker"] == a else PERSONA
                line_of[turn["dia_id"]] = app_side.say(c, "dm", who, turn["text"], at=at)
        facts = obs.get(f"session_{n}_observation", {}).get(a, [])
        annotated["candidates"] = [
            {
                "subject": f"u:{HUMAN}",
                "kind": "fact",
                "text": text.replace(a, f"u:{HUMAN}"),
                "importance": IMPORTANCE,
                "evidence": [line_of[e] for e in _ids(ev) if e in line_of],
            }
            for text, ev in facts
        ]
        started = time.perf_counter()
        spell = steps.begin(PERSONA, "dm")
        assert spell is not None
        lines, present = _slice(spell)
        spell = steps.run_extract(spell, model)
        _, rejected = extract.guard(
            extract.ExtractAnswer.model_validate(annotated),
            persona=PERSONA,
            present=present,
            lines=lines,
            already_today={},
        )
        spell = steps.run_embed(spell, embedder)
        spell = steps.run_route(spell, model)
        outcome = steps.run_commit(spell)
        out.spell_ms.append((time.perf_counter() - started) * 1000)
        out.sessions += 1
        out.lines += len(line_of)
        out.proposed += len(facts)
        out.rows += len(outcome.row_ids)
        out.rejected.update(r.reason.split(" (")[0] for r in rejected)
        out.line_of.update(line_of)
        out.last_day = day
    block = reader.build_block(PERSONA, {HUMAN}, "dm", touch=False)
    out.block_chars, out.block_rows = block.chars_current, len(block.row_ids)
    with store.engine().connect() as c:
        out.held_back = len(
            c.execute(
                select(t.persona_memory.c.id).where(
                    t.persona_memory.c.named.is_not(None), t.persona_memory.c.valid_to.is_(None)
                )
            ).all()
        )
    return out


def conversations(spec: str, total: int) -> list[int]:
    """'1-6', '7-10', '1,3,5' or 'all' → 0-based indexes."""
    if spec == "all":
        return list(range(total))
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    if not out or min(out) < 1 or max(out) > total:
        raise SystemExit(f"--conversations {spec!r}: pick from 1-{total}")
    return [i - 1 for i in out]


def _ids(ev: str | list[str]) -> list[str]:
    return [e.strip() for e in ([ev] if isinstance(ev, str) else ev)]


def _slice(spell):  # type: ignore[no-untyped-def]
    from memory_worker.write import window

    with store.engine().connect() as c:
        return window.slice_of(c, spell), spell.present


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--conversations", type=int, default=10)
    a = p.parse_args()
    if not DATA.exists():
        raise SystemExit(f"LoCoMo not found at {DATA}")
    data = json.loads(DATA.read_text())[: a.conversations]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, sample in enumerate(data):
            results.append(replay(sample, f"sqlite:///{tmp}/locomo{i}.db"))
    table = Table(title="LoCoMo through the write path (annotations as the model)")
    for col in (
        "sample",
        "sessions",
        "lines",
        "proposed",
        "rows",
        "dropped",
        "spell ms (med)",
        "block chars",
        "block rows",
    ):
        table.add_column(col, justify="right")
    for r in results:
        table.add_row(
            r.sample,
            str(r.sessions),
            str(r.lines),
            str(r.proposed),
            str(r.rows),
            str(sum(r.rejected.values())),
            f"{statistics.median(r.spell_ms):.1f}",
            str(r.block_chars),
            str(r.block_rows),
        )
    Console(width=max(Console().width, 120)).print(table)
    reasons: Counter = Counter()
    for r in results:
        reasons.update(r.rejected)
    for reason, count in reasons.most_common():
        print(f"  dropped {count:4d} × {reason}")


if __name__ == "__main__":
    main()
