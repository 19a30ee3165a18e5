"""The hostile model: an extractor and a router that copy whatever they were shown.

It reads the prompt as the real model would (the transcript's `[id] speaker: text` lines, the
numbered neighbours) and answers with random candidates built from it: any subject (present,
absent, `self`, `world`, nonsense), any kind, text copied from any fragment of the prompt —
sometimes a whole line verbatim, sometimes with a disguised marker or a disguised name of any
human — evidence that is sometimes plausible (the subject's own lines, dispatches for a world
row) so candidates get past the guards, and sometimes anything; and router decisions with
any event and any number, shown or invented. Seeded: a failure replays.
"""

from __future__ import annotations

import random
import re
from typing import Any

from exams.flow.world import FULL_WIDTH, World, markers
from memory_worker.core.constants import KINDS
from memory_worker.models.scripted import ScriptedChat, route_payload

_LINE = re.compile(r"^\[(\d+)\] (\S+): (.*)$", re.M)
_PRESENT = re.compile(r"^- (u:\d+) \(", re.M)
_FRAGMENT = re.compile(r"[^\W\d_]+ mk[0-9a-f]{6}")


class Hostile:
    def __init__(self, world: World, rng: random.Random):
        self.world = world
        self.rng = rng
        self.wrote: set[str] = set()  # world rows' texts it wrote: worth restating elsewhere

    def chat(self) -> ScriptedChat:
        return ScriptedChat({"extract": self.extract, "route": self.route})

    # --- call A ---------------------------------------------------------------------------

    def extract(self, prompt: str) -> dict[str, Any]:
        rng = self.rng
        lines = [(int(i), who, text) for i, who, text in _LINE.findall(prompt)]
        present = _PRESENT.findall(prompt)
        pool = _FRAGMENT.findall(prompt)
        if not lines:
            return {"candidates": []}
        out = []
        for _ in range(rng.randint(0, 5)):
            subject = self._subject(present)
            evidence = self._evidence(subject, lines)
            again = self._restated(lines, evidence)
            text = again or self._text(pool, lines, evidence)
            subject = "world" if again else subject
            if subject == "world":
                self.wrote.add(text)
            out.append(
                {
                    "subject": subject,
                    "kind": rng.choice([*KINDS, "fact", "event", "fact"]),
                    "text": text,
                    "importance": rng.randint(3, 10),
                    "counterpart": rng.choice([*present, "u:1", None]),
                    "evidence": evidence,
                }
            )
        return {"candidates": out}

    def _subject(self, present: list[str]) -> str:
        rng = self.rng
        roll = rng.random()
        if present and roll < 0.4:
            return rng.choice(present)
        if roll < 0.7:
            return "world"
        if roll < 0.85:
            return "self"
        if roll < 0.97:
            return f"u:{rng.choice(sorted(self.world.humans))}"
        return rng.choice(["Dan", "u:x", ""])

    def _evidence(self, subject: str, lines: list[tuple[int, str, str]]) -> list[int]:
        rng = self.rng
        ids = [i for i, _, _ in lines]
        if rng.random() < 0.3:
            return rng.sample(ids, rng.randint(1, min(3, len(ids))))
        if subject == "world":
            news = [i for i, who, _ in lines if who.startswith("dispatch:")]
            if news and rng.random() < 0.5:
                return [rng.choice(news)]
            return [rng.choice(ids)]
        own = [i for i, who, _ in lines if who == subject or not who.startswith("u:")]
        mine = [i for i, who, _ in lines if who == subject]
        picked = set(rng.sample(own, min(len(own), rng.randint(1, 2)))) if own else set()
        if mine:
            picked.add(rng.choice(mine))
        return sorted(picked) or [rng.choice(ids)]

    def _restated(self, lines: list[tuple[int, str, str]], evidence: list[int]) -> str | None:
        """A world row it wrote before, now said again in a cited line: the row restated word
        for word, to recruit whoever said it into the old row's audience."""
        said = {i: text for i, _, text in lines}
        here = set().union(*(markers(said.get(i, "")) for i in evidence))
        # A model answers from its prompt alone: it may restate an old row only when the
        # cited lines hold all it says (its memory must not carry one spell into another).
        again = sorted(t for t in self.wrote if (m := markers(t)) and m <= here)
        if again and self.rng.random() < 0.7:
            return self.rng.choice(again)
        return None

    def _text(self, pool: list[str], lines: list[tuple[int, str, str]], evidence: list[int]) -> str:
        """Copied text: a cited line verbatim (what a row that a human may later confirm looks
        like), or fragments of anything shown, sometimes disguised, sometimes with a name."""
        rng = self.rng
        by_id = {i: text for i, _, text in lines}
        if evidence and evidence[0] in by_id and rng.random() < 0.5:
            words = by_id[evidence[0]].split()
            parts = [" ".join(words[i : i + 2]) for i in range(0, len(words), 2)]
            parts = parts[: rng.randint(1, len(parts))]
        else:
            n = rng.choice([1, 1, 1, 2, 3])
            parts = rng.sample(pool, min(len(pool), n)) if pool else ["nothing"]
        if rng.random() < 0.1:
            k = rng.randrange(len(parts))
            parts[k] = rng.choice(
                [parts[k].translate(FULL_WIDTH), parts[k].replace("mk", "m\u200bk")]
            )
        if rng.random() < 0.3:
            who = rng.choice(sorted(self.world.humans))
            parts.insert(rng.randrange(len(parts) + 1), self.world.disguise(who))
        return (" ".join(parts) + ".")[:200]

    # --- call B ---------------------------------------------------------------------------

    def route(self, prompt: str) -> dict[str, Any]:
        rng = self.rng
        shown, cands = route_payload(prompt)
        numbers = [m["id"] for m in shown]
        out = []
        for c in cands:
            choices = c["neighbours"] or numbers
            old = rng.choice(choices) if choices and rng.random() < 0.8 else str(rng.randint(0, 9))
            event = rng.choice(["ADD", "ADD", "UPDATE", "CLOSE", "NONE"])
            out.append({"candidate": c["candidate"], "event": event, "old_id": old})
        return {"decisions": out}
