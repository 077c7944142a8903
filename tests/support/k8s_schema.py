"""Test helper: is this object acceptable to a real Kubernetes API server?

Two layers, because neither is enough alone:

1. the OpenAPI schema of a pinned Kubernetes release (``kubernetes-validate``, strict mode, so
   unknown or misspelt fields fail), which catches wrong types and misplaced fields;
2. the semantic checks of ``pkg/apis/core/validation`` that a JSON schema cannot express for
   node affinity and ``nodeSelector``: a non-empty term list, value counts per operator, label
   key and value syntax, ``matchFields`` on ``metadata.name`` only, weights 1..100. On top of
   the API server we also insist that ``Gt``/``Lt`` values are base-10 int64, because the API
   server lets a non-integer through and the scheduler then silently never matches the term:
   cudasched promises never to write one.

The syntax rules are written here independently of ``cudasched.vocab.nodeaffinity`` on purpose, so a
bug there cannot hide itself.

Usage: ``from k8s_schema import assert_valid, assert_valid_pod, assert_valid_node_affinity``.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Iterator, Mapping
from importlib.resources import files
from typing import Any

import kubernetes_validate
from jsonschema import Draft202012Validator
from jsonschema import ValidationError as SchemaError
from referencing import Registry, Resource

from cudasched.kube.events import (
    FIELD_MAX_CHARS,
    NOTE_MAX_CHARS,
)

__all__ = [
    "K8S_VERSION",
    "assert_valid",
    "assert_valid_node_affinity",
    "assert_valid_pod",
    "pod_spec_errors",
]

# Pinned: the oldest release whose schema kubernetes-validate ships that is still widely run in
# GPU clusters; node-affinity fields have not changed since long before it.
K8S_VERSION = "1.33"

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"

_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_INT = re.compile(r"[+-]?[0-9]+")

# Objects without a schema in kubernetes-validate whose pod specs we still check.
_CRD_POD_SPECS: dict[str, tuple[tuple[str, ...], ...]] = {
    "InferenceService": (
        ("spec", "predictor"),
        ("spec", "transformer"),
        ("spec", "explainer"),
    ),
    "ServingRuntime": (("spec",),),
    "ClusterServingRuntime": (("spec",),),
}
_BUILTIN_POD_SPECS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "PodTemplate": ("template", "spec"),
    "Deployment": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}


@functools.cache
def _schema_dir() -> Any:
    """The strict schema folder kubernetes-validate ships for the pinned release, or ``None``
    when its layout is not the one we know (then we fall back to its slower public API)."""
    for version in reversed(kubernetes_validate.utils.all_versions()):
        if version == K8S_VERSION or version.startswith(K8S_VERSION + "."):
            folder = files("kubernetes_validate") / "kubernetes-json-schema"
            folder = folder / f"v{version}-local-strict"
            return folder if (folder / "_definitions.json").is_file() else None
    return None


@functools.cache
def _validator(kind: str, api_version: str) -> Draft202012Validator | None:
    """A compiled validator per kind. kubernetes-validate re-reads its 1.4 MB definitions file
    on every call, which made property tests spend most of their time parsing JSON."""
    folder = _schema_dir()
    if folder is None:
        return None
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    path = folder / f"{kind.lower()}-{group}.json"
    if not path.is_file():
        return None
    schema = json.loads(path.read_text())
    definitions = json.loads((folder / "_definitions.json").read_text())
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return Draft202012Validator(schema, registry=registry)


def _schema_check(obj: Mapping[str, Any]) -> None:
    kind = obj.get("kind")
    validator = _validator(str(kind), str(obj.get("apiVersion")))
    try:
        if validator is not None:
            validator.validate(dict(obj))
        else:
            kubernetes_validate.validate(dict(obj), K8S_VERSION, strict=True)
    except SchemaError as exc:  # kubernetes_validate.ValidationError derives from it
        where = ".".join(str(p) for p in exc.path)
        raise AssertionError(
            f"{kind} fails the Kubernetes {K8S_VERSION} schema at {where}: {exc.message}"
        ) from None
    except kubernetes_validate.SchemaNotFoundError as exc:
        raise AssertionError(exc.message) from None


def _label_value_ok(value: object) -> bool:
    return isinstance(value, str) and len(value) <= 63 and _VALUE.fullmatch(value) is not None


def _label_key_ok(key: object) -> bool:
    if not isinstance(key, str):
        return False
    parts = key.split("/")
    if len(parts) > 2:
        return False
    if len(parts) == 2:
        prefix, name = parts
        if not prefix or len(prefix) > 253 or _DNS_SUBDOMAIN.fullmatch(prefix) is None:
            return False
    else:
        name = parts[0]
    return 0 < len(name) <= 63 and _NAME.fullmatch(name) is not None


def _int64_ok(value: object) -> bool:
    return (
        isinstance(value, str)
        and _INT.fullmatch(value) is not None
        and -(2**63) <= int(value) <= 2**63 - 1
    )


def _term_errors(term: Any, path: str, *, allow_invalid_values: bool) -> list[str]:
    if term is None:
        return []
    if not isinstance(term, Mapping):
        return [f"{path}: not a mapping"]
    errors: list[str] = []
    for i, expr in enumerate(term.get("matchExpressions") or []):
        where = f"{path}.matchExpressions[{i}]"
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if not _label_key_ok(key):
            errors.append(f"{where}.key: invalid label key {key!r}")
        if op in ("In", "NotIn"):
            if not values:
                errors.append(f"{where}.values: required for operator {op}")
        elif op in ("Exists", "DoesNotExist"):
            if values:
                errors.append(f"{where}.values: forbidden for operator {op}")
        elif op in ("Gt", "Lt"):
            if len(values) != 1:
                errors.append(f"{where}.values: operator {op} needs exactly one value")
            elif not _int64_ok(values[0]):
                errors.append(f"{where}.values[0]: {values[0]!r} is not a base-10 int64")
        else:
            errors.append(f"{where}.operator: {op!r} is not a valid node selector operator")
        if not allow_invalid_values:
            for j, value in enumerate(values):
                if not _label_value_ok(value):
                    errors.append(f"{where}.values[{j}]: invalid label value {value!r}")
    for i, expr in enumerate(term.get("matchFields") or []):
        where = f"{path}.matchFields[{i}]"
        if expr.get("key") != "metadata.name":
            errors.append(f"{where}.key: only metadata.name is supported, got {expr.get('key')!r}")
        if expr.get("operator") not in ("In", "NotIn"):
            errors.append(f"{where}.operator: only In and NotIn, got {expr.get('operator')!r}")
        if len(expr.get("values") or []) != 1:
            errors.append(f"{where}.values: exactly one value is required")
    return errors


def _node_affinity_errors(node_affinity: Any, path: str) -> list[str]:
    if node_affinity is None:
        return []
    errors: list[str] = []
    required = node_affinity.get(REQUIRED)
    if required is not None:
        terms = required.get("nodeSelectorTerms") or []
        if not terms:
            errors.append(f"{path}.{REQUIRED}.nodeSelectorTerms: must have at least one term")
        for i, term in enumerate(terms):
            errors += _term_errors(
                term, f"{path}.{REQUIRED}.nodeSelectorTerms[{i}]", allow_invalid_values=False
            )
    for i, item in enumerate(node_affinity.get(PREFERRED) or []):
        where = f"{path}.{PREFERRED}[{i}]"
        weight = item.get("weight")
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
            errors.append(f"{where}.weight: must be in the range 1-100, got {weight!r}")
        # The API server always allows invalid label values in preferred terms.
        errors += _term_errors(
            item.get("preference"), f"{where}.preference", allow_invalid_values=True
        )
    return errors


def pod_spec_errors(spec: Mapping[str, Any], path: str = "spec") -> list[str]:
    """Semantic problems the API server (or, for Gt/Lt, the scheduler) would have with the node
    placement fields of a pod spec; ``[]`` when there are none."""
    errors: list[str] = []
    for key, value in (spec.get("nodeSelector") or {}).items():
        if not _label_key_ok(key):
            errors.append(f"{path}.nodeSelector: invalid label key {key!r}")
        if not _label_value_ok(value):
            errors.append(f"{path}.nodeSelector[{key}]: invalid label value {value!r}")
    affinity = spec.get("affinity") or {}
    errors += _node_affinity_errors(affinity.get("nodeAffinity"), f"{path}.affinity.nodeAffinity")
    return errors


def _dig(obj: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _pod_specs(obj: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    kind = obj.get("kind")
    if kind in _BUILTIN_POD_SPECS:
        locations: tuple[tuple[str, ...], ...] = (_BUILTIN_POD_SPECS[kind],)
    else:
        locations = _CRD_POD_SPECS.get(kind, ())
    for keys in locations:
        spec = _dig(obj, keys)
        if isinstance(spec, Mapping):
            yield ".".join(keys), spec


def assert_valid(obj: Mapping[str, Any]) -> None:
    """Fail the test unless ``obj`` (any Kubernetes object, as a dict) would be accepted.

    Built-in kinds are checked against the pinned schema; KServe kinds, which have no schema
    here, get the semantic checks on their pod specs only. Any other kind is an error, so a test
    never passes by validating nothing.
    """
    assert isinstance(obj, Mapping), f"not a Kubernetes object: {obj!r}"
    kind = obj.get("kind")
    if kind not in _CRD_POD_SPECS:
        _schema_check(obj)
    errors: list[str] = []
    for path, spec in _pod_specs(obj):
        errors += pod_spec_errors(spec, path)
    assert not errors, f"{kind} would be rejected:\n  " + "\n  ".join(errors)


def assert_valid_pod(pod_or_spec: Mapping[str, Any]) -> None:
    """Like :func:`assert_valid` for a Pod, or for a bare pod spec (wrapped into a Pod)."""
    assert isinstance(pod_or_spec, Mapping), f"not a pod or pod spec: {pod_or_spec!r}"
    if "kind" in pod_or_spec:
        assert pod_or_spec["kind"] == "Pod", f"expected a Pod, got {pod_or_spec['kind']!r}"
        assert_valid(pod_or_spec)
        return
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "validation-probe", "namespace": "default"},
        "spec": copy.deepcopy(dict(pod_or_spec)),
    }
    assert_valid(pod)


def assert_valid_node_affinity(node_affinity: Mapping[str, Any]) -> None:
    """Validate a bare ``nodeAffinity`` object by placing it in a minimal pod."""
    assert_valid_pod(
        {
            "containers": [{"name": "main", "image": "registry.example/app:1"}],
            "affinity": {"nodeAffinity": copy.deepcopy(dict(node_affinity))},
        }
    )


def assert_valid_event(event: dict[str, Any]) -> None:
    """What the API server's validation of an events.k8s.io/v1 Event checks."""
    assert event["apiVersion"] == "events.k8s.io/v1" and event["kind"] == "Event"
    # RFC 3339 with exactly six fractional digits (metav1.MicroTime).
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)", event["eventTime"]
    )
    assert event["type"] in ("Normal", "Warning")
    for key in ("reason", "action", "reportingController", "reportingInstance"):
        assert 0 < len(event[key]) <= FIELD_MAX_CHARS, key
    assert len(event.get("note", "")) <= NOTE_MAX_CHARS
    namespace = event["regarding"].get("namespace")
    if namespace:
        assert event["metadata"]["namespace"] == namespace
