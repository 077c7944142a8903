"""The discovery chain: NVML first, then ``nvidia-smi`` (XML report, then plain table).

Each source is a small unit with a ``probe() -> DriverFacts`` method, so the chain, the CLI and
the tests can combine them freely. The chain returns the first source that answers; when all
fail it reports the most informative failure (a missing tool says less than "driver/library
version mismatch").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from cudasched.agent.host import read_host
from cudasched.agent.nvidia_smi import NvidiaSmiSource
from cudasched.agent.nvml import NvmlSession, NvmlSource
from cudasched.nodes.hostfacts import DiscoveryError, DriverFacts, HostFacts, Reason
from cudasched.nodes.labelers import GpuCatalog, enrich

__all__ = ["Discovery", "Source", "default_discovery"]

# Failures that only say "this tool is not here"; another source's failure is more telling.
_ABSENT = frozenset({Reason.NVML_NOT_FOUND, Reason.NVIDIA_SMI_NOT_FOUND})


class Source(Protocol):
    def probe(self) -> DriverFacts: ...


@dataclass(frozen=True, slots=True)
class Discovery:
    """Try ``sources`` in order; enrich the answer from the knowledge base and host files."""

    sources: Sequence[Source]
    kb: GpuCatalog | None = None
    host: Callable[[], HostFacts] | None = None

    def probe(self) -> DriverFacts:
        errors: list[DiscoveryError] = []
        for source in self.sources:
            try:
                facts = source.probe()
            except DiscoveryError as exc:
                errors.append(exc)
                continue
            facts = enrich(facts, self.kb)
            if self.host is not None:
                facts = replace(facts, host=self.host())
            return facts
        if not errors:
            raise DiscoveryError(Reason.NVML_NOT_FOUND, "no discovery source configured")
        telling = [e for e in errors if e.reason not in _ABSENT] or errors
        chosen = telling[0]
        detail = "; ".join(str(e) for e in errors)
        raise DiscoveryError(chosen.reason, detail)


def default_discovery(
    *,
    kb: GpuCatalog | None = None,
    nvml_lib: Any = None,
    session: NvmlSession | None = None,
    nvidia_smi: str = "nvidia-smi",
    host: Callable[[], HostFacts] | None = read_host,
) -> Discovery:
    """NVML, then nvidia-smi; ``session`` lets the agent keep one NVML initialisation."""
    nvml = NvmlSource(session or NvmlSession(nvml_lib))
    return Discovery(sources=(nvml, NvidiaSmiSource(binary=nvidia_smi)), kb=kb, host=host)
