"""The page's sessions (`web_sessions`): every SQL statement on that table.

The signed cookie names a session by a random id; the store keeps only its hash. A session is
alive while its row exists, is not past `expires` and was minted under the MW_WEB_SECRET in
force (`secret_tag`): deleting the row (sign-out, "sign out everywhere") or rotating the secret
ends it for every copy of the cookie at once.
"""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import Connection, delete, insert, or_, select

from memory_worker.core import tables as t

w = t.web_sessions.c


class WebSession(NamedTuple):
    id_hash: str
    user_id: int
    csrf: str


def start(
    conn: Connection,
    *,
    id_hash: str,
    user_id: int,
    csrf: str,
    secret_tag: str,
    now: int,
    expires: int,
) -> None:
    conn.execute(
        insert(t.web_sessions).values(
            id_hash=id_hash,
            user_id=user_id,
            csrf=csrf,
            secret_tag=secret_tag,
            created=now,
            expires=expires,
        )
    )


def find(conn: Connection, id_hash: str, *, secret_tag: str, now: int) -> WebSession | None:
    """The live session with this id hash, or None (ended, expired, or another secret's)."""
    row = conn.execute(
        select(w.id_hash, w.user_id, w.csrf).where(
            w.id_hash == id_hash, w.secret_tag == secret_tag, w.expires > now
        )
    ).first()
    return None if row is None else WebSession(row.id_hash, row.user_id, row.csrf)


def end(conn: Connection, id_hash: str) -> None:
    conn.execute(delete(t.web_sessions).where(w.id_hash == id_hash))


def end_all_of(conn: Connection, user_id: int) -> int:
    """Every session of the user, on every browser: how many ended."""
    return conn.execute(delete(t.web_sessions).where(w.user_id == user_id)).rowcount


def end_stale(conn: Connection, *, secret_tag: str, now: int) -> int:
    """Sessions of another secret (it was rotated) or past their expiry: how many ended."""
    stale = or_(w.secret_tag != secret_tag, w.expires <= now)
    return conn.execute(delete(t.web_sessions).where(stale)).rowcount
