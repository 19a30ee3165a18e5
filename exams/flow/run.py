"""The flow exam: a hostile random model against the whole write path; then every output read.

README.md beside this file says what it proves. In short: random worlds (exams/flow/world.py)
where every line carries unique markers; spells run through the real write path (extract →
embed → route → commit, then its toasts delivered) on a real SQLite store, with the hostile model
(exams/flow/hostile.py) answering both calls; then every room is opened for every persona
(block cold and warm, recall), and every human's page, evidence and rail are read. A marker
that reaches a human who never heard a line holding it, or a model prompt of a spell some of
whose humans never did, is a flow; so is a row naming a human shown where they are absent.

    .venv/bin/python -m exams.flow.run [--spells 10000] [--seed 1] [--self-test]

Exit status 1 when a flow is found (or, with --self-test, when a removed guard goes unseen).
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import re
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from unittest import mock

from sqlalchemy import func, select
from sqlalchemy import text as sql
from sqlalchemy.engine import Connection

from exams.flow import postgres
from exams.flow.hostile import Hostile
from exams.flow.world import NAMES, PERSONAS, Human, Room, World, markers, oracle_fold
from memory_worker import app_side, controls, reader
from memory_worker.core import settings as settings_mod
from memory_worker.core import tables as t
from memory_worker.core.audience import Scope
from memory_worker.core.rows import Spell
from memory_worker.models.hashing import HashingEmbedder
from memory_worker.storage import stamps, store, users
from memory_worker.web import page_model
from memory_worker.write import steps

EMBEDDER = HashingEmbedder()
SPELLS_PER_WORLD = 40
CHECK_EVERY = 10  # spells between two full reads of every output
_TRANSCRIPT = re.compile(r"^\[(\d+)\] ", re.M)


@dataclass(frozen=True)
class Flow:
    """Something reached someone it must not have."""

    where: str
    human: int
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what} reached u:{self.human}"


@dataclass
class Tally:
    worlds: int = 0
    spells: int = 0  # spells begun (a model was asked in `asked` of them)
    asked: int = 0
    rows: int = 0
    violations: int = 0  # rows wider than their call's label, lines shown against their time
    concurrent: int = 0  # switches in a transaction open while lines were stored (PostgreSQL)
    flows: list[Flow] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)  # the worlds' seeds: a flow's world replays


# --- one world ----------------------------------------------------------------------------


def build(world: World) -> None:
    """Humans, personas and rooms, written through `app_side` as the app writes them."""
    rng = world.rng
    ids = rng.sample(range(11, 60), rng.randint(4, 6))
    for uid, name in zip(ids, rng.sample(NAMES, len(ids)), strict=False):
        world.humans[uid] = Human(uid, name, memory_on=rng.random() > 0.15)
        if rng.random() < 0.1:
            world.humans[uid].mutes.add(rng.choice(PERSONAS))
    rooms: list[Room] = []
    for uid in ids:
        for persona in PERSONAS:
            if persona == "warren" or rng.random() < 0.5:
                rooms.append(Room(f"dm-{persona}-{uid}", "private", {uid: 0}, [persona]))
    for g in range(rng.randint(2, 4)):
        members = rng.sample(ids, rng.randint(2, min(4, len(ids))))
        personas = rng.sample(PERSONAS, rng.randint(1, 2))
        rooms.append(Room(f"g{g}", "group", dict.fromkeys(members, 0), personas))
    odd = rng.sample(ids, 2)
    rooms.append(Room("incognito", "group", dict.fromkeys(odd, 0), ["warren"], incognito=True))
    rooms.append(Room("kit", "group", dict.fromkeys(odd, 0), ["warren"], kit=True))
    with store.transaction() as conn:
        for h in world.humans.values():
            users.add_user(conn, h.id, h.name, memory_on=h.memory_on)
            for persona in sorted(h.mutes):
                users.add_mute(conn, h.id, persona)
        for persona in PERSONAS:
            app_side.add_persona(conn, persona, persona.capitalize())
        for room in rooms:
            refs = [f"u:{u}" for u in room.humans] + room.personas
            app_side.add_room(
                conn, room.id, room.kind, refs, incognito=room.incognito, kit_mounted=room.kit
            )
            world.rooms[room.id] = room


def say(world: World, room: Room) -> None:
    """A few lines in one room, in a transaction of their own."""
    with store.transaction() as conn:
        say_lines(world, conn, room)


def say_lines(world: World, conn: Connection, room: Room) -> None:
    """A few lines in one room: members, personas, the news, now and then a stranger."""
    rng = world.rng
    for _ in range(rng.randint(1, 3)):
        roll = rng.random()
        speaker: int | str
        if roll < 0.1:
            speaker = "dispatch:news"
        elif roll < 0.15:
            speaker = rng.choice(sorted(world.humans))  # maybe not a member: the app's bug
        elif roll < 0.35:
            speaker = rng.choice(room.personas)
        else:
            speaker = rng.choice(sorted(room.humans))
        text = world.line_text(speaker, room)
        line_id = app_side.say(conn, room.id, speaker, text)
        world.heard(line_id, room, speaker, text)


def relay(world: World) -> Room | None:
    """A human passes on, in a chat of their own, something they heard lately elsewhere: the
    way a fact reaches someone outside the audience of the row that holds it."""
    rng = world.rng
    human = rng.choice(sorted(world.humans))
    heard = world.recent.get(human, [])[-8:]
    own = [r for r in world.rooms.values() if r.kind == "private" and human in r.humans]
    if not heard or not own:
        return None
    room = rng.choice(own)
    text = f"{world.fragment()} {world.fragments[rng.choice(heard)]}"
    with store.transaction() as conn:
        line_id = app_side.say(conn, room.id, human, text)
    world.heard(line_id, room, human, text)
    return room


def recruit(world: World, hostile: Hostile, tally: Tally) -> list[Flow]:
    """The attack on the confirmation: a private world row is picked from the store; one of
    its audience who knows all it says tells a human outside it (in a new group with the
    persona), who then says it in their own chat with the persona, where the hostile model
    restates the row word for word. The newcomer may join the row: they said it all."""
    rng = world.rng
    with store.engine().connect() as conn:
        found = conn.execute(
            select(
                t.persona_memory.c.persona, t.persona_memory.c.text, t.persona_memory.c.private_to
            ).where(
                t.persona_memory.c.subject == "world",
                t.persona_memory.c.valid_to.is_(None),
                t.persona_memory.c.private_to.is_not(None),
            )
        ).all()
    if not found:
        return []
    persona, text, held = rng.choice(found)
    audience = set(json.loads(held))
    said = markers(text)
    teachers = [h for h in sorted(audience) if all(world.may_know(h, m) for m in said)]
    outside = sorted(set(world.humans) - audience)
    if not teachers or not outside:
        return []
    teacher, newcomer = rng.choice(teachers), rng.choice(outside)
    meet = Room(f"meet{len(world.rooms)}", "group", {teacher: 0, newcomer: 0}, [persona])
    own = Room(f"dm-{persona}-{newcomer}-2", "private", {newcomer: 0}, [persona])
    with store.transaction() as conn:
        for room in (meet, own):
            if room.id not in world.rooms:
                members = [f"u:{u}" for u in room.humans] + room.personas
                app_side.add_room(conn, room.id, room.kind, members)
                world.rooms[room.id] = room
        own = world.rooms[own.id]
        line = app_side.say(conn, meet.id, teacher, text)
        world.heard(line, meet, teacher, text)
        line = app_side.say(conn, own.id, newcomer, text)
        world.heard(line, own, newcomer, text)
    hostile.wrote.add(text)
    return spell(world, own, hostile, tally)


def join(world: World) -> None:
    rng = world.rng
    groups = [r for r in world.rooms.values() if r.kind == "group"]
    room = rng.choice(groups)
    outside = sorted(set(world.humans) - set(room.humans))
    if not outside:
        return
    who = rng.choice(outside)
    with store.transaction() as conn:
        app_side.join(conn, room.id, f"u:{who}")
    room.humans[who] = room.lines


def persona_joins(world: World) -> None:
    """A persona is added to a room after it has talk of its own: it mines nothing said before."""
    rng = world.rng
    room = rng.choice(sorted(world.rooms.values(), key=lambda r: r.id))
    missing = [p for p in PERSONAS if p not in room.personas]
    if not missing or room.incognito:
        return
    persona = rng.choice(missing)
    with store.transaction() as conn:
        app_side.join(conn, room.id, persona)
    room.personas.append(persona)


def kit(world: World) -> None:
    """A kit mounted or unmounted in a group: what is said while it is on is never mined."""
    rng = world.rng
    room = rng.choice([r for r in world.rooms.values() if r.kind == "group"])
    room.kit = not room.kit
    with store.transaction() as conn:
        app_side.set_kit_mounted(conn, room.id, room.kit)


def switch(world: World) -> None:
    rng = world.rng
    h = world.humans[rng.choice(sorted(world.humans))]
    with store.transaction() as conn:
        if rng.random() < 0.5:
            h.memory_on = not h.memory_on
            users.set_memory_on(conn, h.id, h.memory_on)
        else:
            persona = rng.choice(PERSONAS)
            if persona in h.mutes:
                h.mutes.discard(persona)
                users.remove_mute(conn, h.id, persona)
            else:
                h.mutes.add(persona)
                users.add_mute(conn, h.id, persona)


# A self-test switch (`GUARDS`): the store's echo reach, 0 with the echo rule removed.
ECHO_REACH: int | None = None


def delete_lines(world: World) -> None:
    """The app deletes the store's newest line, or every line of a private chat, and a switch
    flips right after: a line said next must not borrow a deleted one's id or its time."""
    rng = world.rng
    with store.transaction() as conn:
        if rng.random() < 0.5:
            newest = conn.execute(select(func.max(t.lines.c.id))).scalar()
            if newest is None:
                return
            room_id = conn.execute(
                select(t.lines.c.room_id).where(t.lines.c.id == newest)
            ).scalar_one()
            gone = [(str(room_id), int(newest))]
        else:
            chats = sorted(r.id for r in world.rooms.values() if r.kind == "private")
            room_id = rng.choice(chats)
            ids = conn.execute(select(t.lines.c.id).where(t.lines.c.room_id == room_id))
            gone = [(room_id, int(i)) for i in ids.scalars()]
        conn.execute(t.lines.delete().where(t.lines.c.id.in_([i for _, i in gone])))
    for room_id, line_id in gone:
        world.forget_line(room_id, line_id)
    switch(world) if rng.random() < 0.5 else raw_switch(world)


