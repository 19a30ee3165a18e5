"""The follow scope: whether what a user told a persona one-to-one may come up in groups they
are in — the deployment's scope (MW_MEMORY_SCOPE) and the user's per-persona switch."""

from __future__ import annotations

from memory_worker.controls.checks import (
    check_switch,
    check_user_and_persona,
    require_persona,
)
from memory_worker.core import settings as settings_mod
from memory_worker.storage import store, users


def set_follows(user_id: int, persona: str, on: bool) -> None:
    """The switch "bring up what I told you privately when I'm in a group", per persona. On
    (the default) follows the deployment's scope; off keeps the user's one-to-one rows with
    this persona in their private chats, while the rest of the group scope applies."""
    check_user_and_persona(user_id, persona)
    check_switch(on, "on")
    with store.transaction() as conn:
        require_persona(conn, user_id, persona)
        users.set_follows(conn, user_id, persona, on)


def group_scope() -> bool:
    """Whether this deployment lets memories follow people into groups (MW_MEMORY_SCOPE)."""
    return settings_mod.current().memory_scope == "follow"


def may_follow(group_scope: bool, memory_on: bool, forget_me: bool, switch_on: bool) -> bool:
    """Pure: whether what a user told a persona one-to-one may come up in groups they are in —
    what the reader would load (docs/design.md §4): only under the group scope, with their
    memory on, without "forget me" for that persona, and with their switch on."""
    return group_scope and memory_on and not forget_me and switch_on


def follows_into_groups(user_id: int, persona: str) -> bool:
    """`may_follow` for this user and persona, as the store and the deployment say now."""
    with store.engine().connect() as conn:
        _, memory_on = users.switches(conn, user_id)
        muted = users.muted_by(conn, user_id)
        private = users.private_with(conn, user_id)
    return may_follow(group_scope(), memory_on, persona in muted, persona not in private)
