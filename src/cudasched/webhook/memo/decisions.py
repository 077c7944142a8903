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
  can change the answer is in it (:mod:`cudasched.webhook.admission.recall` builds both). The memo
  keeps the SHA-256 of each key, not the key: 32 bytes instead of a whole pod (a few KiB), with
  collisions as unlikely as SHA-256's, which no one can produce on purpose either;
* entries belong to one snapshot, and snapshots only move forward. The memo holds its entries
  in a *generation* (a weak reference to the snapshot, the entries, their byte count) that is
  replaced whole, never edited in place by a lookup, so a lookup reads one consistent
  generation. A snapshot that has been replaced is *retired* (a weak set): a lookup with it
  misses and never makes it current again, and an answer computed from any snapshot other than
  the current one is not stored;
* memory is bounded by bytes: the key digests, each distinct answer once (the two keys of one
  request, and the many templates that get the same answer, share it), a fixed overhead per
  entry, and the frequency sketch below. A single request larger than an eighth of the budget
  is never stored.

What is kept when the budget is full (issue 22): a first-in-first-out memo (and a
least-recently-used one alike) keeps nothing at all when the templates that keep coming are
more than it holds, since each entry is evicted just before its next replica arrives; at 5,000
nodes and 1,000 templates cycled, the old memo answered 0 % of repeats. Here:

* *admission by frequency* (TinyLFU): every lookup counts its key in a small sketch of recent
  frequencies (:mod:`cudasched.webhook.memo.frequency`: 4-bit counters, two hashes, halved every
  ``10 x width`` lookups so the past fades). A new entry only replaces entries that were
  asked for less often than it was before the lookup that missed it; an entry as frequent as
  its would-be victims is not stored.
  A scan or a cycle larger than the memo then leaves the memo holding a fixed part of the
  working set (hits = budget / working set) instead of thrashing it, while a template with
  many replicas still gets in on its second;
* *eviction by second chance* (CLOCK): the victim is the oldest entry not used since it was
  stored or last passed over, so one hot old entry does not block everything behind it.

Thread safety: lookups run on the event loop without a lock (reading one attribute, a
``dict.get``, setting a flag and bumping two counters: lost updates of a counter or flag only
make a guess of the policy a little worse); stores and generation changes take a lock, and
they happen only on the slow path.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cudasched.webhook.memo.frequency import FrequencySketch, second_chance_victims

__all__ = ["Answer", "DecisionMemo"]

#: Bytes accounted per entry on top of its keys (the entry object, its slot in the order).
_ENTRY_OVERHEAD = 200
#: Bytes accounted per key: the 32-byte digest as a bytes object and its dict slot.
_KEY_BYTES = 120
#: Bytes accounted per distinct answer on top of its text (the object, its interning slot).
_ANSWER_OVERHEAD = 200


def digest(key: bytes) -> bytes:
    """What the memo keeps of ``key``."""
    return hashlib.sha256(key).digest()


@dataclass(frozen=True, slots=True)
class Answer:
    """A serialised AdmissionReview response cut around its uid: ``head + uid + tail``, with
    what the server counts for it."""

    head: bytes
    tail: bytes
    outcome: str
    unknown: tuple[str, str] | None = None  # the decision's (kind, reason), for the metric
    # Told again at each recall (opaque here): a pod's report of the controller no node can
    # run, so every replica's admission reaches the NoCompatibleNode reporter.
    report: object = None

    def render(self, uid_json: bytes) -> bytes:
        """The response for the request whose uid serialises to ``uid_json``."""
        return self.head + uid_json + self.tail

    @property
    def size(self) -> int:
        return len(self.head) + len(self.tail)


class _Entry:
    """One remembered request: its answer and the digests of the keys that find it."""

    __slots__ = ("answer", "keys", "used")

    def __init__(self, answer: Answer, keys: tuple[bytes, ...]) -> None:
        self.answer = answer
        self.keys = keys
        self.used = False


@dataclass(slots=True)
class _Generation:
    """The entries of one snapshot. ``owner`` is ``None`` for a snapshot type that cannot be
    weakly referenced (nothing is remembered then). ``entries`` finds an entry by key digest,
    ``order`` is the eviction order (oldest first), ``answers`` the distinct answers with the
    number of entries sharing each."""

    owner: weakref.ref[Any] | None
    entries: dict[bytes, _Entry] = field(default_factory=dict)
    order: dict[_Entry, None] = field(default_factory=dict)
    answers: dict[Answer, list[Any]] = field(default_factory=dict)  # answer -> [shared, refs]
    bytes: int = 0

    def owned_by(self, state: Any) -> bool:
        return self.owner is not None and self.owner() is state


def _entry_bytes(keys: int) -> int:
    return _ENTRY_OVERHEAD + keys * _KEY_BYTES


def _answer_bytes(answer: Answer) -> int:
    return answer.size + _ANSWER_OVERHEAD