def raw_switch(world: World) -> None:
    """The app changes a switch with its own SQL, none of which an UPDATE trigger would see:
    INSERT OR REPLACE, DELETE then INSERT, or a mute moved to the other persona."""
    rng = world.rng
    h = world.humans[rng.choice(sorted(world.humans))]
    how = rng.choice(["replace", "delete-insert", "move-mute"])
    with store.transaction() as conn:
        if how == "move-mute" and len(h.mutes) == 1:
            (old,) = h.mutes
            new = next(p for p in PERSONAS if p != old)
            conn.execute(
                sql("UPDATE persona_memory_mute SET persona = :new WHERE user_id = :u"),
                {"new": new, "u": h.id},
            )
            h.mutes = {new}
            return
        h.memory_on = not h.memory_on
        values = {"u": h.id, "name": h.name, "on": int(h.memory_on)}
        if not store.is_sqlite(conn):
            postgres.raw_memory_switch(conn, values, how)
        elif how == "replace":
            conn.execute(
                sql("INSERT OR REPLACE INTO users (id, name, memory_on) VALUES (:u, :name, :on)"),
                values,
            )
        else:
            conn.execute(sql("DELETE FROM users WHERE id = :u"), values)
            conn.execute(
                sql("INSERT INTO users (id, name, memory_on) VALUES (:u, :name, :on)"), values
            )


