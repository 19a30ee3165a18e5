"""The human's controls (docs/design.md §5): undo it, delete it, write the note, switch it off,
choose whether it follows them into groups — one module for each thing a human does.

Every control acts *as* one user and touches only what is about that user: rows whose subject
is them, the persona's promises and loops whose counterpart is them, and world rows whose
audience holds them (they witnessed the lines it cites). Each mutating call runs in one
transaction. Inputs are checked before anything is read (`checks`). What the page shows is
read by `memory_worker.web.page_model`.

The controls the app and the page call are named here, so `controls.delete_row(...)` reads as
what the human did.
"""

from memory_worker.controls.chats import start_room
from memory_worker.controls.deletes import clear_all, delete_row, undo_notice
from memory_worker.controls.follow import follows_into_groups, set_follows
from memory_worker.controls.note import clean_note, set_note
from memory_worker.controls.switches import mute, set_memory_on, unmute

__all__ = [
    "clean_note",
    "clear_all",
    "delete_row",
    "follows_into_groups",
    "mute",
    "set_follows",
    "set_memory_on",
    "set_note",
    "start_room",
    "undo_notice",
    "unmute",
]
