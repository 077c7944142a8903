"""A pod's policy key: everything cudasched's pod admission reads of a pod, written as one
string that Python (the parameter controller) and CEL (the API server's
MutatingAdmissionPolicy) both compute, and the pod rebuilt from it.

Why a key that holds every input: the policy mode moves pod admission into the API server,
where CEL can read the pod but not an image's registry config, a ServingRuntime, an
LLMInferenceService or the nodes. The controller therefore decides ahead of time, with the
webhook's own code, for every pod shape the cluster creates, and the policy looks the answer
up. That is only the webhook's answer if two pods with one key get one decision, so the key is
made of *raw values* of every field the decision reads (apart from the pod's own node affinity,
which the policy merges itself, and ``spec.nodeName``, on which it does nothing, as the webhook
does), and the controller decides on :func:`key_pod`, the pod rebuilt from those fields alone:
the decision is then a function of the key by construction. What it holds:

* the request's namespace (runtimes, LLMInferenceServices and pull secrets are looked up in it,
  and ``namespaces`` may exclude it);
* the labels that make a pod a KServe predictor, transformer or explainer or an
  LLMInferenceService model server, and name its owner (:data:`LABEL_KEYS`);
* the four ``cudasched.io/*`` annotations a requirement is read from, and whether any other
  ``cudasched.io/*`` annotation declares the pod (the skip switch and the requirement record do
  not: the policy's ``matchConditions`` handle the first, and the second is our output);
* whether the pod has resource claims; its ServiceAccount and ``imagePullSecrets`` (the pull
  scope an image look-up may use);
* every container: its name, image, NVIDIA GPU resources (names, and whether each quantity is
  a positive whole number, zero, or something else) in limits and requests, and the container
  toolkit's gate variables it sets literally (``NVIDIA_REQUIRE_*``, ``NVIDIA_DISABLE_REQUIRE``,
  ``CUDA_VERSION``); every init container's GPU resources.

A present value is written ``=`` + the value, an absent one as nothing, so an empty annotation
(an error the webhook reports) never reads as a missing one. Every value is escaped
(:func:`escape`) so the separators (``|`` between parts, ``&`` between containers, ``;``
between a container's fields, ``,`` between list items, ``=`` inside an item) only ever
separate: the writing is injective. A GPU quantity that is neither a whole number nor zero
(``"?"``) makes the pod one the policy never serves (:func:`pod_key` answers ``None``; the
webhook reads such a pod as unreadable).

:func:`key_expression` is the same key in CEL, written from the same tables. The two agree on
the real API server (``tests/e2e/k8s137``) and the Python side is tested against the webhook
(the decision of a pod equals the decision of its :func:`key_pod`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from cudasched.vocab import labels as L
from cudasched.vocab.kserve import COMPONENT_LABEL, INFERENCESERVICE_LABEL
from cudasched.vocab.requirecuda import DISABLE_ENV, LEGACY_ENV
from cudasched.workloads.gpu import GPU_RESOURCE_PREFIXES
from cudasched.workloads.kserve.llm import COMPONENT_LABEL as LLM_COMPONENT_LABEL
from cudasched.workloads.kserve.llm import NAME_LABEL, PART_OF_LABEL

__all__ = [
    "ANNOTATION_KEYS",
    "KEY_VERSION",
    "LABEL_KEYS",
    "escape",
    "key_expression",
    "key_pod",
    "pod_key",
]

#: The first part of every key: a new way of writing keys changes it, so parameters written
#: for the old one are never matched by the new policy (or the other way round).
KEY_VERSION = "k1"

#: The labels a pod's role and owner are read from (``workloads/view``).
LABEL_KEYS: tuple[str, ...] = (
    INFERENCESERVICE_LABEL,
    COMPONENT_LABEL,
    PART_OF_LABEL,
    LLM_COMPONENT_LABEL,
    NAME_LABEL,
)

#: The annotations a requirement is read from (``workloads/declared.read_cudasched``).
ANNOTATION_KEYS: tuple[str, ...] = (
    L.ANN_CUDA_VERSION,
    L.ANN_MIN_COMPUTE,
    L.ANN_POLICY,
    L.ANN_SHIPS_CUDA_COMPAT,
)

#: ``cudasched.io/*`` annotations that do not declare a need (the webhook's rule).
_NOT_DECLARING = (L.ANN_REQUIREMENT, L.ANN_SKIP)

#: The container toolkit's gate variables (``vocab/requirecuda.is_gate_env``).
_GATE_PREFIX = "NVIDIA_REQUIRE_"
_GATE_NAMES = (DISABLE_ENV, LEGACY_ENV)

#: Escapes, in order (``%`` first, so an escape is never escaped again).
_ESCAPES = (("%", "%25"), ("|", "%7C"), ("&", "%26"), (";", "%3B"), (",", "%2C"), ("=", "%3D"))
_WHOLE = re.compile(r"[0-9]+")
_ZERO = re.compile(r"0+")

#: What a quantity's sign is written as, and what :func:`key_pod` gives back for it.
_POSITIVE, _ZERO_MARK, _OTHER = "+", "0", "?"
_QUANTITY_OF = {_POSITIVE: "1", _ZERO_MARK: "0"}


def escape(text: str) -> str:
    """``text`` with the key's separators escaped."""
    for raw, escaped in _ESCAPES:
        text = text.replace(raw, escaped)
    return text