def delete(world: World) -> None:
    """A human deletes a row from their page, or undoes a toast."""
    rng = world.rng
    human = rng.choice(sorted(world.humans))
    page = page_model.manage_page(human)
    lines = [line for s in page.personas for line in s.lines]
    if lines and rng.random() < 0.7:
        controls.delete_row(human, rng.choice(lines).delete_id)
        return
    notes = [n for n in page_model.rail(human, limit=50) if not n.undone]
    if notes:
        controls.undo_notice(human, rng.choice(notes).id)


def spell(world: World, room: Room, hostile: Hostile, tally: Tally) -> list[Flow]:
    """One spell of a random persona in the room, through the real write path, and the
    check of what its model calls were shown."""
    persona = world.rng.choice(room.personas)
    chat = hostile.chat()
    begun = steps.begin(persona, room.id)
    if begun is None:
        return []
    tally.spells += 1
    s: Spell = steps.run_extract(begun, chat)
    s = steps.run_embed(s, EMBEDDER)
    s = steps.run_route(s, chat)
    outcome = steps.run_commit(s)
    while outcome.status == "stale":
        s = steps.run_route(s, chat)
        outcome = steps.run_commit(s)
    steps.mark_delivered(steps.place_toasts(s.persona, s.room_id))  # told: no channel here
    tally.asked += bool(chat.calls)
    tally.rows += len(outcome.row_ids)
    found = prompt_flows(world, chat.calls, f"spell {s.key}")
    found += label_flows(world, persona, chat.calls, outcome.row_ids, f"spell {s.key}")
    tally.violations += sum(1 for f in found if f.where.endswith(LABEL))
    return found


