"""The late-spell scene (docs/design.md §10.3): Dan keeps bees, says one more thing, then no
longer keeps bees. A model that reads the transcript as a careful extractor would, for the stub
or in-process: each "keep bees" line becomes a candidate citing that line."""

from __future__ import annotations

import re

from sqlalchemy import Engine

from memory_worker import app_side
from memory_worker.models.scripted import candidate, transcript_ids
from tests.scenes import DAN

KEEPS = "I keep bees on the roof."
MORE = "Anyway, the weather is nice."
STOPPED = "I no longer keep bees, the hive left."
NEWS = "I started a pottery class."

FACTS = {
    KEEPS: "u:42 keeps bees on the roof.",
    STOPPED: "u:42 no longer keeps bees.",
    NEWS: "u:42 started a pottery class.",
}


def say(db: Engine, text: str, room: str = "dm-dan") -> int:
    with db.begin() as conn:
        return app_side.say(conn, room, DAN, text)


def extract(prompt: str) -> dict:
    """Candidates for every line in the transcript that states a fact about Dan."""
    found = []
    for line_id in transcript_ids(prompt):
        said = re.search(rf"^\[{line_id}\] \S+: (.*)$", prompt, flags=re.M)
        text = said.group(1).strip() if said else ""
        for line, fact in FACTS.items():
            if line in text:
                found.append(candidate("u:42", "fact", fact, 6, [line_id]))
    return {"candidates": found}
