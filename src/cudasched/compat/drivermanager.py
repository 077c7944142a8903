"""Who installs a node's driver: the GPU Operator's driver DaemonSet, the host, or a cloud's
node image, decided from every signal the cluster shows, and how that driver moves to another
branch.

Pure: knowledge base, labels and the cluster's GPU Operator objects in, a :class:`Manager` out.
The facts are ``gpu-operator.yaml``'s ``driver_manager``, ``openshift`` and ``node_images``
(each with its source). The one trap: the operator labels *every* GPU node
``nvidia.com/gpu.deploy.driver=true``, also where no driver DaemonSet will ever run (a
ClusterPolicy with ``spec.driver.enabled=false``, as NVIDIA documents for GKE, AKS and EKS
images that carry the driver). So the label says who does *not* install the driver
(``pre-installed``, written by k8s-driver-manager when it finds a host driver, or ``false``), never
who does. A node is the operator's only on evidence that its driver DaemonSet reaches it, first
match wins (:func:`driver_manager`):

1. ``pre-installed`` / ``false``: the host's, or the node group's image;
2. a driver pod on the node, or the owner label GPU Operator v26.7 writes
   (``nvidia.com/gpu-operator.driver.owner``): the operator's;
3. a cloud's own driver (GKE's ``cloud.google.com/gke-gpu-driver-version`` or a
   Container-Optimized OS node; an EKS-optimized Amazon Linux or Bottlerocket AMI): the node
   image's;
4. OpenShift without the RHCOS ``OSTREE_VERSION`` label (RHEL compute nodes): the operator skips
   the node, so the host's;
5. the ClusterPolicy: ``spec.driver.enabled=false`` is the host's or the node image's (unless an
   NVIDIADriver selects the node in NVIDIADriver mode); enabled, the operator's (in
   NVIDIADriver mode: when an NVIDIADriver selects the node or a default one exists);
6. no ClusterPolicy in the snapshot (or NVIDIADriver mode and no NVIDIADriver object in it): the
   label read alone: ``true`` is the operator's, no label too but *assumed*, and a managed node
   group without the label the node image's (assumed).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from cudasched.vocab.objects import labels_of, name_of

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.knowledge.operator import DriverManagerFacts
    from cudasched.vocab.versions import DriverVersion

__all__ = [
    "CLUSTER_POLICY_KIND",
    "NFD_OS_ID",
    "OPENSHIFT_SKIPPED",
    "DriverCluster",
    "DriverManager",
    "Manager",
    "PolicyDriver",
    "driver_change",
    "driver_cluster",
    "driver_manager",
    "group_noun",
    "policy_driver",
]

CLUSTER_POLICY_KIND = "ClusterPolicy"
#: How a host manager's evidence says the operator skips an OpenShift node (notes look for it).
OPENSHIFT_SKIPPED = "which the GPU Operator's driver pools skip"
NFD_OS_ID = "feature.node.kubernetes.io/system-os_release.ID"
_HELM_LABEL = "helm.sh/chart"


def group_noun(provider: str | None) -> str:
    """What a cloud calls a group of alike nodes: EKS a node group, GKE and AKS a node pool."""
    return "node pool" if provider in ("GKE", "AKS") else "node group"


class DriverManager(StrEnum):
    """Who installs a node's driver."""

    OPERATOR = "operator"  # the GPU Operator's driver container
    HOST = "host"  # installed on the host (pre-installed, or the operator's driver turned off)
    NODE_IMAGE = "node-image"  # a cloud-managed node group's image


@dataclass(frozen=True, slots=True)
class Manager:
    """Who installs a node's driver, how we know (``evidence``) and, for a managed node group,
    its provider and name."""

    kind: DriverManager
    evidence: str
    provider: str | None = None
    group: str | None = None
    assumed: bool = False  # no cluster object says so: inferred from labels alone

    @property
    def operator(self) -> bool:
        return self.kind is DriverManager.OPERATOR

    def where(self) -> str:
        """``EKS node group g5-al2``, ``GKE node pool l4-cos``: the cloud's own word."""
        if not self.group:
            return f"the {self.provider} nodes"
        return f"{self.provider} {group_noun(self.provider)} {self.group}"

    def describe(self) -> str:
        if self.kind is DriverManager.NODE_IMAGE:
            return f"{self.where()} (driver from the node image: {self.evidence})"
        if self.kind is DriverManager.HOST:
            return f"host-installed driver ({self.evidence})"
        return "GPU Operator driver container" + (f" ({self.evidence})" if self.evidence else "")