def _optional(values: Mapping[str, Any], key: str) -> str:
    value = values.get(key)
    return "" if value is None else "=" + escape(str(value))


def _sign(value: object) -> str:
    text = str(value)
    if _WHOLE.fullmatch(text):
        return _ZERO_MARK if _ZERO.fullmatch(text) else _POSITIVE
    return _OTHER


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _gpu_amounts(amounts: Mapping[str, Any]) -> list[tuple[str, str]]:
    return sorted(
        (str(name), _sign(value))
        for name, value in amounts.items()
        if str(name).startswith(GPU_RESOURCE_PREFIXES)
    )


def _written(amounts: list[tuple[str, str]]) -> str:
    return ",".join(f"{escape(name)}={sign}" for name, sign in amounts)


def _is_gate(name: str) -> bool:
    return name.startswith(_GATE_PREFIX) or name in _GATE_NAMES


def _gate_env(container: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [
        (str(var["name"]), str(var["value"]))
        for var in _list(container.get("env"))
        if isinstance(var, Mapping)
        and isinstance(var.get("name"), str)
        and var.get("value") is not None
        and _is_gate(var["name"])
    ]


class _Reading:
    """The raw values a key is written from, read once from a pod (or pod template)."""

    def __init__(self, pod: Mapping[str, Any], namespace: str) -> None:
        meta = _mapping(pod.get("metadata"))
        spec = _mapping(pod.get("spec"))
        self.namespace = namespace
        self.labels = _mapping(meta.get("labels"))
        self.annotations = _mapping(meta.get("annotations"))
        self.declared = any(
            isinstance(k, str) and k.startswith(L.PREFIX) and k not in _NOT_DECLARING
            for k in self.annotations
        )
        self.claims = bool(_list(spec.get("resourceClaims")))
        account = spec.get("serviceAccountName") or spec.get("serviceAccount")
        self.account = account if isinstance(account, str) and account else "default"
        self.pull_secrets = [
            str(_mapping(entry).get("name") or "") for entry in _list(spec.get("imagePullSecrets"))
        ]
        self.containers = [_mapping(c) for c in _list(spec.get("containers"))]
        self.inits = [_mapping(c) for c in _list(spec.get("initContainers"))]

    def amounts(self, container: Mapping[str, Any], part: str) -> list[tuple[str, str]]:
        """A container's GPU amounts in ``limits`` or ``requests``; requests as the API server
        defaults them before admission (a limit without a request is also the request), so a
        template read from a controller gives the key its pods will have."""
        resources = _mapping(container.get("resources"))
        amounts = _mapping(resources.get(part))
        if part == "requests":
            amounts = {**_mapping(resources.get("limits")), **amounts}
        return _gpu_amounts(amounts)

    def readable(self) -> bool:
        return all(
            sign != _OTHER
            for container in (*self.containers, *self.inits)
            for part in ("limits", "requests")
            for _, sign in self.amounts(container, part)
        )

    def key(self) -> str:
        containers = "&".join(
            ";".join(
                (
                    escape(str(c.get("name") or "")),
                    _optional(c, "image"),
                    _written(self.amounts(c, "limits")),
                    _written(self.amounts(c, "requests")),
                    ",".join(f"{escape(n)}={escape(v)}" for n, v in _gate_env(c)),
                )
            )
            for c in self.containers
        )
        inits = "&".join(
            f"{_written(self.amounts(c, 'limits'))};{_written(self.amounts(c, 'requests'))}"
            for c in self.inits
        )
        return "|".join(
            (
                KEY_VERSION,
                escape(self.namespace),
                *(_optional(self.labels, k) for k in LABEL_KEYS),
                *(_optional(self.annotations, k) for k in ANNOTATION_KEYS),
                "d" if self.declared else "",
                "c" if self.claims else "",
                escape(self.account),
                ",".join(escape(name) for name in self.pull_secrets),
                containers,
                inits,
            )
        )


def pod_key(pod: Mapping[str, Any], namespace: str) -> str | None:
    """The key of ``pod`` admitted in ``namespace`` (a Pod as the API server sends it to
    admission, or a stored one: neither its affinity nor ``nodeName`` is read); ``None`` for
    a pod the policy never serves (a GPU quantity that is not a whole number)."""
    reading = _Reading(pod, namespace)
    return reading.key() if reading.readable() else None


def _reduced_container(container: Mapping[str, Any], reading: _Reading, *, init: bool) -> Any:
    out: dict[str, Any] = {} if init else {"name": str(container.get("name") or "")}
    if not init and container.get("image") is not None:
        out["image"] = str(container["image"])
    resources = {
        part: {name: _QUANTITY_OF[sign] for name, sign in reading.amounts(container, part)}
        for part in ("limits", "requests")
    }
    resources = {part: amounts for part, amounts in resources.items() if amounts}
    if resources:
        out["resources"] = resources
    env = [{"name": n, "value": v} for n, v in ([] if init else _gate_env(container))]
    if env:
        out["env"] = env
    if init:
        out["name"] = "init"
    return out


def key_pod(pod: Mapping[str, Any], namespace: str, *, name: str = "policy-key") -> dict[str, Any]:
    """The pod rebuilt from what :func:`pod_key` reads, and nothing else: what the controller
    asks the webhook's decision about. Quantities become ``"1"`` or ``"0"``; a declaring
    annotation other than the four keys becomes one (``cudasched.io/declared``); init
    containers keep only their GPU resources. Only for a pod :func:`pod_key` serves."""
    reading = _Reading(pod, namespace)
    labels = {k: str(reading.labels[k]) for k in LABEL_KEYS if reading.labels.get(k) is not None}
    annotations = {
        k: str(reading.annotations[k])
        for k in ANNOTATION_KEYS
        if reading.annotations.get(k) is not None
    }
    if reading.declared and not annotations:
        annotations[L.PREFIX + "declared"] = "true"
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    spec: dict[str, Any] = {
        "serviceAccountName": reading.account,
        "containers": [_reduced_container(c, reading, init=False) for c in reading.containers],
    }
    if reading.inits:
        spec["initContainers"] = [_reduced_container(c, reading, init=True) for c in reading.inits]
    if reading.pull_secrets:
        spec["imagePullSecrets"] = [{"name": n} if n else {} for n in reading.pull_secrets]
    if reading.claims:
        spec["resourceClaims"] = [{"name": "claim", "resourceClaimName": "claim"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


# --------------------------------------------------------------------------- the same in CEL


def _cel_string(text: str) -> str:
    """A CEL string literal (single-quoted; the texts here hold no quote or backslash)."""
    assert "'" not in text and "\\" not in text
    return f"'{text}'"


def _cel_escape(expr: str) -> str:
    for raw, escaped in _ESCAPES:
        expr = f"{expr}.replace({_cel_string(raw)}, {_cel_string(escaped)})"
    return expr


def _cel_optional(mapping: str, key: str) -> str:
    lit = _cel_string(key)
    return f"(has({mapping}) && {lit} in {mapping} ? '=' + {_cel_escape(f'{mapping}[{lit}]')} : '')"


def _cel_amounts(container: str, part: str) -> str:
    amounts = f"{container}.resources.{part}"
    prefixes = " || ".join(f"k.startsWith({_cel_string(p)})" for p in GPU_RESOURCE_PREFIXES)
    sign = (
        f"(string({amounts}[k]).matches('^[0-9]+$') ? "
        f"(string({amounts}[k]).matches('^0+$') ? '{_ZERO_MARK}' : '{_POSITIVE}') : '{_OTHER}')"
    )
    return (
        f"(has({container}.resources) && has({amounts}) ? "
        f"{amounts}.filter(k, {prefixes}).sort()"
        f".map(k, {_cel_escape('k')} + '=' + {sign}).join(',') : '')"
    )


def _cel_gate(container: str) -> str:
    names = " || ".join(
        [f"e.name.startsWith({_cel_string(_GATE_PREFIX)})"]
        + [f"e.name == {_cel_string(n)}" for n in _GATE_NAMES]
    )
    return (
        f"(has({container}.env) ? {container}.env.filter(e, has(e.value) && ({names}))"
        f".map(e, {_cel_escape('e.name')} + '=' + {_cel_escape('e.value')}).join(',') : '')"
    )


def key_expression(obj: str = "object", namespace: str = "request.namespace") -> str:
    """:func:`pod_key` in CEL, over the pod ``obj`` admitted in ``namespace`` (a CEL string).
    A pod with a GPU quantity that is not a whole number gets a key with ``?`` in it, which
    the controller never writes (as :func:`pod_key` answers ``None``)."""
    meta, spec = f"{obj}.metadata", f"{obj}.spec"
    labels, annotations = f"{meta}.labels", f"{meta}.annotations"
    declared = " && ".join(
        [f"k.startsWith({_cel_string(L.PREFIX)})"]
        + [f"k != {_cel_string(k)}" for k in _NOT_DECLARING]
    )
    container = (
        f"{_cel_escape('c.name')} + ';' + (has(c.image) ? '=' + {_cel_escape('c.image')} : '')"
        f" + ';' + {_cel_amounts('c', 'limits')} + ';' + {_cel_amounts('c', 'requests')}"
        f" + ';' + {_cel_gate('c')}"
    )
    init = f"{_cel_amounts('c', 'limits')} + ';' + {_cel_amounts('c', 'requests')}"
    account = (
        f"(has({spec}.serviceAccountName) ? {spec}.serviceAccountName : "
        f"has({spec}.serviceAccount) ? {spec}.serviceAccount : 'default')"
    )
    parts: Sequence[str] = (
        _cel_string(KEY_VERSION),
        _cel_escape(namespace),
        *(_cel_optional(labels, k) for k in LABEL_KEYS),
        *(_cel_optional(annotations, k) for k in ANNOTATION_KEYS),
        f"(has({annotations}) && {annotations}.exists(k, {declared}) ? 'd' : '')",
        f"(has({spec}.resourceClaims) && size({spec}.resourceClaims) > 0 ? 'c' : '')",
        _cel_escape(account),
        f"(has({spec}.imagePullSecrets) ? {spec}.imagePullSecrets"
        f".map(s, has(s.name) ? {_cel_escape('s.name')} : '').join(',') : '')",
        f"{spec}.containers.map(c, {container}).join('&')",
        f"(has({spec}.initContainers) ? {spec}.initContainers.map(c, {init}).join('&') : '')",
    )
    return " + '|' + ".join(parts)
