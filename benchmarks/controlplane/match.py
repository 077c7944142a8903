"""kube-scheduler's own node-affinity code timed in Go on one thread (``tests/e2e/affinitymatch``,
built from the control plane's pinned module): for each affinity, a Filter call's match on one
node, a PreFilter's parse per pod, and how many of the fleet's nodes it admits. Skipped where Go
is absent (the control plane's binaries may be cached without it)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.harness.binaries import BuildError, build_package
from tests.harness.controlplane.plane import ControlPlane

from benchmarks.common import progress
from benchmarks.controlplane.pods import JSON

__all__ = ["MatchResult", "measure_match"]


@dataclass
class MatchResult:
    """kube-scheduler's own node-affinity code on one affinity, timed in Go on one thread
    (``tests/e2e/affinitymatch``): a Filter call's match on one node, a PreFilter's
    parse per pod, and how many of the fleet's nodes it admits."""

    nodes: int
    shape: str
    ns_per_node: float
    us_per_pod: float
    matched: int


def measure_match(
    plane: ControlPlane, work: Path, affinities: dict[str, JSON]
) -> list[MatchResult]:
    """Time NodeAffinity's matching of each affinity over every node of the fleet; nothing
    when Go is absent (the control plane's binaries may be cached without it)."""
    try:
        binary = build_package("./affinitymatch", work / "affinitymatch", progress=progress)
    except BuildError as exc:
        progress(f"match: skipped ({exc})")
        return []
    nodes = list(plane.api().list("/api/v1/nodes"))
    done = subprocess.run(
        [str(binary)],
        input=json.dumps({"nodes": nodes, "affinities": affinities}),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"affinitymatch exited {done.returncode}: {done.stderr.strip()}")
    found = json.loads(done.stdout)
    return [
        MatchResult(
            len(nodes),
            shape,
            found[shape]["nsPerNode"],
            found[shape]["nsPerPod"] / 1000,
            found[shape]["matched"],
        )
        for shape in affinities
    ]
