"""How far back does a persona echo, and what does the echo rule hold back? (MW_ECHO_REACH_LINES)

    .venv/bin/python benchmarks/echo_reach.py [--conversations 6] [--data PATH]

A persona's line is stamped with the meet of its own witnesses and the stamps of the room's
previous MW_ECHO_REACH_LINES lines (docs/design.md §12). The reach should cover what a persona
repeats. Here, for the demo's script and LoCoMo's conversations (Maharana et al., ACL 2024;
CC BY-NC 4.0; read from ../shared/data/locomo/, never copied here; speaker B plays the
persona), each persona line's *echo distance*: for each distinctive word it says (five
letters or more, in at most three lines of the conversation), how many lines back the human
last said it; the line's distance is the largest. Printed as percentiles.

Then each conversation is played into a store with the stamp trigger at the reach chosen, as
the replay plays it (one private chat, the human's memory on), and the persona lines the echo
rule makes unreadable or narrower than their own witnesses are counted: what it holds back.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import text  # noqa: E402

from memory_worker import app_side  # noqa: E402
from memory_worker.core import settings as settings_mod  # noqa: E402
from memory_worker.demo import FIRST_SPELL, SECOND_SPELL  # noqa: E402
from memory_worker.storage import stamps, store  # noqa: E402

DATA = (
    Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "locomo" / "locomo10.json"
)
WORD = re.compile(r"[a-z]{5,}")
RARE = 3  # a word in at most this many lines of a conversation is distinctive
Turns = list[tuple[bool, str, int]]  # (said by the persona, text, session)


def conversations(n: int, data: Path = DATA) -> dict[str, Turns]:
    """The demo's script and the first `n` LoCoMo conversations, as (persona?, text) turns."""
    out: dict[str, Turns] = {
        "demo": [(isinstance(w, str), s, 1) for w, s in FIRST_SPELL + SECOND_SPELL]
    }
    for conv in json.loads(data.read_text())[:n]:
        c = conv["conversation"]
        keys = sorted(
            (k for k in c if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k.split("_")[1])
        )
        out[conv["sample_id"]] = [
            (t["speaker"] == c["speaker_b"], t["text"], int(k.split("_")[1]))
            for k in keys
            for t in c[k]
        ]
    return out


def echo_distances(turns: Turns) -> list[int]:
    """Per persona line that repeats a distinctive word the human said earlier in the same
    session (what its chat model had in view; an earlier session's comes from its memory,
    whose rows keep their own audiences), how far back."""
    words = [set(WORD.findall(s.lower())) for _, s, _ in turns]
    df = Counter(w for ws in words for w in ws)
    out: list[int] = []
    for i, (persona, _, session) in enumerate(turns):
        if not persona:
            continue
        far = 0
        for w in words[i]:
            if df[w] > RARE:
                continue
            back = next(
                (
                    i - j
                    for j in range(i - 1, -1, -1)
                    if turns[j][2] == session and not turns[j][0] and w in words[j]
                ),
                None,
            )
            far = max(far, back or 0)
        if far:
            out.append(far)
    return out


def held_back(turns: Turns, reach: int) -> tuple[int, int]:
    """(persona lines, those the echo rule makes unreadable or narrower), played into a store
    as the replay plays a conversation."""
    with tempfile.TemporaryDirectory(prefix="mw-echo-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'echo.db'}"
        store.init_db(url)
        eng = store.engine(url)
        with eng.begin() as conn:
            stamps.set_echo_reach(conn, reach)
            app_side.add_user(conn, 1, "Human")
            app_side.add_persona(conn, "b", "Persona")
            app_side.add_room(conn, "dm", "private", ["u:1", "b"])
            for persona, said, _ in turns:
                app_side.say(conn, "dm", "b" if persona else 1, said)
        with eng.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT s.readable, s.heard, s.label FROM line_stamps s "
                    "JOIN lines l ON l.id = s.line_id WHERE l.speaker = 'b'"
                )
            ).all()
        store.dispose_all()
    narrower = [r for r in rows if not r[0] or json.loads(r[2] or "[]") != json.loads(r[1])]
    return len(rows), len(narrower)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=6)
    parser.add_argument("--data", type=Path, default=DATA, help="locomo10.json")
    a = parser.parse_args(argv)
    if not a.data.exists():
        raise SystemExit(f"LoCoMo is not at {a.data} (../shared/data/locomo/locomo10.json)")
    reach = settings_mod.current().echo_reach_lines
    print(
        f"{'conversation':>12} {'lines':>6} {'echoes':>7} {'p50':>4} {'p90':>4} {'p99':>4} "
        f"{'max':>4} {'within reach':>13} {'held back':>10}"
    )
    for name, turns in conversations(a.conversations, a.data).items():
        d = sorted(echo_distances(turns))
        pct = [d[min(len(d) - 1, int(q * len(d)))] if d else 0 for q in (0.5, 0.9, 0.99)]
        within = sum(1 for x in d if x <= reach)
        lines, held = held_back(turns, reach)
        print(
            f"{name:>12} {len(turns):>6} {len(d):>7} {pct[0]:>4} {pct[1]:>4} {pct[2]:>4} "
            f"{max(d, default=0):>4} {within:>6}/{len(d):<6} {held:>4}/{lines:<5}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
