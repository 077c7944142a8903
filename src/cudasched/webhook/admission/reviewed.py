"""The object under review, read and edited the way admission needs it.

Admission must never change the request's own object (the memo keys on it and a copy is what
the patch is computed against), and copying a whole pod per review costs more than a quarter of
a first-seen decision. So these helpers copy only what a mutation writes (the top level,
``metadata``, ``spec``), build new annotation maps instead of editing, fill in the namespace
the request carries, and say which objects declare a requirement and which placement to report
for the NoCompatibleNode Event. Pure: dicts in, dicts out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson

from cudasched.vocab import labels as L
from cudasched.vocab.jsontree import copy_json
from cudasched.vocab.kinds import (
    CRON_JOB,
    DEPLOYMENT,
    INFERENCE_SERVICE,
    JOB,
    LLM_INFERENCE_SERVICE,
    STATEFUL_SET,
)
from cudasched.vocab.objects import annotations_of, metadata_of
from cudasched.webhook.admission.review import Placement, ReviewRequest

__all__ = [
    "NOT_DECLARING",
    "REPORTED_KINDS",
    "WORKLOAD_KINDS",
    "copy_decoded",
    "declares_requirement",
    "owner_placement",
    "placement_of",
    "pod_for_mutation",
    "set_annotation",
    "with_namespace",
]

#: Annotations cudasched writes or reads as switches; they do not declare a requirement.
NOT_DECLARING = frozenset({L.ANN_REQUIREMENT, L.ANN_SKIP})

#: LeaderWorkerSet (sigs.k8s.io/lws): a leader template (optional) and a worker template.
_LWS_GROUP, _LWS_VERSION = "leaderworkerset.x-k8s.io", "v1"

#: ``(group, kind)`` of the workload controllers whose pod templates admission judges
#: (``templaterules``): the Deployments, StatefulSets, Jobs, CronJobs and LeaderWorkerSets
#: most GPU workloads come from.
WORKLOAD_KINDS: frozenset[tuple[str, str]] = frozenset(
    {(k.group, k.kind) for k in (DEPLOYMENT, STATEFUL_SET, JOB, CRON_JOB)}
    | {(_LWS_GROUP, "LeaderWorkerSet")}
)

#: ``(group, kind)`` of the objects reported: what a user deploys and then waits on;
#: admission tells the NoCompatibleNode reporter where each can run.
REPORTED_KINDS: frozenset[tuple[str, str]] = frozenset(
    {
        (INFERENCE_SERVICE.group, INFERENCE_SERVICE.kind),
        (LLM_INFERENCE_SERVICE.group, LLM_INFERENCE_SERVICE.kind),
        *WORKLOAD_KINDS,
    }
)

# The version an Event refers to a reported object by when the object does not say its own.
_API_VERSIONS = {
    INFERENCE_SERVICE.kind: INFERENCE_SERVICE.api_version,
    LLM_INFERENCE_SERVICE.kind: LLM_INFERENCE_SERVICE.api_version,
    **{k.kind: k.api_version for k in (DEPLOYMENT, STATEFUL_SET, JOB, CRON_JOB)},
    "LeaderWorkerSet": f"{_LWS_GROUP}/{_LWS_VERSION}",
}


def declares_requirement(obj: Mapping[str, Any]) -> bool:
    """Whether the object carries one of our annotations that states a need (a skip switch or
    our own output annotation does not count)."""
    return any(
        isinstance(k, str) and k.startswith(L.PREFIX) and k not in NOT_DECLARING
        for k in annotations_of(obj)
    )


def copy_decoded(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of an object that :func:`~cudasched.webhook.admission.review.parse_review`
    decoded with orjson (plain JSON data by construction): an orjson round trip in C is several
    times faster than walking the tree in Python, and each review copies its object twice."""
    try:
        copied = orjson.loads(orjson.dumps(obj))
    except TypeError:  # not plain JSON data after all: copy it the general way
        copied = None
    if isinstance(copied, dict):
        return copied
    general: dict[str, Any] = copy_json(obj)
    return general


