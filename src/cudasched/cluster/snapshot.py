"""Cluster snapshots: the Kubernetes objects cudasched reasons about, loaded from files and
written back as one kubectl ``List``.

Every offline command (``explain``, ``mutate``, ``audit``, ``demo``) works on a *snapshot*: the
objects a real cluster returns, saved by ``kubectl get ... -o yaml`` (or ``-o json``). Loading
them here, once, keeps the core pure: it only ever sees plain dicts exactly as the API returns
them, and the same recorded files drive the tests.

Accepted input shapes, because that is what people actually have on disk:

* a ``List`` (``kubectl get a,b,c -A -o yaml``) or a typed list (``NodeList`` from the raw API,
  whose items carry no ``kind``/``apiVersion``: they are filled in from the list's own kind);
* multi-document YAML (``kubectl apply -f`` style manifests), empty documents ignored;
* JSON (a single object, a ``List``, or an array of objects);
* a single object.

Objects are classified by ``apiVersion``/``kind`` into the buckets the rest of the code needs.

Writing (:func:`dump_snapshot`) produces the ``List`` the loader reads, so a dump round-trips;
:meth:`ClusterSnapshot.shareable` first drops what a bug report must not carry (Secrets,
``managedFields``, kubectl's last-applied copy) and reduces pods to :data:`POD_FIELDS`, the
fields cudasched reads. A live read (``cudasched.kube.live``) reduces pods the same way.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

import orjson
import yaml

from cudasched.vocab import inputfiles
from cudasched.vocab.errors import InputError
from cudasched.vocab.kinds import (
    GPU_OPERATOR_GROUP,
    KSERVE_GROUP,
    NVIDIA_DRIVER,
    POD_TEMPLATE_KINDS,
)
from cudasched.vocab.requirecuda import is_gate_env

__all__ = [
    "POD_FIELDS",
    "WORKLOAD_KINDS",
    "ClusterSnapshot",
    "DumpFormat",
    "bundled_snapshot",
    "dump_snapshot",
    "load_nodes",
    "load_snapshot",
    "parse_objects",
    "reduce_pod",
    "to_yaml",
    "without_bulk",
]

# Controllers whose pod template a workload check can read (apiVersion group, kind).
WORKLOAD_KINDS = frozenset((k.group, k.kind) for k in POD_TEMPLATE_KINDS)

BUNDLED_NAME = "bundled sample cluster"


KubeObject = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """The objects of one cluster, grouped by what cudasched does with them.

    Tuples keep the snapshot itself immutable; the dicts inside are the API's own objects and
    must be treated as read-only by every consumer (the core copies before it changes anything).
    ``admission_read``: a live read listed the cluster's MutatingWebhookConfigurations (they are
    in ``other``, all of them, possibly none); a dump is taken to hold them when it holds one.
    """

    nodes: tuple[KubeObject, ...] = ()
    inference_services: tuple[KubeObject, ...] = ()
    serving_runtimes: tuple[KubeObject, ...] = ()
    cluster_serving_runtimes: tuple[KubeObject, ...] = ()
    llm_inference_services: tuple[KubeObject, ...] = ()
    nvidia_drivers: tuple[KubeObject, ...] = ()
    pods: tuple[KubeObject, ...] = ()
    workloads: tuple[KubeObject, ...] = ()
    other: tuple[KubeObject, ...] = ()
    source: str = field(default="", compare=False)
    admission_read: bool = field(default=False, compare=False)

    @classmethod
    def from_objects(
        cls, objects: Iterable[Mapping[str, Any]], source: str = ""
    ) -> ClusterSnapshot:
        """Classify already-parsed objects (each must carry ``apiVersion`` and ``kind``)."""
        buckets: dict[str, list[KubeObject]] = {
            "nodes": [],
            "inference_services": [],
            "serving_runtimes": [],
            "cluster_serving_runtimes": [],
            "llm_inference_services": [],
            "nvidia_drivers": [],
            "pods": [],
            "workloads": [],
            "other": [],
        }
        for index, obj in enumerate(objects, start=1):
            where = f"object {index}"
            _check_object(obj, source or "<input>", where)
            buckets[_bucket_of(obj)].append(dict(obj))
        for node in buckets["nodes"]:
            if not _name_of(node):
                raise InputError(f"{source or '<input>'}: a Node has no metadata.name")
        # Every bucket is a field of tuples (the bool admission_read keeps its default).
        fields: dict[str, Any] = {k: tuple(v) for k, v in buckets.items()}
        return cls(**fields, source=source)

    def objects(self) -> Iterator[KubeObject]:
        """Every object of the snapshot, bucket by bucket."""
        for bucket in (
            self.nodes,
            self.inference_services,
            self.serving_runtimes,
            self.cluster_serving_runtimes,
            self.llm_inference_services,
            self.nvidia_drivers,
            self.pods,
            self.workloads,
            self.other,
        ):
            yield from bucket

    def __len__(self) -> int:
        return sum(1 for _ in self.objects())

    def with_nodes(self, nodes: Iterable[KubeObject]) -> ClusterSnapshot:
        """The same snapshot with its nodes replaced (``--nodes FILE`` next to ``--cluster``)."""
        return replace(self, nodes=tuple(nodes))

    def shareable(self) -> ClusterSnapshot:
        """The snapshot as ``cudasched snapshot`` writes it: no Secrets, no ``managedFields``
        or last-applied copies, pods reduced to :data:`POD_FIELDS`. Answers do not change:
        nothing dropped is read by any command."""
        return replace(
            self,
            nodes=_each(without_bulk, self.nodes),
            inference_services=_each(without_bulk, self.inference_services),
            serving_runtimes=_each(without_bulk, self.serving_runtimes),
            cluster_serving_runtimes=_each(without_bulk, self.cluster_serving_runtimes),
            llm_inference_services=_each(without_bulk, self.llm_inference_services),
            nvidia_drivers=_each(without_bulk, self.nvidia_drivers),
            pods=_each(reduce_pod, self.pods),
            workloads=_each(without_bulk, self.workloads),
            other=_each(without_bulk, (o for o in self.other if not _is_secret(o))),
        )


def load_snapshot(source: Path | str | bytes, *, name: str | None = None) -> ClusterSnapshot:
    """Load a cluster snapshot from a file path, or from YAML/JSON text or bytes.

    A ``str`` is read as *text* when it contains a newline or starts with ``{``/``[``, and as a
    file path otherwise (a one-line YAML object is not a realistic dump; a path is).
    ``name`` labels error messages (defaults to the path, or ``<input>``).
    """
    text, label = _read_source(source, name)
    return ClusterSnapshot.from_objects(parse_objects(text, label), source=label)


def load_nodes(path: Path | str | bytes, *, name: str | None = None) -> tuple[KubeObject, ...]:
    """The ``Node`` objects of a file (``kubectl get nodes -o yaml``); an error if none."""
    text, label = _read_source(path, name)
    snapshot = ClusterSnapshot.from_objects(parse_objects(text, label), source=label)
    if not snapshot.nodes:
        kinds = sorted({str(o.get("kind")) for o in snapshot.objects()})
        found = f"found only {', '.join(kinds)}" if kinds else "it holds no objects"
        raise InputError(
            f"{label}: no Node objects ({found}); expected the output of kubectl get nodes -o yaml"
        )
    return snapshot.nodes


def bundled_snapshot() -> ClusterSnapshot:
    """The sample cluster shipped with the package (``cudasched/data/sample-cluster.yaml``)."""
    data = importlib.resources.files("cudasched").joinpath("data", "sample-cluster.yaml")
    return load_snapshot(data.read_bytes(), name=BUNDLED_NAME)


# --------------------------------------------------------------------------- writing

#: What a pod keeps in a dump or a live read: every field a command reads, nothing else.
#: ``env`` keeps only the variables the container toolkit's gate reads
#: (:func:`cudasched.vocab.requirecuda.is_gate_env`; others may hold credentials written
#: inline) and annotations lose kubectl's last-applied copy of the pod.
POD_FIELDS: Mapping[str, tuple[str, ...]] = {
    "metadata": (
        "name",
        "namespace",
        "generateName",
        "labels",
        "annotations",
        "ownerReferences",
        "uid",
    ),
    "spec": (
        "nodeName",
        "nodeSelector",
        "affinity",
        "containers",
        "initContainers",
        "resourceClaims",
    ),
    "status": ("phase",),
}
CONTAINER_FIELDS = ("name", "image", "env", "resources")
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


class DumpFormat(StrEnum):
    """How :func:`dump_snapshot` writes: the two formats kubectl writes and the loader reads."""

    YAML = "yaml"
    JSON = "json"


def without_bulk(obj: Mapping[str, Any]) -> KubeObject:
    """``obj`` without ``metadata.managedFields`` and kubectl's last-applied annotation (bulk
    no command reads); the input is not changed."""
    out = dict(obj)
    meta = obj.get("metadata")
    if isinstance(meta, Mapping) and ("managedFields" in meta or _has_last_applied(meta)):
        meta = {k: v for k, v in meta.items() if k != "managedFields"}
        annotations = meta.get("annotations")
        if isinstance(annotations, Mapping) and LAST_APPLIED in annotations:
            meta["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
        out["metadata"] = meta
    return out


def reduce_pod(pod: Mapping[str, Any]) -> KubeObject:
    """A pod reduced to :data:`POD_FIELDS` (``kind``/``apiVersion`` kept); the input is not
    changed. Fields of an unexpected type are kept as they are, so a broken pod stays broken
    (and is reported the same way) after the reduction."""
    out: KubeObject = {k: pod[k] for k in ("apiVersion", "kind") if k in pod}
    for part, keys in POD_FIELDS.items():
        section = pod.get(part)
        if not isinstance(section, Mapping):
            if section is not None:
                out[part] = section
            continue
        kept = {k: section[k] for k in keys if k in section}
        if part == "metadata":
            kept = without_bulk({"metadata": kept})["metadata"]
        if part == "spec":
            for key in ("containers", "initContainers"):
                if isinstance(kept.get(key), list):
                    kept[key] = [_reduce_container(c) for c in kept[key]]
        out[part] = kept
    return out


def dump_snapshot(snapshot: ClusterSnapshot, fmt: DumpFormat = DumpFormat.YAML) -> str:
    """The snapshot as one kubectl ``List`` (YAML or JSON text), objects bucket by bucket;
    :func:`load_snapshot` reads it back to an equal snapshot."""
    doc = {
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": ""},
        "items": list(snapshot.objects()),
    }
    if fmt is DumpFormat.JSON:
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n"
    return to_yaml(doc)


# The base is libyaml's dumper where PyYAML was built with it, else the pure-Python one: chosen
# at run time, so mypy cannot check it (misc).
class _PlainYamlDumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """A safe dumper that writes a value used twice twice, never as an ``&anchor``/``*alias``
    pair (which kubectl writes nowhere and people cannot read)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def to_yaml(doc: Any) -> str:
    """``doc`` as block-style YAML the way kubectl writes it: keys in their order, no aliases,
    strings that would read back as another type quoted."""
    return yaml.dump(  # noqa: S506 - a safe dumper
        doc, Dumper=_PlainYamlDumper, sort_keys=False, allow_unicode=True, default_flow_style=False
    )


def _reduce_container(container: Any) -> Any:
    if not isinstance(container, Mapping):
        return container
    out = {k: container[k] for k in CONTAINER_FIELDS if k in container}
    env = out.get("env")
    if isinstance(env, list):
        out["env"] = [v for v in env if not isinstance(v, Mapping) or is_gate_env(v.get("name"))]
        if not out["env"]:
            del out["env"]
    return out


def _has_last_applied(meta: Mapping[str, Any]) -> bool:
    annotations = meta.get("annotations")
    return isinstance(annotations, Mapping) and LAST_APPLIED in annotations


def _is_secret(obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") == "Secret" and obj.get("apiVersion") == "v1"


def _each(
    change: Callable[[Mapping[str, Any]], KubeObject], objects: Iterable[KubeObject]
) -> tuple[KubeObject, ...]:
    return tuple(change(o) for o in objects)


# --------------------------------------------------------------------------- reading


def parse_objects(text: str, label: str = "<input>") -> list[KubeObject]:
    """Parse YAML or JSON text into a flat list of Kubernetes objects (lists expanded).

    Raises :class:`InputError` naming ``label`` for invalid syntax, for a document that is not
    a Kubernetes object, and for text without any document at all.
    """
    stripped = text.lstrip()
    if not stripped:
        raise InputError(f"{label}: empty file, expected Kubernetes objects in YAML or JSON")
    docs = [d for d in inputfiles.parse_documents(text, label, inputfiles.CLUSTER) if d is not None]
    if not docs:
        raise InputError(f"{label}: no YAML documents, expected Kubernetes objects")
    objects: list[KubeObject] = []
    for number, doc in enumerate(docs, start=1):
        where = f"document {number}" if len(docs) > 1 else "the document"
        if isinstance(doc, list):  # a JSON array of objects
            for item_no, item in enumerate(doc, start=1):
                objects.extend(_expand(item, label, f"{where}, element {item_no}"))
        else:
            objects.extend(_expand(doc, label, where))
    return objects


# --------------------------------------------------------------------------- helpers


def _read_source(source: Path | str | bytes, name: str | None) -> tuple[str, str]:
    """The text of ``source`` (bytes, text, or a file read through
    :mod:`cudasched.vocab.inputfiles`,
    which refuses devices, FIFOs, oversized and non-UTF-8 files) and its label."""
    if isinstance(source, bytes | bytearray):
        return inputfiles.decode(bytes(source), name or "<input>"), name or "<input>"
    if isinstance(source, str) and ("\n" in source or source.lstrip()[:1] in ("{", "[")):
        return source, name or "<input>"
    if not isinstance(source, str | Path):
        raise InputError(f"cannot load a cluster snapshot from {type(source).__name__}")
    label = name or str(source)
    return inputfiles.read_text(source, label, inputfiles.CLUSTER), label


def _expand(doc: Any, label: str, where: str) -> list[KubeObject]:
    """One document -> its objects; a ``*List`` yields its items (kind filled in if missing)."""
    _check_object(doc, label, where)
    kind = doc["kind"]
    if not kind.endswith("List") or "items" not in doc:
        return [doc]
    items = doc["items"]
    if items is None:
        return []
    if not isinstance(items, list):
        raise InputError(f"{label}: {where} is a {kind} whose items is not a list")
    item_kind = kind[: -len("List")] if kind != "List" else None
    out: list[KubeObject] = []
    for number, item in enumerate(items, start=1):
        item_where = f"{where}, item {number} of the {kind}"
        if isinstance(item, dict) and item_kind and "kind" not in item:
            # The raw API returns typed lists (NodeList) whose items carry no kind/apiVersion.
            item = {"apiVersion": doc["apiVersion"], "kind": item_kind, **item}
        out.extend(_expand(item, label, item_where))
    return out


def _check_object(obj: Any, label: str, where: str) -> None:
    if not isinstance(obj, Mapping):
        raise InputError(
            f"{label}: {where} is a {_type_name(obj)}, expected a Kubernetes object "
            "(a mapping with apiVersion and kind)"
        )
    missing = [
        key
        for key in ("apiVersion", "kind")
        if not (isinstance(obj.get(key), str) and obj[key].strip())
    ]
    if missing:
        raise InputError(
            f"{label}: {where} has no {' or '.join(missing)}: not a Kubernetes object{_hint(obj)}"
        )
    metadata = obj.get("metadata")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise InputError(
            f"{label}: {where} ({obj['kind']}) has metadata of type {_type_name(metadata)}, "
            "expected a mapping"
        )


def _hint(obj: Mapping[str, Any]) -> str:
    keys = sorted(str(k) for k in obj)[:5]
    return f" (keys: {', '.join(keys)})" if keys else " (empty mapping)"


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, str):
        return "string"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list):
        return "list"
    return type(value).__name__


def _group_of(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def _bucket_of(obj: Mapping[str, Any]) -> str:
    group, version = _group_of(obj["apiVersion"])
    kind = obj["kind"]
    if group == "" and kind == "Node":
        return "nodes"
    if group == "" and kind == "Pod":
        return "pods"
    if group == KSERVE_GROUP:
        if kind == "InferenceService" and version == "v1beta1":
            return "inference_services"
        if kind == "ServingRuntime" and version == "v1alpha1":
            return "serving_runtimes"
        if kind == "ClusterServingRuntime" and version == "v1alpha1":
            return "cluster_serving_runtimes"
        if kind == "LLMInferenceService":  # v1alpha1 (KServe 0.16) and v1alpha2 (0.17+)
            return "llm_inference_services"
    if group == GPU_OPERATOR_GROUP and kind == NVIDIA_DRIVER.kind:
        return "nvidia_drivers"
    if (group, kind) in WORKLOAD_KINDS:
        return "workloads"
    return "other"


def _name_of(obj: Mapping[str, Any]) -> str:
    name = (obj.get("metadata") or {}).get("name")
    return name if isinstance(name, str) else ""
