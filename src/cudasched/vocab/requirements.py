"""What a workload needs from a node: the CUDA it was built with and the policy to judge it by."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from cudasched.vocab.errors import InputError
from cudasched.vocab.versions import ComputeCapability, CudaVersion

if TYPE_CHECKING:
    from cudasched.vocab.requirecuda import Gate


class Policy(StrEnum):
    """How strictly a driver must match the workload's CUDA.

    ``strict``: the driver natively supports the toolkit. ``minor-compat``: also any driver at or
    above the CUDA major's floor (no PTX JIT). ``forward-compat``: also older data-center driver
    branches listed in NVIDIA's forward-compatibility matrix, when the image ships ``cuda-compat``.
    """

    STRICT = "strict"
    MINOR_COMPAT = "minor-compat"
    FORWARD_COMPAT = "forward-compat"

    @classmethod
    def parse(cls, value: str) -> Policy:
        try:
            return cls(value.strip().lower())
        except ValueError:
            allowed = ", ".join(p.value for p in cls)
            raise InputError(f"invalid policy {value!r}: expected one of {allowed}") from None


@dataclass(frozen=True, slots=True)
class FrameworkBuild:
    """A framework binary, e.g. ``torch 2.5.1+cu124``: the CUDA it was built with and, when
    known, the compute capabilities it ships kernels for (``None`` = unknown, not "all")."""

    name: str
    version: str
    cuda: CudaVersion | None
    arch_list: tuple[ComputeCapability, ...] | None = None
    ptx: bool = False
    source: str = ""


@dataclass(frozen=True, slots=True)
class Requirement:
    """A workload's needs. ``source`` says where they were found (annotation, runtime label,
    image table ...) so every answer can be explained. ``gate`` is the container toolkit's
    ``NVIDIA_REQUIRE_*`` check the container starts under (None: none, or disabled), which
    the engine applies on top of the CUDA rules (:mod:`cudasched.vocab.requirecuda`).
    ``unknown_reason`` and ``disagreement`` are for warnings: an empty requirement says why
    nothing was found, a runtime whose label and image disagree says so."""

    cuda: CudaVersion | None = None
    min_compute: ComputeCapability | None = None
    policy: Policy | None = None
    ships_cuda_compat: bool = False
    framework: FrameworkBuild | None = None
    source: str = ""
    gate: Gate | None = None
    # Explanations that never change what is required (so not part of equality): why no CUDA
    # requirement was found (the image is not in the table...), and how a runtime's declared
    # requirement and its image disagree (the stricter of the two is used).
    unknown_reason: str = field(default="", compare=False)
    disagreement: str = field(default="", compare=False)

    @property
    def is_empty(self) -> bool:
        return self.cuda is None and self.min_compute is None and self.framework is None

    @property
    def needs(self) -> tuple[object, ...]:
        """Everything that decides where the workload may run, without the words that explain
        it (``source`` may quote a request-sized image reference): the key of caches of
        compiled terms, so two requirements that differ in any rule-relevant field (a gate,
        a framework build) never share an answer."""
        return (
            self.cuda,
            self.min_compute,
            self.policy,
            self.ships_cuda_compat,
            self.framework,
            self.gate,
        )

    def describe(self) -> str:
        """Short human form, e.g. ``cuda>=12.4, cc>=8.0``."""
        parts = []
        if self.cuda is not None:
            parts.append(f"cuda>={self.cuda.release}")
        if self.min_compute is not None:
            parts.append(f"cc>={self.min_compute}")
        if self.framework is not None:
            parts.append(f"{self.framework.name} {self.framework.version}")
        return ", ".join(parts) or "none"

    def record(self, policy: Policy) -> str:
        """The ``cudasched.io/requirement`` annotation value: what is needed, under which
        policy (when not strict) and why, e.g. ``cuda>=12.8 [minor-compat] (image ...)``.

        The source is cut to :data:`RECORD_SOURCE_CHARS` characters: it can quote an image
        reference of any length, and the annotation must never push an object past the API
        server's 256 KiB limit on all annotations together."""
        text = self.describe()
        if policy is not Policy.STRICT:
            text += f" [{policy.value}]"
        if self.source:
            source = self.source
            if len(source) > RECORD_SOURCE_CHARS:
                source = source[: RECORD_SOURCE_CHARS - 1] + "…"
            text += f" ({source})"
        return text


#: The longest ``source`` a requirement record quotes.
RECORD_SOURCE_CHARS = 256
