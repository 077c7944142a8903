"""A memo bounded in bytes, for the admission path's caches of derived values.

Counting entries is not enough when requests choose the size of what is cached: 4,096 merged
affinities of 12 KB each are 100 MB. So every entry is stored with the bytes it holds (the
caller knows: the length of a serialised key and value, plus a fixed overhead for the Python
objects around them), and the oldest entries are evicted until the new one fits. An entry larger
than an eighth of the budget is never stored, so one request cannot empty the memo.

Thread safety: ``get`` is one ``dict.get`` (atomic under the GIL) and takes no lock; ``put``
takes a lock. Review threads share one instance.
"""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

__all__ = ["ENTRY_OVERHEAD", "BoundedMemo"]

K = TypeVar("K")
V = TypeVar("V")

#: Bytes accounted per entry on top of what the caller counts (dict slot, tuple, object headers).
ENTRY_OVERHEAD = 200


class BoundedMemo(Generic[K, V]):
    """Values by key, at most ``max_bytes`` of them (0 turns the memo off)."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"invalid max_bytes {max_bytes!r}: expected >= 0")
        self.max_bytes = max_bytes
        self._entries: dict[K, tuple[V, int]] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes_used(self) -> int:
        return self._bytes

    def get(self, key: K) -> tuple[V] | None:
        """``(value,)`` for a remembered key (the value itself may be ``None``), else ``None``."""
        found = self._entries.get(key)
        return None if found is None else (found[0],)

    def put(self, key: K, value: V, size: int) -> bool:
        """Remember ``value`` under ``key``, counted as ``size`` bytes (plus the overhead);
        whether it was stored."""
        size += ENTRY_OVERHEAD
        if size > self.max_bytes // 8:
            return False
        with self._lock:
            entries = self._entries
            old = entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            while entries and self._bytes + size > self.max_bytes:
                oldest = next(iter(entries))
                self._bytes -= entries.pop(oldest)[1]
            entries[key] = (value, size)
            self._bytes += size
            return True
