"""Shared test support."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        self.value = value
        super().__init__(f"NVML error {value}")


NOT_SUPPORTED = 3


DRIVER_NOT_LOADED = 9


LIBRARY_NOT_FOUND = 12


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    cc: tuple[int, int] = (9, 0)
    brand: int = 14  # NVML_BRAND_NVIDIA
    memory_bytes: int = 85_520_809_984  # 81559 MiB
    mig: tuple[int, int] | None = (0, 0)  # None: not MIG capable
    uuid: str = "GPU-00000000-1111-2222-3333-444444444444"


@dataclass
class FakeNvml:
    """A module-like stand-in for pynvml recording how often NVML is initialised."""

    driver: str | bytes = "550.90.07"
    cuda: int | None = 12040  # None: _v2 fails with LIBRARY_NOT_FOUND (no libcuda)
    gpus: list[FakeGpu] = field(default_factory=lambda: [FakeGpu()])
    init_error: int | None = None
    query_error: int | None = None
    init_count: int = 0
    shutdown_count: int = 0
    NVMLError: type[Exception] = FakeNVMLError

    def nvmlInit(self) -> None:
        self.init_count += 1
        if self.init_error is not None:
            raise FakeNVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdown_count += 1

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        if self.query_error is not None:
            raise FakeNVMLError(self.query_error)
        return self.driver

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        if self.cuda is None:
            raise FakeNVMLError(LIBRARY_NOT_FOUND)
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def nvmlDeviceGetName(self, handle: FakeGpu) -> str:
        return handle.name

    def nvmlDeviceGetCudaComputeCapability(self, handle: FakeGpu) -> tuple[int, int]:
        return handle.cc

    def nvmlDeviceGetBrand(self, handle: FakeGpu) -> int:
        return handle.brand

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu) -> Any:
        return SimpleNamespace(total=handle.memory_bytes, free=handle.memory_bytes, used=0)

    def nvmlDeviceGetMigMode(self, handle: FakeGpu) -> tuple[int, int]:
        if handle.mig is None:
            raise FakeNVMLError(NOT_SUPPORTED)
        return handle.mig

    def nvmlDeviceGetUUID(self, handle: FakeGpu) -> str:
        return handle.uuid
