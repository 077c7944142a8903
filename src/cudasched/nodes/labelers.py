"""Node labels from discovered facts: small labelers, each returning a label map, merged.

This follows GFD's shape (one labeler per fact family) but fixes its known flaw: on a node with
mixed GPU models GFD labels whichever model its map iteration visits last, so labels flap.
Here every aggregate is deterministic: the LOWEST compute capability (a workload must run on
every GPU the scheduler may hand it), the product list sorted and de-duplicated, and
``gpu.datacenter`` true only when every GPU is a data-center part. The GPU family words come
from the knowledge base's architecture rows (``architectures.yaml``), never from code here.

A GPU name that is cut off (``NVIDIA-GeForce``, ``NVIDIA-RTX-A200`` from a truncated
``nvidia-smi`` column) is never published as a product: a wrong product label would make the
knowledge base read the wrong GPU (:meth:`KnowledgeBase.truncated_product`).

Every value is checked against the Kubernetes label-value grammar before it leaves this module.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from cudasched.knowledge import GFD_UNDEFINED_FAMILY, gfd_product_label
from cudasched.knowledge.naming import BRAND_WORDS, product_key
from cudasched.nodes.hostfacts import DriverFacts, GpuFacts
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.labelsyntax import label_value_ok
from cudasched.vocab.versions import ComputeCapability, parse_compute_capability

if TYPE_CHECKING:
    from cudasched.knowledge import ArchInfo

# Where the agent writes its labels for NFD's local feature source when it does not patch the
# Node itself; the installer mounts the same path (part of the label contract, so here).
DEFAULT_NFD_PATH = "/etc/kubernetes/node-feature-discovery/features.d/cudasched"

__all__ = [
    "AGENT_KEYS",
    "DEFAULT_NFD_PATH",
    "GFD_KEYS",
    "ArchCatalog",
    "GpuCatalog",
    "build_labels",
    "enrich",
    "failure_labels",
    "publishable_product",
    "sanitise_product",
]

# The cudasched.io/ keys the agent owns: it may set and remove these and nothing else.
AGENT_KEYS = frozenset(
    {
        L.CUDA_CODE,
        L.CUDA_VERSION,
        L.DRIVER_CODE,
        L.DRIVER_VERSION,
        L.DRIVER_BRANCH,
        L.COMPUTE_CODE,
        L.GPU_ARCH,
        L.GPU_PRODUCT,
        L.GPU_DATACENTER,
        L.PROBE_STATUS,
        L.PROBE_REASON,
    }
)

# GFD keys written with --gfd-compatible (both key generations). Only then does the agent
# consider them its own; without the flag it never touches nvidia.com/ labels.
GFD_KEYS = frozenset(
    {
        *L.GFD_VERSION_KEYS,
        *L.GFD_OLD_VERSION_KEYS,
        L.GFD_PRODUCT,
        L.GFD_COMPUTE_MAJOR,
        L.GFD_COMPUTE_MINOR,
        L.GFD_FAMILY,
        L.GFD_COUNT,
        "nvidia.com/gpu.memory",
    }
)

_EDGE_RE = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")


class GpuCatalog(Protocol):
    """What the agent needs from ``cudasched.knowledge.KnowledgeBase``: ``gpu(name)``."""

    def gpu(self, name: str) -> Any: ...


class ArchCatalog(Protocol):
    """What the labelers need from ``cudasched.knowledge.KnowledgeBase``: ``arch(cc)``, the
    architecture row of a compute capability (its ``family`` and ``gfd_family`` words)."""

    def arch(self, cc: ComputeCapability) -> ArchInfo | None: ...


def _fit(value: str) -> str:
    """Trim to a valid label value: at most 63 characters, alphanumeric at both ends."""
    return _EDGE_RE.sub("", _EDGE_RE.sub("", value)[:63])


def sanitise_product(name: str) -> str:
    """GFD's product sanitising (:func:`cudasched.knowledge.gfd_product_label`:
    ``NVIDIA A100-SXM4-80GB`` -> ``NVIDIA-A100-SXM4-80GB``), then trimmed to a valid label value
    (nvidia-smi's truncated ``NVIDIA A100-SXM...`` loses the dots)."""
    return _fit(gfd_product_label(name))


def publishable_product(name: str, catalog: object | None) -> str:
    """The product label value for a GPU name, or ``""`` when the name is cut off (see the
    module docstring): the knowledge base decides when it is at hand, else a name that is a
    brand word alone or ends in ``...`` is refused."""
    sanitised = sanitise_product(name)
    if not sanitised:
        return ""
    truncated = getattr(catalog, "truncated_product", None)
    if callable(truncated):
        return "" if truncated(name) else sanitised
    cut = name.strip().endswith(("...", "\u2026")) or product_key(name) in BRAND_WORDS
    return "" if cut else sanitised


def _as_cc(value: Any) -> ComputeCapability | None:
    if value is None:
        return None
    try:
        return parse_compute_capability(value)
    except InputError:
        return None


def enrich(facts: DriverFacts, kb: GpuCatalog | None) -> DriverFacts:
    """Fill compute capability and data-center flags the source did not report from the
    knowledge base (``kb.gpu(name)``); facts the source did report always win."""
    if kb is None:
        return facts
    gpus: list[GpuFacts] = []
    for gpu in facts.gpus:
        compute, datacenter = gpu.compute, gpu.datacenter
        if compute is None or datacenter is None:
            info = kb.gpu(gpu.name)
            if info is not None:
                if compute is None:
                    compute = _as_cc(getattr(info, "compute", None))
                if datacenter is None:
                    known = getattr(info, "datacenter", None)
                    datacenter = known if isinstance(known, bool) else None
        gpus.append(
            GpuFacts(
                name=gpu.name,
                compute=compute,
                memory_mib=gpu.memory_mib,
                brand=gpu.brand,
                datacenter=datacenter,
                mig_enabled=gpu.mig_enabled,
                uuid=gpu.uuid,
            )
        )
    return replace(facts, gpus=tuple(gpus))


def _lowest(gpus: Iterable[GpuFacts]) -> GpuFacts | None:
    """The GPU with the lowest compute capability, or ``None`` when any GPU's is unknown
    (an unknown one might be the lowest, and a wrong "minimum" would admit pods that crash)."""
    gpus = list(gpus)
    if not gpus or any(g.compute is None for g in gpus):
        return None
    return min(gpus, key=lambda g: (g.compute, sanitise_product(g.name)))


def _arch_of(gpu: GpuFacts | None, archs: ArchCatalog | None) -> ArchInfo | None:
    """The architecture row of a GPU's compute capability; None when the capability, the
    knowledge base or a row for it is missing."""
    if gpu is None or gpu.compute is None or archs is None:
        return None
    return archs.arch(gpu.compute)


# ---------------------------------------------------------------- labelers (facts -> map)


def driver_labels(facts: DriverFacts) -> dict[str, str]:
    d = facts.driver
    return {
        L.DRIVER_CODE: str(d.code),
        L.DRIVER_VERSION: str(d),
        L.DRIVER_BRANCH: str(d.branch),
    }


def cuda_labels(facts: DriverFacts) -> dict[str, str]:
    if facts.cuda is None:
        return {}
    c = facts.cuda.release
    return {L.CUDA_CODE: str(c.code), L.CUDA_VERSION: str(c)}


def gpu_labels(facts: DriverFacts, archs: ArchCatalog | None) -> dict[str, str]:
    """Lowest compute capability and its family (``undefined`` when no architecture row covers
    it), the sorted product list and the data-center flag."""
    out: dict[str, str] = {}
    lowest = _lowest(facts.gpus)
    if lowest is not None and lowest.compute is not None:
        out[L.COMPUTE_CODE] = str(lowest.compute.code)
        arch = _arch_of(lowest, archs)
        out[L.GPU_ARCH] = arch.family if arch is not None else GFD_UNDEFINED_FAMILY
    products = sorted({p for g in facts.gpus if (p := publishable_product(g.name, archs))})
    if products:
        out[L.GPU_PRODUCT] = _fit("_".join(products))
    flags = [g.datacenter for g in facts.gpus]
    if flags and all(f is True for f in flags):
        out[L.GPU_DATACENTER] = "true"
    elif any(f is False for f in flags):
        out[L.GPU_DATACENTER] = "false"
    return out


def status_labels(facts: DriverFacts) -> dict[str, str]:
    """``ok``, or ``partial`` with the reason when the source reported no GPU facts."""
    if facts.missing is not None:
        return {L.PROBE_STATUS: "partial", L.PROBE_REASON: _fit(facts.missing) or "unknown"}
    return {L.PROBE_STATUS: "ok"}


def gfd_labels(facts: DriverFacts, archs: ArchCatalog | None) -> dict[str, str]:
    """GFD's keys in GFD's exact formats, for clusters that run no GFD.

    Driver parts keep NVIDIA's leading zeros and an empty revision for two-part versions; the
    ``runtime`` keys carry the driver's CUDA version as GFD does; ``gpu.family`` is the word GFD
    prints (the architecture row's ``gfd_family``, ``undefined`` without a row). Where GFD
    labels one random model, we label the model with the lowest compute capability and count
    every GPU.
    """
    out: dict[str, str] = {}
    parts = str(facts.driver).split(".")
    major, minor = parts[0], parts[1]
    rev = parts[2] if len(parts) > 2 else ""
    out.update(
        {
            L.GFD_DRIVER_FULL: str(facts.driver),
            L.GFD_DRIVER_MAJOR: major,
            L.GFD_DRIVER_MINOR: minor,
            L.GFD_DRIVER_REVISION: rev,
            L.GFD_OLD_DRIVER_MAJOR: major,
            L.GFD_OLD_DRIVER_MINOR: minor,
            L.GFD_OLD_DRIVER_REV: rev,
        }
    )
    if facts.cuda is not None:
        c = facts.cuda
        out.update(
            {
                L.GFD_CUDA_FULL: f"{c.major}.{c.minor}",
                L.GFD_CUDA_MAJOR: str(c.major),
                L.GFD_CUDA_MINOR: str(c.minor),
                L.GFD_OLD_CUDA_MAJOR: str(c.major),
                L.GFD_OLD_CUDA_MINOR: str(c.minor),
            }
        )
    if not facts.gpus:  # a partial report: nothing is known about the GPUs
        return out
    out[L.GFD_COUNT] = str(len(facts.gpus))
    lowest = _lowest(facts.gpus)
    chosen = lowest or min(facts.gpus, key=lambda g: sanitise_product(g.name))
    if product := publishable_product(chosen.name, archs):
        out[L.GFD_PRODUCT] = product
    if chosen.memory_mib:
        out["nvidia.com/gpu.memory"] = str(chosen.memory_mib)
    if lowest is not None and lowest.compute is not None:
        out[L.GFD_COMPUTE_MAJOR] = str(lowest.compute.major)
        out[L.GFD_COMPUTE_MINOR] = str(lowest.compute.minor)
        arch = _arch_of(lowest, archs)
        out[L.GFD_FAMILY] = arch.gfd_family if arch is not None else GFD_UNDEFINED_FAMILY
    return out


def _merge(maps: Iterable[Mapping[str, str]]) -> dict[str, str]:
    merged: dict[str, str] = {}
    for m in maps:
        merged.update(m)
    for key, value in merged.items():
        if not label_value_ok(value):  # a bug in a labeler, never user input
            raise ValueError(f"label {key}={value!r} is not a valid Kubernetes label value")
    return dict(sorted(merged.items()))


def build_labels(
    facts: DriverFacts, *, archs: ArchCatalog | None = None, gfd_compatible: bool = False
) -> dict[str, str]:
    """All labels for a successful probe, sorted by key. ``archs`` is the knowledge base (None
    when it could not load: every family is then ``undefined``)."""
    maps = [
        driver_labels(facts),
        cuda_labels(facts),
        gpu_labels(facts, archs),
        status_labels(facts),
    ]
    if gfd_compatible:
        maps.append(gfd_labels(facts, archs))
    return _merge(maps)


def failure_labels(reason: str) -> dict[str, str]:
    """The two labels a failed probe changes; everything else keeps its last good value."""
    return _merge([{L.PROBE_STATUS: "failed", L.PROBE_REASON: _fit(reason) or "unknown"}])


def owned_keys(gfd_compatible: bool) -> frozenset[str]:
    """Keys this agent may set or delete on the Node."""
    return AGENT_KEYS | GFD_KEYS if gfd_compatible else AGENT_KEYS
