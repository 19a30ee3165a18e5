"""The audience rule (docs/design.md §4): what a persona may have in its head, here and now.

The whole privacy model is this one predicate, in code, evaluated before any ranking, any
rendering and any model call. Code decides what enters the context; the model only decides how
to use it. Everything after it (ranking, take, render) only drops rows, never adds them.

The rule is pure: it reads plain data (the rows, the room and its members, who is present, each
present human's switches) and touches no database. Every reader takes its audience from
`scope_for` — the block, on-demand recall, the write path's model context — so no path can see
what another may not (docs/design.md §11.1). `Scope` is the same rule reduced
to "which subjects", so the reader can push it into SQL and pay only for rows that can be
visible; `visible_memories` is the rule over rows, and the reader applies it again to every row
before it is rendered.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from memory_worker.core.constants import SUBJECT_SELF, SUBJECT_WORLD, V1_PROVEN_SCOPE
from memory_worker.core.rows import Room, Row, concerns, human_ref


@dataclass(frozen=True)
class Consent:
    """The present humans' switches: account `memory_on` and per-persona mutes (docs/design.md §5).

    A human missing from `memory_on` counts as off: when we do not know, nothing loads.
    """

    memory_on: Mapping[int, bool] = field(default_factory=dict)
    mutes: frozenset[tuple[int, str]] = frozenset()  # (user_id, persona): "this persona forgets me"
    # (user_id, persona): "bring up what I told you privately when I'm in a group" is off
    stays_private: frozenset[tuple[int, str]] = frozenset()

    def allows(self, user_id: int, persona: str) -> bool:
        return bool(self.memory_on.get(user_id, False)) and (user_id, persona) not in self.mutes


@dataclass(frozen=True)
class Members:
    """Who belongs to the room: its human members and its persona members (the app's list)."""

    humans: frozenset[int]
    personas: frozenset[str]


@dataclass(frozen=True)
class Scope:
    """The rule reduced to who: the subjects one persona may see in one room.

    `world` is False only in an incognito room (or for a persona not in it). `humans` are the
    present humans whose rows load, and the persona's own promises and open loops with them
    (`subject = 'self'`, counterpart `u:X`) load only for these humans too. `readers` are
    every human who would hear what the persona says here (the present set, members or not,
    whatever their switches); `allowing` the present members who let this persona remember
    them, before the proven scope narrows `humans`. `follow`: the group scope (the New).
    """

    persona: str
    world: bool
    humans: frozenset[int]
    readers: frozenset[int] = frozenset()
    allowing: frozenset[int] = frozenset()
    follow: bool = False
    guarded: bool = False  # the group scope in a room that is not a private chat
    # With the group scope, in a room that is not a private chat: the present humans whose
    # one-to-one rows stay in their private chats (their switch is off).
    private_only: frozenset[int] = frozenset()
    # With the group scope, in a room that is not a private chat: every human (present or not)
    # who keeps their one-to-one rows with this persona out of groups. A row follows into such
    # a room only when none of those it was formed with or names is one of them.
    keepers: frozenset[int] = frozenset()

    @property
    def human_refs(self) -> tuple[str, ...]:
        """'u:42' refs of `humans`, sorted: what the SQL `IN (...)` lists."""
        return tuple(human_ref(u) for u in sorted(self.humans))

    def admits_named(self, named: Iterable[int]) -> bool:
        """Every human a row names besides whom it concerns must be in this audience too: a
        row about Dan that says Cara is pregnant is Cara's news as much as Dan's."""
        return all(u in self.humans for u in named)

    def admits_private_to(self, private_to: Iterable[int] | None) -> bool:
        """A world row's audience (`private_to`: who witnessed the lines it cites; None: every
        line a dispatch, public) must hold someone here who lets the persona remember them,
        and — in the proven scope — every human who would hear it (docs/design.md
        "Provenance decides who may know"). With the group scope, as a row about a present
        human, one of its audience present and allowing carries it."""
        if private_to is None:
            return True
        held = frozenset(private_to)
        if not self.allowing & held:
            return False
        return self.follow or self.readers <= held

    def follows(self, row: Row) -> bool:
        """May `row` follow into this group (the group scope)? Only when everyone it was formed
        with and everyone it names lets their rows follow (no keeper among them), and — a world
        row — nobody it was formed with has left its audience (a human who deleted a row never
        hears it again, whoever else holds it)."""
        if row.subject == SUBJECT_WORLD and row.private_to is None:
            return True  # the news: everyone's
        who = holder(row)
        formed = {*row.witnessed, *row.named, *(() if who is None else (who,))}
        if formed & self.keepers:
            return False
        if row.subject == SUBJECT_WORLD and row.private_to is not None:
            return set(row.witnessed) <= set(row.private_to)
        return True

    def heard_by_all(self, row: Row) -> bool:
        """Everyone here heard it, and holds it still (a world row: everyone here is in its
        audience): it follows no one, as the proven scope would show a group its own news."""
        held = row.private_to if row.subject == SUBJECT_WORLD else row.witnessed
        return held is not None and self.readers <= set(held)

    def admits(self, row: Row) -> bool:
        """True when `row` may enter this persona's head in this room."""
        if row.persona != self.persona or row.valid_to is not None:
            return False  # another mind's row, or a closed one: never loads
        if not (self.admits_named(row.named) and self.admits_private_to(row.private_to)):
            return False
        if self.private_only and one_to_one(row) and holder(row) in self.private_only:
            return False  # told one-to-one, and its teller keeps that out of groups
        if self.follow and self.guarded and not (self.follows(row) or self.heard_by_all(row)):
            return False
        if row.subject == SUBJECT_WORLD:
            return self.world
        return concerns(row.subject, row.counterpart) in self.humans


def scope_for(
    persona: str,
    present: Iterable[int],
    room: Room,
    consent: Consent,
    *,
    members: Members,
    proven_scope: bool = V1_PROVEN_SCOPE,
) -> Scope:
    """Who this persona may remember here.

    - incognito: nothing at all, not even world facts (a room that neither reads nor writes);
    - a persona that is not a member of the room: nothing (it remembers only where it is);
    - a present human who is not a member (the app and the store disagree) adds nothing about
      them and makes the room not private for everyone else: we fail closed, and the caller
      logs it as the app's error;
    - a present member who has memory off, or has muted this persona, is treated as absent:
      neither rows about them nor the persona's promises to them load;
    - with `proven_scope` (v1), only a private chat with its one human loads anything personal;
      any other room gets world facts only, until the leak exam says otherwise. A "private"
      room that somehow holds two present humans is treated like a group (docs/design.md §4);
    - without it (the group scope, the New), a present human who turned off "bring up what I
      told you privately when I'm in a group" for this persona keeps their one-to-one rows out
      of every room but their private chat.
    """
    present = frozenset(present)
    if room.incognito or persona not in members.personas:
        return Scope(persona, world=False, humans=frozenset(), readers=present)
    strangers = present - members.humans
    allowing = frozenset(u for u in present - strangers if consent.allows(u, persona))
    private = room.is_private_chat() and not strangers and len(present) == 1
    humans = frozenset() if proven_scope and not private else allowing
    keep = frozenset(u for u in allowing if (u, persona) in consent.stays_private)
    return Scope(
        persona,
        world=True,
        humans=humans,
        readers=present,
        allowing=allowing,
        follow=not proven_scope,
        private_only=frozenset() if proven_scope or private else keep,
        guarded=not proven_scope and not private,
        keepers=frozenset(u for u, p in consent.stays_private if p == persona),
    )


def visible_memories(
    persona: str,
    present: Iterable[int],
    room: Room,
    rows: Iterable[Row],
    consent: Consent,
    *,
    members: Members,
    proven_scope: bool = V1_PROVEN_SCOPE,
) -> list[Row]:
    """What this persona may have in its head in THIS room, right now (docs/design.md §4).

    Open rows only; world rows always (except incognito); rows about u:X only when X is present,
    has memory on and has not muted the persona, tagged `confidence` when formed one-to-one
    (`witnessed == [X]`); the persona's own promises and loops with u:X on the same terms — a
    human who muted the persona or switched memory off is absent for this rule, so its promises
    to them do not load either; a row that names a human outside the audience, or a world
    row still private to people outside it, does not load. Rows about anyone else do not exist
    for this room. Returns copies (the caller's rows are not changed), in the order given.
    """
    scope = scope_for(persona, present, room, consent, members=members, proven_scope=proven_scope)
    out: list[Row] = []
    for r in rows:
        if not scope.admits(r):
            continue
        # docs/design.md §4: a row about X witnessed by X alone is tagged `confidence`; a world row
        # is no one's confidence, and a promise is not one, whoever heard it.
        about_someone = r.subject not in (SUBJECT_SELF, SUBJECT_WORLD)
        out.append(replace(r, confidence=about_someone and one_to_one(r)))
    return out


def holder(row: Row) -> int | None:
    """The one human a row formed one-to-one is held by: whom it concerns, or the one human a
    world row stays with."""
    if row.subject == SUBJECT_WORLD:
        held = row.private_to or ()
        return held[0] if len(held) == 1 else None
    return concerns(row.subject, row.counterpart)


def one_to_one(row: Row) -> bool:
    """Formed one-to-one: witnessed by the one human who holds it (`holder`)."""
    who = holder(row)
    return who is not None and set(row.witnessed) == {who}


@dataclass(frozen=True)
class RoomAudience:
    """Everyone a room's memories could reach, built once from what a room open, a recall or a
    spell read, and handed on whole: the scope of each persona and the gate every row passes
    come from this one value, so no two readers can build it differently
    (docs/design.md §11.1)."""

    room: Room
    present: frozenset[int]
    members: Members
    consent: Consent
    proven_scope: bool = V1_PROVEN_SCOPE

    def scope(self, persona: str) -> Scope:
        """Who `persona` may remember here (`scope_for`)."""
        return scope_for(
            persona,
            self.present,
            self.room,
            self.consent,
            members=self.members,
            proven_scope=self.proven_scope,
        )

    def visible(self, persona: str, rows: Iterable[Row]) -> list[Row]:
        """The rows of `rows` that may enter `persona`'s head here (`visible_memories`)."""
        return visible_memories(
            persona,
            self.present,
            self.room,
            rows,
            self.consent,
            members=self.members,
            proven_scope=self.proven_scope,
        )