LABEL = "label"


def label_flows(
    world: World, persona: str, calls: list[tuple[str, str, str]], row_ids: list[int], where: str
) -> list[Flow]:
    """The invariant, whatever the text says: the label of the spell's calls is the meet of
    the labels of the lines they were shown (the exam's own record of who heard each, with
    their switches then), no line may be shown that its time forbids, and no row the spell
    wrote may reach anyone outside that label."""
    flows: list[Flow] = []
    heard = sorted(
        {int(i) for purpose, _, p in calls if purpose == "extract" for i in _TRANSCRIPT.findall(p)}
    )
    label: frozenset[int] | None = None
    for i in heard:
        if not world.readable(i, persona):
            flows.append(Flow(f"{where} line {i} shown against its time {LABEL}", 0, "a line"))
            continue
        line_label = world.label(i, persona)
        if line_label is not None:
            label = line_label if label is None else label & line_label
    if not row_ids:
        return flows
    if not heard:
        label = frozenset()
    cols = t.persona_memory.c
    with store.engine().connect() as conn:
        written = conn.execute(
            select(cols.id, cols.subject, cols.counterpart, cols.private_to).where(
                cols.id.in_(row_ids)
            )
        ).all()
    for row_id, subject, counterpart, private_to in written:
        if subject == "world":
            audience = None if private_to is None else frozenset(json.loads(private_to))
        else:
            ref = counterpart if subject == "self" else subject
            audience = frozenset({int(str(ref).split(":")[1])}) if ref else frozenset()
        wider = audience is None or not audience <= label if label is not None else False
        if wider:
            flows.append(Flow(f"{where} row {row_id} wider than its call {LABEL}", 0, "a row"))
    return flows


def prompt_flows(world: World, calls: list[tuple[str, str, str]], where: str) -> list[Flow]:
    """Every marker a model was shown must be known to every human who witnessed the lines
    of its spell: they are whom its rows may reach."""
    flows: list[Flow] = []
    extract = [p for purpose, _, p in calls if purpose == "extract"]
    heard = {int(i) for p in extract for i in _TRANSCRIPT.findall(p)}
    humans = set().union(*(world.line_witnesses.get(i, frozenset()) for i in heard))
    for purpose, system, prompt in calls:
        for m in sorted(markers(system + prompt)):
            for h in sorted(humans):
                if not world.may_know(h, m):
                    flows.append(Flow(f"{where} {purpose} prompt", h, f"marker {m}"))
    return flows