class DecisionMemo:
    """Answers keyed by request, for the newest snapshot seen by :meth:`get`.

    ``max_bytes`` of 0 disables the memo (every lookup misses, nothing is stored). The
    frequency sketch takes about ``max_bytes / 128`` of the budget (128 KiB of the default
    16 MiB).
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"invalid max_bytes {max_bytes!r}: expected >= 0")
        self.max_bytes = max_bytes
        # An entry takes ~500 bytes or more (frequency.py).
        self._sketch = FrequencySketch(max_bytes, 128)
        #: What the entries may take: the budget less the sketch.
        self.entry_budget = max(0, max_bytes - self._sketch.width)
        self._lock = threading.Lock()
        self._gen = _Generation(None)
        self._retired: weakref.WeakSet[Any] = weakref.WeakSet()

    def __len__(self) -> int:
        """The number of remembered requests."""
        return len(self._gen.order)

    @property
    def bytes_used(self) -> int:
        """What the entries take (the sketch's fixed share aside)."""
        return self._gen.bytes

    def get(self, state: Any, key: bytes) -> Answer | None:
        """The answer remembered for ``key`` under ``state``, or ``None``. A ``state`` the memo
        has not seen before becomes the current one (the previous one is retired); a retired
        ``state`` just misses. Every lookup under the current snapshot counts ``key``."""
        if not self.max_bytes:
            return None
        gen = self._gen
        if gen.owned_by(state):
            found = digest(key)
            self._count(found)
            entry = gen.entries.get(found)
            if entry is None:
                return None
            entry.used = True
            return entry.answer
        self._adopt(state)
        return None

    def put(self, state: Any, keys: bytes | Sequence[bytes], answer: Answer) -> bool:
        """Remember ``answer`` under ``keys`` (one key or several that find the same request)
        if ``state`` is the current snapshot, the entry fits the budget and the policy admits
        it (see the module docstring); whether it was stored."""
        if not self.max_bytes:
            return False
        listed = [keys] if isinstance(keys, bytes) else keys
        digests = tuple(dict.fromkeys(digest(k) for k in listed))
        if not digests:
            return False
        with self._lock:
            gen = self._gen
            if not gen.owned_by(state):
                return False  # computed from a snapshot that is not (or no longer) current
            for d in digests:
                old = gen.entries.get(d)
                if old is not None:
                    self._evict(gen, old)  # replaced by the new entry (a race of two threads)
            shared = gen.answers.get(answer)
            size = _entry_bytes(len(digests))
            if shared is None:
                size += _answer_bytes(answer)
            if size > self.max_bytes // 8:
                return False
            if gen.bytes + size > self.entry_budget and not self._make_room(
                gen, size, max(self._prior(d) for d in digests)
            ):
                return False
            shared = gen.answers.get(answer)  # eviction may have dropped the last sharer
            if shared is None:
                shared = gen.answers[answer] = [answer, 0]
                gen.bytes += _answer_bytes(answer)
            shared[1] += 1
            entry = _Entry(shared[0], digests)
            for d in digests:
                gen.entries[d] = entry
            gen.order[entry] = None
            gen.bytes += _entry_bytes(len(digests))
            return True

    # ------------------------------------------------------------------ policy

    def _count(self, found: bytes) -> None:
        self._sketch.count(FrequencySketch.of_digest(found))

    def _prior(self, found: bytes) -> int:
        return self._sketch.before_this_lookup(FrequencySketch.of_digest(found))

    def _frequency(self, found: bytes) -> int:
        return self._sketch.frequency(FrequencySketch.of_digest(found))

    def _make_room(self, gen: _Generation, size: int, frequency: int) -> bool:
        """Evict entries until ``size`` more bytes fit, by the rule both memos share
        (:func:`~cudasched.webhook.memo.frequency.second_chance_victims`); ``False`` (nothing
        evicted) when the newcomer (``frequency``) is not worth them."""
        order = gen.order

        def requeue(passed: list[_Entry]) -> None:
            for entry in passed:
                entry.used = False
                del order[entry]
                order[entry] = None

        victims = second_chance_victims(
            lambda: order,
            gen.bytes + size - self.entry_budget,
            frequency,
            used=lambda entry: entry.used,
            frequency=lambda entry: max(self._frequency(d) for d in entry.keys),
            freed_by=lambda entry, chosen: self._freed_by(gen, entry, chosen),
            requeue=requeue,
        )
        if victims is None:
            return False
        for entry in victims:
            self._evict(gen, entry)
        return True

    @staticmethod
    def _freed_by(gen: _Generation, entry: _Entry, victims: dict[_Entry, None]) -> int:
        """The bytes evicting ``entry`` frees, given the ``victims`` chosen with it (its answer
        is freed with the last of the victims sharing it)."""
        freed = _entry_bytes(len(entry.keys))
        refs = gen.answers[entry.answer][1]
        if sum(1 for v in victims if v.answer is entry.answer) == refs:
            freed += _answer_bytes(entry.answer)
        return freed

    @staticmethod
    def _evict(gen: _Generation, entry: _Entry) -> None:
        if entry not in gen.order:
            return  # already gone
        del gen.order[entry]
        for d in entry.keys:
            if gen.entries.get(d) is entry:
                del gen.entries[d]
        gen.bytes -= _entry_bytes(len(entry.keys))
        shared = gen.answers[entry.answer]
        shared[1] -= 1
        if not shared[1]:
            del gen.answers[entry.answer]
            gen.bytes -= _answer_bytes(entry.answer)

    def _accounted(self) -> int:
        """The bytes the current generation's entries should be counted as (tests)."""
        gen = self._gen
        return sum(_entry_bytes(len(e.keys)) for e in gen.order) + sum(
            _answer_bytes(a) for a in gen.answers
        )

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
