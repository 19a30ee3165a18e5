"""Render (docs/design.md §3 step 4): the block a persona gets in its system prompt. Pure.

Letta's always-in block with a meter (`chars_current / chars_limit`), one line per memory with
optional tags, each human's own note verbatim under their name, and a tail that says what the
persona does with a memory — knows it, doesn't announce it — never an order to recite.

The text depends only on its inputs (no clock, no ids of the run), so the same store at the
same time renders the same bytes and the app's cached prompt prefix survives.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from memory_worker.core import settings as settings_mod
from memory_worker.core.constants import BLOCK_CHARS_LIMIT
from memory_worker.core.rows import Row, human_ref

STATE_KINDS = ("fact", "preference", "relationship")  # ours: kinds that hold "since" a date
# The tag on a row about someone that they told the persona alone (`Row.confidence`): words a
# human reads on the page and the persona reads in its block, not a score.
ONE_TO_ONE_TAG = "told one-to-one"


@dataclass(frozen=True)
class Human:
    """A present human as the block names them: 'Dan (u:42)', with their note
    (docs/design.md §5)."""

    id: int
    name: str
    note: str | None = None

    @property
    def label(self) -> str:
        return f"{self.name} ({human_ref(self.id)})"


@dataclass(frozen=True)
class Section:
    """One human's rows (and note), or the world's rows when `human` is None."""

    human: Human | None
    rows: Sequence[Row]


@dataclass(frozen=True)
class Block:
    """One persona's memory block for one room.

    `chars_current` counts the memory sentences the char cap limits (notes and the frame are
    outside it); it may pass `chars_limit` only by open loops and promises, which always ride.
    `row_ids_by_human` is keyed 'u:42' (the human a row is about, or a promise is to) and 'world'.
    `touched` says whether this read promised its touch (`last_recalled`, `recall_count`):
    the reader applies it in the background; `reader.flush_touches()` waits for it.
    """

    persona: str
    text: str
    chars_current: int
    chars_limit: int
    row_ids: tuple[int, ...]
    row_ids_by_human: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    touched: bool = False

    @classmethod
    def empty(cls, persona: str, chars_limit: int = BLOCK_CHARS_LIMIT) -> Block:
        """Nothing this persona may recall here (incognito, or nothing held)."""
        return cls(persona=persona, text="", chars_current=0, chars_limit=chars_limit, row_ids=())


def day(stamp: str) -> str:
    """'2026-07' stays; '2026-11-03T10:00:00+00:00' becomes '2026-11-03'."""
    return stamp[:10]


def span(valid_from: str | None, valid_to: str | None) -> str | None:
    """When a memory held, the one way every view writes it: '2026-07 → 2026-08-18' for a
    closed arc ('until 2026-08-18' without a start), 'since 2026-07' for an open one with a
    start, None when nothing is known. The block, the manage page and the demo all use it."""
    if valid_to is not None:
        return f"{day(valid_from)} → {day(valid_to)}" if valid_from else f"until {day(valid_to)}"
    return f"since {day(valid_from)}" if valid_from else None


def meter(rows: Iterable[Row]) -> int:
    """The block's meter: the characters of the open rows' sentences (notes and the frame are
    outside it). The one count the block's head, the CLI and the page all show."""
    return sum(len(r.text) for r in rows if r.valid_to is None)


def tags(row: Row) -> list[str]:
    """The optional tags after a line: told one-to-one, open loop, and when it held."""
    out: list[str] = []
    if row.confidence:
        out.append(ONE_TO_ONE_TAG)
    if row.kind == "open_loop":
        out.append("open loop")
    held = span(row.valid_from, row.valid_to)
    if held and (row.valid_to is not None or row.kind in STATE_KINDS):
        out.append(held)
    return out


def render_line(row: Row) -> str:
    """'- u:42 owns a flat in Xuhui. (told one-to-one · since 2026-07)' — also the page's line."""
    t = tags(row)
    return f"- {row.text}" + (f" ({' · '.join(t)})" if t else "")


TAILS = ("plain", "discreet")  # the tail rule's variants the leak exam weighs (settings.block_tail)


def tail(persona_name: str, *, any_confidence: bool, variant: str = "plain") -> str:
    """What the persona does with what it remembers: describe, never order a recital. The
    "discreet" variant adds the stronger clause the leak exam may choose to ship."""
    lines = [
        f"{persona_name} knows these things the way a friend does: they colour what "
        f"{persona_name} notices, asks and follows up on, and stay unspoken unless the talk "
        "comes to them. Open loops and promises are what a friend comes back to when the "
        "moment fits. Nothing here is announced, listed, or traced back to where it was learned."
    ]
    if any_confidence:
        lines.append(
            f"A line marked {ONE_TO_ONE_TAG} stays between {persona_name} and that person."
        )
    if variant == "discreet":
        lines.append(
            f"What one person told {persona_name} alone is theirs to bring up, never "
            f"{persona_name}'s: in company, {persona_name} waits for them to raise it."
        )
    return " ".join(lines)


def render(
    persona: str,
    persona_name: str,
    sections: Sequence[Section],
    *,
    chars_limit: int = BLOCK_CHARS_LIMIT,
    tail_variant: str | None = None,
) -> Block:
    """The block text and its meter. Sections render in the order given; empty ones vanish.
    `tail_variant`: the tail rule's wording (default: the one in force, `settings.block_tail`,
    which a leak exam verdict names)."""
    body: list[str] = []
    row_ids: list[int] = []
    by_human: dict[str, tuple[int, ...]] = {}
    chars = 0
    any_confidence = False
    for s in sections:
        note = (s.human.note or "").strip() if s.human else ""
        if not s.rows and not note:
            continue
        body.append(s.human.label if s.human else "The world")
        if s.human and note:
            body.append(f"{s.human.name}'s own note, in their words: {s.human.note}")
        for r in s.rows:
            body.append(render_line(r))
            any_confidence = any_confidence or r.confidence
        chars += meter(s.rows)
        ids = tuple(r.id for r in s.rows)
        row_ids.extend(ids)
        if ids:
            by_human["world" if s.human is None else human_ref(s.human.id)] = ids
        body.append("")
    if not body:
        return Block.empty(persona, chars_limit)
    head = f"{persona_name}'s memory · {chars}/{chars_limit} chars"
    variant = tail_variant or settings_mod.current().block_tail
    rule = tail(persona_name, any_confidence=any_confidence, variant=variant)
    text = "\n".join([head, "", *body, rule])
    return Block(
        persona=persona,
        text=text,
        chars_current=chars,
        chars_limit=chars_limit,
        row_ids=tuple(row_ids),
        row_ids_by_human=by_human,
    )
