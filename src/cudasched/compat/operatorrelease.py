"""Which GPU Operator release a cluster runs, read from what the cluster stores: the release the
NVIDIADriver objects a plan writes must be valid for, and whose OS support and image tags apply.

Pure: objects in, an :class:`OperatorRead` out (the ``kube/`` edge fetches the objects; a dump may
hold them too). The reads, most reliable first (``gpu-operator.yaml`` ``cluster_release`` and
``operator_versions``, with their sources):

1. **The ClusterPolicy's Helm labels.** NVIDIA's chart labels its ClusterPolicy with
   ``app.kubernetes.io/version`` (the chart's appVersion, the release tag ``v26.7.0``) and
   ``helm.sh/chart`` (``gpu-operator-v26.7.0``): the exact release. An OLM install, or a chart
   packaged without a release (``main-latest``), has neither.
2. **The NVIDIADriver CRD's schema.** The CRD carries no release, but each release line adds
   spec properties (``crd_marks``: ``kernelModuleType`` v25.3, ``secretEnv`` v25.10,
   ``podSecurityContext`` v26.3, ``default``/``upgradePolicy`` v26.7): the newest line whose
   marks the CRD has. It is what kubectl validates objects against, so when it is older than the
   ClusterPolicy's release (Helm does not upgrade CRDs) the read says so.
3. **Stored NVIDIADriver objects**: the API server writes CRD defaults into every object it
   stores (``spec.default`` from v26.7, ``spec.kernelModuleType`` from v25.3).

The ClusterPolicy's status holds no version, and the operator Deployment's image tag is the
same value as its labels (the chart renders both from the appVersion) in a namespace cudasched
would have to find and be allowed to read: neither is read. No read at all is ``None``: the
caller plans for the newest release and says so.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.knowledge.operator import OperatorVersion

__all__ = [
    "CLUSTER_POLICY_KIND",
    "CRD_KIND",
    "POLICY_DRIVER_FIELDS",
    "OperatorRead",
    "crd_release",
    "operator_from_objects",
    "operator_of_cluster",
    "reduced",
]

CLUSTER_POLICY_KIND = "ClusterPolicy"
CRD_KIND = "CustomResourceDefinition"
#: A release tag (``v26.7.0``, a release candidate ``v26.7.0-rc.1``); charts packaged from the
#: repository (``v1.0.0-devel``, appVersion ``main-latest``) or for OCI previews
#: (``0.0.0-git-<sha>``) name no release.
_RELEASE = re.compile(r"v?(\d{1,3})\.(\d{1,3})\.(\d{1,3})(?:-rc\.\d{1,3})?")


@dataclass(frozen=True, slots=True)
class OperatorRead:
    """The release a cluster runs (its line's facts), how that was read, and what the reader
    should know (a CRD older than the release, a release newer than cudasched knows)."""

    version: OperatorVersion
    source: str
    notes: tuple[str, ...] = ()


def _kind(obj: Mapping[str, Any]) -> str:
    return str(obj.get("kind") or "")


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _release_text(value: str, chart: str) -> str | None:
    """``v26.7.0`` (``app.kubernetes.io/version``) or ``gpu-operator-v26.7.0``
    (``helm.sh/chart``) -> ``v26.7.0``; ``None`` for anything that names no release."""
    text = value.strip()
    if text.startswith(chart + "-"):
        text = text[len(chart) + 1 :]
    return text if _RELEASE.fullmatch(text) else None


def _line_of(kb: KnowledgeBase, text: str) -> tuple[OperatorVersion, str | None]:
    """The release line of a release tag, and a note when cudasched does not know that line
    (then the nearest known one: the newest for a newer release, the oldest for an older)."""
    m = _RELEASE.fullmatch(text)
    assert m is not None
    found = kb.operator.version(f"{m.group(1)}.{m.group(2)}")
    if found is not None:
        return found, None
    key = (int(m.group(1)), int(m.group(2)))
    newest, oldest = kb.operator.versions[0], kb.operator.versions[-1]
    if key > newest.key:
        return newest, (
            f"GPU Operator {text} is newer than the releases cudasched knows: objects written "
            f"for {newest.version}; check the release's CRD for new fields"
        )
    nearest = next((v for v in kb.operator.versions if v.key <= key), oldest)
    return nearest, (
        f"GPU Operator {text} is a release cudasched does not know: objects written for "
        f"{nearest.version}"
    )


def _policy_release(kb: KnowledgeBase, objects: list[Mapping[str, Any]]) -> tuple[str, str] | None:
    """(release tag, where it was read) from the first ClusterPolicy label that names one."""
    facts = kb.operator.cluster_release
    if facts is None:
        return None
    for obj in objects:
        if _kind(obj) != CLUSTER_POLICY_KIND:
            continue
        labels = _meta(obj).get("labels")
        if not isinstance(labels, Mapping):
            continue
        for key in facts.version_labels:
            value = labels.get(key)
            text = _release_text(str(value), facts.chart) if value is not None else None
            if text is not None:
                name = _meta(obj).get("name") or "?"
                return text, f"ClusterPolicy {name} label {key}={value}"
    return None


def _spec_properties(crd: Mapping[str, Any]) -> set[str]:
    """The ``spec`` properties of every served version of a CRD's schema."""
    spec = crd.get("spec")
    versions = spec.get("versions") if isinstance(spec, Mapping) else None
    found: set[str] = set()
    for version in versions if isinstance(versions, list) else ():
        if not isinstance(version, Mapping) or version.get("served") is False:
            continue
        schema: Any = version.get("schema")
        for key in ("openAPIV3Schema", "properties", "spec", "properties"):
            schema = schema.get(key) if isinstance(schema, Mapping) else None
        if isinstance(schema, Mapping):
            found |= {str(k) for k in schema}
    return found


def crd_release(
    kb: KnowledgeBase, objects: Iterable[Mapping[str, Any]]
) -> tuple[OperatorVersion, str] | None:
    """The release line of the cluster's NVIDIADriver CRD (among ``objects``): the newest line
    whose ``crd_marks`` its schema has, and the marks that said so; ``None`` without the CRD or
    with a schema that shows no spec properties."""
    facts = kb.operator.cluster_release
    name = facts.crd if facts is not None else ""
    crd = next((o for o in objects if _kind(o) == CRD_KIND and _meta(o).get("name") == name), None)
    if crd is None:
        return None
    props = _spec_properties(crd)
    if not props:
        return None
    for version in kb.operator.versions:
        if version.crd_marks <= props:
            marks = ", ".join(f"spec.{m}" for m in sorted(version.crd_marks))
            return version, f"the {name} CRD's schema ({marks or 'none of the later fields'})"
    return None


#: What of a ClusterPolicy's ``spec.driver`` the planner reads (who installs drivers:
#: :mod:`cudasched.compat.drivermanager`): whether its driver DaemonSet runs, NVIDIADriver mode,
#: precompiled drivers, and the version it installs.
POLICY_DRIVER_FIELDS = ("enabled", "useNvidiaDriverCRD", "usePrecompiled", "version")


def _policy_driver(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    spec = obj.get("spec")
    driver = spec.get("driver") if isinstance(spec, Mapping) else None
    if not isinstance(driver, Mapping):
        return None
    return {k: driver[k] for k in POLICY_DRIVER_FIELDS if k in driver}


def reduced(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A ClusterPolicy or CRD cut to what :func:`operator_of_cluster` and the planner read
    (what a live read keeps and ``cudasched snapshot`` writes): a ClusterPolicy's name, labels,
    the driver settings of :data:`POLICY_DRIVER_FIELDS`, ``spec.cdi`` (the toolkit's mode,
    :mod:`cudasched.compat.toolkitmode`) and state; a CRD's
    name, group, names, scope and, per version, whether it is served and the names of its spec
    properties (their schemas emptied). Any other object is returned as it is."""
    kind, meta = _kind(obj), _meta(obj)
    head = {"apiVersion": obj.get("apiVersion"), "kind": kind}
    if kind == CLUSTER_POLICY_KIND:
        status = obj.get("status")
        state = status.get("state") if isinstance(status, Mapping) else None
        out: dict[str, Any] = {
            **head,
            "metadata": {"name": meta.get("name"), "labels": dict(meta.get("labels") or {})},
        }
        spec = obj.get("spec")
        cdi = spec.get("cdi") if isinstance(spec, Mapping) else None
        driver = _policy_driver(obj)
        kept = {
            **({"driver": driver} if driver is not None else {}),
            **({"cdi": dict(cdi)} if isinstance(cdi, Mapping) else {}),
        }
        if kept:
            out["spec"] = kept
        if state is not None:
            out["status"] = {"state": state}
        return out
    if kind != CRD_KIND:
        return dict(obj)
    spec = obj.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    versions = []
    for version in spec.get("versions") or ():
        if not isinstance(version, Mapping):
            continue
        props = sorted(_spec_properties({"spec": {"versions": [{**version, "served": True}]}}))
        versions.append(
            {
                "name": version.get("name"),
                "served": version.get("served", True),
                "storage": version.get("storage", False),
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "properties": {p: {} for p in props}}
                        },
                    }
                },
            }
        )
    return {
        **head,
        "metadata": {"name": meta.get("name")},
        "spec": {
            "group": spec.get("group"),
            "names": dict(spec.get("names") or {}),
            "scope": spec.get("scope"),
            "versions": versions,
        },
    }


def operator_from_objects(
    kb: KnowledgeBase, drivers: Iterable[Mapping[str, object]]
) -> tuple[OperatorVersion, str] | None:
    """The GPU Operator release a cluster's NVIDIADriver objects were stored by, and how that
    was read (``None``: no object to read). The API server writes CRD defaults into every
    object it stores: ``spec.default`` (false) from v26.7, ``spec.kernelModuleType`` (auto)
    from v25.3; so the newest release whose fields the objects show is the oldest the cluster
    can run."""
    specs = [s for s in (d.get("spec") for d in drivers) if isinstance(s, Mapping)]
    if not specs:
        return None
    seen = set().union(*(set(s) for s in specs))
    for version in kb.operator.versions:
        marks = [f for f in ("default", "kernelModuleType") if version.accepts(f)]
        if all(f in seen for f in marks):
            shown = " and ".join(f"spec.{f}" for f in marks) or "no spec.kernelModuleType"
            return version, f"read from the cluster's NVIDIADriver objects ({shown})"
    oldest = kb.operator.versions[-1]
    return oldest, "read from the cluster's NVIDIADriver objects (the oldest release known)"


def operator_of_cluster(
    kb: KnowledgeBase,
    objects: Iterable[Mapping[str, Any]],
    drivers: Iterable[Mapping[str, Any]] = (),
) -> OperatorRead | None:
    """The GPU Operator release the cluster runs, from its ClusterPolicy and NVIDIADriver CRD
    (``objects``: any objects, the others are ignored) and its stored NVIDIADriver objects
    (``drivers``), in the order of the module docstring; ``None``: nothing tells."""
    objects = list(objects)
    crd = crd_release(kb, objects)
    policy = _policy_release(kb, objects)
    if policy is not None:
        text, where = policy
        version, unknown = _line_of(kb, text)
        notes = [unknown] if unknown is not None else []
        if crd is not None and crd[0].key < version.key:
            missing = sorted(m for v in kb.operator.versions if crd[0].key < v.key <= version.key
                             for m in v.crd_marks)  # fmt: skip
            notes.append(
                f"the cluster's NVIDIADriver CRD is GPU Operator {crd[0].version}'s (it has no "
                f"{', '.join('spec.' + m for m in missing)}) while the operator is {text}: Helm "
                "does not upgrade CRDs; apply the release's CRDs (or upgrade with "
                "operator.upgradeCRD=true) before applying these objects"
            )
        return OperatorRead(version, f"read from the cluster's {where}", tuple(notes))
    if crd is not None:
        return OperatorRead(crd[0], f"read from {crd[1]}")
    stored = operator_from_objects(kb, drivers)
    if stored is not None:
        return OperatorRead(stored[0], stored[1])
    return None
