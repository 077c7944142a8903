"""What discovery learns about a node, independent of where it learned it.

Every discovery source (NVML, ``nvidia-smi -q -x``, ``nvidia-smi -q``, the plain ``nvidia-smi``
table) produces the same :class:`DriverFacts`, so the label builder and the CLI never care which
source answered. A failed probe is a :class:`DiscoveryError` carrying a short machine ``reason``
that is also a valid label value, because the agent publishes it as ``cudasched.io/probe.reason``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cudasched.vocab.errors import InputError
from cudasched.vocab.versions import ComputeCapability, CudaVersion, DriverVersion

__all__ = [
    "DiscoveryError",
    "DriverFacts",
    "GpuFacts",
    "HostFacts",
    "Reason",
]


class Reason:
    """Machine reasons for a failed probe (label values, so short and ``[a-z0-9-]`` only)."""

    NO_DRIVER = "no-driver"  # kernel module not loaded / nvidia-smi cannot talk to it
    VERSION_MISMATCH = "driver-library-mismatch"  # user-space library != kernel module
    NVML_NOT_FOUND = "nvml-not-found"  # libnvidia-ml.so missing: no driver installed
    NVML_ERROR = "nvml-error"  # any other NVML failure
    NO_DEVICES = "no-devices"  # driver loaded, zero GPUs visible
    NVIDIA_SMI_NOT_FOUND = "nvidia-smi-not-found"
    NVIDIA_SMI_FAILED = "nvidia-smi-failed"
    UNRECOGNISED_OUTPUT = "unrecognised-output"  # text that is not nvidia-smi output
    BAD_VALUE = "bad-value"  # nvidia-smi output with a value we cannot parse
    NO_GPU_SECTION = "no-gpu-section"  # a partial report: driver and CUDA, but no GPU section


class DiscoveryError(InputError):
    """Discovery could not produce facts.

    It derives from :class:`InputError` because a saved ``nvidia-smi`` output that cannot be read
    is bad input for ``cudasched probe --from-nvidia-smi`` (exit 2); the agent reads ``reason``
    and publishes ``probe.status=failed`` instead of crashing.
    """

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class GpuFacts:
    """One physical GPU (never a MIG device: MIG slices share their parent's facts).

    ``compute`` is ``None`` when the source does not report it (the plain table, ``-q`` and
    ``-q -x`` before ``compute_cap`` existed); ``datacenter`` is ``None`` when the brand is
    unknown or not decisive (vGPU brands).
    """

    name: str
    compute: ComputeCapability | None = None
    memory_mib: int | None = None
    brand: str | None = None
    datacenter: bool | None = None
    mig_enabled: bool | None = None
    uuid: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "compute_capability": str(self.compute) if self.compute is not None else None,
            "memory_mib": self.memory_mib,
        }


@dataclass(frozen=True, slots=True)
class HostFacts:
    """Kernel and OS of the node: what a driver build depends on (GPU Operator image tags)."""

    kernel_release: str | None = None
    os_id: str | None = None
    os_version_id: str | None = None

    def to_json(self) -> dict[str, str | None]:
        return {
            "kernel_release": self.kernel_release,
            "os_id": self.os_id,
            "os_version_id": self.os_version_id,
        }


@dataclass(frozen=True, slots=True)
class DriverFacts:
    """The driver, the newest CUDA it supports and its GPUs, as one source reported them.

    ``cuda`` is ``None`` when the source says ``N/A`` / ``Not Found`` (for example a vGPU guest or
    a host whose ``libcuda`` is missing): the label builder then omits the CUDA labels rather
    than guessing. ``missing`` names what a partial report lacked (a machine reason such as
    ``no-gpu-section``): the driver facts are still good, the GPU facts are unknown.
    """

    driver: DriverVersion
    cuda: CudaVersion | None
    gpus: tuple[GpuFacts, ...]
    source: str
    host: HostFacts | None = field(default=None)
    missing: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "driver_version": str(self.driver),
            "cuda_version": str(self.cuda) if self.cuda is not None else None,
            "gpus": [gpu.to_json() for gpu in self.gpus],
            "missing": self.missing,
        }