# --- reading every output -----------------------------------------------------------------


def present_sets(world: World, room: Room) -> list[frozenset[int]]:
    """Who the app may say is present: everyone, each alone, everyone and a stranger."""
    members = frozenset(room.humans)
    sets = [members, *(frozenset({u}) for u in sorted(members))]
    strangers = sorted(set(world.humans) - members)
    if strangers:
        sets.append(members | {world.rng.choice(strangers)})
    return sets


def names_in(world: World, text: str) -> set[int]:
    """The humans a shown text names, by the exam's own reading: every disguise the hostile
    model wrote, every word of each display name, and `u:` ids."""
    found = set()
    folded = oracle_fold(text)
    for form, human in world.forms:
        if _has(text, form) or _has(folded, oracle_fold(form)):
            found.add(human)
    for h in world.humans.values():
        if any(_has(folded, part.casefold()) for part in h.name.split()):
            found.add(h.id)
    found |= {int(u) for u in re.findall(r"u:(\d+)", folded) if int(u) in world.humans}
    return found


def _has(text: str, form: str) -> bool:
    if not form.isascii():
        return form in text
    return re.search(rf"(?<!\w){re.escape(form)}(?!\w)", text) is not None


def output_flows(world: World, group_scope: bool = False) -> list[Flow]:
    flows: list[Flow] = []
    reader.close()
    for heat in ("cold", "warm"):
        for room in world.rooms.values():
            for present in present_sets(world, room):
                flows += room_flows(world, room, present, heat, group_scope)
    for h in sorted(world.humans):
        flows += page_flows(world, h)
    return flows


def room_flows(
    world: World, room: Room, present: frozenset[int], heat: str, group_scope: bool = False
) -> list[Flow]:
    """What every persona is shown in the room with these humans present. The proven scope:
    every marker heard by every present human. The group scope (`group_scope`: the reader reads
    with `proven_scope=False`): docs/design.md §4's subject-present rule, `World.may_show`. A
    row naming a human who is absent is a flow under both."""
    flows: list[Flow] = []
    proven = not group_scope
    where = f"{heat} open of {room.id} with {sorted(present)}"
    shown: list[tuple[str, str, str]] = []  # (where, persona, text)
    for persona, block in reader.blocks_for_room(
        room.id, present, touch=False, proven_scope=proven
    ).items():
        shown.append((f"{where}: {persona}'s block", persona, block.text))
    outsider = next(p for p in PERSONAS if p not in room.personas) if len(room.personas) < 2 else ""
    if outsider:
        block = reader.build_block(outsider, present, room.id, touch=False, proven_scope=proven)
        shown.append((f"{where}: {outsider}'s block (not a member)", outsider, block.text))
    if heat == "warm":
        query = world.rng.choice(list(world.fragments.values()) or ["news"])
        for persona in room.personas:
            got = reader.recall(
                persona, present, room.id, query, block_ids=[], touch=False, proven_scope=proven
            )
            shown.append((f"{where}: {persona}'s recall", persona, "\n".join(r.text for r in got)))
    for label, persona, text in shown:
        for m in sorted(markers(text)):
            if group_scope and world.may_show(room, persona, present, m):
                continue
            flows += [Flow(label, h, f"marker {m}") for h in present if not world.may_know(h, m)]
        for named in sorted(names_in(world, text) - present):
            flows += [Flow(label, h, f"a row naming absent u:{named}") for h in sorted(present)]
    return flows


