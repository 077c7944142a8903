"""Node-group templates for autoscaling from zero: the labels the agent will publish on a node
with a given GPU and driver, and how to tell each autoscaler about them before the node exists.

A pod whose required node affinity names labels that only appear after boot (ours, or GPU
Feature Discovery's) never triggers a scale-up of a node group with no node: the Cluster
Autoscaler builds a scaled-to-zero group's node from the cloud template, and Karpenter refuses a
custom label key its NodePool does not define. The labels must be declared on the group
(``reference/ops-facts.md`` §1). The values come from the agent's own labelers
(:func:`cudasched.nodes.labelers.build_labels` over the facts the driver would report), never
from a second copy of the label rules, so a declared template equals what the agent writes.

Declarations, exactly as each autoscaler reads them:

* AWS Auto Scaling group tag ``k8s.io/cluster-autoscaler/node-template/label/<key>`` = value;
* Azure VMSS tag ``k8s.io_cluster-autoscaler_node-template_label_<key>``, the key with each
  ``_`` written ``~2`` and then each ``/`` written ``_`` (the autoscaler reads ``_`` back as
  ``/``, then ``~2`` as ``_``: kubernetes/autoscaler ``cloudprovider/azure/azure_template.go``
  ``extractLabelsFromTags``);
* Cluster API annotations on the MachineDeployment / MachineSet / MachinePool:
  ``capacity.cluster-autoscaler.kubernetes.io/labels: "k=v,..."`` and, to scale from zero, the
  node's capacity: ``.../gpu-type: nvidia.com/gpu`` and ``.../gpu-count``, with ``.../cpu`` and
  ``.../memory``, which the autoscaler requires at the minimum (kubernetes/autoscaler
  ``cloudprovider/clusterapi/README.md``, "Scale from zero support");
* a Karpenter ``NodePool`` whose ``spec.template.metadata.labels`` carry the fixed values (never
  ``Exists``/``Gt``/``Lt`` requirements on these keys: Karpenter would then write a random value
  on the new node, which the scheduler trusts until the agent corrects it);
* a GKE node pool's Kubernetes labels (``gcloud container node-pools create|update
  --node-labels``), which GKE puts on every node of the pool and its autoscaler puts on the
  template of a pool scaled to zero;
* an AKS node pool's labels (``az aks nodepool add|update --labels``, space-separated), which AKS
  puts on every node of the pool (labels under ``kubernetes.azure.com/`` and ``kubernetes.io/``
  are AKS's own: learn.microsoft.com/azure/aks/use-labels);
* kubelet ``--node-labels`` so the node registers with the labels it was promised.

Every tag is checked against its cloud's rules (AWS: key <= 128, value <= 256 characters of
letters, digits, spaces and ``_.:/=+-@``, no ``aws:`` prefix; Azure: name <= 512 characters
without ``<>%&\\?/``, value <= 256, no ``azure``/``microsoft``/``windows`` prefix; 50 tags per
resource on both) before it is printed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from cudasched.knowledge import gfd_product_label
from cudasched.nodes.hostfacts import DriverFacts, GpuFacts
from cudasched.nodes.labelers import build_labels, enrich
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.labelsyntax import dns_subdomain_ok, label_value_ok
from cudasched.vocab.versions import DriverVersion, parse_driver

if TYPE_CHECKING:
    from cudasched.knowledge import GpuInfo, KnowledgeBase

__all__ = [
    "AWS_LABEL_TAG_PREFIX",
    "AZURE_LABEL_TAG_PREFIX",
    "CAPI_LABELS_ANNOTATION",
    "KARPENTER_API_VERSION",
    "KARPENTER_NODEPOOL_LABEL",
    "NodeClassRef",
    "NodePoolOptions",
    "Provider",
    "aks_node_labels",
    "aws_tags",
    "azure_label_key",
    "azure_tag_name",
    "azure_tags",
    "capi_annotations",
    "declarations",
    "gke_node_labels",
    "karpenter_nodepool",
    "kubelet_flag",
    "node_template",
    "parse_label_list",
    "template_facts",
    "template_labels",
]

AWS_LABEL_TAG_PREFIX = "k8s.io/cluster-autoscaler/node-template/label/"
AZURE_LABEL_TAG_PREFIX = "k8s.io_cluster-autoscaler_node-template_label_"
CAPI_LABELS_ANNOTATION = "capacity.cluster-autoscaler.kubernetes.io/labels"
CAPI_CAPACITY_PREFIX = "capacity.cluster-autoscaler.kubernetes.io/"
#: The GPU resource the device plugin advertises (the CAPI ``gpu-type`` annotation's value).
GPU_RESOURCE = "nvidia.com/gpu"
#: A label value's limit: a NodePool's name becomes the value of ``karpenter.sh/nodepool``.
LABEL_VALUE_MAX = 63
KARPENTER_API_VERSION = "karpenter.sh/v1"
#: The label Karpenter puts on every node it launches: the NodePool's name.
KARPENTER_NODEPOOL_LABEL = "karpenter.sh/nodepool"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"

#: Tags per resource, on AWS and on Azure alike.
MAX_TAGS = 50
_AWS_KEY_MAX, _AWS_VALUE_MAX = 128, 256
_AWS_CHARS = re.compile(r"^[\w .:/=+\-@]*$")
_AZURE_NAME_MAX, _AZURE_VALUE_MAX = 512, 256
_AZURE_FORBIDDEN = frozenset("<>%&\\?/")
_AZURE_RESERVED = ("azure", "microsoft", "windows")
# NodeRestriction: a kubelet may not set labels of these domains on its own Node (except a few
# well-known ones, none of which cudasched writes).
_KUBELET_FORBIDDEN_DOMAINS = ("kubernetes.io", "k8s.io")


class Provider(StrEnum):
    """Where a node group's template labels are declared."""

    AWS = "aws"
    AZURE = "azure"
    GKE = "gke"
    AKS = "aks"
    CAPI = "capi"
    KARPENTER = "karpenter"
    ALL = "all"

    def expand(self) -> tuple[Provider, ...]:
        if self is Provider.ALL:
            return (
                Provider.AWS,
                Provider.AZURE,
                Provider.GKE,
                Provider.AKS,
                Provider.CAPI,
                Provider.KARPENTER,
            )
        return (self,)


