"""Undo and delete (docs/design.md §5): the only physical deletes in the system, and only the
human's. A delete reaches every copy — the toasts that quoted a deleted row are reworded
without it, a folded copy of the same sentence goes with it. A world row others hold too is
theirs as well: deleting it takes the user out of its audience, and it goes when nobody is
left. Each call runs in one transaction."""

from __future__ import annotations

from sqlalchemy import Connection

from memory_worker.controls.checks import check_id, concerns_user, in_range
from memory_worker.core import names, toasts
from memory_worker.core.constants import SUBJECT_WORLD
from memory_worker.core.errors import NotFound
from memory_worker.core.rows import Row
from memory_worker.storage import memories, notices, rooms, store, users


def undo_notice(user_id: int, notice_id: int) -> int:
    """The toast's undo: delete the rows it lists that concern the user. Returns how many.

    A second undo finds the notice already undone and does nothing, so a double tap is safe.
    """
    check_id(user_id, "user_id")
    check_id(notice_id, "notice_id")
    if not (in_range(user_id) and in_range(notice_id)):
        raise NotFound("notice", notice_id, user_id)
    with store.transaction() as conn:
        found = notices.get(conn, notice_id)
        if found is None or found.user_id != user_id:
            raise NotFound("notice", notice_id, user_id)
        if found.undone:
            return 0
        listed = memories.rows_by_id(conn, found.row_ids).values()
        mine = [r.id for r in listed if concerns_user(r, user_id)]
        _delete_rows(conn, user_id, mine)
        notices.mark_undone(conn, notice_id)
        return len(mine)


def delete_row(user_id: int, row_id: int) -> None:
    """Delete one row that concerns the user; a row it had closed (an UPDATE) is reopened."""
    check_id(user_id, "user_id")
    check_id(row_id, "row_id")
    if not (in_range(user_id) and in_range(row_id)):
        raise NotFound("memory row", row_id, user_id)
    with store.transaction() as conn:
        rows = list(memories.rows_by_id(conn, [row_id]).values())
        if not rows or not concerns_user(rows[0], user_id):
            raise NotFound("memory row", row_id, user_id)
        _delete_rows(conn, user_id, [row_id])


def clear_all(user_id: int, persona: str | None = None) -> int:
    """Delete every row that concerns the user (only `persona`'s when given). Returns the count."""
    check_id(user_id, "user_id")
    if persona is not None and not isinstance(persona, str):
        raise TypeError(f"persona must be a str or None, not {type(persona).__name__}")
    if not in_range(user_id):
        return 0
    with store.transaction() as conn:
        rows = memories.rows_about(conn, user_id, persona)
        ids = [r.id for r in rows if concerns_user(r, user_id)]
        _delete_rows(conn, user_id, ids)
        return len(ids)


def _delete_rows(conn: Connection, user_id: int, ids: list[int]) -> None:
    """Delete `ids` for the user: a world row others hold too loses the user from its
    audience (it is theirs as well); every other row is deleted, what it closed is reopened,
    and the toasts that quoted it are reworded without it.

    Undoing an UPDATE restores what it replaced. Only rows that concern the same user are
    reopened; the router's neighbours share the subject, so in practice that is every row an
    UPDATE closed.
    """
    if not ids:
        return
    found = memories.rows_by_id(conn, ids)
    shared = [r for r in found.values() if _others_hold(r, user_id)]
    for r in shared:
        held = set(r.private_to or ())
        memories.set_audience(conn, r.id, held - {user_id}, was=held)
    _redact_toasts(conn, _places(conn, shared), {r.id for r in shared}, user_id)
    gone = [i for i in ids if i in found and found[i] not in shared]
    if not gone:
        return
    closed = [
        r
        for r in memories.rows_closed_by(conn, gone)
        if concerns_user(r, user_id) and r.id not in gone
    ]
    # A copy of the same sentence that a wider row closed (the commit's exactly-once across
    # audiences) is the same memory: it goes too, never comes back.
    copies = [r for r in closed if _same_sentence(r, found.get(r.closed_by or 0))]
    memories.reopen(conn, [r.id for r in closed if r not in copies])
    places = _places(conn, [found[i] for i in gone])
    memories.delete_rows(conn, gone)
    _redact_toasts(conn, places, set(gone))
    _delete_rows(conn, user_id, [r.id for r in copies])


def _same_sentence(row: Row, closer: Row | None) -> bool:
    return closer is not None and names.sentence_key(row.text) == names.sentence_key(closer.text)


def _places(conn: Connection, rows: list[Row]) -> set[tuple[str, str]]:
    """Where toasts may quote these rows: (persona, room) of the spells that wrote them or
    that a human joined them in — the rooms of their evidence lines."""
    lines = rooms.lines_by_id(conn, {i for r in rows for i in r.evidence})
    places = {(r.persona, r.room_id) for r in rows}
    places |= {(r.persona, lines[i].room_id) for r in rows for i in r.evidence if i in lines}
    return places


def _others_hold(row: Row, user_id: int) -> bool:
    """A world row whose audience holds someone besides the user."""
    return row.subject == SUBJECT_WORLD and bool(set(row.private_to or ()) - {user_id})


def _redact_toasts(
    conn: Connection, places: set[tuple[str, str]], gone: set[int], user_id: int | None = None
) -> None:
    """Every toast that quoted a deleted row (only `user_id`'s, for a row they left), reworded
    without it (a delete reaches every copy).

    A toast covers the rows of one spell, so it carries their persona and room: only those
    notices are read.
    """
    for persona, room_id in sorted(places):
        persona_name = users.persona_name(conn, persona)
        for notice in notices.of_place(conn, persona, room_id):
            removed = [i for i in notice.row_ids if i in gone]
            if not removed or (user_id is not None and notice.user_id != user_id):
                continue
            left = [i for i in notice.row_ids if i not in gone]
            kept = memories.rows_by_id(conn, left)
            texts = [kept[i].text for i in left if i in kept]
            names = users.user_names(conn, sorted(toasts.mentioned(texts)))
            text = toasts.redacted(
                persona_name, [toasts.named(x, names) for x in texts], len(removed)
            )
            notices.reword(conn, notice.id, text, left)