def page_flows(world: World, human: int) -> list[Flow]:
    page = page_model.manage_page(human)
    found = page_model.evidence(human, page)
    texts = [("page", line.text) for s in page.personas for line in s.lines]
    texts += [("page evidence", e.text or "") for ev in found.values() for e in ev]
    texts += [("rail", n.text) for n in page_model.rail(human, limit=200)]
    return [
        Flow(f"u:{human}'s {label}", human, f"marker {m}")
        for label, text in texts
        for m in sorted(markers(text))
        if not world.may_know(human, m)
    ]


def run_world(
    seed: int, spells: int, template: str, folder: Path, *, group_scope: bool = False
) -> Tally:
    """One random world: `spells` spells among random talk, joins, switches and deletes, with
    every output read every CHECK_EVERY spells and at the end. `group_scope`: the rooms are
    read as the group scope (MW_MEMORY_SCOPE=follow) reads them, and judged by its rule."""
    tally = Tally(worlds=1)
    rng = random.Random(seed)
    tally.seeds.append(seed)
    concurrent = postgres.is_postgres(template)
    with fresh_store(template, folder / f"w{seed}"):
        world = World(rng, echo_reach=settings_mod.current().echo_reach_lines)
        build(world)
        hostile = Hostile(world, random.Random(seed * 7919 + 1))
        rooms = list(world.rooms.values())
        while tally.spells < spells:
            roll = rng.random()
            room = rng.choice(rooms)
            if roll < 0.1:
                relayed = relay(world)
                if relayed is not None:
                    tally.flows += spell(world, relayed, hostile, tally)
            elif roll < 0.15:
                tally.flows += recruit(world, hostile, tally)
            elif roll < 0.19:
                join(world)
            elif roll < 0.22:
                switch(world)
            elif roll < 0.25:
                delete(world)
            elif roll < 0.26:
                persona_joins(world)
            elif roll < 0.27:
                kit(world)
            elif roll < 0.29:
                delete_lines(world)
            elif roll < 0.31:
                raw_switch(world)
            elif roll < 0.41 and concurrent:  # PostgreSQL only: SQLite has one writer
                postgres.concurrent_switch(world, room, say_lines)
                tally.concurrent += 1
                tally.flows += spell(world, room, hostile, tally)
            else:  # talk, and as often as not the room goes quiet right after
                say(world, room)
                if rng.random() < 0.3:
                    continue
                before = tally.spells
                tally.flows += spell(world, room, hostile, tally)
                if tally.spells != before and tally.spells % CHECK_EVERY == 0:
                    tally.flows += output_flows(world, group_scope)
            if tally.flows:
                break
        if not tally.flows:
            tally.flows += output_flows(world, group_scope)
    return tally


@contextmanager
def fresh_store(template: str, folder: Path) -> Iterator[None]:
    """A copy of the migrated template (a SQLite file, or a PostgreSQL database) with a store
    id of its own, configured as the store."""
    folder.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        if postgres.is_postgres(template):
            url = stack.enter_context(postgres.fresh_database(template, folder.name))
        else:
            path = folder / "memory.db"
            shutil.copyfile(template, path)
            url = f"sqlite:///{path}"
        with store.engine(url).begin() as conn:
            conn.execute(t.store_identity.update().values(store_id=uuid.uuid4().hex))
            if ECHO_REACH is not None:  # the guard removed: a persona's line carries nothing
                conn.execute(sql("UPDATE echo_reach SET lines = :n"), {"n": ECHO_REACH})
        with _configured(url, folder):
            yield


@contextmanager
def _configured(url: str, folder: Path) -> Iterator[None]:
    before = settings_mod.current()
    settings_mod.configure(
        before.with_(
            database_url=url,
            embedder="hashing",
            state_dir=folder / "state",
            read_cache_sweep_s=3600.0,
            # Its own temporary store, never served: the group scope is measured here before
            # any verdict exists, so it starts on the override (docs/design.md §4.3).
            memory_scope_override=True,
        )
    )
    try:
        yield
    finally:
        reader.close(timeout=30)
        settings_mod.configure(before)
        store.engine(url).dispose()
        shutil.rmtree(folder, ignore_errors=True)


