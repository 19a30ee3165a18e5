"""Humans, personas and the switches (`users`, `personas`, `persona_memory_mute`).

Who someone is (a name, the 400-char `memory_note`) and what they allow: the account switch
`memory_on` and per-persona mutes (docs/design.md §5). The audience rule reads these; the controls
write them; the app adds users and personas.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection, bindparam, delete, insert, select, update

from memory_worker.core import tables as t
from memory_worker.core.errors import UnknownUser
from memory_worker.core.names import humans_named, name_parts, text_grams
from memory_worker.storage.prepared import PREPARED_IN_MAX, Prepared

u = t.users.c
p = t.personas.c
mu = t.persona_memory_mute.c


# --- users ----------------------------------------------------------------------------------


def add_user(conn: Connection, user_id: int, name: str, *, memory_on: bool = True) -> int:
    """A human, with their name's parts in the name index (`user_name_parts`)."""
    conn.execute(insert(t.users).values(id=user_id, name=name, memory_on=int(memory_on)))
    _index_name(conn, user_id, name)
    return user_id


def rename_user(conn: Connection, user_id: int, name: str) -> None:
    """A new display name; UnknownUser for an unknown user. Rows keep naming them `u:<id>`;
    the name index forgets the old name's parts and learns the new one's."""
    require_user(conn, user_id)
    conn.execute(update(t.users).where(u.id == user_id).values(name=name))
    conn.execute(delete(t.user_name_parts).where(t.user_name_parts.c.user_id == user_id))
    _index_name(conn, user_id, name)


def _index_name(conn: Connection, user_id: int, name: str) -> None:
    parts = [{"part": part, "user_id": user_id} for part in name_parts(name)]
    if parts:
        conn.execute(insert(t.user_name_parts), parts)


def require_user(conn: Connection, user_id: int) -> None:
    if conn.execute(select(u.id).where(u.id == user_id)).first() is None:
        raise UnknownUser(user_id)


USER_NAMES = Prepared(lambda ids: select(u.id, u.name).where(u.id.in_(ids)), ids=0)


def has_users(conn: Connection) -> bool:
    """Whether the store holds any human at all (an empty store: say so, not "unknown user")."""
    return conn.execute(select(u.id).limit(1)).first() is not None


def user_names(conn: Connection, user_ids: Sequence[int]) -> dict[int, str]:
    """Display names by user id (only users that exist). Each spell asks (embed, commit)."""
    if not user_ids:
        return {}
    ids = list(user_ids)
    found: Any
    if len(ids) <= PREPARED_IN_MAX:
        found = USER_NAMES.execute(conn, {}, ids=ids).all()
    else:
        found = conn.execute(select(u.id, u.name).where(u.id.in_(ids))).all()
    return {int(i): str(n) for i, n in found}


def memory_on(conn: Connection, user_ids: Iterable[int]) -> dict[int, bool]:
    """The account switch of each user that exists."""
    ids = sorted(set(user_ids))
    if not ids:
        return {}
    found = conn.execute(select(u.id, u.memory_on).where(u.id.in_(ids)))
    return {int(i): bool(flag) for i, flag in found}


def switches(conn: Connection, user_id: int) -> tuple[str | None, bool]:
    """(memory_note, memory_on) of one user; UnknownUser if unknown."""
    found = conn.execute(select(u.memory_note, u.memory_on).where(u.id == user_id)).first()
    if found is None:
        raise UnknownUser(user_id)
    return found.memory_note, bool(found.memory_on)


def set_note(conn: Connection, user_id: int, note: str | None) -> None:
    conn.execute(update(t.users).where(u.id == user_id).values(memory_note=note))


def set_memory_on(conn: Connection, user_id: int, on: bool) -> None:
    conn.execute(update(t.users).where(u.id == user_id).values(memory_on=int(on)))


# --- personas -------------------------------------------------------------------------------


def add_persona(conn: Connection, slug: str, name: str) -> str:
    """A persona. Its slug is how its lines name their speaker, so it holds no ':' (that is
    for 'u:42', a human, and 'dispatch:news', a line nobody said): ValueError, naming it."""
    if not slug or ":" in slug:
        raise ValueError(f"persona slug {slug!r}: non-empty, without ':' ('u:…', 'dispatch:…')")
    conn.execute(insert(t.personas).values(slug=slug, name=name))
    return slug


def persona_exists(conn: Connection, slug: str) -> bool:
    return conn.execute(select(p.slug).where(p.slug == slug)).first() is not None


def persona_slugs(conn: Connection) -> list[str]:
    """Every persona's slug, in order: what a command names when given one that is not."""
    return [str(x) for x in conn.execute(select(p.slug).order_by(p.slug)).scalars()]