def with_namespace(obj: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """``obj`` with metadata.namespace filled in: pods arrive with an empty namespace (the
    request carries it) and resolution looks runtimes up by namespace. Only the object and its
    metadata are new dicts; everything below is shared, because resolution only reads."""
    out = dict(obj)
    meta = out.get("metadata")
    meta = dict(meta) if (type(meta) is dict or isinstance(meta, Mapping)) else {}
    out["metadata"] = meta
    if namespace and not meta.get("namespace"):
        meta["namespace"] = namespace
    return out


def pod_for_mutation(pod: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``pod`` that admission may change where a pod mutation writes (the top level,
    ``metadata`` and ``spec`` are new dicts; ``set_annotation`` and the merge build new
    annotation and affinity values instead of editing): deep-copying the whole pod cost more
    than a quarter of a first-seen decision."""
    out = dict(pod)
    for key in ("metadata", "spec"):
        value = out.get(key)
        if type(value) is dict or isinstance(value, Mapping):
            out[key] = dict(value)
    return out


def set_annotation(obj: dict[str, Any], key: str, value: str | None) -> None:
    """Set (or with ``None`` remove) one annotation of ``obj``, building a new annotation
    map rather than editing the one the object shares with the request."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        if value is None:
            return  # nothing to remove; creating metadata would be a no-op patch
        meta = {}  # a malformed value is replaced whole, never walked into
        obj["metadata"] = meta
    current = meta.get("annotations")
    ann = dict(current) if (type(current) is dict or isinstance(current, Mapping)) else {}
    if value is None:
        ann.pop(key, None)
    else:
        ann[key] = value
    if ann or "annotations" in meta:
        meta["annotations"] = ann


def owner_placement(
    req: ReviewRequest,
    pod: Mapping[str, Any],
    no_fit: str | None,
    check: tuple[Any, Callable[[], Any]] | None,
) -> Placement | None:
    """The placement to report for the controller that created ``pod`` (its ``ownerReferences``
    entry with ``controller: true``: a ReplicaSet, StatefulSet, Job, LeaderWorkerSet...) when
    no node can run the pod: the pod has no name yet at admission, so its owner is what the
    NoCompatibleNode Event can be recorded on now, and what the pod is found by once stored
    (:mod:`cudasched.webhook.background.podevents`). ``None`` when some node can, or it has no
    controller."""
    if no_fit is None:
        return None
    for ref in metadata_of(pod).get("ownerReferences") or ():
        if not (isinstance(ref, Mapping) and ref.get("controller") is True):
            continue
        kind, name, api_version = ref.get("kind"), ref.get("name"), ref.get("apiVersion")
        if not (isinstance(kind, str) and isinstance(name, str) and name):
            return None
        if not (isinstance(api_version, str) and api_version):
            return None
        uid = ref.get("uid")
        group = api_version.rpartition("/")[0]
        return Placement(
            group=group,
            kind=kind,
            api_version=api_version,
            namespace=str(metadata_of(pod).get("namespace") or req.namespace or ""),
            name=name,
            uid=uid if isinstance(uid, str) and uid else None,
            no_fit=no_fit,
            check=check,
            for_owner=True,
        )
    return None


def placement_of(
    req: ReviewRequest,
    obj: Mapping[str, Any],
    no_fit: str | None,
    check: tuple[Any, Callable[[], Any]] | None,
) -> Placement | None:
    """The placement to report for an object of a reported kind (``None`` for other kinds)."""
    if (req.group, req.kind) not in REPORTED_KINDS:
        return None
    meta = metadata_of(obj)
    name, uid = meta.get("name"), meta.get("uid")
    api_version = obj.get("apiVersion")
    if not isinstance(name, str) or not name:
        return None
    return Placement(
        group=req.group,
        kind=req.kind,
        api_version=api_version if isinstance(api_version, str) else _API_VERSIONS[req.kind],
        namespace=str(meta.get("namespace") or req.namespace or ""),
        name=name,
        uid=uid if isinstance(uid, str) and uid else None,
        no_fit=no_fit,
        check=check,
    )
