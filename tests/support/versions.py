"""Short names for the version literals tests write: ``cv("12.4")`` is ``parse_cuda("12.4")``."""

from __future__ import annotations

from cudasched.vocab import versions

__all__ = ["cc", "cudas", "cv", "dv"]


def cv(text: str) -> versions.CudaVersion:
    return versions.parse_cuda(text)


def cudas(*texts: str) -> list[versions.CudaVersion]:
    return [versions.parse_cuda(text) for text in texts]


def dv(text: str) -> versions.DriverVersion:
    return versions.parse_driver(text)


def cc(text: str) -> versions.ComputeCapability:
    return versions.parse_compute_capability(text)
