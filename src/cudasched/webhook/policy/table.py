"""The policy's parameters: the webhook's decision for each pod key, kept as ``PlacementTable``
objects the MutatingAdmissionPolicy reads.

**One decision per key, the webhook's own.** For each key
(:func:`cudasched.workloads.policykey.pod_key`) the controller builds the pod the key stands
for (:func:`~cudasched.workloads.policykey.key_pod`), gives it one probe term that is all
cudasched's (``[marker]``), asks the :class:`~cudasched.webhook.admission.admitter.Admitter`
(the webhook's code, configuration, knowledge, image resolver and cluster snapshot) for its
answer and reads it back: the requirement annotation it writes, and what became of the probe
term (:func:`placement_of`). A probe left as it was means the webhook would not touch the
affinity (no selector can exist, or nothing is known); a probe removed means its terms are
``[]`` (an earlier injection is removed and nothing added); otherwise each term is the marker
followed by one of cudasched's alternatives. A denial, or an answer with neither annotation nor
terms, is no placement: the policy leaves such a pod to the webhook, or to the unplaced
warning. In ``dra.mode`` the answer also says which DeviceClass the GPUs are asked through:
a ``deviceclass.resource.kubernetes.io/<class>`` resource it added to a container
(``extended-resource``), or the template of a ``cudasched-gpu-*`` claim it added to the pod
(``claim``); the class is kept, not the count, which the policy reads from each pod.

**One table per namespace.** A key's second part is the namespace of its pod
(:func:`cudasched.workloads.policykey.pod_key`), and ``PlacementTable`` is a namespaced kind
bound without a namespace, so the API server hands the policy only the tables of the admitted
pod's namespace: it converts the whole parameter object to JSON and back for every CEL
activation, so a pod pays for its own namespace's keys, not the cluster's
(``docs/design.md``, fourth pass), and for them as one string (sixth pass). A namespace
without keys has no table (the policy does nothing there: ``parameterNotFoundAction:
Allow``).

**Tables within etcd's object limit.** Each placement is stored once per object under the
first 16 hex digits of the SHA-256 of its JSON; keys map to placement ids, one line of the
``pods`` text each (``vocab/placementtable``; a key with a newline or tab, from an annotation
value, is not stored: :func:`storable`). A namespace's keys
are spread over ``2**n`` objects by the SHA-256 of the key, ``n`` the smallest that keeps every
object under :data:`MAX_TABLE_BYTES` and the schema's counts; the object names carry ``2**n``,
so growing the table writes a new set beside the old one and then deletes the old one (a key is
in two objects for a moment, never in none; the merge is idempotent, so two patches give one
answer).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import orjson

from cudasched.placement.deviceclass import EXTENDED_RESOURCE_PREFIX
from cudasched.placement.drarequest import CLAIM_PREFIX
from cudasched.placement.merge import MARKER, REQUIRED_KEY
from cudasched.vocab import labels as L
from cudasched.vocab import placementtable as T
from cudasched.vocab.errors import InputError
from cudasched.vocab.kinds import PLACEMENT_TABLE
from cudasched.webhook.admission.review import Decision

__all__ = [
    "MAX_TABLE_BYTES",
    "Placement",
    "held_placements",
    "key_namespace",
    "placement_of",
    "probe_pod",
    "storable",
    "table_keys",
    "tables",
]

#: Bytes of one table object's JSON at most: etcd refuses requests over 1.5 MiB; the rest is
#: room for metadata and the API server's own fields.
MAX_TABLE_BYTES = 900_000
_MAX_SHARDS = 1024
#: The count prefix of a claim template's name (``x2.`` in ``x2.<class>``).
_COUNTED = re.compile(r"^x[1-9][0-9]*\.")


class Placement(NamedTuple):
    """What the policy writes for one key: the requirement annotation (``None``: none),
    cudasched's terms (``None``: the affinity is left alone), the DeviceClass whose extended
    resource the pod's ``nvidia.com/gpu`` becomes (``dra.mode: extended-resource``; ``None``:
    the resources are left alone) and the DeviceClass whose claim templates each GPU container
    consumes a claim from instead (``dra.mode: claim``; the count picks the template in the
    API server, :func:`~cudasched.placement.mergecel.claim_variables`)."""

    requirement: str | None
    terms: tuple[dict[str, Any], ...] | None
    device_class: str | None = None
    claim_class: str | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.requirement is not None:
            out["requirement"] = self.requirement
        if self.terms is not None:
            out["terms"] = [dict(t) for t in self.terms]
        if self.device_class is not None:
            out["deviceClass"] = self.device_class
        if self.claim_class is not None:  # absent otherwise: other placements keep their ids
            out["claimClass"] = self.claim_class
        return out

    def ident(self) -> str:
        text = orjson.dumps(self.as_json(), option=orjson.OPT_SORT_KEYS)
        return hashlib.sha256(text).hexdigest()[:16]


def probe_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """``pod`` (a key pod) with one required term that is all cudasched's marker."""
    probe: dict[str, Any] = orjson.loads(orjson.dumps(pod))
    probe.setdefault("spec", {})["affinity"] = {
        "nodeAffinity": {REQUIRED_KEY: {"nodeSelectorTerms": [{"matchExpressions": [MARKER]}]}}
    }
    return probe


