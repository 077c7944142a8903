"""Driver, CUDA and compute-capability versions: parsing, ordering and integer label codes.

Kubernetes ``Gt``/``Lt`` compare base-10 int64 values only, so each version has an integer
``code`` whose order equals the version order. Any "version >= X" then becomes the single
expression ``code Gt (X.code - 1)``:

* CUDA: ``1000*major + 10*minor`` (the encoding of ``cudaDriverGetVersion``; 12.4 -> 12040);
* driver: ``major*1_000_000 + minor*1_000 + revision`` (550.90.07 -> 550090007);
* compute capability: ``10*major + minor`` (8.6 -> 86, 12.0 -> 120).

A driver version parsed from text keeps that text and prints it as given (``999.1``, Jetson's
``540.4.0``); only versions built from numbers are printed NVIDIA's way (``550.90.07``). The
spelling never takes part in comparisons: ``570.124.6`` equals ``570.124.06``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cudasched.vocab.errors import VersionError

__all__ = [
    "ComputeCapability",
    "CudaVersion",
    "DriverVersion",
    "parse_compute_capability",
    "parse_cuda",
    "parse_driver",
]

# ASCII digits only: Python's \d also matches other scripts' digits (Arabic-Indic, Devanagari...),
# which no driver, toolkit or label ever prints. \Z, not $: "12.4\n" is not a version.
_A = re.ASCII
_DRIVER_RE = re.compile(r"^[rR]?(\d{2,4})\.(\d{1,4})(?:\.(\d{1,4}))?\Z", _A)
_CUDA_DOTTED_RE = re.compile(
    r"^(?:cuda[-_ ]?|v)?(\d{1,2})(?:\.(\d{1,2}))?(?:\.(\d{1,4}))?\Z", re.I | _A
)
_CUDA_CU_RE = re.compile(r"^cu(\d{2,4})\Z", re.I | _A)
_CUDA_CODE_RE = re.compile(r"^\d{4,6}\Z", _A)
_CC_DOTTED_RE = re.compile(r"^(\d{1,2})\.(\d)\Z", _A)
_CC_SM_RE = re.compile(r"^(?:sm|compute)_?(\d{2,3})[af]?\Z", re.I | _A)
_CC_INT_RE = re.compile(r"^(\d{2,3})\Z", _A)

# Longer input is never a version; refusing it first keeps every later step cheap (and out of
# Python's 4,300-digit limit on int()).
_MAX_TEXT = 64

_DRIVER_FORMS = "MAJOR.MINOR[.REVISION] such as 535.104.05, 570.26 or 570.124.6"
_CUDA_FORMS = "MAJOR[.MINOR[.PATCH]] (12, 12.4, 12.4.1), a wheel tag (cu124) or a code (12040)"
_CC_FORMS = "MAJOR.MINOR (8.6), an arch name (sm_86, sm_90a, compute_90) or a code (86, 120)"


@dataclass(frozen=True, order=True, slots=True)
class DriverVersion:
    """An NVIDIA kernel-driver version. ``revision`` is 0 when the version has two parts;
    ``text`` is the spelling it was parsed from (None when built from numbers)."""

    major: int
    minor: int
    revision: int = 0
    has_revision: bool = field(default=True, compare=False)
    text: str | None = field(default=None, compare=False)

    @property
    def code(self) -> int:
        return self.major * 1_000_000 + self.minor * 1_000 + self.revision

    @property
    def branch(self) -> int:
        """The driver branch number (R550 -> 550)."""
        return self.major

    @classmethod
    def from_code(cls, code: int) -> DriverVersion:
        if code < 0:
            raise VersionError("driver code", code, "a non-negative integer")
        return cls(code // 1_000_000, (code // 1_000) % 1_000, code % 1_000)

    def __str__(self) -> str:
        if self.text is not None:
            return self.text
        # NVIDIA prints minor and revision with two digits (550.90.07, 535.54.03).
        if self.has_revision:
            return f"{self.major}.{self.minor:02d}.{self.revision:02d}"
        return f"{self.major}.{self.minor:02d}"


@dataclass(frozen=True, order=True, slots=True)
class CudaVersion:
    """A CUDA version. Ordering and equality use major.minor only: drivers advertise CUDA
    support per minor release, so a patch level never changes which nodes can run a workload."""

    major: int
    minor: int = 0
    patch: int | None = field(default=None, compare=False)

    @property
    def code(self) -> int:
        return self.major * 1000 + self.minor * 10

    @property
    def release(self) -> CudaVersion:
        """The same version without its patch level (the key of NVIDIA's tables)."""
        return CudaVersion(self.major, self.minor)

    @classmethod
    def from_code(cls, code: int) -> CudaVersion:
        if code < 1000:
            raise VersionError("CUDA code", code, "1000*major + 10*minor, e.g. 12040 for 12.4")
        return cls(code // 1000, (code % 1000) // 10)

    def __str__(self) -> str:
        base = f"{self.major}.{self.minor}"
        return base if self.patch is None else f"{base}.{self.patch}"


@dataclass(frozen=True, order=True, slots=True)
class ComputeCapability:
    """A GPU compute capability (SM version)."""

    major: int
    minor: int = 0

    @property
    def code(self) -> int:
        return self.major * 10 + self.minor

    @classmethod
    def from_code(cls, code: int) -> ComputeCapability:
        if not 10 <= code <= 999:
            raise VersionError("compute capability code", code, "10*major + minor, e.g. 86")
        return cls(code // 10, code % 10)

    @property
    def sm(self) -> str:
        return f"sm_{self.code}"

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


def _version_text(kind: str, value: object, forms: str) -> str:
    """The text a version is parsed from: a string or an integer of bounded length, stripped;
    anything else is a :class:`VersionError` naming ``kind`` and the ``forms`` expected."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise VersionError(kind, value, forms)
    if isinstance(value, int) and not -(10**_MAX_TEXT) < value < 10**_MAX_TEXT:
        raise VersionError(kind, value, forms)
    text = str(value).strip()
    if not text or len(text) > _MAX_TEXT:
        raise VersionError(kind, value, forms)
    return text


def parse_driver(value: str | int | DriverVersion) -> DriverVersion:
    """Parse ``535.104.05``, ``570.26``, ``550.54.014`` (leading zeros) or ``570.124.6``."""
    if isinstance(value, DriverVersion):
        return value
    text = _version_text("driver version", value, _DRIVER_FORMS)
    m = _DRIVER_RE.match(text)
    if not m:
        raise VersionError("driver version", value, _DRIVER_FORMS)
    major, minor, rev = m.groups()
    spelled = text.lstrip("rR")
    return DriverVersion(
        int(major), int(minor), int(rev or 0), has_revision=rev is not None, text=spelled
    )


def parse_cuda(value: str | int | CudaVersion) -> CudaVersion:
    """Parse ``12``, ``12.4``, ``12.4.1``, ``cuda12.4``, ``cu124``, ``cu92`` or ``12040``."""
    if isinstance(value, CudaVersion):
        return value
    text = _version_text("CUDA version", value, _CUDA_FORMS)
    if m := _CUDA_CU_RE.match(text):
        digits = m.group(1)
        # The last digit of a wheel tag is the minor version: cu92 -> 9.2, cu124 -> 12.4.
        return CudaVersion(int(digits[:-1]), int(digits[-1]))
    if _CUDA_CODE_RE.match(text):
        return CudaVersion.from_code(int(text))
    m = _CUDA_DOTTED_RE.match(text)
    if not m or int(m.group(1)) == 0:
        raise VersionError("CUDA version", value, _CUDA_FORMS)
    major, minor, patch = m.groups()
    if patch is not None and minor is None:
        raise VersionError("CUDA version", value, _CUDA_FORMS)
    return CudaVersion(int(major), int(minor or 0), int(patch) if patch is not None else None)


def parse_compute_capability(value: str | int | ComputeCapability) -> ComputeCapability:
    """Parse ``8.6``, ``sm_86``, ``sm_90a``, ``compute_90``, ``86`` or ``120``."""
    if isinstance(value, ComputeCapability):
        return value
    text = _version_text("compute capability", value, _CC_FORMS)
    if m := _CC_DOTTED_RE.match(text):
        major, minor = int(m.group(1)), int(m.group(2))
    elif m := (_CC_SM_RE.match(text) or _CC_INT_RE.match(text)):
        code = int(m.group(1))
        major, minor = code // 10, code % 10
    else:
        raise VersionError("compute capability", value, _CC_FORMS)
    if major == 0:
        raise VersionError("compute capability", value, _CC_FORMS)
    return ComputeCapability(major, minor)
