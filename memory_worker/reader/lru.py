"""A least-recently-used store bounded in bytes: the read cache's first part (cache.py).

Plain and not thread-safe: the cache holds its lock around every call. Written here rather
than taken from cachetools: its `LRUCache(getsizeof=...)` counts a value once, as it is set,
and makes every set a use, where the read cache changes an entry's size in place (a topic's
cosines, the winners kept) and lets the sweep catch an entry up without it counting as a use.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class ByteLRU(Generic[K, V]):
    """Values by key, each with its size in bytes, the least recently used let go of first
    once their sum passes `max_bytes`. What grows the store returns the keys it let go of,
    for the owner to forget what it kept beside them."""

    def __init__(self, max_bytes: int) -> None:
        self._values: OrderedDict[K, V] = OrderedDict()
        self._sizes: dict[K, int] = {}
        self.max_bytes = max_bytes
        self.bytes = 0

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._values))

    def __len__(self) -> int:
        return len(self._values)

    def items(self) -> list[tuple[K, V]]:
        return list(self._values.items())

    def values(self) -> list[V]:
        return list(self._values.values())

    def peek(self, key: K) -> V | None:
        """The value held for `key`, its place in the order unchanged."""
        return self._values.get(key)

    def use(self, key: K) -> None:
        """`key` was just used: the last to go."""
        self._values.move_to_end(key)

    def replace(self, key: K, value: V) -> None:
        """Another value of the same size for a held key, in the same place."""
        self._values[key] = value

    def set(self, key: K, value: V, size: int, *, recent: bool = True) -> list[K]:
        """Hold `value` of `size` bytes (a held key keeps its place unless `recent`): the keys
        let go of, `key` itself when it alone is bigger than the bound."""
        if size > self.max_bytes:
            return [key] if self.pop(key) is not None else []
        if key in self._values:
            self.bytes -= self._sizes[key]
        self._values[key] = value
        if recent:
            self._values.move_to_end(key)
        self._sizes[key] = size
        self.bytes += size
        return self._trim()

    def resize(self, key: K, size: int) -> list[K]:
        """The held value of `key` now takes `size` bytes (it grew or shrank in place): the
        keys let go of."""
        self.bytes += size - self._sizes[key]
        self._sizes[key] = size
        return self._trim()

    def pop(self, key: K) -> V | None:
        """Let go of `key` (if held), returning its value."""
        value = self._values.pop(key, None)
        if key in self._sizes:
            self.bytes -= self._sizes.pop(key)
        return value

    def clear(self) -> None:
        self._values.clear()
        self._sizes.clear()
        self.bytes = 0

    def _trim(self) -> list[K]:
        gone = []
        while self.bytes > self.max_bytes and self._values:
            gone.append(key := next(iter(self._values)))
            self.pop(key)
        return gone
