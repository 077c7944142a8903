"""Short names for the version literals tests write: ``cv("12.4")`` is ``parse_cuda("12.4")``."""

from __future__ import annotations

from cudasched.vocab.versions import (
    ComputeCapability,
    CudaVersion,
    DriverVersion,
    parse_compute_capability,
    parse_cuda,
    parse_driver,
)

__all__ = ["cc", "cudas", "cv", "dv"]


def cv(text: str) -> CudaVersion:
    return parse_cuda(text)


def cudas(*texts: str) -> list[CudaVersion]:
    return [parse_cuda(text) for text in texts]


def dv(text: str) -> DriverVersion:
    return parse_driver(text)


def cc(text: str) -> ComputeCapability:
    return parse_compute_capability(text)
