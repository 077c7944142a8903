"""A ResourceClaim's GPU requests narrowed to the devices that can run its pod: the CUDA-aware
class's CEL selectors added to each request, as the JSON patch an admission answer carries.

Which claims: those kube-controller-manager's resourceclaim controller makes from a pod's
ResourceClaimTemplate after the pod exists (owned by the pod, so the pod's requirement is
known); the webhook reads the pod and hands this module the selectors of its requirement's
class (:func:`cudasched.placement.deviceclass.device_class`, the full-GPU guard first).

Which requests: those of NVIDIA's ``gpu.nvidia.com`` class and of a cudasched class of another
requirement (the pod's image then needs both; a device must pass both), in either shape of the
``resource.k8s.io/v1`` API: ``exactly`` and each ``firstAvailable`` subrequest. A request of
the pod's own class already carries the selectors; a request of any other class (MIG slices,
passthrough, another vendor) is left alone, as its devices would all fail the full-GPU guard.

Why that never widens: a device the allocator picks must pass every selector of the request
and of its class, so adding selectors only takes devices away. Nothing is removed or replaced,
no count or allocation mode is touched, and a selector already there (by its expression) is
not added again, so the patch applied twice adds nothing. A request that would pass the API's
limit of 32 selectors is left as it is: the API server would refuse the whole claim, and the
pod would wait for it forever.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cudasched.placement.deviceclass import CLASS_DOMAIN
from cudasched.placement.dra import DEVICE_CLASS

__all__ = ["MAX_SELECTORS", "ClaimNarrowing", "narrow_claim", "narrowed_class"]

#: A request's selectors, at most (``DeviceSelectorsMaxSize`` in ``resource/v1/types.go``).
MAX_SELECTORS = 32


@dataclass(frozen=True, slots=True)
class ClaimNarrowing:
    """The patch, and what it did: the requests narrowed (``name`` or ``name/subrequest``) and
    those of a GPU class left as they were, with why."""

    ops: tuple[dict[str, Any], ...]
    narrowed: tuple[str, ...]
    left: tuple[str, ...]


def narrowed_class(device_class_name: object, own_class: str) -> bool:
    """Whether a request of ``device_class_name`` gets the selectors of ``own_class``:
    NVIDIA's full-GPU class, or a cudasched class other than ``own_class``."""
    if not isinstance(device_class_name, str):
        return False
    if device_class_name == DEVICE_CLASS:
        return True
    return device_class_name.endswith("." + CLASS_DOMAIN) and device_class_name != own_class


def _mapping(value: object) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) else None


def _requests(spec: Mapping[str, Any]) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    """Every request shape that names a class: ``(label, pointer, body)`` for each
    ``exactly`` and each ``firstAvailable`` subrequest, in order."""
    devices = _mapping(spec.get("devices")) or {}
    requests = devices.get("requests")
    if not isinstance(requests, list):
        return
    for i, entry in enumerate(requests):
        request = _mapping(entry)
        if request is None:
            continue
        name = str(request.get("name", i))
        exactly = _mapping(request.get("exactly"))
        if exactly is not None:
            yield name, f"/spec/devices/requests/{i}/exactly", exactly
        alternatives = request.get("firstAvailable")
        if isinstance(alternatives, list):
            for j, sub in enumerate(alternatives):
                body = _mapping(sub)
                if body is not None:
                    label = f"{name}/{body.get('name', j)}"
                    yield label, f"/spec/devices/requests/{i}/firstAvailable/{j}", body


def _expressions(selectors: object) -> list[str] | None:
    """The CEL expressions of a request's selectors, or ``None`` when they cannot be read
    (then the request is left alone)."""
    if selectors is None:
        return []
    if not isinstance(selectors, list):
        return None
    found = []
    for selector in selectors:
        cel = _mapping((_mapping(selector) or {}).get("cel"))
        expression = cel.get("expression") if cel is not None else None
        if isinstance(expression, str):
            found.append(expression)
        elif not isinstance(selector, Mapping):
            return None
    return found


def narrow_claim(
    spec: Mapping[str, Any], selectors: Sequence[str], own_class: str
) -> ClaimNarrowing:
    """The patch that adds ``selectors`` (the CEL expressions of ``own_class``) to every GPU
    request of the claim ``spec`` (its ``spec``, at ``/spec`` in the reviewed object) that
    lacks some of them."""
    ops: list[dict[str, Any]] = []
    narrowed, left = [], []
    for label, at, body in _requests(spec):
        if not narrowed_class(body.get("deviceClassName"), own_class):
            continue
        have = _expressions(body.get("selectors"))
        if have is None:
            left.append(f"{label}: its selectors are not a list of CEL selectors")
            continue
        missing = [s for s in dict.fromkeys(selectors) if s not in have]
        if not missing:
            continue
        if len(body.get("selectors") or ()) + len(missing) > MAX_SELECTORS:
            left.append(f"{label}: more than {MAX_SELECTORS} selectors with the class's")
            continue
        added = [{"cel": {"expression": s}} for s in missing]
        if isinstance(body.get("selectors"), list):
            ops.extend({"op": "add", "path": f"{at}/selectors/-", "value": a} for a in added)
        else:
            ops.append({"op": "add", "path": f"{at}/selectors", "value": added})
        narrowed.append(label)
    return ClaimNarrowing(tuple(ops), tuple(narrowed), tuple(left))
