"""The note: the field "what personas should remember about you", injected verbatim, so kept
short (MEMORY_NOTE_MAX_CHARS)."""

from __future__ import annotations

from memory_worker.controls.checks import check_id, require_user
from memory_worker.core.constants import MEMORY_NOTE_MAX_CHARS
from memory_worker.core.errors import NoteTooLong
from memory_worker.storage import store, users


def clean_note(text: str | None) -> str | None:
    """Pure: the note as stored. Stripped; empty means no note; over the limit is refused.

    Only a str (or None, to clear it) is a note: `0`, bytes or a list is a TypeError, never
    stored as "b'...'" nor silently taken as "no note".
    """
    if text is not None and not isinstance(text, str):
        raise TypeError(f"the memory note must be a str or None, not {type(text).__name__}")
    note = (text or "").strip()
    if len(note) > MEMORY_NOTE_MAX_CHARS:
        raise NoteTooLong(len(note))
    return note or None


def set_note(user_id: int, text: str | None) -> None:
    """The field "what personas should remember about you", injected verbatim: kept short."""
    check_id(user_id, "user_id")
    note = clean_note(text)
    with store.transaction() as conn:
        require_user(conn, user_id)
        users.set_note(conn, user_id, note)
