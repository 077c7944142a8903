"""Test helper: an NVIDIADriver checked against what each GPU Operator release's CRD accepts.

The schemas are cudasched's own (``tests/data/planning/nvidiadriver-<release>.yaml``), written
from each release's CRD fields, enums, required fields and CEL rules. ``additionalProperties:
false`` on ``spec`` stands for kubectl's strict field validation; the CEL rules are evaluated
with a CEL interpreter; metadata names and label values are checked as the API server checks
them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import celpy
import yaml
from jsonschema import Draft202012Validator

__all__ = ["RELEASES", "cel", "schema", "validation_errors"]

DATA = Path(__file__).parents[1] / "data" / "planning"
RELEASES = ("24.9", "25.3", "25.10", "26.3", "26.7")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

_ENV = celpy.Environment()  # built at import: the CEL parser raises the recursion limit


@cache
def schema(release: str) -> dict[str, Any]:
    """The schema of one GPU Operator release (``26.7``)."""
    loaded: dict[str, Any] = yaml.safe_load((DATA / f"nvidiadriver-{release}.yaml").read_text())
    return loaded


@cache
def _programs(release: str) -> tuple[Any, ...]:
    rules = schema(release)["properties"]["spec"].get("x-cudasched-cel", [])
    return tuple(_ENV.program(_ENV.compile(rule)) for rule in rules)


def cel(release: str, spec: Mapping[str, Any]) -> bool:
    """Whether ``spec`` passes every CEL rule the release puts on ``spec``."""
    activation = {"self": celpy.json_to_cel(dict(spec))}
    return all(bool(p.evaluate(activation)) for p in _programs(release))


def validation_errors(release: str, obj: Mapping[str, Any]) -> list[str]:
    """Why the API server of a cluster running ``release`` would refuse ``obj`` (empty: it
    would accept it)."""
    errors = [e.message for e in Draft202012Validator(schema(release)).iter_errors(obj)]
    spec = obj.get("spec")
    if isinstance(spec, Mapping) and not cel(release, spec):
        errors.append("a CEL rule on spec refuses it")
    name = str(obj.get("metadata", {}).get("name", ""))
    if len(name) > 63 or not LABEL_VALUE.match(name):
        errors.append(f"name {name!r} cannot be the operator's owner label value")
    if isinstance(spec, Mapping):
        for key, value in (spec.get("nodeSelector") or {}).items():
            if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
                errors.append(f"nodeSelector {key}={value!r} is not a label value")
    return errors