# --------------------------------------------------------------------------- labels


def _board_name(name: str, info: GpuInfo) -> str:
    """The name the driver reports for the board ``name`` means: the product label depends on
    it, so a product with several boards needs the exact board."""
    if len(info.names) <= 1:
        return info.names[0] if info.names else info.product
    wanted = gfd_product_label(name).lower()
    for board in info.names:
        if gfd_product_label(board).lower() == wanted:
            return board
    boards = ", ".join(repr(b) for b in info.names)
    raise InputError(
        f"GPU {name!r} names several {info.product} boards, and nodes with each carry a "
        f"different product label: give the name nvidia-smi prints, one of {boards}"
    )


def template_facts(
    gpu: str, driver: DriverVersion | str, kb: KnowledgeBase, *, gpus: int = 1
) -> DriverFacts:
    """The facts a node with ``gpus`` GPUs named ``gpu`` and this driver reports to the agent:
    the board's name as the driver prints it, the CUDA version the driver supports
    (:meth:`~cudasched.knowledge.KnowledgeBase.max_cuda_for_driver`), and the compute capability
    and data-center flag the agent fills in from the knowledge base (:func:`enrich`)."""
    version = parse_driver(driver) if isinstance(driver, str) else driver
    if gpus < 1:
        raise InputError(f"invalid GPU count {gpus}: expected 1 or more")
    info = kb.gpu(gpu)
    if info is None:
        raise kb.unknown_gpu(gpu)
    cuda = kb.max_cuda_for_driver(version)
    if cuda is None:
        raise InputError(
            f"driver {version} is older than every CUDA toolkit the knowledge base knows: its "
            "nodes would carry no CUDA labels (expected a driver such as 570.124.06)"
        )
    board = GpuFacts(name=_board_name(gpu, info))
    facts = DriverFacts(driver=version, cuda=cuda, gpus=(board,) * gpus, source="node-template")
    return enrich(facts, kb)


def template_labels(
    gpu: str,
    driver: DriverVersion | str,
    kb: KnowledgeBase,
    *,
    gpus: int = 1,
    gfd_compatible: bool = False,
) -> dict[str, str]:
    """The labels the agent publishes on such a node (with ``gfd_compatible``, also GFD's keys
    as ``cudasched agent --gfd-compatible`` writes them; GFD's ``nvidia.com/gpu.memory`` is not
    known before boot and is left out)."""
    facts = template_facts(gpu, driver, kb, gpus=gpus)
    return build_labels(facts, archs=kb, gfd_compatible=gfd_compatible)