@dataclass(frozen=True, slots=True)
class PolicyDriver:
    """What a ClusterPolicy says of drivers: whether its driver DaemonSet runs
    (``spec.driver.enabled``, default true; ``None``: the snapshot does not hold the spec),
    whether NVIDIADriver objects install them (``useNvidiaDriverCRD``), precompiled drivers, and
    how it was installed (Helm labels; OLM's sample name)."""

    name: str
    enabled: bool | None
    use_crd: bool
    precompiled: bool
    helm: bool

    def describe(self) -> str:
        if self.enabled is None:
            return f"ClusterPolicy {self.name}"
        return f"ClusterPolicy {self.name} spec.driver.enabled={str(self.enabled).lower()}"


@dataclass(frozen=True, slots=True)
class DriverCluster:
    """What a cluster shows of the operator's driver DaemonSets, read once: its ClusterPolicy,
    NVIDIADriver objects, the nodes with a driver pod, and whether it is OpenShift."""

    policy: PolicyDriver | None = None
    drivers: tuple[Mapping[str, Any], ...] = ()
    pods_on: frozenset[str] = frozenset()
    openshift: bool = False

    @property
    def olm(self) -> bool:
        """An install without Helm's labels on its ClusterPolicy (OLM on OpenShift)."""
        return self.policy is not None and not self.policy.helm


def _bool(value: object, default: bool | None) -> bool | None:
    return value if isinstance(value, bool) else default


def policy_driver(obj: Mapping[str, Any]) -> PolicyDriver | None:
    """A ClusterPolicy's driver settings (``None`` for any other object)."""
    if obj.get("kind") != CLUSTER_POLICY_KIND:
        return None
    spec = obj.get("spec")
    driver = spec.get("driver") if isinstance(spec, Mapping) else None
    known = isinstance(driver, Mapping)
    settings = driver if isinstance(driver, Mapping) else {}
    return PolicyDriver(
        name=name_of(obj) or "?",
        enabled=_bool(settings.get("enabled"), True) if known else None,
        use_crd=bool(_bool(settings.get("useNvidiaDriverCRD"), False)),
        precompiled=bool(_bool(settings.get("usePrecompiled"), False)),
        helm=_HELM_LABEL in labels_of(obj),
    )


def driver_cluster(
    kb: KnowledgeBase,
    objects: Iterable[Mapping[str, Any]],
    *,
    drivers: Iterable[Mapping[str, Any]] = (),
    pods: Iterable[Mapping[str, Any]] = (),
    nodes: Iterable[Mapping[str, Any]] = (),
) -> DriverCluster:
    """The cluster's evidence (module docstring): the first ClusterPolicy among ``objects``,
    the NVIDIADriver objects, the nodes a driver pod runs on (``pods``), and OpenShift (a node
    with ``node.openshift.io/os_id``)."""
    facts = kb.operator.driver_manager
    policy = next((p for p in (policy_driver(o) for o in objects) if p is not None), None)
    key, value = facts.driver_pod_label
    pods_on = frozenset(
        str(node)
        for p in pods
        if labels_of(p).get(key) == value
        and isinstance(p.get("spec"), Mapping)
        and isinstance(node := p["spec"].get("nodeName"), str)
    )
    os_label = kb.operator.openshift.os_id_label if kb.operator.openshift else ""
    openshift = bool(os_label) and any(os_label in labels_of(n) for n in nodes)
    return DriverCluster(policy, tuple(drivers), pods_on, openshift)


