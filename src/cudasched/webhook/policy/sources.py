"""Which pod keys the cluster creates: the pods it runs and the pod templates of its workload
controllers, each read down to its keys as it is watched.

A key is worth a table entry when a pod of it may come again: a Deployment's, ReplicaSet's,
StatefulSet's, DaemonSet's, Job's or CronJob's template (read before the controller makes its
pods, so the first pod of a new workload is often served), and any Pod that runs (its next
replica, restart or copy is). Only pods the policy's ``matchConditions`` would send (they may
need a GPU and are not skipped) count. A key stays while an object it came from exists, and
``keep_seconds`` (10 minutes by default) after the last one went: a Deployment recreated, a
Job run again, a pod deleted and created anew are served as before; after that the tables
forget it (garbage collection).

The reflectors store, for each object, only its name and keys (:meth:`SourceIndex.transform`),
never the object: a cluster's pods are many, their keys few.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

from cudasched.kube.reflector import ObjectKey
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.kinds import CONTROLLERS, POD, Kind
from cudasched.vocab.kserve import INFERENCESERVICE_LABEL
from cudasched.workloads.kserve.llm import PART_OF_LABEL, PART_OF_VALUE
from cudasched.workloads.pods import is_skipped, read_pod_template
from cudasched.workloads.policykey import key_pod, pod_key

__all__ = ["SOURCE_KINDS", "SourceIndex", "keys_of", "may_need_gpu"]

#: The kinds whose objects give keys: Pods and the workload controllers' templates.
SOURCE_KINDS: tuple[Kind, ...] = (POD, *CONTROLLERS)

_KSERVE_LABEL = INFERENCESERVICE_LABEL


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def may_need_gpu(pod: Mapping[str, Any]) -> bool:
    """The policy's (and the webhook's) ``may-need-gpu`` match condition, in Python."""
    meta = _mapping(pod.get("metadata"))
    annotations = _mapping(meta.get("annotations"))
    labels = _mapping(meta.get("labels"))
    spec = _mapping(pod.get("spec"))
    if any(isinstance(k, str) and k.startswith(L.PREFIX) for k in annotations):
        return True
    if _KSERVE_LABEL in labels or labels.get(PART_OF_LABEL) == PART_OF_VALUE:
        return True
    if spec.get("resourceClaims"):
        return True
    for container in spec.get("containers") or []:
        limits = _mapping(_mapping(_mapping(container).get("resources")).get("limits"))
        if any(str(k).startswith("nvidia.com/") for k in limits):
            return True
    return False


def _pods_of(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The pod ``obj`` is (a Pod) or its controller creates (its template)."""
    if obj.get("kind") == POD.kind or "containers" in _mapping(obj.get("spec")):
        return [dict(obj)]
    try:
        template = read_pod_template(obj)
    except InputError:
        return []
    return [{"metadata": dict(template.metadata), "spec": dict(template.spec)}]


def keys_of(obj: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The keys (and key pods) of the pods ``obj`` is or creates that the policy may serve."""
    namespace = str(_mapping(obj.get("metadata")).get("namespace") or "default")
    found: dict[str, dict[str, Any]] = {}
    for pod in _pods_of(obj):
        annotations = _mapping(_mapping(pod.get("metadata")).get("annotations"))
        if is_skipped(annotations) or not may_need_gpu(pod):
            continue
        key = pod_key(pod, namespace)
        if key is not None:
            found[key] = key_pod(pod, namespace)
    return found


class SourceIndex:
    """The keys of every watched object, counted (a reflector listener; its transform keeps
    each object as its name and keys only)."""

    def __init__(self, keep_seconds: float = 600.0) -> None:
        self.pods: dict[str, dict[str, Any]] = {}  # key -> key pod, of objects that exist
        self.keep_seconds = keep_seconds
        self._retired: dict[str, tuple[dict[str, Any], float]] = {}  # key -> (pod, when gone)
        self._count: Counter[str] = Counter()
        self._listed: set[str] = set()
        self.changes = 0  # bumped on every change of the key set

    @staticmethod
    def transform(obj: dict[str, Any]) -> dict[str, Any]:
        meta = _mapping(obj.get("metadata"))
        return {
            "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
            "keys": keys_of(obj),
        }

    def synced(self) -> bool:
        return all(k.plural in self._listed for k in SOURCE_KINDS)

    def current(self, now: float | None = None) -> dict[str, dict[str, Any]]:
        """The keys to hold now: those of existing objects, and those whose last object went
        less than ``keep_seconds`` ago (older ones are forgotten here)."""
        now = time.monotonic() if now is None else now
        expired = [k for k, (_, gone) in self._retired.items() if now - gone >= self.keep_seconds]
        for key in expired:
            del self._retired[key]
            self.changes += 1
        return {**{k: pod for k, (pod, _) in self._retired.items()}, **self.pods}

    def _add(self, stored: Mapping[str, Any] | None, sign: int) -> None:
        for key, pod in _mapping((stored or {}).get("keys")).items():
            self._count[key] += sign
            if self._count[key] <= 0:
                del self._count[key]
                gone = self.pods.pop(key, None)
                if gone is not None:
                    self._retired[key] = (gone, time.monotonic())
            elif key not in self.pods:
                self.pods[key] = pod
                if self._retired.pop(key, None) is None:
                    self.changes += 1

    # ReflectorListener
    def on_listed(
        self,
        kind: Kind,
        previous: Mapping[ObjectKey, dict[str, Any]],
        current: Mapping[ObjectKey, dict[str, Any]],
    ) -> None:
        for stored in current.values():
            self._add(stored, +1)
        for stored in previous.values():
            self._add(stored, -1)
        self._listed.add(kind.plural)
        self.changes += 1

    def on_event(self, kind: Kind, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        self._add(new, +1)
        self._add(old, -1)

    def on_absent(self, kind: Kind, previous: Mapping[ObjectKey, dict[str, Any]]) -> None:
        for stored in previous.values():
            self._add(stored, -1)
        self._listed.add(kind.plural)

    def on_restart(self, kind: Kind, reason: str) -> None:
        return None