def _pointer(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]


def _apply(obj: dict[str, Any], ops: list[dict[str, Any]]) -> None:
    """Apply the JSON patch operations an admission answer carries (add, replace, remove on
    objects and list indexes; the webhook writes no others)."""
    for op in ops:
        *parents, last = _pointer(str(op["path"]))
        node: Any = obj
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        kind = op["op"]
        if isinstance(node, list):
            index = len(node) if last == "-" else int(last)
            if kind == "add":
                node.insert(index, op["value"])
            elif kind == "replace":
                node[index] = op["value"]
            elif kind == "remove":
                del node[index]
            else:
                raise InputError(f"unexpected patch operation {kind!r}")
        elif kind in ("add", "replace"):
            node[last] = op["value"]
        elif kind == "remove":
            del node[last]
        else:
            raise InputError(f"unexpected patch operation {kind!r}")


def placement_of(decision: Decision, probe: Mapping[str, Any]) -> Placement | None:
    """What the policy must do for pods of ``probe``'s key, read from the webhook's
    ``decision`` on it (see the module docstring); ``None`` for no placement."""
    if not decision.allowed:
        return None
    after = orjson.loads(orjson.dumps(probe))
    _apply(after, orjson.loads(orjson.dumps(list(decision.patch))))
    annotations = after.get("metadata", {}).get("annotations") or {}
    requirement = annotations.get(L.ANN_REQUIREMENT)
    required = (
        (after.get("spec", {}).get("affinity") or {}).get("nodeAffinity", {}).get(REQUIRED_KEY)
    )
    terms: tuple[dict[str, Any], ...] | None
    if required is None:
        terms = ()
    else:
        found = required.get("nodeSelectorTerms") or []
        if found == [{"matchExpressions": [MARKER]}]:
            terms = None  # the probe as it was: the affinity is not touched
        else:
            terms = tuple(
                {"matchExpressions": term["matchExpressions"][1:]}
                for term in found
                if term.get("matchExpressions", [None])[0] == MARKER
            )
    device_class = _moved_to_class(probe, after)
    claim_class = _claimed_class(probe, after)
    if requirement is None and not terms and device_class is None and claim_class is None:
        return None
    return Placement(
        requirement if isinstance(requirement, str) else None, terms, device_class, claim_class
    )


def _moved_to_class(probe: Mapping[str, Any], after: Mapping[str, Any]) -> str | None:
    """The class the answer asks the probe's GPUs through: a ``deviceclass...`` resource the
    answer added to a container (the webhook names one class per pod)."""
    for field in ("initContainers", "containers"):
        before = (probe.get("spec") or {}).get(field) or []
        for i, container in enumerate((after.get("spec") or {}).get(field) or []):
            had = before[i].get("resources") or {} if i < len(before) else {}
            for part in ("limits", "requests"):
                added = set((container.get("resources") or {}).get(part) or {}) - set(
                    had.get(part) or {}
                )
                for key in sorted(str(k) for k in added):
                    if key.startswith(EXTENDED_RESOURCE_PREFIX):
                        return key.removeprefix(EXTENDED_RESOURCE_PREFIX)
    return None


def _claimed_class(probe: Mapping[str, Any], after: Mapping[str, Any]) -> str | None:
    """The class the answer's new claims come from: the template of a pod-level claim the
    answer added (``claim_rewrite`` names one class per pod; the key pod asks one GPU per
    container, so the template is the class itself, and an ``x<N>.`` count prefix is
    dropped should one appear)."""
    had = {
        str(c.get("name"))
        for c in (probe.get("spec") or {}).get("resourceClaims") or []
        if isinstance(c, Mapping)
    }
    for claim in (after.get("spec") or {}).get("resourceClaims") or []:
        if not isinstance(claim, Mapping) or str(claim.get("name")) in had:
            continue
        template = claim.get("resourceClaimTemplateName")
        if isinstance(template, str) and str(claim.get("name")).startswith(CLAIM_PREFIX):
            return _COUNTED.sub("", template)
    return None


def _shard_of(key: str, shards: int) -> int:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % shards


def key_namespace(key: str) -> str:
    """The namespace of ``key``'s pods: the key's second part. A namespace name (an RFC 1123
    label) holds none of the characters the key escapes, so the part is the name itself."""
    parts = key.split("|", 2)
    if len(parts) < 3 or not parts[1] or "%" in parts[1]:
        raise InputError(f"not a pod key: {key[:80]!r}")
    return parts[1]


