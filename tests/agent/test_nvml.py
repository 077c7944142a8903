"""NVML discovery through a fake at the NVML-call boundary.

``FakeNvml`` stands in for the ``pynvml`` module: same function names, same error type with a
``value`` return code. The real :class:`NvmlSource` code runs against it unchanged.
"""

from __future__ import annotations

from typing import Any

import pytest

from cudasched.agent.nvml import NvmlSession, NvmlSource
from cudasched.nodes.hostfacts import DiscoveryError, Reason
from cudasched.vocab.versions import ComputeCapability, CudaVersion, DriverVersion
from tests.support.nvml import DRIVER_NOT_LOADED, LIBRARY_NOT_FOUND, FakeGpu, FakeNvml

FUNCTION_NOT_FOUND = 13
UNKNOWN = 999
RM_VERSION_MISMATCH = 18
GPU_IS_LOST = 15


def probe(lib: FakeNvml) -> Any:
    return NvmlSource(NvmlSession(lib)).probe()


def test_reads_driver_cuda_and_gpus() -> None:
    lib = FakeNvml(
        gpus=[
            FakeGpu(mig=(1, 1)),
            FakeGpu(name="Tesla T4", cc=(7, 5), brand=2, memory_bytes=16_106_127_360, mig=None),
        ]
    )
    facts = probe(lib)
    assert facts.source == "nvml"
    assert facts.driver == DriverVersion(550, 90, 7)
    assert facts.cuda == CudaVersion(12, 4)
    h100, t4 = facts.gpus
    assert (h100.name, h100.compute, h100.memory_mib) == (
        "NVIDIA H100 80GB HBM3",
        ComputeCapability(9, 0),
        81559,
    )
    assert (h100.brand, h100.datacenter, h100.mig_enabled) == ("NVIDIA", True, True)
    assert (t4.brand, t4.datacenter, t4.mig_enabled, t4.memory_mib) == ("Tesla", True, None, 15360)


def test_cuda_code_encoding_from_nvml() -> None:
    assert probe(FakeNvml(cuda=13000)).cuda == CudaVersion(13, 0)
    assert probe(FakeNvml(cuda=11080)).cuda == CudaVersion(11, 8)


def test_missing_libcuda_gives_no_cuda_version_instead_of_a_guess() -> None:
    assert probe(FakeNvml(cuda=None)).cuda is None


def test_bytes_from_old_bindings_are_decoded() -> None:
    assert str(probe(FakeNvml(driver=b"535.104.05")).driver) == "535.104.05"


def test_geforce_brand_is_not_datacenter() -> None:
    lib = FakeNvml(gpus=[FakeGpu(name="NVIDIA GeForce RTX 4090", cc=(8, 9), brand=5, mig=None)])
    (gpu,) = probe(lib).gpus
    assert (gpu.brand, gpu.datacenter) == ("GeForce", False)


def test_vgpu_brand_leaves_datacenter_unknown() -> None:
    lib = FakeNvml(gpus=[FakeGpu(brand=9)])  # NVIDIA Virtual Compute Server
    assert probe(lib).gpus[0].datacenter is None


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (LIBRARY_NOT_FOUND, Reason.NVML_NOT_FOUND),
        (DRIVER_NOT_LOADED, Reason.NO_DRIVER),
        (RM_VERSION_MISMATCH, Reason.VERSION_MISMATCH),
        (UNKNOWN, Reason.NVML_ERROR),
    ],
)
def test_init_failures_carry_a_reason(code: int, reason: str) -> None:
    with pytest.raises(DiscoveryError) as info:
        probe(FakeNvml(init_error=code))
    assert info.value.reason == reason


def test_library_not_found_message_says_no_driver() -> None:
    with pytest.raises(DiscoveryError, match="NVML library not found"):
        probe(FakeNvml(init_error=LIBRARY_NOT_FOUND))


def test_no_gpus_is_a_failure() -> None:
    with pytest.raises(DiscoveryError) as info:
        probe(FakeNvml(gpus=[]))
    assert info.value.reason == Reason.NO_DEVICES


def test_session_initialises_once_for_many_probes_and_shuts_down_on_close() -> None:
    lib = FakeNvml()
    with NvmlSession(lib) as session:
        source = NvmlSource(session)
        for _ in range(3):
            source.probe()
        assert lib.init_count == 1
        assert lib.shutdown_count == 0
    assert lib.shutdown_count == 1


def test_query_error_resets_the_session_so_the_next_probe_reinitialises() -> None:
    lib = FakeNvml(query_error=GPU_IS_LOST)
    session = NvmlSession(lib)
    source = NvmlSource(session)
    with pytest.raises(DiscoveryError) as info:
        source.probe()
    assert info.value.reason == Reason.NVML_ERROR
    assert not session.initialised
    assert lib.shutdown_count == 1
    lib.query_error = None
    assert source.probe().driver == DriverVersion(550, 90, 7)
    assert lib.init_count == 2


def test_failed_init_is_retried_on_the_next_probe() -> None:
    lib = FakeNvml(init_error=DRIVER_NOT_LOADED)
    source = NvmlSource(NvmlSession(lib))
    with pytest.raises(DiscoveryError):
        source.probe()
    lib.init_error = None
    assert source.probe().gpus
    assert lib.init_count == 2


def test_session_does_not_initialise_before_first_use() -> None:
    lib = FakeNvml()
    NvmlSession(lib)
    assert lib.init_count == 0
