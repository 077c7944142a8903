"""Node label keys: cudasched's own integer-coded scheme and NVIDIA GFD's two key generations.

GFD's ``cuda.runtime*`` keys hold the *driver's* maximum CUDA version, not the image's.
"""

from __future__ import annotations

from enum import StrEnum

from cudasched.vocab.errors import InputError

PREFIX = "cudasched.io/"

# cudasched's own labels (published by `cudasched agent`).
CUDA_CODE = PREFIX + "cuda.code"  # 1000*major + 10*minor of the driver's CUDA
CUDA_VERSION = PREFIX + "cuda.version"  # "12.4"
DRIVER_CODE = PREFIX + "driver.code"  # major*1e6 + minor*1e3 + revision
DRIVER_VERSION = PREFIX + "driver.version"  # "550.90.07"
DRIVER_BRANCH = PREFIX + "driver.branch"  # "550"
COMPUTE_CODE = PREFIX + "gpu.compute.code"  # 10*major + minor of the LOWEST cc on the node
GPU_ARCH = PREFIX + "gpu.arch"  # "hopper"
GPU_PRODUCT = PREFIX + "gpu.product"  # sanitised, sorted, "_"-joined when mixed
GPU_DATACENTER = PREFIX + "gpu.datacenter"  # "true" | "false"
PROBE_STATUS = PREFIX + "probe.status"  # "ok" | "partial" | "failed"
PROBE_REASON = PREFIX + "probe.reason"  # short machine reason when failed or partial
# Written by the operator when applying a `cudasched plan-drivers` plan: the node's driver pool,
# which the plan's NVIDIADriver objects select.
DRIVER_POOL = PREFIX + "driver-pool"

# Annotations a workload (or a serving runtime) can carry.
ANN_CUDA_VERSION = PREFIX + "cuda-version"
ANN_MIN_COMPUTE = PREFIX + "min-compute-capability"
ANN_POLICY = PREFIX + "policy"
ANN_SHIPS_CUDA_COMPAT = PREFIX + "ships-cuda-compat"
ANN_SKIP = PREFIX + "skip"
ANN_REQUIREMENT = PREFIX + "requirement"

# NVIDIA GPU Feature Discovery, new keys (GFD >= 0.15).
GFD_DRIVER_FULL = "nvidia.com/cuda.driver-version.full"
GFD_DRIVER_MAJOR = "nvidia.com/cuda.driver-version.major"
GFD_DRIVER_MINOR = "nvidia.com/cuda.driver-version.minor"
GFD_DRIVER_REVISION = "nvidia.com/cuda.driver-version.revision"
GFD_CUDA_FULL = "nvidia.com/cuda.runtime-version.full"
GFD_CUDA_MAJOR = "nvidia.com/cuda.runtime-version.major"
GFD_CUDA_MINOR = "nvidia.com/cuda.runtime-version.minor"
# Deprecated keys (every GFD version sets them; older GFD sets only these).
GFD_OLD_DRIVER_MAJOR = "nvidia.com/cuda.driver.major"
GFD_OLD_DRIVER_MINOR = "nvidia.com/cuda.driver.minor"
GFD_OLD_DRIVER_REV = "nvidia.com/cuda.driver.rev"
GFD_OLD_CUDA_MAJOR = "nvidia.com/cuda.runtime.major"
GFD_OLD_CUDA_MINOR = "nvidia.com/cuda.runtime.minor"
#: The version keys of each GFD generation.
GFD_VERSION_KEYS = (
    GFD_DRIVER_FULL,
    GFD_DRIVER_MAJOR,
    GFD_DRIVER_MINOR,
    GFD_DRIVER_REVISION,
    GFD_CUDA_FULL,
    GFD_CUDA_MAJOR,
    GFD_CUDA_MINOR,
)
GFD_OLD_VERSION_KEYS = (
    GFD_OLD_DRIVER_MAJOR,
    GFD_OLD_DRIVER_MINOR,
    GFD_OLD_DRIVER_REV,
    GFD_OLD_CUDA_MAJOR,
    GFD_OLD_CUDA_MINOR,
)
# GPU facts.
GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_COMPUTE_MAJOR = "nvidia.com/gpu.compute.major"
GFD_COMPUTE_MINOR = "nvidia.com/gpu.compute.minor"
GFD_FAMILY = "nvidia.com/gpu.family"
GFD_COUNT = "nvidia.com/gpu.count"
GFD_PRESENT = "nvidia.com/gpu.present"
# Unix seconds of GFD's last labelling pass, rewritten every pass (60 s by default) unless GFD
# runs with --no-timestamp.
GFD_TIMESTAMP = "nvidia.com/gfd.timestamp"

#: Node label keys whose values change on every refresh and say nothing about compatibility:
#: grouping nodes and deciding when the cluster changed both ignore them.
VOLATILE_KEYS = frozenset({GFD_TIMESTAMP})

# Keys the placement compiler writes expressions on (merge.py checks that its terms use no
# other). Our earlier terms are recognised by merge.MARKER, not by these keys: a user's own
# expressions on them are kept. GFD's product label carries the GPU class the container
# toolkit's brand alternatives need (placement._gate_terms).
OWNED_KEYS = frozenset(
    {
        GFD_PRODUCT,
        CUDA_CODE,
        DRIVER_CODE,
        DRIVER_BRANCH,
        COMPUTE_CODE,
        GPU_DATACENTER,
        GFD_CUDA_MAJOR,
        GFD_CUDA_MINOR,
        GFD_OLD_CUDA_MAJOR,
        GFD_OLD_CUDA_MINOR,
        GFD_DRIVER_MAJOR,
        GFD_DRIVER_MINOR,
        GFD_DRIVER_REVISION,
        GFD_OLD_DRIVER_MAJOR,
        GFD_OLD_DRIVER_MINOR,
        GFD_OLD_DRIVER_REV,
        GFD_COMPUTE_MAJOR,
        GFD_COMPUTE_MINOR,
    }
)


class LabelScheme(StrEnum):
    """Which node labels the placement compiler targets."""

    CUDASCHED = "cudasched"  # our integer codes: one Gt per bound
    GFD = "gfd"  # ORed major/minor terms over GFD keys
    AUTO = "auto"  # whatever every GPU node in the cluster carries

    @classmethod
    def parse(cls, value: str) -> LabelScheme:
        try:
            return cls(value.strip().lower())
        except ValueError:
            allowed = ", ".join(s.value for s in cls)
            raise InputError(f"invalid label scheme {value!r}: expected one of {allowed}") from None
