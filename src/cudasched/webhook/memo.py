"""Remembered admission answers, per cluster snapshot.

Pods are created from templates: every replica of a Deployment, every pod of a KServe
predictor's ReplicaSet, every restart of a Job arrives at the webhook as the same object (the
API server fills in ``metadata.name`` and ``metadata.uid`` only after mutating admission), under
a new AdmissionReview ``uid``. The decision is a pure function of the request without its uid,
the configuration and the cluster snapshot, so the answer for a repeat is the first answer with
the new uid spliced in.

Correctness rests on three rules:

* the key is the serialised request fields the decision reads (kind, operation, namespace,
  group/kind, sub-resource, the whole object), or the body itself minus its uid: anything that
  can change the answer is in it (:mod:`cudasched.webhook.recall` builds both);
* entries belong to one snapshot, and snapshots only move forward. The memo holds its entries
  in a *generation* (a weak reference to the snapshot, the entries, their byte count) that is
  replaced whole, never edited in place by a lookup, so a lookup reads one consistent
  generation. A snapshot that has been replaced is *retired* (a weak set): a lookup with it
  misses and never makes it current again, and an answer computed from any snapshot other than
  the current one is not stored;
* memory is bounded by bytes (keys and answers), oldest entries evicted first; a single
  request larger than an eighth of the budget is never stored.

Thread safety: lookups run on the event loop without a lock (reading one attribute and a
``dict.get`` are atomic under the GIL); stores and generation changes take a lock, and they
happen only on the slow path.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Answer", "DecisionMemo"]

#: Bytes accounted per entry on top of its key and answer (dict slot, tuple, bytes headers).
_ENTRY_OVERHEAD = 200


@dataclass(frozen=True, slots=True)
class Answer:
    """A serialised AdmissionReview response cut around its uid: ``head + uid + tail``, with
    what the server counts for it."""

    head: bytes
    tail: bytes
    outcome: str
    unknown: tuple[str, str] | None = None  # the decision's (kind, reason), for the metric

    def render(self, uid_json: bytes) -> bytes:
        """The response for the request whose uid serialises to ``uid_json``."""
        return self.head + uid_json + self.tail

    @property
    def size(self) -> int:
        return len(self.head) + len(self.tail)


@dataclass(slots=True)
class _Generation:
    """The entries of one snapshot. ``owner`` is ``None`` for a snapshot type that cannot be
    weakly referenced (nothing is remembered then)."""

    owner: weakref.ref[Any] | None
    entries: dict[bytes, Answer] = field(default_factory=dict)
    bytes: int = 0

    def owned_by(self, state: Any) -> bool:
        return self.owner is not None and self.owner() is state


class DecisionMemo:
    """Answers keyed by request, for the newest snapshot seen by :meth:`get`.

    ``max_bytes`` of 0 disables the memo (every lookup misses, nothing is stored).
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"invalid max_bytes {max_bytes!r}: expected >= 0")
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._gen = _Generation(None)
        self._retired: weakref.WeakSet[Any] = weakref.WeakSet()

    def __len__(self) -> int:
        return len(self._gen.entries)

    @property
    def bytes_used(self) -> int:
        return self._gen.bytes

    def get(self, state: Any, key: bytes) -> Answer | None:
        """The answer remembered for ``key`` under ``state``, or ``None``. A ``state`` the memo
        has not seen before becomes the current one (the previous one is retired); a retired
        ``state`` just misses."""
        if not self.max_bytes:
            return None
        gen = self._gen
        if gen.owned_by(state):
            return gen.entries.get(key)
        self._adopt(state)
        return None

    def put(self, state: Any, key: bytes, answer: Answer) -> bool:
        """Remember ``answer`` for ``key`` if ``state`` is the current snapshot and the entry
        fits the budget; whether it was stored."""
        size = len(key) + answer.size + _ENTRY_OVERHEAD
        if size > self.max_bytes // 8:
            return False
        with self._lock:
            gen = self._gen
            if not gen.owned_by(state):
                return False  # computed from a snapshot that is not (or no longer) current
            entries = gen.entries
            old = entries.pop(key, None)
            if old is not None:
                gen.bytes -= len(key) + old.size + _ENTRY_OVERHEAD
            while entries and gen.bytes + size > self.max_bytes:
                oldest = next(iter(entries))
                dropped = entries.pop(oldest)
                gen.bytes -= len(oldest) + dropped.size + _ENTRY_OVERHEAD
            entries[key] = answer
            gen.bytes += size
            return True

    def _adopt(self, state: Any) -> None:
        with self._lock:
            gen = self._gen
            if gen.owned_by(state):
                return  # another thread adopted it first
            try:
                if state in self._retired:
                    return  # replaced snapshots never come back
                ref: weakref.ref[Any] | None = weakref.ref(state)
            except TypeError:  # a snapshot type without weak references: never remember
                ref = None
            previous = gen.owner() if gen.owner is not None else None
            if previous is not None:
                self._retired.add(previous)
            self._gen = _Generation(ref)
