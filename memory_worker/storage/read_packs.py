"""The reader's packs: one persona's ranking columns, and its rows' cosines to a room topic,
each in one blob (schema/versions/0015).

A process that does not hold a persona reads its pack and the rows the change log names
since, instead of every row the room's audience may see: one row of a few bytes per memory,
not the memories. The reader's background threads write a pack when the one stored is missing
or far behind, and a topic's cosines when they hold them exactly; the write path never does.
A delete (the human's, `memories.delete_rows`) takes its rows out of the persona's pack and
cosines in its own transaction (`forget`), so the pack outlives it and no pack ever holds a
number of a deleted row.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import Connection, and_, bindparam, delete, insert, select, update
from sqlalchemy.engine import Dialect

from memory_worker.core import tables as t
from memory_worker.core.read_columns import TOPICS_PER_PERSONA, Version, Versions, packed, unpacked
from memory_worker.storage import read_path
from memory_worker.storage.prepared import Prepared

_p, _t = t.persona_read_packs.c, t.persona_read_topics.c


@dataclass(frozen=True)
class Cosines:
    """A persona's rows' cosines to one topic, as of `version`: ids (int64) and cosines
    (float64), in the same order."""

    version: Version
    ids: bytes
    cosines: bytes


@dataclass(frozen=True)
class Pack:
    """A persona's pack as stored: its version, row count and columns, and its rows' cosines
    to the topic asked about, if kept."""

    version: Version
    rows: int
    columns: bytes
    topic: Cosines | None


def topic_key(topic: bytes) -> str:
    """The name a topic's cosines are kept under: the sha256 of its vector, 32 hex digits."""
    return hashlib.sha256(topic).hexdigest()[:32]


def _version(counter: Any, stamp: Any) -> Version:
    return Version(int(counter), None if stamp is None else int(stamp))


PACKS = Prepared(
    lambda personas: (
        select(_p.persona, _p.version, _p.stamp, _p.rows, _p.columns, _t.version, _t.stamp, _t.ids)
        .add_columns(_t.cosines)
        .select_from(
            t.persona_read_packs.outerjoin(
                t.persona_read_topics,
                and_(_t.persona == _p.persona, _t.topic == bindparam("topic")),
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
    out = {}
    for p, v, s, n, cols, tv, ts, ids, cos in found:
        cosines = None if cos is None else Cosines(_version(tv, ts), bytes(ids), bytes(cos))
        out[str(p)] = Pack(_version(v, s), int(n), bytes(cols), cosines)
    return out


KEPT = Prepared(
    lambda personas: select(_p.persona, _p.version, _p.stamp).where(_p.persona.in_(personas)),
    personas="",
)
KEPT_TOPICS = Prepared(
    lambda personas: select(_t.persona, _t.topic, _t.version, _t.stamp).where(
        _t.persona.in_(personas)
    ),
    personas="",
)

Kept = tuple[Version | None, dict[str, Version]]  # a persona's pack version, its topics'


def kept(conn: Connection, personas: Sequence[str]) -> dict[str, Kept]:
    """For each of these personas, the version of its pack (None: none) and of each topic's
    cosines kept."""
    out: dict[str, Kept] = {p: (None, {}) for p in personas}
    packed: Sequence[Any] = KEPT.execute(conn, {}, personas=list(personas)).all()
    for p, v, s in packed:
        out[str(p)] = (_version(v, s), out[str(p)][1])
    topics: Sequence[Any] = KEPT_TOPICS.execute(conn, {}, personas=list(personas)).all()
    for p, key, v, s in topics:
        out[str(p)][1][str(key)] = _version(v, s)
    return out


def compile_for(dialect: Dialect) -> None:
    """Compile these statements for this dialect (see `read_path.compile_for`)."""
    for n in (1, 2, 4):
        PACKS.compile_for(dialect, personas=n)
        KEPT.compile_for(dialect, personas=n)
        KEPT_TOPICS.compile_for(dialect, personas=n)


def write_pack(conn: Connection, persona: str, version: Version, rows: int, columns: bytes) -> None:
    """Keep this pack of `persona`, replacing the one kept. The caller holds the write
    transaction and has checked that `version` is the persona's version now."""
    at = {"version": version.counter, "stamp": version.stamp, "rows": rows, "columns": columns}
    done = conn.execute(update(t.persona_read_packs).where(_p.persona == persona).values(**at))
    if not done.rowcount:
        conn.execute(insert(t.persona_read_packs).values(persona=persona, **at))


def write_cosines(
    conn: Connection, persona: str, version: Version, ids: bytes, cosines: Mapping[bytes, bytes]
) -> None:
    """Keep these topics' cosines (topic vector → float64 cosines of the rows `ids`, in that
    order) as of `version`, replacing those kept of the same topics; then only the newest
    TOPICS_PER_PERSONA topics of the persona stay. Same checks as `write_pack`."""
    keys = [topic_key(topic) for topic in cosines]
    conn.execute(delete(t.persona_read_topics).where(_t.persona == persona, _t.topic.in_(keys)))
    conn.execute(
        insert(t.persona_read_topics),
        [
            {
                "persona": persona,
                "topic": key,
                "version": version.counter,
                "stamp": version.stamp,
                "ids": ids,
                "cosines": cos,
            }
            for key, cos in zip(keys, cosines.values(), strict=True)
        ],
    )
    newest = (
        select(_t.topic)
        .where(_t.persona == persona)
        .order_by(_t.version.desc())
        .limit(TOPICS_PER_PERSONA)
    )
    conn.execute(
        delete(t.persona_read_topics).where(_t.persona == persona, _t.topic.not_in(newest))
    )


def forget(conn: Connection, gone: Mapping[str, Sequence[int]], before: Versions) -> None:
    """Take the rows `gone` (persona → the ids its delete just removed) out of each persona's
    pack and topics' cosines, in the delete's transaction. What was kept at the persona's
    version `before` the delete is then kept at its version now, as a commit's pack stays
    in step through the change log: the next cold open reads it and no row by id. What was
    kept at an older version stays at it, less these rows (the change log names them too)."""
    now = read_path.versions(conn, list(gone))

    def moved(counter: int, stamp: int | None, persona: str) -> Version:
        kept = _version(counter, stamp)
        return now[persona] if kept == before[persona] else kept

    ids_of = {p: sorted(ids) for p, ids in gone.items()}
    for p, n, v, s, cols in conn.execute(
        select(_p.persona, _p.rows, _p.version, _p.stamp, _p.columns).where(
            _p.persona.in_(list(gone))
        )
    ):
        version = moved(v, s, p)
        left = unpacked(bytes(cols), version).without(ids_of[p], version)
        if len(left) != n or version != _version(v, s):
            write_pack(conn, p, version, len(left), packed(left))
    for p, key, v, s, ids, cos in conn.execute(
        select(_t.persona, _t.topic, _t.version, _t.stamp, _t.ids, _t.cosines).where(
            _t.persona.in_(list(gone))
        )
    ):
        version = moved(v, s, p)
        held = np.frombuffer(bytes(ids), dtype="<i8")
        keep = ~np.isin(held, np.array(ids_of[p], dtype=np.int64))
        cosines = np.frombuffer(bytes(cos), dtype="<f8")[keep]
        conn.execute(
            update(t.persona_read_topics)
            .where(_t.persona == p, _t.topic == key)
            .values(
                version=version.counter,
                stamp=version.stamp,
                ids=held[keep].tobytes(),
                cosines=cosines.tobytes(),
            )
        )