def persona_names(conn: Connection, slugs: Sequence[str]) -> dict[str, str]:
    """Display names by slug; a persona the app never named is shown by its slug."""
    found = dict(conn.execute(select(p.slug, p.name).where(p.slug.in_(list(slugs)))).all())
    return {s: found.get(s) or s for s in slugs}


PERSONA_NAME = Prepared(lambda: select(p.name).where(p.slug == bindparam("slug")))


def persona_name(conn: Connection, slug: str) -> str:
    """The persona's display name, its slug if the app never named it (route, commit)."""
    return PERSONA_NAME.execute(conn, {"slug": slug}).scalar() or slug


def all_persona_names(conn: Connection) -> dict[str, str]:
    return {str(slug): str(name) for slug, name in conn.execute(select(p.slug, p.name))}


# --- mutes ----------------------------------------------------------------------------------


def mutes(
    conn: Connection, user_ids: Iterable[int], personas: Iterable[str]
) -> frozenset[tuple[int, str]]:
    """(user_id, persona) for each of these users who told one of these personas to forget them."""
    ids = sorted(set(user_ids))
    if not ids:
        return frozenset()
    query = select(mu.user_id, mu.persona).where(
        mu.user_id.in_(ids), mu.persona.in_(sorted(set(personas)))
    )
    return frozenset((int(uid), str(slug)) for uid, slug in conn.execute(query))


def muted_by(conn: Connection, user_id: int) -> set[str]:
    """The personas this user muted."""
    return set(conn.execute(select(mu.persona).where(mu.user_id == user_id)).scalars())


def add_mute(conn: Connection, user_id: int, persona: str) -> None:
    conn.execute(insert(t.persona_memory_mute).values(user_id=user_id, persona=persona))


def remove_mute(conn: Connection, user_id: int, persona: str) -> None:
    conn.execute(delete(t.persona_memory_mute).where(mu.user_id == user_id, mu.persona == persona))


def eligible_humans(conn: Connection, persona: str, humans: Sequence[int]) -> list[int]:
    """Humans the persona may write about: memory on, and this persona not muted."""
    if not humans:
        return []
    on = memory_on(conn, humans)
    muted = {uid for uid, _ in mutes(conn, humans, [persona])}
    return sorted(h for h in humans if on.get(h, False) and h not in muted)


def people_named_in(conn: Connection, texts: Sequence[str]) -> dict[int, str]:
    """id → display name of every human the store knows that one of `texts` names, by id or
    by any distinctive part of their name (`core.names.humans_named`, docs/design.md §12,
    names normalised once): one indexed read of the name index for the texts' word runs, then the
    rule itself on the few humans it finds."""
    grams = sorted(set().union(*(text_grams(x) for x in texts))) if texts else []
    found: set[int] = set()
    for start in range(0, len(grams), NAME_GRAMS_PER_STATEMENT):
        part = grams[start : start + NAME_GRAMS_PER_STATEMENT]
        query = select(t.user_name_parts.c.user_id).where(t.user_name_parts.c.part.in_(part))
        found.update(int(i) for i in conn.execute(query).scalars())
    by_ref = {r for x in texts for r in humans_named(x, {})}
    people = user_names(conn, sorted(found | by_ref))
    named = {r for x in texts for r in humans_named(x, people)}
    return {uid: people[uid] for uid in sorted(named) if uid in people}


NAME_GRAMS_PER_STATEMENT = 500  # word runs per IN list: under every driver's parameter cap


# --- "bring up what I told you privately when I'm in a group" -------------------------------

sp = t.persona_memory_stays_private.c


def stays_private(
    conn: Connection, user_ids: Iterable[int], personas: Iterable[str]
) -> frozenset[tuple[int, str]]:
    """(user_id, persona) for each of these users who keeps what they told one of these personas
    one-to-one out of groups (the switch off)."""
    ids = sorted(set(user_ids))
    if not ids:
        return frozenset()
    query = select(sp.user_id, sp.persona).where(
        sp.user_id.in_(ids), sp.persona.in_(sorted(set(personas)))
    )
    return frozenset((int(uid), str(slug)) for uid, slug in conn.execute(query))


def private_with(conn: Connection, user_id: int) -> set[str]:
    """The personas this user keeps their one-to-one rows out of groups with."""
    return set(conn.execute(select(sp.persona).where(sp.user_id == user_id)).scalars())


def set_follows(conn: Connection, user_id: int, persona: str, on: bool) -> None:
    """The switch: on (the default) lets one-to-one rows follow the user into groups where the
    deployment's scope does; off keeps them in private chats."""
    conn.execute(
        delete(t.persona_memory_stays_private).where(sp.user_id == user_id, sp.persona == persona)
    )
    if not on:
        conn.execute(
            insert(t.persona_memory_stays_private).values(user_id=user_id, persona=persona)
        )
