"""What an image carries, read from its layers or its SBOM: each CUDA fact with where it was
found (layer digest, path) and why it says what it says, and the rule that turns the facts into
one answer.

The facts come from :mod:`cudasched.knowledge.layerfiles` (one file at a time) and
:mod:`cudasched.knowledge.sbom` (an SBOM's packages); :mod:`cudasched.knowledge.layerscan`
walks the layers. This module holds only the result and the rule, so the command line, the
webhook's resolver and a stored fact read the same thing (``docs/design.md``, "What an image
carries").

The rule (:func:`decide`): the runtimes an image loads together count by the newest (any of
them may be the one a kernel launch goes through); the runners an application chooses among
at start (sibling ``cuda_v12``/``cuda_v13`` directories, as Ollama ships them) count by the
oldest, since the application falls back to the one the node's driver runs. A fact that names
only a CUDA major (cuBLAS and the other libraries NVIDIA versions apart from the toolkit) is a
floor.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from cudasched.vocab.versions import CudaVersion

__all__ = [
    "CompatNote",
    "ContentFact",
    "ImageContents",
    "decide",
    "runner_of",
]

#: A runner directory an application picks at start: ``cuda_v12`` (Ollama's
#: ``lib/ollama/cuda_v12``), ``cuda12``/``cuda-12`` (the same layout with other spellings).
_RUNNER_RE = re.compile(r"^cuda[_-]?v?(\d{2})$")


@dataclass(frozen=True, slots=True)
class ContentFact:
    """One thing the image carries that names a CUDA: ``kind`` (``library``, ``pip``,
    ``torch``, ``conda``, ``deb``, ``rpm``), ``what`` (the file or package as found, e.g.
    ``libcudart.so.12.8.90``), the CUDA it means, ``layer`` (the layer's digest, or the SBOM
    blob's), ``path`` in the image (or the SBOM's own words for where), ``why`` (the reading
    rule), and ``floor`` when only the major is known (the CUDA is at least ``cuda``)."""

    kind: str
    what: str
    cuda: CudaVersion
    layer: str
    path: str
    why: str
    floor: bool = False

    @property
    def runner(self) -> tuple[str, str] | None:
        """``(parent, runner)`` when the fact lies in a runner directory (see
        :func:`runner_of`)."""
        return runner_of(self.path)

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "what": self.what,
            "cuda": str(self.cuda),
            "floor": self.floor,
            "layer": self.layer,
            "path": self.path,
            "why": self.why,
        }


@dataclass(frozen=True, slots=True)
class CompatNote:
    """The forward-compatibility note of the image's compat ``libcuda.so``
    (``.note.cuda.fwd_compatibility``, owner ``NVIDIA Corporation``, a JSON description; read
    as NVIDIA/nvidia-container-toolkit ``cmd/nvidia-cdi-hook/cudacompat/cuda-elf-header.go``
    reads it): the CUDA the compat library provides, the host driver branches it supports
    (``driver``), the ``device`` list as printed, the note's ``format``, and the compat
    driver's version from the library's file name (what the toolkit compares with the host
    driver). ``has_note`` is false for a compat library that carries no note (older CUDA
    releases): ``cuda`` is then its ``/usr/local/cuda-X.Y`` directory's, and the toolkit
    compares driver majors (:mod:`cudasched.compat.compatlibs`)."""

    cuda: CudaVersion | None
    driver_branches: tuple[int, ...]
    devices: tuple[int, ...]
    format: int | None
    compat_driver: str
    layer: str
    path: str
    has_note: bool = True

    def to_dict(self) -> dict[str, object]:
        return {
            "cuda": str(self.cuda) if self.cuda is not None else None,
            "driverBranches": list(self.driver_branches),
            "devices": list(self.devices),
            "format": self.format,
            "compatDriver": self.compat_driver or None,
            "layer": self.layer,
            "path": self.path,
            "note": self.has_note,
        }


@dataclass(frozen=True, slots=True)
class ImageContents:
    """What a read of an image's SBOM and layers found. ``cuda`` is the answer of
    :func:`decide` over ``facts`` (``None``: unknown, ``unknown`` says why), ``rule`` how it
    was picked, ``lower_bound`` when it is only a floor; ``compat`` the compat library's note;
    ``notes`` what was seen but not read (an rpm database in a format not read, a file over
    its cap); ``stopped`` why the read ended before the answer (a budget, a corrupt layer),
    empty when it ended on the answer or after the last layer. ``layers_read`` counts the
    layers read to their end, of ``layers_total``; ``bytes_read`` the compressed bytes."""

    image: str
    digest: str = ""
    facts: tuple[ContentFact, ...] = ()
    compat: CompatNote | None = None
    cuda: CudaVersion | None = None
    lower_bound: bool = False
    rule: str = ""
    unknown: str = ""
    notes: tuple[str, ...] = ()
    stopped: str = ""
    sbom: bool = False
    layers_read: int = 0
    layers_total: int = 0
    bytes_read: int = 0

    @property
    def known(self) -> bool:
        return self.cuda is not None

    def size(self) -> int:
        """Roughly the bytes it holds (caches bound themselves with it)."""
        facts = sum(200 + len(f.what) + len(f.path) + len(f.why) for f in self.facts)
        notes = sum(len(n) for n in self.notes)
        return 300 + facts + notes + len(self.rule) + len(self.unknown) + len(self.stopped)

    def describe(self) -> str:
        """One line: the answer and what decided it, or why there is none."""
        if self.cuda is None:
            return f"unknown: {self.unknown}"
        bound = " (at least)" if self.lower_bound else ""
        return f"CUDA {self.cuda}{bound}: {self.rule}"

    def to_dict(self) -> dict[str, object]:
        return {
            "image": self.image,
            "digest": self.digest or None,
            "cuda": str(self.cuda) if self.cuda is not None else None,
            "lowerBound": self.lower_bound,
            "rule": self.rule or None,
            "unknown": self.unknown or None,
            "facts": [f.to_dict() for f in self.facts],
            "compat": self.compat.to_dict() if self.compat is not None else None,
            "notes": list(self.notes),
            "stopped": self.stopped or None,
            "sbom": self.sbom,
            "layersRead": self.layers_read,
            "layersTotal": self.layers_total,
            "bytesRead": self.bytes_read,
        }


def runner_of(path: str) -> tuple[str, str] | None:
    """``(parent directory, runner directory)`` when ``path`` lies under a directory named
    like a CUDA runner (``.../lib/ollama/cuda_v12/libcudart.so.12.8.90`` is
    ``("usr/lib/ollama", "cuda_v12")``), else ``None``."""
    parts = path.strip("/").split("/")
    for i in range(len(parts) - 2, -1, -1):
        if _RUNNER_RE.match(parts[i]):
            return "/".join(parts[:i]), parts[i]
    return None


def _newest(facts: Iterable[ContentFact]) -> ContentFact:
    """The fact with the newest CUDA; an exact one before a floor of the same release."""
    return max(facts, key=lambda f: (f.cuda, not f.floor))


def decide(facts: Iterable[ContentFact]) -> tuple[CudaVersion | None, bool, str]:
    """The CUDA an image's runtimes need, whether it is only a floor, and the rule in words
    (see the module's docstring). ``(None, False, "")`` without facts."""
    listed = list(facts)
    if not listed:
        return None, False, ""
    together: list[ContentFact] = []
    runners: dict[str, dict[str, list[ContentFact]]] = {}
    for fact in listed:
        found = fact.runner
        if found is None:
            together.append(fact)
        else:
            runners.setdefault(found[0], {}).setdefault(found[1], []).append(fact)
    counted: list[tuple[ContentFact, str]] = []
    if together:
        top = _newest(together)
        counted.append((top, f"newest runtime loaded together: {_where(top)}"))
    for parent, sets in sorted(runners.items()):
        if len(sets) == 1:
            ((name, only),) = sets.items()
            top = _newest(only)
            counted.append((top, f"the only runner {name} under /{parent}: {_where(top)}"))
            continue
        # Each runner needs its newest library; the application starts the oldest runner
        # the driver runs, so the set needs only the oldest runner's CUDA.
        per_runner = [(_newest(fs), name) for name, fs in sorted(sets.items())]
        low, low_name = min(per_runner, key=lambda pair: (pair[0].cuda, pair[0].floor))
        names = ", ".join(sorted(sets))
        counted.append(
            (
                low,
                f"runners {names} under /{parent} are alternatives the application picks "
                f"from; the oldest counts ({low_name}: {_where(low)})",
            )
        )
    chosen, why = max(counted, key=lambda pair: (pair[0].cuda, not pair[0].floor))
    others = [w for f, w in counted if f is not chosen]
    rule = why if not others else f"{why}; also {'; '.join(others)}"
    return chosen.cuda.release, chosen.floor, rule


def _where(fact: ContentFact) -> str:
    layer = fact.layer[:19] if fact.layer.startswith("sha256:") else fact.layer
    return f"{fact.what} at /{fact.path.strip('/')} ({layer})"
