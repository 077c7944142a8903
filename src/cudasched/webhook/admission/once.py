"""Warnings given once per process: a small bounded set of what was already said.

Some admission warnings are about a shared object rather than the workload being admitted: a
ServingRuntime whose label declares less than its image needs warns every pod it serves, and
repeating that on every replica would bury the warning that matters. :class:`FirstSeen`
remembers which of them this process has already given.

"Once" is scoped to one webhook process: each replica warns once, a restart warns again, and
when more than ``max_keys`` different things have been said the oldest is forgotten (and may be
said again). Nothing here is shared between replicas or persisted; the words also go to the
webhook's log when they are first said.

Thread safety: review threads share one instance; :meth:`FirstSeen.first` takes a lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Hashable
from typing import TYPE_CHECKING

from cudasched.webhook.admission.review import clip
from cudasched.workloads.kserve import SERVING_RUNTIME

if TYPE_CHECKING:
    from cudasched.vocab.requirements import Requirement
    from cudasched.workloads.kserve import RuntimeChoice

__all__ = ["DEFAULT_MAX_KEYS", "FirstSeen", "said_once"]

log = logging.getLogger(__name__)

#: How many different warnings one process remembers (a few hundred bytes each).
DEFAULT_MAX_KEYS = 1024


class FirstSeen:
    """Keys this process has seen, at most ``max_keys`` of them (oldest forgotten first)."""

    def __init__(self, max_keys: int = DEFAULT_MAX_KEYS) -> None:
        if max_keys < 1:
            raise ValueError(f"invalid max_keys {max_keys!r}: expected >= 1")
        self.max_keys = max_keys
        self._seen: dict[Hashable, None] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._seen)

    def first(self, key: Hashable) -> bool:
        """Whether ``key`` is new (it is remembered from now on)."""
        with self._lock:
            if key in self._seen:
                return False
            self._seen[key] = None
            while len(self._seen) > self.max_keys:
                del self._seen[next(iter(self._seen))]
            return True


def said_once(
    seen: FirstSeen,
    requirement: Requirement,
    kind: str,
    runtime: RuntimeChoice | None,
    namespace: str,
) -> tuple[str, ...]:
    """The warning that a runtime's label and image disagree (the stricter of the two was
    used), the first time this process admits a ``kind`` object of that runtime with that
    disagreement; ``()`` after that, and when they agree. Pods and InferenceServices are
    counted apart: a pod's warnings reach its controller, an InferenceService's the user who
    applied it. A namespaced ServingRuntime is told apart by ``namespace``."""
    text = requirement.disagreement
    if not text:
        return ()
    where = namespace if runtime is not None and runtime.kind == SERVING_RUNTIME else ""
    if not seen.first((kind, where, text)):
        return ()
    log.info("%s (%s; said once per process)", text, requirement.source)
    return (clip(f"cudasched: {text}"),)
