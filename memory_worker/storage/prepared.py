"""Statements compiled once per process: SQLAlchemy Core in, the driver's own SQL out.

Building a Core statement and walking it for its cache key costs more than SQLite's own work
for the small reads of a room open and a spell (measured for both). A `Prepared` builds
its statement once per dialect and IN-list shape, keeps the compiled SQL, and runs it with
`exec_driver_sql`: each call pays only for its parameters.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from sqlalchemy import (
    BindParameter,
    ClauseElement,
    ColumnElement,
    Connection,
    CursorResult,
    Integer,
    LargeBinary,
    Text,
    bindparam,
    cast,
    literal_column,
    null,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeEngine

Column = ColumnElement[Any]


# The longest IN list the write path hands a `Prepared` statement: eleven shapes (1, 2, 4 …
# 1,024), far under SQLite's 32,766 parameters; a longer list is cut in parts or built per call.
PREPARED_IN_MAX = 1024

# The most ids any statement binds in one IN list (ours): a stock SQLite binds at most 32,766
# parameters a statement, PostgreSQL 65,535; "clear all" of 40k rows in one list failed.
IDS_PER_STATEMENT = 10_000


def in_parts(ids: Iterable[int]) -> Iterator[list[int]]:
    """`ids` in lists short enough for one statement each (`IDS_PER_STATEMENT`)."""
    listed = list(ids)
    for start in range(0, len(listed), IDS_PER_STATEMENT):
        yield listed[start : start + IDS_PER_STATEMENT]


def _bucket(n: int) -> int:
    """An IN list's length rounded up to a power of two, at least 1: a handful of shapes."""
    return 1 << max(n - 1, 0).bit_length()


class Prepared:
    """A Core statement compiled once per dialect and IN-list shape, run as driver SQL.

    `build` takes, for each name in `lists`, a list of bind parameters to put in an IN; a list
    of values is padded to a power of two by repeating its last value (IN ignores repeats), and
    an empty one holds the `lists` value given for it: one that matches no row.
    """

    def __init__(self, build: Callable[..., ClauseElement], **lists: Any):
        self._build = build
        self._lists = tuple(lists)
        self._nothing = lists
        self._compiled: dict[tuple[Any, ...], tuple[str, Any, dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def execute(
        self, conn: Connection, params: dict[str, Any], **lists: Sequence[Any]
    ) -> CursorResult[Any]:
        sql, args = self._bound(conn.dialect, params, lists)
        return conn.exec_driver_sql(sql, args)

    def fetch_raw(
        self, raw: Any, dialect: Dialect, params: dict[str, Any], **lists: Sequence[Any]
    ) -> list[Any]:
        """Every row, run on a pooled DBAPI connection (`Engine.raw_connection`): no
        SQLAlchemy Connection and no transaction begun, for a read that is one statement."""
        sql, args = self._bound(dialect, params, lists)
        cursor = raw.cursor()
        try:
            cursor.execute(sql, args)
            return list(cursor.fetchall())
        finally:
            cursor.close()

    def compile_for(self, dialect: Dialect, **sizes: int) -> None:
        """Compile for this dialect and these IN-list lengths now (a process's start)."""
        self._compile(dialect, tuple(_bucket(sizes.get(n, 1)) for n in self._lists))

    def _bound(
        self, dialect: Dialect, params: dict[str, Any], lists: dict[str, Sequence[Any]]
    ) -> tuple[str, Any]:
        sizes = tuple(_bucket(len(lists[n])) for n in self._lists)
        sql, order, constants = self._compile(dialect, sizes)
        values = {**constants, **params}
        for name, size in zip(self._lists, sizes, strict=True):
            items = list(lists[name]) or [self._nothing[name]]
            items += items[-1:] * (size - len(items))
            values.update({f"{name}_{i}": v for i, v in enumerate(items)})
        args = tuple(values[k] for k in order) if order is not None else values
        return sql, args

    def _compile(self, dialect: Dialect, sizes: tuple[int, ...]) -> tuple[str, Any, dict[str, Any]]:
        key = (dialect.name, dialect.paramstyle, sizes)
        got = self._compiled.get(key)
        if got is None:
            with self._lock:
                binds: dict[str, list[BindParameter[Any]]] = {
                    name: [bindparam(f"{name}_{i}") for i in range(size)]
                    for name, size in zip(self._lists, sizes, strict=True)
                }
                compiled: Any = self._build(**binds).compile(dialect=dialect)  # SQLCompiler
                order = tuple(compiled.positiontup or ()) if compiled.positional else None
                # The statement's own literals (CASE values, constants) are bound too.
                got = self._compiled[key] = (str(compiled), order, dict(compiled.params))
        return got


def tagged(
    tag: str,
    key: Column,
    *,
    a: Column | None = None,
    b: Column | None = None,
    n1: Column | None = None,
    n2: Column | None = None,
    n3: Column | None = None,
    blob: Column | None = None,
) -> list[Column]:
    """One branch of a UNION ALL that folds several small reads into one statement: (tag, key,
    a, b, n1, n2, n3, blob), typed for PostgreSQL's UNION rules."""

    def typed(value: Column | None, type_: type[TypeEngine[Any]]) -> Column:
        return cast(null(), type_) if value is None else value

    return [
        literal_column(f"'{tag}'", Text).label("tag"),
        typed(key, Text).label("k"),
        typed(a, Text).label("a"),
        typed(b, Text).label("b"),
        typed(n1, Integer).label("n1"),
        typed(n2, Integer).label("n2"),
        typed(n3, Integer).label("n3"),
        typed(blob, LargeBinary).label("blob"),
    ]
