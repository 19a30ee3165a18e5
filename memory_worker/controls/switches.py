"""The switches: "Personas remember me" for the whole account, and "this persona forgets me"
(mute) per persona. Existing rows stay; reads and writes about the user stop."""

from __future__ import annotations

from memory_worker.controls.checks import (
    check_id,
    check_switch,
    check_user_and_persona,
    in_range,
    require_persona,
    require_user,
)
from memory_worker.storage import store, users


def set_memory_on(user_id: int, on: bool) -> None:
    """The account switch "Personas remember me"; off stops reads and writes about the user."""
    check_id(user_id, "user_id")
    check_switch(on, "on")
    with store.transaction() as conn:
        require_user(conn, user_id)
        users.set_memory_on(conn, user_id, on)


def mute(user_id: int, persona: str) -> None:
    """The switch "this persona forgets me": no reads or writes; existing rows stay."""
    check_user_and_persona(user_id, persona)
    with store.transaction() as conn:
        require_persona(conn, user_id, persona)
        if persona not in users.muted_by(conn, user_id):
            users.add_mute(conn, user_id, persona)


def unmute(user_id: int, persona: str) -> None:
    """Undo `mute`; unmuting what was never muted does nothing."""
    check_user_and_persona(user_id, persona)
    if not in_range(user_id):
        return
    with store.transaction() as conn:
        users.remove_mute(conn, user_id, persona)
