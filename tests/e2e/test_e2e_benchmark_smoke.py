"""``python -m benchmarks.controlplane`` end to end on a tiny size, so the script cannot rot: every
series and pod shape is measured, every GPU pod created with the webhook registered was
mutated and none without it, every scheduled pod was bound, and kube-scheduler's own matching
code admits the same nodes with the injected terms as with one In on cudasched's answer. No
timing is asserted (the numbers belong in benchmarks/README.md)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.harness.binaries import Binaries, find_go

ROOT = Path(__file__).resolve().parents[2]


def test_controlplane_benchmark_quick(
    binaries: Binaries, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from benchmarks.controlplane.__main__ import main
    from benchmarks.controlplane.pods import AUTO, SAME

    out = tmp_path / "result.json"
    assert main(["--quick", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    creates = {r["series"]: r for r in data["create"]}
    assert (
        creates["gpu, webhook registered"]["mutated"] == creates["gpu, webhook registered"]["pods"]
    )
    assert creates["gpu, no admission"]["mutated"] == 0
    placed = creates["gpu already placed, no admission"]
    assert placed["mutated"] == placed["pods"]  # it carries the annotation the webhook wrote
    assert creates["cpu, webhook registered"]["mutated"] == 0
    assert all(math.isfinite(r["p99_ms"]) for r in data["create"])
    shapes = {r["shape"]: r for r in data["schedule"]}
    assert len(shapes) == 5
    assert all(r["bound"] == r["pods"] for r in data["schedule"])
    # kube-scheduler's NodeAffinity plugin filtered nodes for every pod with an affinity (each
    # call counted), and was skipped for the pods without one
    evaluated = sorted(r["affinity_nodes_per_pod"] for r in data["schedule"])
    assert evaluated[:2] == [0, 0] and evaluated[2] > 0 and evaluated[-1] <= 100, evaluated
    # kube-scheduler's own matching code (Go) admits with the injected GFD terms exactly the
    # nodes the one In on cudasched's explain answer admits (it needs Go, which CI has)
    admitted = {m["shape"]: m["matched"] for m in data["match"]}
    if find_go() is not None:
        assert admitted[AUTO] == admitted[SAME] > 0, admitted
    terms = [v for k, v in data["settings"]["extra"].items() if k.startswith("terms: ")]
    assert len(terms) == 3 and min(terms) >= 1
