"""Which embedder made this store's vectors (`store_embedder`), and a re-embedding under way.

A cosine between vectors of two models means nothing, so a store is one model's: the first
embedder to write claims it, and any other is refused with an error that says how to switch.
`memory-worker reembed` switches: it names the new embedder `pending`, re-embeds rows and room
topics in batches behind two cursors, and makes the new one the store's at the end. While it
runs, only the new embedder may write (new rows get its vectors; the old one's would be left
behind by the cursor).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, insert, select, update
from sqlalchemy.exc import IntegrityError

from memory_worker.core import tables as t
from memory_worker.core.errors import EmbedderMismatch
from memory_worker.storage.prepared import Prepared

e = t.store_embedder.c
THE_ROW = 1


@dataclass(frozen=True)
class Identity:
    name: str
    dims: int
    pending_name: str | None = None
    pending_dims: int | None = None
    after_row_id: int = 0
    after_room_id: str = ""

    @property
    def writer(self) -> tuple[str, int]:
        """The embedder allowed to write now: the pending one during a re-embedding."""
        if self.pending_name is not None and self.pending_dims is not None:
            return self.pending_name, self.pending_dims
        return self.name, self.dims


# Read by every embed step: compiled once per process (`memory_worker.storage.prepared`).
IDENTITY = Prepared(lambda: select(t.store_embedder).where(e.id == THE_ROW))


def identity(conn: Connection) -> Identity | None:
    found = IDENTITY.execute(conn, {}).mappings().first()
    if found is None:
        return None
    return Identity(
        name=found["name"],
        dims=int(found["dims"]),
        pending_name=found["pending_name"],
        pending_dims=found["pending_dims"],
        after_row_id=int(found["after_row_id"]),
        after_room_id=found["after_room_id"],
    )


def check(conn: Connection, name: str, dims: int) -> None:
    """Raise `EmbedderMismatch` unless (name, dims) may write vectors into this store now.

    A store that records no embedder yet is claimed by this one (in its own savepoint: two
    workers claiming at once leave one row, and the loser is checked against it).
    """
    have = identity(conn)
    if have is None:
        try:
            with conn.begin_nested():
                conn.execute(insert(t.store_embedder).values(id=THE_ROW, name=name, dims=dims))
            return
        except IntegrityError:
            have = identity(conn)
            assert have is not None
    if have.writer != (name, dims):
        raise EmbedderMismatch(mismatch(have, name, dims))


def mismatch(have: Identity, name: str, dims: int) -> str:
    wanted, wanted_dims = have.writer
    during = " (a re-embedding to it is under way)" if have.pending_name else ""
    return (
        f"this store's vectors are {wanted}'s ({wanted_dims} dims){during}, but the configured "
        f"embedder is {name} ({dims} dims): set MW_EMBEDDER back, or run "
        f"`memory-worker reembed` to re-embed every row and room topic with {name}"
    )


def begin_reembed(conn: Connection, name: str, dims: int) -> Identity:
    """Name (name, dims) the store's next embedder; a re-embedding to it already under way
    keeps its cursors (resume), one to another embedder starts over. Returns the identity:
    no `pending_name` means the store is already (name, dims)'s."""
    have = identity(conn)
    if have is None:  # vectors of an unknown embedder, if any: re-embed them all too
        conn.execute(
            insert(t.store_embedder).values(
                id=THE_ROW, name=name, dims=dims, pending_name=name, pending_dims=dims
            )
        )
    elif have.pending_name is None and (have.name, have.dims) == (name, dims):
        return have  # already the store's: nothing to do
    elif (have.pending_name, have.pending_dims) != (name, dims):
        conn.execute(
            update(t.store_embedder)
            .where(e.id == THE_ROW)
            .values(pending_name=name, pending_dims=dims, after_row_id=0, after_room_id="")
        )
    got = identity(conn)
    assert got is not None
    return got


def advance(
    conn: Connection, *, after_row_id: int | None = None, after_room_id: str | None = None
) -> None:
    """Move a re-embedding's cursors past what has been re-embedded."""
    values: dict[str, object] = {}
    if after_row_id is not None:
        values["after_row_id"] = after_row_id
    if after_room_id is not None:
        values["after_room_id"] = after_room_id
    if values:
        conn.execute(update(t.store_embedder).where(e.id == THE_ROW).values(**values))


def finish_reembed(conn: Connection) -> None:
    """The pending embedder becomes the store's; the cursors reset."""
    have = identity(conn)
    if have is None or have.pending_name is None:
        return
    conn.execute(
        update(t.store_embedder)
        .where(e.id == THE_ROW)
        .values(
            name=have.pending_name,
            dims=have.pending_dims,
            pending_name=None,
            pending_dims=None,
            after_row_id=0,
            after_room_id="",
        )
    )