def parse_label_list(text: str) -> dict[str, str]:
    """``k1=v1,k2=v2`` (the Cluster API annotation, kubelet ``--node-labels``) as a map; an
    :class:`InputError` naming the piece that is not ``key=value``."""
    labels: dict[str, str] = {}
    for piece in text.split(","):
        piece = piece.strip()
        if not piece:
            continue
        key, sep, value = piece.partition("=")
        if not sep or not key.strip():
            raise InputError(f"invalid label {piece!r} in {text!r}: expected key=value")
        labels[key.strip()] = value.strip()
    return labels


# --------------------------------------------------------------------------- declarations


def _check_count(tags: Mapping[str, str], where: str) -> None:
    if len(tags) > MAX_TAGS:
        raise InputError(
            f"{len(tags)} labels need {len(tags)} {where} tags, more than the {MAX_TAGS} a "
            "resource may carry: declare fewer labels (leave out --gfd-compatible)"
        )


def aws_tags(labels: Mapping[str, str]) -> dict[str, str]:
    """Auto Scaling group tags the Cluster Autoscaler reads as template labels (the key keeps
    its ``/``: CA takes everything after the prefix as the label key)."""
    tags: dict[str, str] = {}
    for key, value in labels.items():
        tag = AWS_LABEL_TAG_PREFIX + key
        if len(tag) > _AWS_KEY_MAX or len(value) > _AWS_VALUE_MAX:
            raise InputError(
                f"AWS tag {tag!r}={value!r} is too long: keys take at most {_AWS_KEY_MAX} "
                f"characters, values {_AWS_VALUE_MAX}"
            )
        if not _AWS_CHARS.match(tag) or not _AWS_CHARS.match(value):
            raise InputError(
                f"AWS tag {tag!r}={value!r} has a character AWS does not allow (expected "
                "letters, digits, spaces and _ . : / = + - @)"
            )
        tags[tag] = value
    _check_count(tags, "AWS")
    return tags


def azure_tag_name(key: str) -> str:
    """The VMSS tag name the Cluster Autoscaler reads back as label ``key``: ``_`` written
    ``~2`` first, then ``/`` written ``_`` (Azure tag names may not contain ``/``)."""
    return AZURE_LABEL_TAG_PREFIX + key.replace("_", "~2").replace("/", "_")


def azure_label_key(tag: str) -> str:
    """The label key the Cluster Autoscaler reads from a VMSS tag name (its own order: ``_``
    to ``/``, then ``~2`` to ``_``)."""
    return tag.removeprefix(AZURE_LABEL_TAG_PREFIX).replace("_", "/").replace("~2", "_")


def azure_tags(labels: Mapping[str, str]) -> dict[str, str]:
    """VMSS tags the Cluster Autoscaler reads as template labels (:func:`azure_tag_name`)."""
    tags: dict[str, str] = {}
    for key, value in labels.items():
        tag = azure_tag_name(key)
        bad = sorted(_AZURE_FORBIDDEN.intersection(tag))
        if bad or tag.lower().startswith(_AZURE_RESERVED):
            raise InputError(
                f"Azure tag name {tag!r} is not allowed (no {' '.join(bad) or 'reserved prefix'})"
            )
        if len(tag) > _AZURE_NAME_MAX or len(value) > _AZURE_VALUE_MAX:
            raise InputError(
                f"Azure tag {tag!r}={value!r} is too long: names take at most "
                f"{_AZURE_NAME_MAX} characters, values {_AZURE_VALUE_MAX}"
            )
        tags[tag] = value
    _check_count(tags, "Azure")
    return tags


