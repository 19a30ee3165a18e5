"""Running whole spells in-process (no broker) and reading back what they left: the helpers
the write-path hole tests, the adversarial suite and the property test share."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy import Engine, insert, select

from memory_worker.core import tables as t
from memory_worker.core.rows import Spell
from memory_worker.core.vectors import quantise
from memory_worker.models.hashing import HashingEmbedder
from memory_worker.storage.notices import Notice
from memory_worker.write import steps

EMB = HashingEmbedder()


@dataclass
class SpellRun:
    """What one in-process spell did: its outcome, the spell as committed, the toasts posted."""

    status: str | None
    row_ids: list[int] = field(default_factory=list)
    spell: Spell | None = None
    toasts: int = 0


def mark_told(spell: Spell) -> list[Notice]:
    """The room's waiting toasts (the spell's and any an earlier spell left) marked delivered,
    as the commit task marks them once it has told each on its human's channel — there is no
    channel here. Returns those it found."""
    waiting = steps.place_toasts(spell.persona, spell.room_id)
    steps.mark_delivered(waiting)
    return waiting


def run_spell(persona: str, room_id: str, chat) -> SpellRun:  # type: ignore[no-untyped-def]
    """begin → extract → embed → route → commit, then its toasts marked told, as the chain runs
    them."""
    spell = steps.begin(persona, room_id)
    if spell is None:
        return SpellRun(None)
    spell = steps.run_extract(spell, chat)
    spell = steps.run_embed(spell, HashingEmbedder())
    spell = steps.run_route(spell, chat)
    outcome = steps.run_commit(spell)
    if outcome.status == "stale":
        spell = steps.run_route(spell, chat)
        outcome = steps.run_commit(spell)
    toasts = mark_told(spell)
    return SpellRun(outcome.status, outcome.row_ids, spell, len(toasts))


def drain(persona: str, room_id: str, chat, max_spells: int = 10_000) -> list[SpellRun]:  # type: ignore[no-untyped-def]
    """Spells until the persona's cursor reaches the room's last line (a backlog, window by
    window, as the worker chains them)."""
    runs = []
    for _ in range(max_spells):
        run = run_spell(persona, room_id, chat)
        if run.status is None:
            return runs
        runs.append(run)
    raise AssertionError(f"{persona}/{room_id} not drained after {max_spells} spells")


def plant(db: Engine, subject: str, text: str, counterpart: str | None = None, **kw) -> int:  # type: ignore[no-untyped-def]
    """A row written earlier (in another room), with its embedding, as the commit writes it."""
    values = dict(
        persona="warren",
        subject=subject,
        counterpart=counterpart,
        witnessed="[17]",  # Cara, in her private chat
        room_id="dm-cara",
        kind="promise" if subject == "self" else "fact",
        text=text,
        importance=7,
        evidence="[1]",
        created="2026-08-01T10:00:00+00:00",
        embedding=quantise(EMB.embed([text])[0]),
    )
    values.update(kw)
    with db.begin() as conn:
        return int(conn.execute(insert(t.persona_memory).values(**values)).inserted_primary_key[0])


def rows(db: Engine) -> list[dict]:
    with db.connect() as c:
        q = select(t.persona_memory).order_by(t.persona_memory.c.id)
        return [dict(r) for r in c.execute(q).mappings()]


def notices(db: Engine) -> list[dict]:
    with db.connect() as c:
        return [dict(r) for r in c.execute(select(t.notices).order_by(t.notices.c.id)).mappings()]


def spell_records(db: Engine) -> list[dict]:
    with db.connect() as c:
        q = select(t.spells).order_by(t.spells.c.last_line_id)
        return [dict(r) for r in c.execute(q).mappings()]


def speakers(db: Engine) -> dict[int, str]:
    with db.connect() as c:
        return {int(i): s for i, s in c.execute(select(t.lines.c.id, t.lines.c.speaker))}


def prompts(chat, purpose: str) -> list[str]:  # type: ignore[no-untyped-def]
    """The exact prompts a ScriptedChat received for one purpose ('extract' or 'route')."""
    return [p for what, _, p in chat.calls if what == purpose]


def evidence(row: dict) -> list[int]:
    return [int(i) for i in json.loads(row["evidence"])]


# --- the write path's rules, read back from the store (the adversarial and property tests) -----


def assert_write_rules(db: Engine, cap: int = 12, planted: Iterable[int] = ()) -> None:
    """Every stored row and toast obeys the write path's rules (docs/design.md §10, §11),
    checked independently of the guards:

    - a row about u:X: X was a member of the room; every cited line is X's or a persona's, one
      at least is X's;
    - a `self` row: its counterpart was a member; every cited line is the persona's or theirs;
    - a `world` row: names no human (no `u:` id, no display name the store knows), cites lines
      of its room; public only when every line it cites is a dispatch, else held by members of
      its room (its witnesses), on each of their pages (memory_audience == private_to);
    - one sentence of at most 200 chars, importance 3..10;
    - at most `cap` rows per persona per cap key per day (self rows count to their counterpart);
    - a toast lists only rows that concern its user.

    `planted` rows (written by the test, not the write path) are not checked.
    """
    import re

    from memory_worker.write.guards import is_one_sentence

    with db.connect() as c:
        lines = {
            int(i): (r, s)
            for i, r, s in c.execute(select(t.lines.c.id, t.lines.c.room_id, t.lines.c.speaker))
        }
        members = {}
        for room_id, member in c.execute(select(t.room_members.c.room_id, t.room_members.c.member)):
            members.setdefault(room_id, set()).add(member)
        names = [str(n) for n in c.execute(select(t.users.c.name)).scalars()]
        audience: dict[int, set[int]] = {}
        q = select(t.memory_audience.c.row_id, t.memory_audience.c.user_id)
        for row_id, uid in c.execute(q):
            audience.setdefault(int(row_id), set()).add(int(uid))
        toasts = notices(db)
    skip = set(planted)
    stored = [r for r in rows(db) if r["id"] not in skip]
    per_cap: dict[tuple[str, str, str], int] = {}
    for r in stored:
        cited = evidence(r)
        assert cited, r["id"]
        assert all(i in lines and lines[i][0] == r["room_id"] for i in cited), r["id"]
        speakers = [lines[i][1] for i in cited]
        subject, cp = r["subject"], r["counterpart"]
        room_members = members.get(r["room_id"], set())
        assert len(r["text"]) <= 200 and is_one_sentence(r["text"]), r["id"]
        assert 3 <= r["importance"] <= 10, r["id"]
        if subject == "world":
            assert not re.search(r"u\s*:\s*\d", r["text"], re.I), r["text"]
            words = set(re.findall(r"[^\W_]+", r["text"].lower()))
            for n in names:
                assert not ({w for w in re.findall(r"[^\W_]+", n.lower()) if len(w) > 1} & words), (
                    r["text"]
                )
            held = None if r["private_to"] is None else set(json.loads(r["private_to"]))
            if not all(s.startswith("dispatch:") for s in speakers):
                assert held, r["id"]  # a line someone said: never public, never nobody's
                assert {f"u:{u}" for u in held} <= room_members, r["id"]
            assert audience.get(r["id"], set()) == (held or set()), r["id"]
            key = "world"
        elif subject == "self":
            assert cp in room_members and set(speakers) <= {r["persona"], cp}, r["id"]
            key = cp
        else:
            assert subject.startswith("u:") and subject in room_members, r["id"]
            assert all(s == subject or not s.startswith("u:") for s in speakers), r["id"]
            assert subject in speakers, r["id"]
            key = subject
        day = (r["persona"], key, r["created"][:10])
        per_cap[day] = per_cap.get(day, 0) + 1
    assert max(per_cap.values(), default=0) <= cap, per_cap
    by_id = {r["id"]: r for r in stored}
    for n in toasts:
        me = f"u:{n['user_id']}"
        for rid in json.loads(n["row_ids"]):
            r = by_id.get(rid)
            if r is None:
                continue
            concerns = r["subject"] == me or (r["subject"] == "self" and r["counterpart"] == me)
            concerns = concerns or (
                r["subject"] == "world" and n["user_id"] in audience.get(rid, set())
            )
            assert concerns, (n["id"], rid)
