"""How often keys were asked for lately: the frequency sketch the webhook's memos admit by.

A memo that evicts its oldest (or least recently used) entry keeps nothing when the keys that
keep coming are more than it holds: each entry is evicted just before it is asked for again
(issue 22). TinyLFU's answer, used by the decision memo (:mod:`cudasched.webhook.memo.decisions`)
and the placer's and snapshot's memos (:mod:`cudasched.webhook.memo.bounded`): count every lookup in
a small sketch and let a new entry replace only entries asked for less often than it.

The sketch is a count-min sketch of 4-bit counters (one byte each, saturating at 15) with two
indexes per key, taken from the low and high 32 bits of a 64-bit hash the memo supplies (a
SHA-256 digest's first eight bytes, or Python's ``hash``). Every ``10 x width`` counts all
counters are halved, so the past fades and a key that was hot an hour ago does not block the
keys of today. Its size is fixed when the memo is built and counted in the memo's budget.

Thread safety: a count is two read-modify-writes of a ``bytearray`` without a lock; a count
lost to a race only makes the policy's guess a little worse.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

__all__ = ["FrequencySketch", "second_chance_victims"]

T = TypeVar("T")

#: Counters saturate here (4 bits' worth).
_MAX_COUNT = 15
#: Counts per counter between two halvings of every counter.
_SAMPLE_PER_COUNTER = 10
_HALVE = bytes(i >> 1 for i in range(256))
_HASH_BITS = (1 << 64) - 1


class FrequencySketch:
    """Recent lookup frequencies of keys, for a memo of ``budget`` bytes whose entries take
    about ``entry_bytes`` or more: about four counters per entry the budget can hold (so the
    keys of a few times more requests than it holds are told apart), between 64 and 2**20."""

    __slots__ = ("_counted", "_mask", "_sample", "_sketch", "width")

    def __init__(self, budget: int, entry_bytes: int = 128) -> None:
        self.width = 1 << max(6, min(20, (budget // entry_bytes - 1).bit_length()))
        self._mask = self.width - 1
        self._sketch = bytearray(self.width)
        self._sample = self.width * _SAMPLE_PER_COUNTER
        self._counted = 0

    def count(self, key_hash: int) -> None:
        """Count one lookup of the key whose 64-bit hash is ``key_hash``."""
        sketch = self._sketch
        mask = self._mask
        i = key_hash & mask
        j = (key_hash >> 32) & mask
        if sketch[i] < _MAX_COUNT:
            sketch[i] += 1
        if sketch[j] < _MAX_COUNT:
            sketch[j] += 1
        self._counted += 1
        if self._counted >= self._sample:
            self._counted = 0
            self._sketch = sketch.translate(_HALVE)

    def frequency(self, key_hash: int) -> int:
        """How often the key was counted lately (an estimate that never undercounts, up to 15
        and up to halvings)."""
        sketch = self._sketch
        mask = self._mask
        return min(sketch[key_hash & mask], sketch[(key_hash >> 32) & mask])

    def before_this_lookup(self, key_hash: int) -> int:
        """How often the key was counted before the lookup that just missed it: what a
        newcomer is judged by. Counting the lookup itself would let every key of a cycle beat
        the entries the cycle has not reached yet (they were last counted a cycle ago), so one
        eviction would cascade through the memo for a whole pass."""
        return max(0, self.frequency(key_hash) - 1)

    @staticmethod
    def of_digest(digest: bytes) -> int:
        """The 64-bit hash of a key kept as a digest: its first eight bytes."""
        return int.from_bytes(digest[:8], "little")

    @staticmethod
    def of_hash(value: int) -> int:
        """Python's ``hash`` of a key as the sketch's 64-bit hash (negative hashes wrap)."""
        return value & _HASH_BITS


def second_chance_victims(
    order: Callable[[], Iterable[T]],
    need: int,
    newcomer: int,
    *,
    used: Callable[[T], bool],
    frequency: Callable[[T], int],
    freed_by: Callable[[T, dict[T, None]], int],
    requeue: Callable[[list[T]], None],
) -> dict[T, None] | None:
    """The entries to evict, oldest unused first, so that ``need`` bytes are freed, taking only
    entries asked for less often than the newcomer (its frequency ``newcomer``); ``None``, with
    nothing to evict, when the newcomer is not worth them or they do not free enough.

    ``order()`` iterates the memo's entries oldest first; an entry used since it was last
    passed gets a second chance: ``requeue`` gets those passed over (to clear their use and
    move them to the back) after each pass, and a second pass follows when the first ran out.
    ``freed_by(entry, victims)`` is what evicting ``entry`` frees with the ``victims`` chosen
    so far (``entry`` among them). Both memos evict by this rule
    (:mod:`cudasched.webhook.memo.decisions`, :mod:`cudasched.webhook.memo.bounded`)."""
    victims: dict[T, None] = {}
    freed = 0
    for _ in range(2):  # a second pass when every entry had been used
        passed: list[T] = []
        refused = False
        for entry in order():
            if freed >= need:
                break
            if entry in victims:
                continue
            if used(entry):
                passed.append(entry)  # second chance: to the back of the line
                continue
            if frequency(entry) >= newcomer:
                refused = True
                break
            victims[entry] = None
            freed += freed_by(entry, victims)
        requeue(passed)
        if refused:
            return None
        if freed >= need:
            return victims
    return None
