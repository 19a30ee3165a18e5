"""The rows a spell's model calls were shown (`spell_views`), noted before each call.

The commit meets the spell's label with the audiences, as they are at the commit, of every row
its calls were shown (docs/design.md §12): a row deleted or narrowed while the spell ran
narrows what it writes. Which rows comes from here, written by the steps themselves before
each call — never from the chain's message. A spell is known by its persona, room and the
line it reads after (a window cut shorter keeps it); row id 0 notes that its extraction's
view was recorded at all, so a commit without it writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Connection, delete, func, select
from sqlalchemy.dialects import postgresql, sqlite

from memory_worker.core import tables as t
from memory_worker.core.rows import Spell, id_list

v = t.spell_views.c
RECORDED = 0  # the row id that says the extraction's view was noted


def note(
    conn: Connection,
    spell: Spell,
    row_ids: Iterable[int],
    *,
    first: bool = False,
    router: bool = False,
) -> None:
    """Note that the spell's next call is shown these rows (`first`: the extraction's;
    `router`: the router's, which marks each row as one the spell may change)."""
    ids = sorted({int(i) for i in row_ids} | ({RECORDED} if first else set()))
    if not ids:
        return
    build = sqlite.insert if conn.dialect.name == "sqlite" else postgresql.insert
    key = dict(persona=spell.persona, room_id=spell.room_id, after_line=spell.after_line_id)
    rows = [dict(key, row_id=i, by_router=int(router)) for i in ids]
    insert = build(t.spell_views)
    if router:  # a row the extraction saw first is the router's now too
        keys = ["persona", "room_id", "after_line", "row_id"]
        conn.execute(insert.on_conflict_do_update(index_elements=keys, set_={"by_router": 1}), rows)
    else:
        conn.execute(insert.on_conflict_do_nothing(), rows)


def router_saw(conn: Connection, spell: Spell) -> set[int]:
    """The rows the spell's router was shown: the only rows it may UPDATE or CLOSE."""
    query = select(v.row_id).where(
        v.persona == spell.persona,
        v.room_id == spell.room_id,
        v.after_line == spell.after_line_id,
        v.by_router == 1,
    )
    return {int(i) for i in conn.execute(query).scalars()}


Audience = tuple[str, str | None, tuple[int, ...] | None]  # subject, counterpart, private_to


def audiences(conn: Connection, spell: Spell) -> list[Audience] | None:
    """The distinct (subject, counterpart, private_to) of the rows the spell's calls were
    shown, as they are now — whom each may reach (`labels.row_audience`) — in one read of a
    row per audience; None when its extraction's view was never noted or a row it was shown
    is gone (then nothing says who may learn what it saw)."""
    pm = t.persona_memory.c
    query = (
        select(pm.subject, pm.counterpart, pm.private_to, func.count())
        .select_from(t.spell_views.outerjoin(t.persona_memory, pm.id == v.row_id))
        .where(
            v.persona == spell.persona,
            v.room_id == spell.room_id,
            v.after_line == spell.after_line_id,
        )
        .group_by(pm.subject, pm.counterpart, pm.private_to)
    )
    out: list[Audience] = []
    missing = 0  # the note that the view was recorded (row 0 is no row) and any row deleted
    for subject, counterpart, private_to, n in conn.execute(query):
        if subject is None:
            missing += int(n)
        else:
            out.append((str(subject), counterpart, id_list(private_to)))
    return out if missing == 1 else None


def forget(conn: Connection, persona: str, room_id: str, before: int) -> None:
    """Drop the views of the spells that began before line `before` (a committed spell's
    own start: a late spell from the same line may still be on its way)."""
    conn.execute(
        delete(t.spell_views).where(
            v.persona == persona, v.room_id == room_id, v.after_line < before
        )
    )