def _joined(labels: Mapping[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in labels.items())


_AKS_RESERVED = ("kubernetes.azure.com/", "kubernetes.io/")


def gke_node_labels(labels: Mapping[str, str]) -> dict[str, Any]:
    """A GKE node pool's labels and the ``gcloud`` flag that sets them."""
    return {"nodeLabels": dict(labels), "gcloud": f"--node-labels={_joined(labels)}"}


def aks_node_labels(labels: Mapping[str, str]) -> dict[str, Any]:
    """An AKS node pool's labels and the ``az aks nodepool`` flag that sets them (AKS's own
    prefixes are refused)."""
    reserved = [k for k in labels if k.startswith(_AKS_RESERVED)]
    if reserved:
        raise InputError(
            f"AKS reserves the prefixes of {', '.join(reserved)}: not a node pool label"
        )
    flag = " ".join(f"{k}={v}" for k, v in labels.items())
    return {"labels": dict(labels), "az": f"--labels {flag}"}


def capi_annotations(
    labels: Mapping[str, str],
    *,
    gpus: int = 1,
    cpu: str | None = None,
    memory: str | None = None,
) -> dict[str, str]:
    """The Cluster API annotations (MachineDeployment, MachineSet or MachinePool) the Cluster
    Autoscaler reads as the template of a node group scaled to zero: its labels, and its
    capacity (``cpu`` and ``memory``, the minimum it requires, only when given; the GPUs)."""
    out = {CAPI_LABELS_ANNOTATION: _joined(labels)}
    if cpu is not None:
        out[CAPI_CAPACITY_PREFIX + "cpu"] = cpu
    if memory is not None:
        out[CAPI_CAPACITY_PREFIX + "memory"] = memory
    out[CAPI_CAPACITY_PREFIX + "gpu-type"] = GPU_RESOURCE
    out[CAPI_CAPACITY_PREFIX + "gpu-count"] = str(gpus)
    return out


def kubelet_flag(labels: Mapping[str, str]) -> str:
    """kubelet's ``--node-labels`` flag; NodeRestriction forbids a kubelet the
    ``kubernetes.io``/``k8s.io`` domains, which these labels never use."""
    for key in labels:
        domain = key.partition("/")[0] if "/" in key else ""
        if any(domain == d or domain.endswith("." + d) for d in _KUBELET_FORBIDDEN_DOMAINS):
            raise InputError(
                f"label {key!r} cannot be set by kubelet --node-labels: NodeRestriction "
                "forbids the kubernetes.io and k8s.io domains"
            )
    return f"--node-labels={_joined(labels)}"


@dataclass(frozen=True, slots=True)
class NodeClassRef:
    """A Karpenter NodePool's ``nodeClassRef``."""

    group: str
    kind: str
    name: str

    @classmethod
    def parse(cls, text: str) -> NodeClassRef:
        """``GROUP/KIND/NAME``, e.g. ``karpenter.k8s.aws/EC2NodeClass/gpu-r570``."""
        parts = text.split("/")
        if len(parts) != 3 or not all(p.strip() for p in parts):
            raise InputError(
                f"invalid node class {text!r}: expected GROUP/KIND/NAME, e.g. "
                "karpenter.k8s.aws/EC2NodeClass/gpu-r570"
            )
        return cls(*(p.strip() for p in parts))

    def to_dict(self) -> dict[str, str]:
        return {"group": self.group, "kind": self.kind, "name": self.name}


@dataclass(frozen=True, slots=True)
class NodePoolOptions:
    """What a NodePool needs beyond the labels: its name, its node class (which picks the
    machine image, hence the driver: one NodePool per driver image) and the instance types
    that carry the GPU (``()``: not restricted, see :func:`karpenter_nodepool`)."""

    name: str
    node_class: NodeClassRef | None = None
    instance_types: tuple[str, ...] = ()
    gpus: int = 1
    cpu: str | None = None
    memory: str | None = None


def karpenter_nodepool(labels: Mapping[str, str], options: NodePoolOptions) -> dict[str, Any]:
    """A ``karpenter.sh/v1`` NodePool that launches nodes already labelled with ``labels``.

    The labels are fixed values under ``spec.template.metadata.labels`` and no requirement
    names any of their keys. ``options.instance_types`` becomes the only requirement
    (``node.kubernetes.io/instance-type In [...]``); without it Karpenter may pick a machine
    with another GPU, whose node then carries these labels until the agent corrects them.
    """
    if not dns_subdomain_ok(options.name) or len(options.name) > LABEL_VALUE_MAX:
        raise InputError(
            f"invalid NodePool name {options.name!r}: expected a DNS subdomain (lower-case "
            f"letters, digits, '-' and '.') of at most {LABEL_VALUE_MAX} characters: Karpenter "
            "labels each node karpenter.sh/nodepool=<name>"
        )
    node_class = options.node_class or NodeClassRef(
        "karpenter.k8s.aws", "EC2NodeClass", options.name
    )
    requirements: list[dict[str, Any]] = []
    if options.instance_types:
        requirements.append(
            {
                "key": INSTANCE_TYPE_LABEL,
                "operator": "In",
                "values": list(dict.fromkeys(options.instance_types)),
            }
        )
    return {
        "apiVersion": KARPENTER_API_VERSION,
        "kind": "NodePool",
        "metadata": {"name": options.name},
        "spec": {
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "nodeClassRef": node_class.to_dict(),
                    "requirements": requirements,
                },
            }
        },
    }


