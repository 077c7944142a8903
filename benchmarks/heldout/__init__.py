"""The held-out evaluation of issue 29: the offline answer (``cudasched image`` without a
registry: the image table alone) on 100 image references no test uses, each with the CUDA it
needs and its source (``images.yaml``), counted as exact, over-strict, unsafe or unknown.

* exact: the answer's CUDA (major.minor) is the image's;
* over-strict: it is newer (the pod is kept off nodes that could run it);
* unsafe: it is older (the pod may land where it cannot run), which must never happen;
* unknown: no answer (the pod is admitted without CUDA placement, warned).

The table was corrected from the first set's run (72 exact, 4 unsafe, 24 unknown), so its
count today is a regression check. ``images-2026-12.yaml`` is the second set, chosen by a rule
written before it was scored (its header) and scored once; its misses are follow-ups, not
table rows of the same change (``benchmarks/RESULTS.md`` section 13).

Run ``python -m benchmarks.heldout [--set FILE] [--json FILE]``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

__all__ = ["SECOND_SET", "SET", "Outcome", "evaluate", "load_set"]

SET = Path(__file__).with_name("images.yaml")
SECOND_SET = Path(__file__).with_name("images-2026-12.yaml")
_CUDA = re.compile(r"cuda>=(\d+)\.(\d+)")


@dataclass(frozen=True)
class Outcome:
    image: str
    family: str
    truth: str
    answer: str  # the requirement as cudasched image shows it ("cuda>=12.8", "unknown")
    verdict: str  # exact, over-strict, unsafe, unknown
    source: str  # where cudasched's answer came from, or why it has none


def load_set(path: Path = SET) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = yaml.safe_load(path.read_text())["images"]
    return rows


def _verdict(answer: str, truth: str) -> str:
    found = _CUDA.search(answer)
    if found is None:
        return "unknown"
    got = (int(found.group(1)), int(found.group(2)))
    major, minor = (int(p) for p in truth.split(".")[:2])
    if got == (major, minor):
        return "exact"
    return "over-strict" if got > (major, minor) else "unsafe"


def evaluate(rows: list[dict[str, Any]] | None = None) -> list[Outcome]:
    """Each reference answered as ``cudasched image`` answers it with no registry."""
    from cudasched.cli.image import image_rows
    from cudasched.cli.inputs import load_images, load_knowledge

    rows = rows if rows is not None else load_set()
    kb = load_knowledge()
    answered = image_rows([r["image"] for r in rows], load_images(kb), kb)
    return [
        Outcome(
            r["image"],
            r["family"],
            str(r["cuda"]),
            a["requirement"],
            _verdict(a["requirement"], str(r["cuda"])),
            a["source"],
        )
        for r, a in zip(rows, answered, strict=True)
    ]
