"""Thread-safe helpers of the webhook server: a bounded set and one lock per key."""

from __future__ import annotations

import threading
from collections import OrderedDict
from contextlib import contextmanager
from typing import Any, Iterator


class LRUSet:
    """A thread-safe set that remembers at most ``capacity`` keys (oldest forgotten first)."""

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"LRU capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._items: OrderedDict[Any, None] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, key: Any) -> bool:
        """Add ``key``; False if it was already present (then it becomes the newest)."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return False
            self._items[key] = None
            if len(self._items) > self.capacity:
                self._items.popitem(last=False)
            return True

    def discard(self, key: Any) -> None:
        with self._lock:
            self._items.pop(key, None)

    def __contains__(self, key: Any) -> bool:
        with self._lock:
            return key in self._items

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


class KeyedLocks:
    """One lock per key, created on demand and dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[Any, tuple[threading.Lock, int]] = {}

    @contextmanager
    def hold(self, key: Any) -> Iterator[None]:
        with self._guard:
            lock, users = self._locks.get(key, (threading.Lock(), 0))
            self._locks[key] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                lock, users = self._locks[key]
                if users == 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        with self._guard:
            return len(self._locks)


__all__ = ["KeyedLocks", "LRUSet"]
