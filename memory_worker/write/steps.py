"""Each step of the chain as one function over a Spell: load what it needs, call the pure
step, return the next Spell. No Celery here — `memory_worker.tasks` adds queues and retries,
and tests run these functions directly.

    begin → extract → embed → route → commit (which writes the toasts; the commit task tells
    them, `place_toasts` … `mark_delivered`, and the sweep finds those left, `waiting_toasts`)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from memory_worker.core import clock
from memory_worker.core.errors import EmbedderMismatch, PromptTooLarge
from memory_worker.core.model_interfaces import ChatModel, Embedder
from memory_worker.core.rows import Candidate, Spell
from memory_worker.storage import embedder as store_embedder
from memory_worker.storage import notices, rooms, spell_views, store, users
from memory_worker.storage.spell_context import spell_context
from memory_worker.write import commit, commit_checks, embed, extract, plan, route, view, window
from memory_worker.write.ask import ask_json

log = logging.getLogger(__name__)


def begin(persona: str, room_id: str, members: Sequence[int] = ()) -> Spell | None:
    """The spell for a persona in a room now, or None when it has no new lines (`members`:
    the room's humans as the caller last saw them, `window.begin_spell`)."""
    with store.engine().connect() as conn:
        spell = window.begin_spell(conn, persona, room_id, members)
    if spell is not None:
        spell.began = time.time()
    return spell


def run_extract(spell: Spell, model: ChatModel) -> Spell:
    """Model call A, then every guard. Re-checks the switches: they may have flipped since."""
    if spell.done:
        return spell
    with store.engine().connect() as conn:
        ctx = spell_context(conn, spell.persona, spell.room_id, spell.witnessed)
        present = ctx.eligible(spell.witnessed) if ctx is not None else []
        spell.present = [u for u in spell.present if u in present]
        if ctx is None or ctx.room.incognito or not spell.present:
            spell.skipped = "the room or its people no longer allow memory"
            return spell
        room, persona_name = ctx.room, ctx.persona_name
        lines = window.load_slice(conn, spell)
        if not lines:
            spell.skipped = "no line said while anyone let this persona remember"
            return spell
        names = {u: ctx.names[u] for u in spell.present if u in ctx.names}
        room_people = {u: ctx.names[u] for u in spell.witnessed if u in ctx.names}
        known_rows = extract.known_rows(conn, window.spell_scope(spell, room))
        already = extract.rows_today(conn, spell.persona, clock.today(), spell.present)
    with store.transaction() as conn:  # what the call is shown, before it is (`spell_views`)
        spell_views.note(conn, spell, [i for i, _ in known_rows], first=True)
    known = [text for _, text in known_rows]
    while True:
        system, prompt = extract.build_prompt(
            persona_name, room, lines, names, known, clock.today()
        )
        try:
            result = ask_json(model, system, prompt, extract.ExtractAnswer, "extract")
            break
        except PromptTooLarge:
            if len(lines) == 1:  # even cut, one line is too much: pass it, never get stuck
                spell.skipped = "one line too large for the model"
                return spell
            lines = lines[: len(lines) // 2]  # the model said too large: the older half first
            spell.last_line_id = lines[-1].id
            log.info("spell %s: window too large for the model; split", spell.key)
    world_texts = [c.text for c in result.parsed.candidates if c.subject.strip() == "world"]
    with store.engine().connect() as conn:
        people = room_people | users.people_named_in(conn, world_texts)
    kept, rejected = extract.guard(
        result.parsed,
        persona=spell.persona,
        present=spell.present,
        lines=lines,
        already_today=already,
        people=people,
    )
    for r in rejected:
        spell.dropped[r.code] = spell.dropped.get(r.code, 0) + 1
    if rejected:
        log.info("spell %s: dropped %s", spell.key, dict(sorted(spell.dropped.items())))
    spell.candidates = [c.to_json() for c in kept]
    spell.tokens_in += result.usage.tokens_in
    spell.tokens_out += result.usage.tokens_out
    spell.model_calls += result.calls
    return spell


def run_embed(spell: Spell, embedder: Embedder) -> Spell:
    if spell.done or not spell.candidates:
        return spell
    cands = [Candidate.from_json(c) for c in spell.candidates]
    try:
        embed.require_store_embedder(embedder)
    except EmbedderMismatch as e:
        spell.parked = str(e)  # no retry fixes it: an operator switches back or re-embeds
        return spell
    with store.engine().connect() as conn:
        names = users.user_names(conn, sorted(embed.humans_named(c.text for c in cands)))
    spell.candidates = [c.to_json() for c in embed.embed_candidates(embedder, cands, names)]
    spell.model_calls += 1  # one batched call
    return spell


def run_route(spell: Spell, model: ChatModel) -> Spell:
    """Model call B over every candidate of the spell at once, with numbered neighbours; then
    the plan its decisions make (`plan.make`) over the facts read before the call
    (`commit_checks.route_facts`: nothing reads the store once it is out), handed on to the
    commit."""
    if spell.done or not spell.candidates:
        return spell
    cands = [Candidate.from_json(c) for c in spell.candidates]
    with store.engine().connect() as conn:
        scope = window.spell_scope(spell, rooms.load_room(conn, spell.room_id))
        rows, as_of = view.read(conn, scope, {c.subject for c in cands})
        persona_name = users.persona_name(conn, spell.persona)
        vectors_of = store_embedder.identity(conn)  # the writer embedded the candidates
    floor = route.neighbour_floor(vectors_of.writer[0] if vectors_of else None)
    per_candidate = route.neighbours(cands, rows, floor)
    with store.transaction() as conn:  # what the call is shown, before it is (`spell_views`)
        spell_views.note(conn, spell, [i for ids in per_candidate for i in ids], router=True)
    with store.engine().connect() as conn:  # for its plan; read outside the write transaction
        facts = commit_checks.route_facts(conn, spell, rows, clock.today())
    numbers = route.number(per_candidate)
    system, prompt = route.build_prompt(persona_name, cands, per_candidate, numbers, rows)
    result = ask_json(model, system, prompt, route.RouteAnswer, "route")
    decisions, dropped = route.resolve(result.parsed, cands, per_candidate, numbers)
    spell.dropped.pop("route", None)  # a re-route counts afresh
    if dropped:
        spell.dropped["route"] = dropped
        log.info("spell %s: %d candidates without a usable decision", spell.key, dropped)
    spell.decisions = [d.to_json() for d in decisions]
    spell.seen_open_rows = route.fingerprint(rows)
    spell.seen_as_of = as_of.token()
    spell.plan = plan.make(facts, decisions).to_json()  # what the commit checks, then applies
    spell.tokens_in += result.usage.tokens_in
    spell.tokens_out += result.usage.tokens_out
    spell.model_calls += result.calls
    return spell


def run_commit(spell: Spell) -> commit.Outcome:
    """One transaction under the persona's writer lock. 'stale' means: route again."""
    with store.writer(spell.persona) as conn:
        return commit.commit_spell(conn, spell, now=clock.now(), today=clock.today())


def has_lines_after(spell: Spell) -> bool:
    """True when the room has lines after the spell's last: a backlog's next window, or lines
    said while it ran (their quiet event found the claim held). One indexed read, so a commit
    with nothing after it claims and begins nothing."""
    with store.engine().connect() as conn:
        return rooms.last_line_id(conn, spell.room_id) > spell.last_line_id


def pending_toasts(spell_key: str) -> list[notices.Notice]:
    """The spell's toasts its commit wrote and nobody delivered yet."""
    with store.engine().connect() as conn:
        return notices.undelivered(conn, spell_key)


def place_toasts(persona: str, room_id: str) -> list[notices.Notice]:
    """The persona's toasts in the room that nobody delivered yet: a commit's own, and any an
    earlier spell of the room left (its worker or broker died before it delivered them)."""
    with store.engine().connect() as conn:
        return notices.undelivered_at(conn, persona, room_id)


def mark_delivered(delivered: list[notices.Notice]) -> None:
    with store.transaction() as conn:
        notices.mark_delivered(conn, [n.id for n in delivered])


def waiting_toasts(written_before: str) -> list[str]:
    """Keys of spells with a toast written before then and still undelivered (the sweep)."""
    with store.engine().connect() as conn:
        return notices.waiting_spells(conn, written_before)
