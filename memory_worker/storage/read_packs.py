"""The reader's packs: one persona's ranking columns, and its rows' cosines to a room topic,
each in one blob (schema/versions/0014).

A process that does not hold a persona reads its pack and the rows the change log names
since, instead of every row the room's audience may see: one row of a few bytes per memory,
not the memories. The reader's background threads write a pack when the one stored is gone
(a delete drops it) or far behind; the write path never does. Only a persona's exact current
version is written, so no pack ever describes a row a delete has already removed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, and_, bindparam, delete, insert, select, update
from sqlalchemy.engine import Dialect

from memory_worker.core import tables as t
from memory_worker.core.read_cache import Version
from memory_worker.storage.prepared import Prepared

_p, _t = t.persona_read_packs.c, t.persona_read_topics.c


@dataclass(frozen=True)
class Pack:
    """A persona's pack as stored: its version, row count, columns and, if asked for and kept
    at the same version, its cosines to one topic."""

    version: Version
    rows: int
    columns: bytes
    cosines: bytes | None


def topic_key(topic: bytes) -> str:
    """The name a topic's cosines are kept under: the sha256 of its vector, 32 hex digits."""
    return hashlib.sha256(topic).hexdigest()[:32]


PACKS = Prepared(
    lambda personas: (
        select(_p.persona, _p.version, _p.stamp, _p.rows, _p.columns, _t.cosines)
        .select_from(
            t.persona_read_packs.outerjoin(
                t.persona_read_topics,
                and_(
                    _t.persona == _p.persona,
                    _t.topic == bindparam("topic"),
                    _t.version == _p.version,
                    _t.stamp == _p.stamp,
                ),
            )
        )
        .where(_p.persona.in_(personas))
    ),
    personas="",  # no persona ''
)


def packs(conn: Connection, personas: Sequence[str], topic: bytes | None) -> dict[str, Pack]:
    """The packs kept for these personas, each with its cosines to `topic` if kept."""
    key = topic_key(topic) if topic is not None else ""
    found: Sequence[Any] = PACKS.execute(conn, {"topic": key}, personas=list(personas)).all()
    return {
        str(p): Pack(
            Version(int(v), None if s is None else int(s)), int(n), bytes(c), cos and bytes(cos)
        )
        for p, v, s, n, c, cos in found
    }


KEPT = Prepared(
    lambda personas: select(_p.persona, _p.version, _p.stamp).where(_p.persona.in_(personas)),
    personas="",
)
KEPT_TOPICS = Prepared(
    lambda personas: select(_t.persona, _t.topic).where(
        _t.persona.in_(personas),
        _t.version == select(_p.version).where(_p.persona == _t.persona).scalar_subquery(),
    ),
    personas="",
)


def kept(conn: Connection, personas: Sequence[str]) -> dict[str, tuple[Version, set[str]]]:
    """The version of each of these personas' packs, with the topics kept at that version."""
    versions: Sequence[Any] = KEPT.execute(conn, {}, personas=list(personas)).all()
    out: dict[str, tuple[Version, set[str]]] = {
        str(p): (Version(int(v), None if s is None else int(s)), set()) for p, v, s in versions
    }
    topics: Sequence[Any] = KEPT_TOPICS.execute(conn, {}, personas=list(personas)).all()
    for p, key in topics:
        if p in out:
            out[p][1].add(str(key))
    return out


def compile_for(dialect: Dialect) -> None:
    """Compile these statements for this dialect (see `read_path.compile_for`)."""
    for n in (1, 2, 4):
        PACKS.compile_for(dialect, personas=n)
        KEPT.compile_for(dialect, personas=n)
        KEPT_TOPICS.compile_for(dialect, personas=n)


def write(
    conn: Connection,
    persona: str,
    version: Version,
    rows: int,
    columns: bytes,
    cosines: Mapping[bytes, bytes],
) -> None:
    """Keep this pack of `persona` and its cosines to these topics (topic vector → float64
    cosines in the pack's order), replacing what was kept. The caller holds the write
    transaction and has checked that `version` is the persona's version now."""
    at = {"version": version.counter, "stamp": version.stamp, "rows": rows, "columns": columns}
    done = conn.execute(update(t.persona_read_packs).where(_p.persona == persona).values(**at))
    if not done.rowcount:
        conn.execute(insert(t.persona_read_packs).values(persona=persona, **at))
    conn.execute(delete(t.persona_read_topics).where(_t.persona == persona))
    if cosines:
        conn.execute(
            insert(t.persona_read_topics),
            [
                {
                    "persona": persona,
                    "topic": topic_key(topic),
                    "version": version.counter,
                    "stamp": version.stamp,
                    "cosines": cos,
                }
                for topic, cos in cosines.items()
            ],
        )
