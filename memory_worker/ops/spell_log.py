"""One JSON log line per spell, and the spell metrics: what an operator greps, no memory text.

    {"event": "spell", "key": "warren/dm-dan/3", "persona": "warren", "room": "dm-dan",
     "lines": [1, 3], "candidates": 3, "kept": 2, "decisions": {"ADD": 2}, "model_calls": 3,
     "tokens_in": 812, "tokens_out": 95, "ms": 412, "outcome": "committed", "rows": 2}

Ids, counts and timings only: never a line's text, a candidate's text or a toast.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from typing import Any

from memory_worker.core.rows import Spell
from memory_worker.ops import metrics

log = logging.getLogger("memory_worker.spell")


def spell_line(spell: Spell, outcome: str, rows: int, now: float | None = None) -> dict[str, Any]:
    """The log record of a finished spell (pure: tests read it)."""
    kept = len(spell.candidates)
    decisions = Counter(str(d.get("event")) for d in spell.decisions)
    took = ((now or time.time()) - spell.began) if spell.began else None
    return {
        "event": "spell",
        "key": spell.key,
        "persona": spell.persona,
        "room": spell.room_id,
        "lines": [spell.after_line_id + 1, spell.last_line_id],
        "candidates": kept + sum(spell.dropped.values()),
        "kept": kept,
        "dropped": dict(spell.dropped),
        "decisions": dict(sorted(decisions.items())),
        "model_calls": spell.model_calls,
        "tokens_in": spell.tokens_in,
        "tokens_out": spell.tokens_out,
        "ms": round(took * 1000) if took is not None else None,
        "outcome": outcome,
        "rows": rows,
    }


def finished(spell: Spell, outcome: str, rows: int) -> None:
    """Log the spell's line and count it in the metrics."""
    line = spell_line(spell, outcome, rows)
    log.info(json.dumps(line, separators=(",", ":")))
    metrics.SPELLS.labels(outcome).inc()
    if line["ms"] is not None and outcome == "committed":
        metrics.SPELL_SECONDS.observe(line["ms"] / 1000)
