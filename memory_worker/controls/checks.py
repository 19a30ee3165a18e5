"""What every control checks first: an id's type and range, a known user, and whether a row
is about the user at all. A wrong type is a `TypeError` that names the argument; "no such row"
and "not yours" are one error, `NotFound`, so a caller cannot probe which ids exist."""

from __future__ import annotations

from sqlalchemy import Connection

from memory_worker.core.errors import NotFound, UnknownUser
from memory_worker.core.rows import Row, concerned
from memory_worker.storage import users

ID_MAX = 2**63 - 1  # the largest id a database integer holds


def check_id(value: object, name: str) -> int:
    """An id argument as an int; TypeError (naming the argument) for anything else.

    bool is refused although it is an int: `True` is not an id.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    return value


def in_range(value: int) -> bool:
    """An id a database could hold: out of range answers "not found", never an overflow."""
    return 1 <= value <= ID_MAX


def concerns_user(row: Row, user_id: int) -> bool:
    """Pure: the row is about the user, is the persona's promise or loop with them, or is a
    world row that cites their lines (`rows.concerned`)."""
    return user_id in concerned(row.subject, row.counterpart, row.private_to)


def check_user_and_persona(user_id: object, persona: object) -> None:
    """A user id and a persona slug of the right types (TypeError naming the argument)."""
    check_id(user_id, "user_id")
    if not isinstance(persona, str):
        raise TypeError(f"persona must be a str, not {type(persona).__name__}")


def require_user(conn: Connection, user_id: int) -> None:
    """UnknownUser for an unknown user — and for an id no database could hold."""
    if not in_range(user_id):
        raise UnknownUser(user_id)
    users.require_user(conn, user_id)


def check_switch(value: object, name: str) -> bool:
    """A switch argument as a bool; TypeError (naming the argument) for anything else: `1` or
    "yes" is not a switch."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, not {type(value).__name__}")
    return value


def require_persona(conn: Connection, user_id: int, persona: str) -> None:
    """UnknownUser for an unknown user, NotFound for an unknown persona: what a control about
    a user and a persona checks before it writes."""
    require_user(conn, user_id)
    if not users.persona_exists(conn, persona):
        raise NotFound("persona", repr(persona), user_id)
