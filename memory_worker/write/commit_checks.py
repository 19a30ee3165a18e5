"""What a commit checks, read in one place: the facts a spell's plan is made of.

The route step makes the spell's plan from the facts it read before its call (`route_facts`,
`plan.make`); the commit,
under the persona's writer lock, reads the same facts again here and only here (`check`) and
makes the plan again with the handed one as its bound (`plan.make`): what the handed plan
says is an upper bound, never trusted. The facts:

- the label of the spell's lines as the store stamped them, and who heard them
  (`window.stamped_spell`), never the message's;
- the audiences now of every row its calls were shown (`spell_views`; a row deleted since:
  nobody), met with the label;
- who still lets the persona remember them (`users.eligible_humans`);
- the rows written today (the caps);
- the open rows of the router's view its steps name, of those only the ones the store noted as
  shown to its router (`spell_views.router_saw`; `view.shown`: None when the view moved: stale,
  route again);
- the humans its texts name, and the open copies of its sentences in every audience.

A spell that carries candidates and no plan (routed by a version before this one, or a
message that lost it) is stale: routed again, it gets one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Connection

from memory_worker.core import labels
from memory_worker.core.rows import Candidate, Decision, Room, Spell
from memory_worker.storage import memories, rooms, spell_views, spells, users
from memory_worker.write import copies, guards, view, window
from memory_worker.write.plan import WRITES, Facts, Plan, make


@dataclass(frozen=True)
class Checked:
    """The plan as it may be applied, and the spell's room (its toasts need it)."""

    plan: Plan
    room: Room


def route_facts(
    conn: Connection, spell: Spell, rows: Sequence[memories.OpenRow], today: str
) -> Facts:
    """The facts the route step makes its plan from (`plan.make`, once the router answered):
    read before its call, after its view is noted, so nothing reads the store once the call
    is out; `rows`: the open rows it read (the router's view)."""
    stamped = window.stamped_spell(conn, spell)
    candidates = [Candidate.from_json(c) for c in spell.candidates]
    read_through = spells.cursor(conn, spell.persona, spell.room_id)
    shown = {r.id: r for r in rows}
    # No names: the commit reads whom each text names itself, under the lock (a handed list is
    # never trusted to be whole), so reading them here too was half the route step's CPU.
    return _facts(conn, stamped, candidates, [], shown, read_through, today)


def check(conn: Connection, spell: Spell, read_through: int, today: str) -> Checked | None:
    """The spell's plan as the facts now let it be applied (never wider than the plan it
    carries), or None: stale, route again (the router's view moved, or it carries no plan)."""
    if spell.plan is None and spell.candidates:
        return None
    handed = Plan.from_json(spell.plan or {})
    stamped = window.stamped_spell(conn, spell)
    room = rooms.load_room(conn, spell.room_id)
    candidates = [Candidate.from_json(c) for c in spell.candidates]
    decisions = [Decision(s.candidate, s.event, s.old_row_id) for s in handed.steps]
    # A row it may change: one the store noted as shown to its router, whatever the plan cites.
    named_rows = {d.old_row_id for d in decisions if d.old_row_id is not None}
    cited = sorted(named_rows & spell_views.router_saw(conn, stamped)) if named_rows else []
    scope = window.spell_scope(stamped, room)
    shown = view.shown(conn, stamped, scope, {c.subject for c in candidates}, cited)
    if shown is None:
        return None
    texts = [candidates[d.candidate].text for d in decisions if d.event in WRITES]
    facts = _facts(conn, stamped, candidates, texts, shown, read_through, today)
    return Checked(make(facts, decisions, bound=handed.steps), room)


def _facts(
    conn: Connection,
    stamped: Spell,
    candidates: list[Candidate],
    writing: list[str],
    shown: dict[int, memories.OpenRow],
    read_through: int,
    today: str,
) -> Facts:
    """The facts of the moment (see the module's docstring); `stamped`: the spell with its
    label and witnesses as the store stamped its lines; `writing`: the texts it may write (the
    humans they name are read)."""
    label = labels.from_json(stamped.label)
    # Who the new rows may reach: at most the label of the calls that wrote them, met with
    # the audiences now of the rows they were shown, and of those the ones who still let the
    # persona remember them. Never from what the model wrote or cited.
    seen = labels.meet(label, _revoked(conn, stamped))
    allowing = frozenset(users.eligible_humans(conn, stamped.persona, stamped.present))
    people: dict[int, str] = {}
    if writing:
        people = users.user_names(conn, sorted(set(stamped.witnessed)))
        people |= users.people_named_in(conn, writing)
    written = memories.written_since(conn, stamped.persona, today, stamped.present)
    return Facts(
        candidates=candidates,
        label=label,
        reach=None if seen is None else seen & allowing,
        witnessed=frozenset(stamped.witnessed),
        read_through=read_through,
        shown=shown,
        already_today=guards.counts_by_cap(written),
        people=people,
        same=copies.Copies.load(conn, stamped.persona, candidates),
    )


def _revoked(conn: Connection, spell: Spell) -> labels.Label:
    """The meet of the audiences, as they are now, of every row the spell's calls were shown
    (`spell_views`, noted by the steps before each call): a row deleted since gives nobody (no
    one may learn from this spell what it saw), one narrowed its narrower audience. Nothing
    noted: nobody."""
    audiences = spell_views.audiences(conn, spell)
    if audiences is None:
        return labels.NOBODY
    return labels.meet_all(labels.row_audience(*a) for a in audiences)
