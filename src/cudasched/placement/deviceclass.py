"""CUDA-aware DRA device classes: a requirement as a ``resource.k8s.io/v1`` DeviceClass whose
selectors admit exactly the NVIDIA GPUs that can run it, so a pod asks for "a GPU that runs CUDA
12.8" by class name (``deviceclass.resource.kubernetes.io/<class>: 1``, KEP-5004) instead of
repeating the selectors in every claim.

The selectors are the claim template's (:func:`cudasched.placement.dra.requirement_selectors`:
the placement compiler's terms, the same knowledge as the node affinity), behind one guard that
comes first: the device belongs to NVIDIA's DRA driver and is a full GPU
(``type == "gpu"``). The driver publishes passthrough GPUs as ``type == "vfio"`` with no CUDA
attributes and MIG slices as ``type == "mig"`` (``cmd/gpu-kubelet-plugin/deviceinfo.go``); the
allocator stops at the first selector that is false, so neither reaches the version
comparisons, and those check with ``has()`` first anyway.

A class never sets ``extendedResourceName`` unless asked: one extended resource name maps to
at most one class and the newest class wins, so claiming ``nvidia.com/gpu`` would silently take
it from NVIDIA's own ``gpu.nvidia.com`` class (and back on its next Helm install).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from cudasched.compat.engine import resolve_policy
from cudasched.placement.dra import (
    API_VERSION,
    DEVICE_ATTRIBUTES,
    DRIVER_DOMAIN,
    default_name,
    requirement_selectors,
)
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.labelsyntax import dns_subdomain_ok
from cudasched.vocab.requirements import Policy

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.vocab.requirements import Requirement

__all__ = [
    "CLASS_DOMAIN",
    "EXTENDED_RESOURCE_PREFIX",
    "GPU_SELECTOR",
    "MANAGED_BY",
    "MAX_CLASS_NAME",
    "DeviceClassDraft",
    "class_name",
    "device_class",
]

#: Every class cudasched names ends in this domain, as NVIDIA's end in ``nvidia.com``.
CLASS_DOMAIN = "cudasched.io"
#: The name every class is also requestable by (KEP-5004): this prefix and the class's name.
EXTENDED_RESOURCE_PREFIX = "deviceclass.resource.kubernetes.io/"
#: The name part of an extended resource name is a qualified name's: at most 63 characters.
MAX_CLASS_NAME = 63
#: The first selector of every class: a full GPU of NVIDIA's DRA driver.
GPU_SELECTOR = (
    f'device.driver == "{DRIVER_DOMAIN}" && has({DEVICE_ATTRIBUTES}.type) && '
    f'{DEVICE_ATTRIBUTES}.type == "gpu"'
)
MANAGED_BY = {"app.kubernetes.io/managed-by": "cudasched"}


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def class_name(req: Requirement, policy: Policy) -> str:
    """The class's name, read from what decides its devices: ``gpu-cuda-12-8.cudasched.io``,
    ``gpu-cuda-12-4-minor-compat.cudasched.io``, ``gpu-cuda-12-4-torch-2-5-1-cu124...``. The
    name stays when the knowledge changes (the class is updated in place); a toolkit gate, which
    has no short spelling, adds a digest of its text. Past 63 characters the readable part is
    cut and a digest of the whole keeps names apart."""
    parts = [default_name(req)]
    if req.framework is not None:
        parts.append(_slug(f"{req.framework.name}-{req.framework.version}"))
    if policy is not Policy.STRICT:
        parts.append(policy.value)
    if req.gate is not None:
        parts.append("gate-" + hashlib.sha256(repr(req.gate).encode()).hexdigest()[:6])
    stem = "-".join(parts)
    suffix = f".{CLASS_DOMAIN}"
    if len(stem) + len(suffix) > MAX_CLASS_NAME:
        digest = hashlib.sha256(stem.encode()).hexdigest()[:8]
        keep = MAX_CLASS_NAME - len(suffix) - len(digest) - 1
        stem = f"{stem[:keep].rstrip('-')}-{digest}"
    return stem + suffix


def _without_idle_gate(
    req: Requirement, policy: Policy, kb: KnowledgeBase, expressions: list[str]
) -> Requirement:
    """``req`` without its toolkit gate when the gate selects no other devices (an image's
    ``NVIDIA_REQUIRE_CUDA`` usually repeats its CUDA): the name then needs no digest."""
    if req.gate is None:
        return req
    bare = replace(req, gate=None)
    return bare if requirement_selectors(bare, policy, kb)[0] == expressions else req


@dataclass(frozen=True, slots=True)
class DeviceClassDraft:
    """A DeviceClass, and whether forward-compat alternatives were left out (no attribute
    says "data-center GPU", so the class is then stricter than the node affinity)."""

    obj: dict[str, Any]
    dropped_forward_compat: bool

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @property
    def extended_resource(self) -> str:
        """What a pod's container asks for to get one of its devices."""
        return EXTENDED_RESOURCE_PREFIX + self.name


def device_class(
    req: Requirement,
    policy: Policy | str,
    kb: KnowledgeBase,
    *,
    name: str | None = None,
    extended_resource_name: str | None = None,
) -> DeviceClassDraft:
    """The DeviceClass of the GPUs that run ``req`` under ``policy`` (an :class:`InputError`
    for a requirement no GPU can meet, as for ``affinity``)."""
    pol = resolve_policy(req, policy)
    expressions, dropped = requirement_selectors(req, pol, kb)
    if name is None:
        name = class_name(_without_idle_gate(req, pol, kb, expressions), pol)
    if not dns_subdomain_ok(name) or len(name) > MAX_CLASS_NAME:
        raise InputError(
            f"invalid device class name {name!r}: expected a DNS subdomain of at most "
            f"{MAX_CLASS_NAME} characters (a pod asks for it as {EXTENDED_RESOURCE_PREFIX}NAME)"
        )
    spec: dict[str, Any] = {
        "selectors": [{"cel": {"expression": e}} for e in (GPU_SELECTOR, *expressions)]
    }
    if extended_resource_name is not None:
        spec["extendedResourceName"] = extended_resource_name
    obj = {
        "apiVersion": API_VERSION,
        "kind": "DeviceClass",
        "metadata": {
            "name": name,
            "labels": dict(MANAGED_BY),
            "annotations": {L.ANN_REQUIREMENT: req.record(pol)},
        },
        "spec": spec,
    }
    return DeviceClassDraft(obj, dropped)
