"""A pod's ``nvidia.com/gpu: N`` asked through a CUDA-aware DRA device class instead, as the
JSON patch an admission answer carries (``dra.mode`` in the settings).

Two spellings, both served by kube-scheduler's own DRA allocator:

* ``extended-resource``: ``nvidia.com/gpu: N`` becomes
  ``deviceclass.resource.kubernetes.io/<class>: N`` in the same container's limits and requests
  (KEP-5004, GA in 1.37: every class is requestable by that name; the scheduler makes the claim);
* ``claim``: the GPU resource is taken out and the container consumes a claim of its own, made
  from the ResourceClaimTemplate named for the class and the count (:func:`claim_template_name`;
  ``cudasched device-classes --claim-templates`` prints them), listed in ``spec.resourceClaims``.

What the patch never does: change any other resource, change the count, touch a container that
asks no ``nvidia.com/gpu`` (MIG slices and renamed shared GPUs included: a CUDA-aware class
admits full GPUs only), or touch a container whose request it cannot read or that already names
the class (a pod asking both would get the two added together; that is the pod's author's to
decide). Applied twice it adds nothing: the second time no ``nvidia.com/gpu`` is left.

Why that never widens: every class admits a subset of the devices of NVIDIA's ``gpu.nvidia.com``
class (its first selector is the driver and ``type == "gpu"``), and the count is the pod's own.
The patch obeys :mod:`cudasched.webhook.admission.patch`'s rule (add under a parent that
exists, replace or remove what exists): the API server fails a request whose patch does not
apply, whatever the failure policy.

Beside the rewrite: whether a pod already asks through a class (:func:`asks_class`, a pod
admitted again), the templates the ``claim`` spelling names (:func:`class_claim_template`), and
an LLMInferenceService's managed-DRA selectors with a class's added
(:func:`managed_dra_selectors`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cudasched.placement.deviceclass import CLASS_DOMAIN, EXTENDED_RESOURCE_PREFIX, MANAGED_BY
from cudasched.placement.dra import API_VERSION, DEVICE_CLASS
from cudasched.vocab.kserve import MANAGED_DRA_CEL_SELECTOR, MANAGED_DRA_DEVICE_CLASS, NVIDIA_GPU
from cudasched.vocab.labelsyntax import dns_subdomain_ok

__all__ = [
    "CLAIM_PREFIX",
    "WHOLE_COUNT",
    "GpuRewrite",
    "asks_class",
    "claim_rewrite",
    "claim_template_name",
    "claims_from_templates",
    "class_claim_template",
    "extended_resource_rewrite",
    "gpu_counts",
    "managed_dra_selectors",
]

#: The pod-level claims the ``claim`` spelling adds are named this and a number.
CLAIM_PREFIX = "cudasched-gpu-"
_PARTS = ("limits", "requests")
_CONTAINER_LISTS = ("initContainers", "containers")
#: A count of whole GPUs either spelling moves (also the policy's test, ``placement/claimcel``).
WHOLE_COUNT = "^[1-9][0-9]{0,5}$"
_WHOLE = re.compile(WHOLE_COUNT)


@dataclass(frozen=True, slots=True)
class GpuRewrite:
    """The patch, and what it did: which containers now ask through the class (``moved``,
    as ``list/name``) and which asking ``nvidia.com/gpu`` were left as they were, with why."""

    ops: tuple[dict[str, Any], ...]
    moved: tuple[str, ...]
    left: tuple[str, ...]


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _mapping(value: object) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) else None


def _count(resources: Mapping[str, Any]) -> tuple[int | None, str | None]:
    """The whole GPUs a container's resources ask (limits and requests must agree, as the API
    server requires of extended resources), or why they cannot be moved; ``(None, None)`` when
    it asks none."""
    texts = set()
    for part in _PARTS:
        found = _mapping(resources.get(part))
        if found is None or NVIDIA_GPU not in found:
            continue
        value = found[NVIDIA_GPU]
        if isinstance(value, bool) or not isinstance(value, int | str):
            return None, f"{NVIDIA_GPU}: {value!r} is not a quantity"
        texts.add(str(value).strip())
    if not texts:
        return None, None
    if len(texts) > 1:
        return None, f"{NVIDIA_GPU} limits and requests differ"
    text = texts.pop()
    if not _WHOLE.match(text):
        return None, f"{NVIDIA_GPU}: {text!r} is not a whole number of GPUs above zero"
    return int(text), None


def gpu_counts(spec: Mapping[str, Any]) -> list[tuple[str, int, int | None, str | None]]:
    """Every container asking ``nvidia.com/gpu``: ``(list, index, count, why-not)``, init
    containers first, in order."""
    found = []
    for field in _CONTAINER_LISTS:
        containers = spec.get(field)
        if not isinstance(containers, Sequence) or isinstance(containers, str):
            continue
        for i, container in enumerate(containers):
            c = _mapping(container)
            resources = _mapping(c.get("resources")) if c is not None else None
            if resources is None:
                continue
            count, why = _count(resources)
            if count is not None or why is not None:
                found.append((field, i, count, why))
    return found


def _container(spec: Mapping[str, Any], field: str, i: int) -> Mapping[str, Any]:
    return spec[field][i]  # type: ignore[no-any-return]


def _label(spec: Mapping[str, Any], field: str, i: int) -> str:
    return f"{field}/{_container(spec, field, i).get('name', i)}"


def _moved_ops(resources: Mapping[str, Any], at: str, new_key: str | None) -> list[dict[str, Any]]:
    """Remove ``nvidia.com/gpu`` from limits and requests; with ``new_key``, add it with the
    same value in the same place."""
    ops: list[dict[str, Any]] = []
    for part in _PARTS:
        found = _mapping(resources.get(part))
        if found is None or NVIDIA_GPU not in found:
            continue
        ops.append({"op": "remove", "path": f"{at}/{part}/{_escape(NVIDIA_GPU)}"})
        if new_key is not None:
            path = f"{at}/{part}/{_escape(new_key)}"
            ops.append({"op": "add", "path": path, "value": found[NVIDIA_GPU]})
    return ops


def extended_resource_rewrite(
    spec: Mapping[str, Any], class_name: str, base: str = "/spec"
) -> GpuRewrite:
    """``nvidia.com/gpu: N`` as ``deviceclass.resource.kubernetes.io/<class_name>: N`` in every
    container that asks it; ``base`` is the pointer of ``spec`` in the reviewed object."""
    key = EXTENDED_RESOURCE_PREFIX + class_name
    ops: list[dict[str, Any]] = []
    moved, left = [], []
    for field, i, count, why in gpu_counts(spec):
        resources = _container(spec, field, i)["resources"]
        if why is None and any(key in (_mapping(resources.get(p)) or {}) for p in _PARTS):
            why = f"already asks {key}"
        if why is not None or count is None:
            left.append(f"{_label(spec, field, i)}: {why}")
            continue
        ops.extend(_moved_ops(resources, f"{base}/{field}/{i}/resources", key))
        moved.append(_label(spec, field, i))
    return GpuRewrite(tuple(ops), tuple(moved), tuple(left))


def asks_class(spec: Mapping[str, Any], class_name: str) -> bool:
    """Whether the pod already asks its GPUs through ``class_name``, as either spelling writes
    it: the class's extended resource in a container, or a claim from one of its templates (a
    pod this module rewrote, admitted again)."""
    key = EXTENDED_RESOURCE_PREFIX + class_name
    for field in _CONTAINER_LISTS:
        for container in spec.get(field) or ():
            resources = _mapping((_mapping(container) or {}).get("resources")) or {}
            if any(key in (_mapping(resources.get(p)) or {}) for p in _PARTS):
                return True
    templates = re.compile(rf"(x[0-9]+\.)?{re.escape(class_name)}")
    for claim in spec.get("resourceClaims") or ():
        template = (_mapping(claim) or {}).get("resourceClaimTemplateName")
        if isinstance(template, str) and templates.fullmatch(template):
            return True
    return False


def claims_from_templates(spec: Mapping[str, Any]) -> bool:
    """Whether the pod asks through DRA claims alone, every one made from a template: the
    claims kube-controller-manager makes for it are narrowed to its class when they are
    created (:mod:`cudasched.placement.claimnarrow`), so no node affinity is needed. A claim
    the pod names (``resourceClaimName``) was made before the pod and is not narrowed."""
    claims = spec.get("resourceClaims")
    if not isinstance(claims, Sequence) or isinstance(claims, str) or not claims:
        return False
    return all(
        isinstance(c, Mapping)
        and isinstance(c.get("resourceClaimTemplateName"), str)
        and not c.get("resourceClaimName")
        for c in claims
    )


def claim_template_name(class_name: str, count: int) -> str:
    """The ResourceClaimTemplate for ``count`` devices of ``class_name`` in a pod's namespace:
    ``gpu-cuda-12-8.cudasched.io`` for one, ``x2.gpu-cuda-12-8.cudasched.io`` for two (a DNS
    subdomain, as template names are)."""
    name = class_name if count == 1 else f"x{count}.{class_name}"
    if not dns_subdomain_ok(name):
        raise ValueError(f"no claim template name for {class_name!r} x{count}")
    return name


def class_claim_template(class_name: str, count: int) -> dict[str, Any]:
    """The ResourceClaimTemplate the ``claim`` spelling refers to: ``count`` devices of
    ``class_name``, nothing else (the class holds the selectors). Namespaced: applied in each
    namespace whose pods use it (``kubectl apply -n``)."""
    request = {"deviceClassName": class_name, "count": count}
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": claim_template_name(class_name, count), "labels": dict(MANAGED_BY)},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}},
    }


def _free_claim_names(spec: Mapping[str, Any]) -> Iterator[str]:
    taken = set()
    for entry in spec.get("resourceClaims") or ():
        if isinstance(entry, Mapping):
            taken.add(entry.get("name"))
    n = 0
    while True:
        if f"{CLAIM_PREFIX}{n}" not in taken:
            yield f"{CLAIM_PREFIX}{n}"
        n += 1


def claim_rewrite(spec: Mapping[str, Any], class_name: str, base: str = "/spec") -> GpuRewrite:
    """Every container asking ``nvidia.com/gpu: N`` consumes a claim of its own (containers
    that share a claim share its devices) from the template for ``class_name`` and N."""
    ops: list[dict[str, Any]] = []
    moved, left = [], []
    claims: list[dict[str, Any]] = []
    names = _free_claim_names(spec)
    for field, i, count, why in gpu_counts(spec):
        if why is not None or count is None:
            left.append(f"{_label(spec, field, i)}: {why}")
            continue
        resources = _container(spec, field, i)["resources"]
        at = f"{base}/{field}/{i}/resources"
        ops.extend(_moved_ops(resources, at, None))
        name = next(names)
        claims.append(
            {"name": name, "resourceClaimTemplateName": claim_template_name(class_name, count)}
        )
        if isinstance(resources.get("claims"), list):
            ops.append({"op": "add", "path": f"{at}/claims/-", "value": {"name": name}})
        else:
            ops.append({"op": "add", "path": f"{at}/claims", "value": [{"name": name}]})
        moved.append(_label(spec, field, i))
    if claims:
        if isinstance(spec.get("resourceClaims"), list):
            ops.extend(
                {"op": "add", "path": f"{base}/resourceClaims/-", "value": c} for c in claims
            )
        else:
            ops.append({"op": "add", "path": f"{base}/resourceClaims", "value": claims})
    return GpuRewrite(tuple(ops), tuple(moved), tuple(left))


def managed_dra_selectors(annotations: Mapping[str, Any], selectors: Sequence[str]) -> str | None:
    """An LLMInferenceService's managed-DRA selector annotation (KServe: one CEL expression a
    line, each added to the claim's request, all of which must hold) with the class's
    ``selectors`` added, or ``None`` when there is nothing to add: no managed DRA, a class other
    than a full NVIDIA GPU's (``gpu.nvidia.com`` or a cudasched class: a MIG or passthrough
    class's devices would all fail the full-GPU guard), an annotation that is not text, or every
    selector already there. Selectors are only ever added, so the request only narrows."""
    asked = annotations.get(MANAGED_DRA_DEVICE_CLASS)
    if not isinstance(asked, str):
        return None
    asked = asked.strip()
    if asked != DEVICE_CLASS and not asked.endswith("." + CLASS_DOMAIN):
        return None
    raw = annotations.get(MANAGED_DRA_CEL_SELECTOR, "")
    if not isinstance(raw, str):
        return None
    have = [line.strip() for line in raw.split("\n") if line.strip()]
    missing = [s for s in selectors if s not in have]
    return "\n".join([*have, *missing]) if missing else None
