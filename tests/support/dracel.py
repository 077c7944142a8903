"""CEL device selectors evaluated as the DRA allocator evaluates them, for tests of what
cudasched writes for NVIDIA's DRA driver (claim templates, device classes).

Kubernetes' semver CEL library is not part of cel-python; :class:`Semver` stands in for it with
semver.org's strict grammar (``MAJOR.MINOR.PATCH``, no leading zeros), which is what
``semver("...")`` accepts, so a literal such as ``570.124.06`` or ``12.8`` fails here too.
A device is the CEL input the allocator builds: ``device.driver`` and ``device.attributes``
grouped by domain (``reference/ops-facts.md`` §5).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

import celpy
from celpy import celtypes

from cudasched.vocab.versions import ComputeCapability, CudaVersion

__all__ = ["DOMAIN", "SEMVER", "Semver", "attributes", "device", "program", "selects"]

SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")
DOMAIN = "gpu.nvidia.com"


class Semver(celtypes.StringType):
    """A semver value: ordered by its three numbers."""

    def __new__(cls, text: str) -> Semver:
        match = SEMVER.match(str(text))
        if match is None:
            raise ValueError(f"not a semver.org version: {text!r}")
        value = super().__new__(cls, str(text))
        value.parts = tuple(int(g) for g in match.groups())  # type: ignore[attr-defined]
        return value


def _semver(text: Any) -> Semver:
    return Semver(str(text))


def _compare_to(a: Semver, b: Semver) -> celtypes.IntType:
    return celtypes.IntType((a.parts > b.parts) - (a.parts < b.parts))  # type: ignore[attr-defined]


@functools.cache
def program(expression: str) -> Any:
    env = celpy.Environment()
    return env.program(
        env.compile(expression), functions={"semver": _semver, "compareTo": _compare_to}
    )


def device(*, kind: str | None = "gpu", driver: str = DOMAIN, **versions: str) -> dict[str, Any]:
    """A device of ``driver`` whose ``type`` attribute is ``kind`` (``None``: no type) and whose
    version attributes are ``versions`` (semver text)."""
    attrs: dict[Any, Any] = {}
    if kind is not None:
        attrs[celtypes.StringType("type")] = celtypes.StringType(kind)
    for key, value in versions.items():
        attrs[celtypes.StringType(key)] = Semver(value)
    return {
        "device": celtypes.MapType(
            {
                celtypes.StringType("driver"): celtypes.StringType(driver),
                celtypes.StringType("attributes"): celtypes.MapType(
                    {celtypes.StringType(driver): celtypes.MapType(attrs)}
                ),
            }
        )
    }


def selects(expressions: Sequence[str], dev: dict[str, Any]) -> bool:
    """Whether every expression holds for ``dev``. Each is evaluated, even after a false one
    (the allocator stops there, but a selector must never fail on any device): an evaluation
    error fails the test, as it would abort the allocation."""
    results = [program(e).evaluate(dev) for e in expressions]
    for result in results:
        assert isinstance(result, celtypes.BoolType), f"evaluation error: {result!r}"
    return all(results)


def attributes(driver: str, cuda: CudaVersion, cc: ComputeCapability) -> dict[str, str]:
    """What the NVIDIA DRA driver publishes for a GPU: versions as semver, leading zeros
    dropped (570.124.06 -> 570.124.6), CUDA as X.Y.0."""
    parts = [str(int(p)) for p in driver.split(".")] + ["0"]
    return {
        "driverVersion": ".".join(parts[:3]),
        "cudaDriverVersion": f"{cuda.major}.{cuda.minor}.0",
        "cudaComputeCapability": f"{cc.major}.{cc.minor}.0",
    }
