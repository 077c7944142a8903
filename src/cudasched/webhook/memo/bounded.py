"""A memo bounded in bytes, for the admission path's caches of derived values (the placer's
compiled terms and merged affinities, a snapshot's "does any node fit" answers).

Counting entries is not enough when requests choose the size of what is cached: 4,096 merged
affinities of 12 KB each are 100 MB. So every entry is stored with the bytes it holds (the
caller knows: the length of a serialised key and value, plus a fixed overhead for the Python
objects around them). An entry larger than an eighth of the budget is never stored, so one
request cannot empty the memo.

What is kept when the budget is full is decided as in the decision memo (issue 22; see
:mod:`cudasched.webhook.memo.decisions`), because requests choose these keys too (a requirement's
annotations and image, a pod's own affinity) and can be more than the memo holds: evicting the
oldest entry would then keep nothing of a cycle of them, each entry evicted just before it is
asked for again. Instead:

* *admission by frequency*: every lookup counts its key in a frequency sketch
  (:mod:`cudasched.webhook.memo.frequency`, counted in the budget); a new entry only replaces
  entries asked for less often than it was before the lookup that missed it, so a scan or a
  cycle larger than the memo leaves it holding a steady part of the working set, and a key
  asked for again and again gets in;
* *eviction by second chance*: the victim is the oldest entry not used since it was stored or
  last passed over.

Thread safety: ``get`` takes no lock (a ``dict.get``, a flag and two counters: a lost update
only makes the policy's guess a little worse); ``put`` takes a lock. Review threads share one
instance.
"""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

from cudasched.webhook.memo.frequency import FrequencySketch, second_chance_victims

__all__ = ["ENTRY_OVERHEAD", "BoundedMemo"]

K = TypeVar("K")
V = TypeVar("V")

#: Bytes accounted per entry on top of what the caller counts (dict slot, tuple, object headers).
ENTRY_OVERHEAD = 200
# More than any count of the sketch: an entry that is admitted whatever it would replace.
_ALWAYS = 16


class _Slot(Generic[V]):
    """One entry: its value, the bytes it is counted as, whether it was used since it was
    stored or last passed over, and its key's hash for the sketch."""

    __slots__ = ("key_hash", "size", "used", "value")

    def __init__(self, value: V, size: int, key_hash: int) -> None:
        self.value = value
        self.size = size
        self.used = False
        self.key_hash = key_hash


class BoundedMemo(Generic[K, V]):
    """Values by key, at most ``max_bytes`` of them with the frequency sketch (0 turns the
    memo off). ``hits`` counts the lookups that found their key."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"invalid max_bytes {max_bytes!r}: expected >= 0")
        self.max_bytes = max_bytes
        # Entries are counted with ENTRY_OVERHEAD and more: about four counters per entry.
        self._sketch = FrequencySketch(max_bytes, ENTRY_OVERHEAD)
        #: What the entries may take: the budget less the sketch.
        self.entry_budget = max(0, max_bytes - self._sketch.width) if max_bytes else 0
        self._entries: dict[K, _Slot[V]] = {}  # in eviction order, oldest first
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes_used(self) -> int:
        """What the entries take (the sketch's fixed share aside)."""
        return self._bytes

    def get(self, key: K) -> tuple[V] | None:
        """``(value,)`` for a remembered key (the value itself may be ``None``), else ``None``.
        Every lookup counts ``key`` in the sketch."""
        if not self.max_bytes:
            return None
        self._sketch.count(FrequencySketch.of_hash(hash(key)))
        found = self._entries.get(key)
        if found is None:
            return None
        found.used = True
        self.hits += 1
        return (found.value,)

    def put(self, key: K, value: V, size: int) -> bool:
        """Remember ``value`` under ``key``, counted as ``size`` bytes (plus the overhead),
        when it fits and the policy admits it (see the module docstring); whether it was
        stored."""
        size += ENTRY_OVERHEAD
        if not self.max_bytes or size > self.max_bytes // 8:
            return False
        key_hash = FrequencySketch.of_hash(hash(key))
        with self._lock:
            entries = self._entries
            old = entries.pop(key, None)
            if old is not None:
                self._bytes -= old.size
            # A key stored again (two threads computed it) keeps its place in the memo.
            frequency = _ALWAYS if old is not None else self._sketch.before_this_lookup(key_hash)
            if self._bytes + size > self.entry_budget and not self._make_room(size, frequency):
                return False
            entries[key] = _Slot(value, size, key_hash)
            self._bytes += size
            return True

    def _make_room(self, size: int, frequency: int) -> bool:
        """Evict entries until ``size`` more bytes fit, by the rule both memos share
        (:func:`~cudasched.webhook.memo.frequency.second_chance_victims`); ``False`` (nothing
        evicted) when the newcomer (``frequency``) is not worth them. Called with the lock
        held."""
        entries = self._entries

        def requeue(passed: list[K]) -> None:
            for key in passed:
                slot = entries.pop(key)
                slot.used = False
                entries[key] = slot

        victims = second_chance_victims(
            lambda: entries,
            self._bytes + size - self.entry_budget,
            frequency,
            used=lambda key: entries[key].used,
            frequency=lambda key: self._sketch.frequency(entries[key].key_hash),
            freed_by=lambda key, _: entries[key].size,
            requeue=requeue,
        )
        if victims is None:
            return False
        for key in victims:
            self._bytes -= entries.pop(key).size
        return True
