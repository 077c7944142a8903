"""Remembered admission answers, per cluster snapshot.

Pods are created from templates: every replica of a Deployment, every pod of a KServe
predictor's ReplicaSet, every restart of a Job arrives at the webhook as the same object (the
API server fills in ``metadata.name`` and ``metadata.uid`` only after mutating admission), under
a new AdmissionReview ``uid``. The decision is a pure function of the request without its uid,
the configuration and the cluster snapshot, so the answer for a repeat is the first answer with
the new uid spliced in.

Correctness rests on three rules:

* the key is the serialised request fields the decision reads (kind, operation, namespace,
  group/kind, sub-resource, the whole object): anything that can change the answer is in it;
* entries belong to one snapshot. The memo holds a weak reference to the snapshot its entries
  were computed from; a lookup with another snapshot starts afresh, and an answer computed from
  an older snapshot than the memo's (a slow review thread) is not stored;
* memory is bounded by bytes (keys and answers), oldest entries evicted first; a single
  request larger than an eighth of the budget is never stored.

Thread safety: lookups run on the event loop without a lock (a ``dict.get`` is atomic under the
GIL); stores and resets take a lock, and they happen only on the slow path.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any

__all__ = ["Answer", "DecisionMemo"]

#: Bytes accounted per entry on top of its key and answer (dict slot, tuple, bytes headers).
_ENTRY_OVERHEAD = 200


@dataclass(frozen=True, slots=True)
class Answer:
    """A serialised AdmissionReview response cut around its uid: ``head + uid + tail``."""

    head: bytes
    tail: bytes
    outcome: str

    def render(self, uid_json: bytes) -> bytes:
        """The response for the request whose uid serialises to ``uid_json``."""
        return self.head + uid_json + self.tail

    @property
    def size(self) -> int:
        return len(self.head) + len(self.tail)


class DecisionMemo:
    """Answers keyed by request, for the newest snapshot seen by :meth:`get`.

    ``max_bytes`` of 0 disables the memo (every lookup misses, nothing is stored).
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"invalid max_bytes {max_bytes!r}: expected >= 0")
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._owner: weakref.ref[Any] | None = None
        self._entries: dict[bytes, Answer] = {}
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes_used(self) -> int:
        return self._bytes

    def get(self, state: Any, key: bytes) -> Answer | None:
        """The answer remembered for ``key`` under ``state``, or ``None``. A ``state`` other
        than the memo's current one makes it the current one (entries are dropped)."""
        if not self.max_bytes:
            return None
        owner = self._owner
        if owner is None or owner() is not state:
            self._adopt(state)
            return None
        return self._entries.get(key)

    def put(self, state: Any, key: bytes, answer: Answer) -> bool:
        """Remember ``answer`` for ``key`` if ``state`` is still the current snapshot and it
        fits the budget; whether it was stored."""
        size = len(key) + answer.size + _ENTRY_OVERHEAD
        if size > self.max_bytes // 8:
            return False
        with self._lock:
            owner = self._owner
            if owner is None or owner() is not state:
                return False  # computed from a snapshot that has been replaced since
            entries = self._entries
            old = entries.pop(key, None)
            if old is not None:
                self._bytes -= len(key) + old.size + _ENTRY_OVERHEAD
            while entries and self._bytes + size > self.max_bytes:
                oldest = next(iter(entries))
                dropped = entries.pop(oldest)
                self._bytes -= len(oldest) + dropped.size + _ENTRY_OVERHEAD
            entries[key] = answer
            self._bytes += size
            return True

    def _adopt(self, state: Any) -> None:
        try:
            ref = weakref.ref(state)
        except TypeError:  # a snapshot type without weak references: never remember
            ref = None
        with self._lock:
            owner = self._owner
            if owner is not None and owner() is state:
                return  # another thread adopted it first
            self._owner = ref
            self._entries = {}
            self._bytes = 0