def migrated_template(folder: Path, database_url: str | None = None) -> str:
    """The store every world copies: a PostgreSQL database with `database_url`, else a file."""
    if database_url:
        return postgres.migrated_template(database_url)
    path = folder / "template.db"
    url = f"sqlite:///{path}"
    store.init_db(url)
    store.engine(url).dispose()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return str(path)


def exam(
    spells: int,
    seed: int,
    folder: Path,
    *,
    stop_at_first: bool = False,
    group_scope: bool = False,
    database_url: str | None = None,
) -> Tally:
    """Worlds from `seed` on until `spells` spells have run (read under the group scope with
    `group_scope`; on PostgreSQL with `database_url`)."""
    template = migrated_template(folder, database_url)
    try:
        return _worlds(spells, seed, template, folder, stop_at_first, group_scope)
    finally:
        if postgres.is_postgres(template):
            postgres.drop(template)


def _worlds(
    spells: int, seed: int, template: str, folder: Path, stop_at_first: bool, group_scope: bool
) -> Tally:
    total = Tally()
    while total.spells < spells:
        got = run_world(
            seed + total.worlds,
            min(SPELLS_PER_WORLD, spells - total.spells),
            template,
            folder,
            group_scope=group_scope,
        )
        total.worlds += 1
        total.spells += got.spells
        total.asked += got.asked
        total.rows += got.rows
        total.violations += got.violations
        total.concurrent += got.concurrent
        total.flows += got.flows
        if got.flows:
            total.seeds += got.seeds
        if got.flows and stop_at_first:
            break
    return total


# --- the self-test: each structural guard removed in turn must be caught ---------------------


def _unscoped(spell: Spell, room: Any) -> Scope:
    """The neighbours as they were before the scope: the persona's rows by subject alone."""
    humans = frozenset(spell.present)
    return Scope(spell.persona, True, humans, readers=frozenset(), allowing=humans, follow=True)


def _naive_fold(text: str, *, keep_case: bool = False) -> str:
    return text if keep_case else (text or "").casefold()


def _public_if_any(a: Any, b: Any) -> Any:
    """The meet without the public-input rule: one public input makes the whole call public."""
    return None if a is None or b is None else a & b


_stamps_between = stamps.between


def _unstamped(conn: Any, persona: str, room_id: str, after: int, last: int) -> dict[int, Any]:
    """The stamps without what they were stamped for: every line readable, heard by all."""
    got = _stamps_between(conn, persona, room_id, after, last)
    return {i: replace(s, readable=True, label=s.heard) for i, s in got.items()}


GUARDS: dict[str, Callable[[], Any]] = {
    "the call label": lambda: mock.patch(
        "memory_worker.write.window.stamped_spell", lambda conn, spell: replace(spell, label=None)
    ),
    "the line stamp": lambda: mock.patch("memory_worker.storage.stamps.between", _unstamped),
    "the echo rule": lambda: mock.patch(f"{__name__}.ECHO_REACH", 0),
    "the public-input rule": lambda: mock.patch("memory_worker.core.labels.meet", _public_if_any),
    "the scoped neighbours": lambda: mock.patch(
        "memory_worker.write.window.spell_scope", _unscoped
    ),
    "the name normaliser": lambda: mock.patch("memory_worker.core.names.fold", _naive_fold),
}
# Monotonic line ids are no guard the exam can take away and see fail: a line's stamps go
# with it, so an id given again carries its own line's label; tests/write/test_line_stamps.py
# proves them. Nor is revocation at the commit: a marker its human deleted from a row is one
# they still heard, so no marker oracle sees it come back; the same tests prove it.
# The page's evidence filter (`page_model.witnessed_lines`) is no longer a guard the exam can
# take away and see fail: a row's evidence lines are all lines of its spell, every one heard by
# everyone in its audience (the label), so no world reaches it. It stays, as a second wall,
# proven by its own test (tests/test_controls.py).