def declarations(
    labels: Mapping[str, str],
    providers: Iterable[Provider],
    nodepool: NodePoolOptions,
) -> dict[str, Any]:
    """How to declare ``labels`` for each of ``providers`` (``all`` expanded), plus the kubelet
    flag every provider's machines need so the node registers with what was promised."""
    out: dict[str, Any] = {}
    for provider in dict.fromkeys(p for given in providers for p in given.expand()):
        if provider is Provider.AWS:
            out["aws"] = {"tags": aws_tags(labels)}
        elif provider is Provider.AZURE:
            out["azure"] = {"tags": azure_tags(labels)}
        elif provider is Provider.GKE:
            out["gke"] = gke_node_labels(labels)
        elif provider is Provider.AKS:
            out["aks"] = aks_node_labels(labels)
        elif provider is Provider.CAPI:
            out["capi"] = {
                "annotations": capi_annotations(
                    labels, gpus=nodepool.gpus, cpu=nodepool.cpu, memory=nodepool.memory
                )
            }
        elif provider is Provider.KARPENTER:
            out["karpenter"] = karpenter_nodepool(labels, nodepool)
    out["kubelet"] = kubelet_flag(labels)
    return out


def default_nodepool_name(labels: Mapping[str, str], driver: DriverVersion) -> str:
    """``<gpu product>-<driver>`` in DNS-subdomain form, e.g. ``nvidia-h100-80gb-hbm3-570-124-06``
    (one NodePool per GPU and driver image), at most 63 characters (the product is shortened:
    the name is a label value)."""
    product = labels.get(L.GPU_PRODUCT, "gpu")
    tail = re.sub(r"[^a-z0-9]+", "-", str(driver).lower()).strip("-")
    head = re.sub(r"[^a-z0-9]+", "-", product.lower()).strip("-")
    head = head[: LABEL_VALUE_MAX - len(tail) - 1].rstrip("-") or "gpu"
    return f"{head}-{tail}"


def node_template(
    gpu: str,
    driver: DriverVersion | str,
    kb: KnowledgeBase,
    *,
    providers: Iterable[Provider] = (Provider.ALL,),
    gpus: int = 1,
    gfd_compatible: bool = False,
    nodepool_name: str | None = None,
    node_class: NodeClassRef | None = None,
    instance_types: tuple[str, ...] = (),
    driver_pool: str | None = None,
    cpu: str | None = None,
    memory: str | None = None,
) -> dict[str, Any]:
    """The ``node-template`` document: ``{"labels": {...}, "declarations": {"aws": {"tags"},
    "azure": {"tags"}, "gke": {"nodeLabels", "gcloud"}, "aks": {"labels", "az"}, "capi":
    {"annotations"}, "karpenter": NODEPOOL, "kubelet": FLAG}}``
    (only the providers asked for, and always ``kubelet``). ``driver_pool``: the driver plan's
    pool label (``cudasched.io/driver-pool``) the group's nodes must carry from their first
    boot, so its NVIDIADriver selects them."""
    version = parse_driver(driver) if isinstance(driver, str) else driver
    labels = template_labels(gpu, version, kb, gpus=gpus, gfd_compatible=gfd_compatible)
    if driver_pool is not None:
        if not label_value_ok(driver_pool):
            raise InputError(
                f"invalid --driver-pool {driver_pool!r}: expected a label value (the plan's "
                "NVIDIADriver name, at most 63 characters)"
            )
        labels[L.DRIVER_POOL] = driver_pool
    options = NodePoolOptions(
        name=nodepool_name or default_nodepool_name(labels, version),
        node_class=node_class,
        instance_types=instance_types,
        gpus=gpus,
        cpu=cpu,
        memory=memory,
    )
    return {"labels": labels, "declarations": declarations(labels, providers, options)}
