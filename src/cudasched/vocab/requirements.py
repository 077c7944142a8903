"""What a workload needs from a node: the CUDA it was built with and the policy to judge it by."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from cudasched.vocab.errors import InputError
from cudasched.vocab.versions import ComputeCapability, CudaVersion, DriverVersion

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


class ToolkitMode(StrEnum):
    """How NVIDIA's container toolkit starts GPU containers on the cluster's nodes, which
    decides two things the engine reads (``docs/design.md``, "Outcomes per node").

    ``legacy``: the ``nvidia-container-runtime-hook`` runs ``nvidia-container-cli`` with each
    ``NVIDIA_REQUIRE_*`` as ``--require`` (the gate is checked), and libnvidia-container puts
    an image's compat libraries first when their driver major is newer than the host's
    (``--cuda-compat-mode=ldconfig``, the default). ``cdi``: GPUs come from a CDI spec; the
    legacy hook does not run (no gate), and the spec's ``enable-cuda-compat`` hook uses the
    compat libraries when the host branch is one their ELF note lists and the compat driver is
    newer than the host's (without a note, when its major is newer)."""

    LEGACY = "legacy"
    CDI = "cdi"

    @classmethod
    def parse(cls, value: str) -> ToolkitMode:
        try:
            return cls(value.strip().lower())
        except ValueError:
            allowed = ", ".join(m.value for m in cls)
            raise InputError(f"invalid toolkit mode {value!r}: expected one of {allowed}") from None


@dataclass(frozen=True, slots=True)
class CompatLibrary:
    """The compat ``libcuda.so`` an image ships under ``/usr/local/cuda/compat`` (CUDA forward
    compatibility), as the container toolkit reads it: ``driver`` is the compat driver's
    version (the library's file name), ``cuda`` the CUDA it provides (its note, else the
    ``cuda-X.Y`` directory; ``None`` when neither says), ``branches`` the host driver branches
    its ``.note.cuda.fwd_compatibility`` lists (``None``: the library has no note, or it was
    not read). ``name`` is what to call it when its file was not read (an image's
    ``NV_CUDA_COMPAT_PACKAGE``: only the branch of ``driver`` is known then)."""

    driver: DriverVersion
    cuda: CudaVersion | None = None
    branches: tuple[int, ...] | None = None
    source: str = field(default="", compare=False)
    name: str = field(default="", compare=False)

    def describe(self) -> str:
        """``libcuda.so.575.57.08 (CUDA 12.9; note: R535, R550)``."""
        parts = [f"CUDA {self.cuda}"] if self.cuda is not None else []
        if self.branches is not None:
            listed = ", ".join(f"R{b}" for b in self.branches) or "no branch"
            parts.append(f"note: {listed}")
        elif not self.name:
            parts.append("no note")
        what = self.name or f"libcuda.so.{self.driver}"
        return f"{what} ({'; '.join(parts)})" if parts else what


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
    the engine applies on top of the CUDA rules (:mod:`cudasched.vocab.requirecuda`) when the
    cluster's ``toolkit`` mode checks it (legacy); ``compat`` the compat library the image
    ships, which the toolkit may put in front of the host's driver (see :class:`ToolkitMode`).
    The gate, the compat library and the toolkit mode are the terms the container starts
    under in this cluster, so they are part of what it needs.
    ``unknown_reason`` and ``disagreement`` are for warnings: an empty requirement says why
    nothing was found, a runtime whose label and image disagree says so."""

    cuda: CudaVersion | None = None
    min_compute: ComputeCapability | None = None
    policy: Policy | None = None
    ships_cuda_compat: bool = False
    framework: FrameworkBuild | None = None
    source: str = ""
    gate: Gate | None = None
    compat: CompatLibrary | None = None
    toolkit: ToolkitMode = ToolkitMode.LEGACY
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
            self.compat,
            self.toolkit,
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