# Under the group scope, the consent check too. Under the proven scope the lines' stamps keep
# what a human did not allow out of every call and every label, so no world of the proven
# scope needs it; what rooms show under the group scope (a present, consenting witness) does.
GROUP_GUARDS: dict[str, Callable[[], Any]] = {
    "the consent check": lambda: mock.patch(
        "memory_worker.core.audience.Consent.allows", lambda self, user_id, persona: True
    ),
}


def guards(group_scope: bool) -> dict[str, Callable[[], Any]]:
    """The guards the self-test removes: GUARDS, and under the group scope GROUP_GUARDS too."""
    return {**GUARDS, **GROUP_GUARDS} if group_scope else dict(GUARDS)


def self_test(
    worlds: int,
    seed: int,
    folder: Path,
    *,
    group_scope: bool = False,
    database_url: str | None = None,
) -> dict[str, int | None]:
    """For each guard: the number of worlds it took to see a flow with the guard removed
    (None: never, within `worlds`)."""
    template = migrated_template(folder, database_url)
    try:
        return _removed(worlds, seed, template, folder, group_scope)
    finally:
        if postgres.is_postgres(template):
            postgres.drop(template)


def _removed(
    worlds: int, seed: int, template: str, folder: Path, group_scope: bool
) -> dict[str, int | None]:
    caught: dict[str, int | None] = {}
    for name, patch in guards(group_scope).items():
        caught[name] = None
        with ExitStack() as stack:
            stack.enter_context(patch())
            for n in range(worlds):
                got = run_world(
                    seed + n, SPELLS_PER_WORLD, template, folder, group_scope=group_scope
                )
                if got.flows:
                    caught[name] = n + 1
                    break
    return caught


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spells", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--self-test", action="store_true", help="remove each guard in turn")
    parser.add_argument("--self-test-worlds", type=int, default=20)
    parser.add_argument(
        "--group-scope",
        action="store_true",
        help="read every room as MW_MEMORY_SCOPE=follow does, judged by docs/design.md §4's rule",
    )
    parser.add_argument(
        "--database-url",
        help="run every world on PostgreSQL (postgresql+psycopg://…/<db>): a database of its "
        "own per world, made beside <db>, with switches in concurrent transactions",
    )
    a = parser.parse_args(argv)
    if a.database_url and not postgres.is_postgres(a.database_url):
        parser.error("--database-url: a postgresql+psycopg:// URL (SQLite is the default)")
    if a.database_url and (why := postgres.unreachable(a.database_url)):
        parser.error(f"--database-url: cannot reach the server's postgres database: {why}")
    logging.getLogger("memory_worker").setLevel(logging.CRITICAL)  # the app's errors, on purpose
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mw-flow-") as tmp:
        if a.self_test:
            caught = self_test(
                a.self_test_worlds,
                a.seed,
                Path(tmp),
                group_scope=a.group_scope,
                database_url=a.database_url,
            )
            for name, n in caught.items():
                print(f"{name:28} {'caught in ' + str(n) + ' world(s)' if n else 'NOT CAUGHT'}")
            print(f"{time.monotonic() - started:.0f} s")
            return 0 if all(caught.values()) else 1
        tally = exam(
            a.spells, a.seed, Path(tmp), group_scope=a.group_scope, database_url=a.database_url
        )
    took = time.monotonic() - started
    print(
        f"{tally.spells} spells in {tally.worlds} worlds ({tally.asked} asked the model, "
        f"{tally.rows} rows written): {len(tally.flows)} flows "
        f"({tally.violations} label violations), {took:.0f} s"
        + (f"; {tally.concurrent} concurrent switches" if tally.concurrent else "")
    )
    for flow in tally.flows[:20]:
        print(f"  {flow}")
    if tally.flows:
        print(f"  replay: --seed {tally.seeds[0]} --spells {SPELLS_PER_WORLD}")
    return 1 if tally.flows else 0


if __name__ == "__main__":
    sys.exit(main())
