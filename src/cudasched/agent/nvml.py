"""Discovery through NVML (``nvidia-ml-py``), the primary source.

NVML is what GFD and the device plugin use; it reports exact compute capabilities and brands
that the ``nvidia-smi`` table cannot. :class:`NvmlSession` owns ``nvmlInit``/``nvmlShutdown``
so the library is initialised once per process (not per probe, not at import), and it
re-initialises after a failure because a driver upgrade invalidates the old handle.

The NVML calls go through ``lib``, a module-like object (``pynvml`` by default). Tests pass a
fake with the same function names, so the code below runs unchanged without a GPU.
"""

from __future__ import annotations

import contextlib
import importlib
from types import TracebackType
from typing import Any

from cudasched.agent.nvidia_smi import brand_is_datacenter
from cudasched.nodes.hostfacts import DiscoveryError, DriverFacts, GpuFacts, Reason
from cudasched.vocab.errors import VersionError
from cudasched.vocab.versions import ComputeCapability, CudaVersion, parse_driver

__all__ = ["NVML_BRANDS", "NvmlSession", "NvmlSource"]

# NVML return codes (nvml.h; stable ABI values).
_ERROR_NOT_SUPPORTED = 3
_ERROR_DRIVER_NOT_LOADED = 9
_ERROR_LIBRARY_NOT_FOUND = 12
_ERROR_FUNCTION_NOT_FOUND = 13
_ERROR_LIB_RM_VERSION_MISMATCH = 18

# nvmlBrandType_t -> the brand string nvidia-smi prints for it.
NVML_BRANDS: dict[int, str] = {
    0: "Unknown",
    1: "Quadro",
    2: "Tesla",
    3: "NVS",
    4: "GRID",
    5: "GeForce",
    6: "Titan",
    7: "NVIDIA vApps",
    8: "NVIDIA Virtual PC",
    9: "NVIDIA Virtual Compute Server",
    10: "NVIDIA RTX Virtual Workstation",
    11: "NVIDIA Cloud Gaming",
    12: "Quadro RTX",
    13: "NVIDIA RTX",
    14: "NVIDIA",
    15: "GeForce RTX",
    16: "Titan RTX",
}


def _code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def _reason(exc: BaseException) -> str:
    code = _code(exc)
    if code == _ERROR_LIBRARY_NOT_FOUND:
        return Reason.NVML_NOT_FOUND
    if code == _ERROR_DRIVER_NOT_LOADED:
        return Reason.NO_DRIVER
    if code == _ERROR_LIB_RM_VERSION_MISMATCH:
        return Reason.VERSION_MISMATCH
    return Reason.NVML_ERROR


def _decoded(value: Any) -> str:
    """NVML's text as ``str`` (older bindings return ``bytes``)."""
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlSession:
    """Owns NVML initialisation for the life of the agent process.

    ``ensure()`` initialises lazily (never at import), ``reset()`` shuts down after an error so
    the next probe starts clean, ``close()`` shuts down at exit. Usable as a context manager.
    """

    def __init__(self, lib: Any = None) -> None:
        self._lib = lib
        self._initialised = False

    @property
    def lib(self) -> Any:
        if self._lib is None:
            try:
                self._lib = importlib.import_module("pynvml")
            except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a dependency
                raise DiscoveryError(
                    Reason.NVML_NOT_FOUND, f"nvidia-ml-py is not installed: {exc}"
                ) from None
        return self._lib

    @property
    def initialised(self) -> bool:
        return self._initialised

    def ensure(self) -> Any:
        """Initialise NVML if needed and return the library object."""
        lib = self.lib
        if not self._initialised:
            try:
                lib.nvmlInit()
            except lib.NVMLError as exc:
                reason = _reason(exc)
                hint = {
                    Reason.NVML_NOT_FOUND: "NVML library not found: is the NVIDIA driver "
                    "installed on this machine?",
                    Reason.NO_DRIVER: "NVIDIA kernel driver not loaded",
                    Reason.VERSION_MISMATCH: "Driver/library version mismatch (driver "
                    "upgraded without reboot?)",
                }.get(reason, "NVML initialisation failed")
                raise DiscoveryError(reason, f"{hint}: {_decoded(exc)}") from None
            self._initialised = True
        return lib

    def reset(self) -> None:
        """Drop the current initialisation (after an error); the next ``ensure`` re-inits."""
        if self._initialised:
            self._initialised = False
            with contextlib.suppress(self.lib.NVMLError):
                self.lib.nvmlShutdown()

    def close(self) -> None:
        self.reset()

    def __enter__(self) -> NvmlSession:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class NvmlSource:
    """Turns NVML answers into :class:`DriverFacts`."""

    name = "nvml"

    def __init__(self, session: NvmlSession) -> None:
        self.session = session

    def probe(self) -> DriverFacts:
        lib = self.session.ensure()
        try:
            return self._probe(lib)
        except lib.NVMLError as exc:
            self.session.reset()
            raise DiscoveryError(_reason(exc), f"NVML query failed: {_decoded(exc)}") from None

    def _cuda(self, lib: Any) -> CudaVersion | None:
        # _v2 asks libcuda itself; the v1 call invents "a known supported version" when libcuda
        # is missing, which would publish a CUDA version nobody can run.
        try:
            code = int(lib.nvmlSystemGetCudaDriverVersion_v2())
        except lib.NVMLError as exc:
            if _code(exc) in (_ERROR_LIBRARY_NOT_FOUND, _ERROR_FUNCTION_NOT_FOUND):
                return None
            raise
        if code <= 0:
            return None
        return CudaVersion.from_code(code)

    def _mig(self, lib: Any, handle: Any) -> bool | None:
        try:
            current, _pending = lib.nvmlDeviceGetMigMode(handle)
        except lib.NVMLError as exc:
            if _code(exc) == _ERROR_NOT_SUPPORTED:
                return None
            raise
        return bool(current)

    def _probe(self, lib: Any) -> DriverFacts:
        driver_text = _decoded(lib.nvmlSystemGetDriverVersion())
        try:
            driver = parse_driver(driver_text)
        except VersionError as exc:
            raise DiscoveryError(Reason.BAD_VALUE, f"NVML driver version: {exc}") from None
        cuda = self._cuda(lib)
        gpus: list[GpuFacts] = []
        for index in range(int(lib.nvmlDeviceGetCount())):
            handle = lib.nvmlDeviceGetHandleByIndex(index)
            major, minor = lib.nvmlDeviceGetCudaComputeCapability(handle)
            brand = NVML_BRANDS.get(int(lib.nvmlDeviceGetBrand(handle)))
            memory = lib.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(
                GpuFacts(
                    name=_decoded(lib.nvmlDeviceGetName(handle)).strip(),
                    compute=ComputeCapability(int(major), int(minor)) if major else None,
                    memory_mib=int(memory.total) // (1024 * 1024),
                    brand=brand if brand != "Unknown" else None,
                    datacenter=brand_is_datacenter(brand),
                    mig_enabled=self._mig(lib, handle),
                    uuid=_decoded(lib.nvmlDeviceGetUUID(handle)),
                )
            )
        if not gpus:
            raise DiscoveryError(Reason.NO_DEVICES, "NVML reports no GPU on this node")
        return DriverFacts(driver=driver, cuda=cuda, gpus=tuple(gpus), source="nvml")