def _selects(driver: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether an NVIDIADriver selects a GPU node: its nodeSelector matches (a default object
    selects the nodes no other one does; the caller decides those)."""
    spec = driver.get("spec")
    if not isinstance(spec, Mapping) or spec.get("default") is True:
        return False
    selector = spec.get("nodeSelector") or {}
    if not isinstance(selector, Mapping) or not selector:
        return False
    return all(labels.get(str(k)) == str(v) for k, v in selector.items())


def _has_default(drivers: Iterable[Mapping[str, Any]]) -> bool:
    """A default NVIDIADriver (v26.7 ``spec.default``; before, an object without nodeSelector
    selects every GPU node)."""
    for d in drivers:
        spec = d.get("spec")
        if isinstance(spec, Mapping) and (
            spec.get("default") is True or not spec.get("nodeSelector")
        ):
            return True
    return False


def _group(facts: DriverManagerFacts, labels: Mapping[str, str]) -> tuple[str, str] | None:
    """(provider, node group) of a cloud-managed node group the node belongs to."""
    found = next((g for g in facts.node_groups if labels.get(g.label)), None)
    return (found.provider, labels[found.label]) if found is not None else None


def _managed(facts: DriverManagerFacts, labels: Mapping[str, str]) -> tuple[str, str] | None:
    """(provider, the label or OS that shows it) when a cloud installs the node's driver."""
    os_id = labels.get(NFD_OS_ID, "").strip().lower() or None
    for rule in facts.managed:
        said = rule.says(labels, os_id)
        if said is not None:
            return rule.provider, said
    return None


def _image(kind: DriverManager, evidence: str, group: tuple[str, str] | None) -> Manager:
    provider, name = group if group is not None else (None, None)
    return Manager(kind, evidence, provider, name)


def driver_manager(
    kb: KnowledgeBase,
    labels: Mapping[str, str],
    cluster: DriverCluster | None = None,
    node: str = "",
) -> Manager:
    """Who installs the driver of node ``node`` with ``labels`` (module docstring)."""
    facts = kb.operator.driver_manager
    cluster = cluster or DriverCluster()
    deploy = labels.get(facts.deploy_label)
    group = _group(facts, labels)
    if deploy is not None and deploy in facts.host_values:
        kind = DriverManager.NODE_IMAGE if group is not None else DriverManager.HOST
        return _image(kind, f"{facts.deploy_label}={deploy}", group)
    if node and node in cluster.pods_on:
        return Manager(DriverManager.OPERATOR, "a GPU Operator driver pod runs on it")
    owner = labels.get(facts.owner_label) if facts.owner_label else None
    if owner:
        return Manager(DriverManager.OPERATOR, f"{facts.owner_label}={owner}")
    managed = _managed(facts, labels)
    if managed is not None:
        provider, said = managed
        name = group[1] if group is not None and group[0] == provider else None
        return Manager(
            DriverManager.NODE_IMAGE, f"{said}: {provider} installs the driver", provider, name
        )
    skipped = _openshift_skips(kb, labels, cluster)
    if skipped is not None:
        return Manager(DriverManager.HOST, skipped)
    policy = cluster.policy
    # In NVIDIADriver mode the objects decide; a snapshot that holds none of them (a dump
    # without the kind) says nothing either way.
    known = policy is not None and policy.enabled is not None
    if (
        policy is not None
        and known
        and not (policy.enabled and policy.use_crd and not cluster.drivers)
    ):
        return _by_policy(labels, cluster, policy, group)
    return _by_label(facts, deploy, group)


def _openshift_skips(
    kb: KnowledgeBase, labels: Mapping[str, str], cluster: DriverCluster
) -> str | None:
    """Why the operator skips an OpenShift node (no RHCOS ``OSTREE_VERSION`` label: RHEL
    compute nodes), else ``None``."""
    facts = kb.operator.openshift
    if facts is None or not cluster.openshift or labels.get(facts.ostree_label):
        return None
    if cluster.policy is not None and cluster.policy.precompiled:
        return None
    os_id = labels.get(facts.os_id_label, "")
    return (
        f"an OpenShift node ({facts.os_id_label}={os_id or '?'}) without "
        f"{facts.ostree_label.rsplit('.', 1)[-1]}, {OPENSHIFT_SKIPPED}"
    )


def _by_policy(
    labels: Mapping[str, str],
    cluster: DriverCluster,
    policy: PolicyDriver,
    group: tuple[str, str] | None,
) -> Manager:
    """Step 5: what the ClusterPolicy (and, in NVIDIADriver mode, the objects) say."""
    selected = next((d for d in cluster.drivers if _selects(d, labels)), None)
    if policy.use_crd and selected is not None:
        return Manager(DriverManager.OPERATOR, f"NVIDIADriver/{name_of(selected)} selects it")
    off = DriverManager.NODE_IMAGE if group is not None else DriverManager.HOST
    if not policy.enabled:
        return _image(off, policy.describe(), group)
    if policy.use_crd and not _has_default(cluster.drivers):
        return _image(
            off, f"{policy.describe()} in NVIDIADriver mode, no NVIDIADriver selects it", group
        )
    return Manager(DriverManager.OPERATOR, policy.describe())


def _by_label(
    facts: DriverManagerFacts, deploy: str | None, group: tuple[str, str] | None
) -> Manager:
    """Step 6: no ClusterPolicy in the snapshot: the label and the node group alone."""
    if deploy is None and group is not None:
        return Manager(
            DriverManager.NODE_IMAGE,
            f"no {facts.deploy_label} label, {group[1]} is a {group[0]} node group",
            group[0],
            group[1],
            assumed=True,
        )
    if deploy is None:
        return Manager(DriverManager.OPERATOR, f"no {facts.deploy_label} label", assumed=True)
    return Manager(DriverManager.OPERATOR, f"{facts.deploy_label}={deploy}")


# --------------------------------------------------------------------------- moving a driver


def _image_action(
    kb: KnowledgeBase, manager: Manager, branch: int, what: str, os: str | None
) -> str:
    """How a managed node group gets ``what`` (an R<branch> driver >= V): the cloud's own knob,
    and for an ended node-image family (EKS Amazon Linux 2) the families that replace it."""
    where = manager.where()
    image = kb.operator.node_image(os) if os is not None else None
    if image is not None and image.ended is not None:
        newest = f" (the last carries {image.driver})" if image.driver is not None else ""
        if image.driver is None or image.driver.branch < branch:
            return (
                f"move {where} off the {image.family}: {image.provider} stopped publishing it on "
                f"{image.ended}{newest}; use {' or '.join(image.successors)} with {what}"
            )
    if manager.provider == "GKE":
        return (
            f"set {where}'s gpu-driver-version (latest), or move it to a GKE version whose GPU "
            f"driver is {what}; GKE installs this driver, not the GPU Operator"
        )
    if manager.provider == "AKS":
        return (
            f"upgrade {where}'s node image (az aks nodepool upgrade --node-image-only) to one "
            f"with {what}, or recreate it with --gpu-driver none so the GPU Operator installs it"
        )
    known = (
        f" ({image.family} {image.release} carries {image.driver})"
        if image is not None and image.driver is not None and image.release
        else ""
    )
    return f"move {where} to a node image with {what}{known}"


def driver_change(
    kb: KnowledgeBase,
    manager: Manager,
    branch: int,
    floor: DriverVersion,
    newest: DriverVersion | None,
    operator_text: str,
    os: str | None = None,
) -> str:
    """How a node's driver moves to ``branch`` (at least ``floor``; ``newest``: the branch's
    newest known release), said the way its driver is installed: a managed node group through
    its cloud's knob (``os``: the OS tag, for the node-image family), a host-installed driver on
    the hosts or their image (no NVIDIADriver reaches them), and the GPU Operator's nodes take
    ``operator_text``. ``plan-drivers`` (per pool) and the audit's fix for a workload no node can
    run (the nearest node) both say it with this function."""
    if manager.kind is DriverManager.OPERATOR:
        return operator_text
    what = f"an R{branch} driver >= {floor}" + (
        f" (newest known: {newest})" if newest is not None else ""
    )
    if manager.kind is DriverManager.NODE_IMAGE:
        return _image_action(kb, manager, branch, what, os)
    return (
        f"install {what} on the hosts or their image ({manager.evidence}: the GPU Operator "
        "does not install this driver)"
    )