def storable(key: str) -> bool:
    """Whether a table can hold ``key``: not a key holding a character that bounds keys in the
    ``pods`` text (a newline or tab from an annotation value)."""
    return T.KEY_START not in key and T.KEY_END not in key


def _table(
    namespace: str, name: str, keys: list[str], entries: Mapping[str, Placement], format_: str
) -> dict[str, Any]:
    placements: dict[str, Any] = {}
    lines: list[str] = []
    for key in sorted(keys):
        placement = entries[key]
        ident = placement.ident()
        lines.append(f"{key}{T.KEY_END}{ident}{T.KEY_START}")
        placements.setdefault(ident, placement.as_json())
    return {
        "apiVersion": PLACEMENT_TABLE.api_version,
        "kind": PLACEMENT_TABLE.kind,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/name": "cudasched",
                "app.kubernetes.io/component": "policy",
                "app.kubernetes.io/managed-by": "cudasched-policy-controller",
                T.TABLE_LABEL: T.TABLE_VALUE,
            },
        },
        "spec": {
            "format": format_,
            "pods": T.KEY_START + "".join(lines),
            "placements": placements,
        },
    }


def table_keys(obj: Mapping[str, Any]) -> dict[str, str]:
    """The pod keys one table object holds, each with its placement id (none from a table
    whose ``pods`` is not text: one written before the keys were)."""
    text = (obj.get("spec") or {}).get("pods")
    out: dict[str, str] = {}
    if not isinstance(text, str):
        return out
    for line in text.split(T.KEY_START):
        key, sep, ident = line.partition(T.KEY_END)
        if sep:
            out[key] = ident
    return out


def _fits(table: Mapping[str, Any]) -> bool:
    spec = table["spec"]
    return (
        spec["pods"].count(T.KEY_START) - 1 <= T.MAX_KEYS
        and len(spec["placements"]) <= T.MAX_PLACEMENTS
        and len(spec["pods"]) <= T.MAX_PODS_TEXT
        and len(orjson.dumps(table)) <= MAX_TABLE_BYTES
    )


def _namespace_tables(
    namespace: str, keys: list[str], entries: Mapping[str, Placement], format_: str
) -> list[dict[str, Any]]:
    """One namespace's ``keys`` over the fewest ``2**n`` objects that fit."""
    shards = 1
    while True:
        buckets: list[list[str]] = [[] for _ in range(shards)]
        for key in keys:
            buckets[_shard_of(key, shards)].append(key)
        built = [
            _table(namespace, f"pods-{shards}-{i}", bucket, entries, format_)
            for i, bucket in enumerate(buckets)
        ]
        if all(_fits(t) for t in built):
            return built
        if shards >= _MAX_SHARDS:
            raise InputError(
                f"the placement table of namespace {namespace} does not fit in {_MAX_SHARDS} "
                f"objects of {MAX_TABLE_BYTES} bytes ({len(keys)} keys)"
            )
        shards *= 2


def tables(entries: Mapping[str, Placement], format_: str) -> list[dict[str, Any]]:
    """The ``PlacementTable`` objects holding ``entries`` (key -> placement): in each key's
    namespace, sharded there (see the module docstring); none for a namespace without keys.
    Keys a table cannot hold (:func:`storable`) are left out: the policy leaves their pods
    unplaced, and the unplaced warning covers them."""
    by_namespace: dict[str, list[str]] = {}
    for key in entries:
        if storable(key):
            by_namespace.setdefault(key_namespace(key), []).append(key)
    return [
        table
        for namespace in sorted(by_namespace)
        for table in _namespace_tables(namespace, by_namespace[namespace], entries, format_)
    ]


def held_placements(objects: Iterable[Mapping[str, Any]], format_: str) -> dict[str, Placement]:
    """What ``PlacementTable`` objects (as listed) hold, key -> placement: the inverse of
    :func:`tables`. Objects written for another key format, keys whose placement is missing,
    and keys in a table of another namespace than their own (the policy never reads them
    there) are left out."""
    held: dict[str, Placement] = {}
    for obj in objects:
        spec = obj.get("spec") or {}
        if spec.get("format") != format_:
            continue
        placements = spec.get("placements") or {}
        namespace = (obj.get("metadata") or {}).get("namespace")
        for key, ident in table_keys(obj).items():
            found = placements.get(ident)
            if not isinstance(found, Mapping) or not _in_namespace(key, namespace):
                continue
            terms = found.get("terms")
            held[key] = Placement(
                found.get("requirement"),
                None if terms is None else tuple(dict(t) for t in terms),
                found.get("deviceClass"),
                found.get("claimClass"),
            )
    return held


def _in_namespace(key: str, namespace: object) -> bool:
    try:
        return key_namespace(key) == namespace
    except InputError:
        return False
