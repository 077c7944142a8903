"""``python -m benchmarks.controlplane``: both parts of the benchmark (see the package's
docstring) against real control planes started for the run, the tables printed and, with
``--json``, the raw numbers written."""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.harness.controlplane.options import Options
from tests.harness.controlplane.plane import ControlPlane

from benchmarks import controlplane as package
from benchmarks.common import comma_list, loadavg, progress, report
from benchmarks.controlplane.affinities import compared
from benchmarks.controlplane.create import CreateResult, measure_create
from benchmarks.controlplane.match import MatchResult, measure_match
from benchmarks.controlplane.pods import JSON
from benchmarks.controlplane.report import render
from benchmarks.controlplane.schedule import ScheduleResult, measure_schedule

__all__ = ["Settings", "main"]


@dataclass
class Settings:
    pods: int
    rounds: int
    scheduled: int
    nodes: tuple[int, ...]
    loadavg_before: str = ""
    loadavg_after: str = ""
    kubernetes: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Scheduled:
    """What the scheduler part measured over every fleet size, and the affinities it used."""

    schedules: list[ScheduleResult] = field(default_factory=list)
    matches: list[MatchResult] = field(default_factory=list)
    #: shape -> the affinity's required node selector, as written into the pods
    injected: dict[str, JSON] = field(default_factory=dict)


def _measure_create(work: Path, settings: Settings, minor: str | None) -> list[CreateResult]:
    plane = ControlPlane(
        work / "create",
        Options(nodes=63, scheduler=False, keep_nodes_ready=False, kubernetes=minor),
        progress=progress,
    )
    with plane:
        settings.kubernetes = plane.binaries.kubernetes if plane.binaries else ""
        return measure_create(plane, work, settings.pods, settings.rounds)


def _measure_schedule(work: Path, settings: Settings, into: Scheduled) -> None:
    for size in settings.nodes:
        plane = ControlPlane(
            work / f"schedule-{size}",
            Options(nodes=size, keep_nodes_ready=False),
            progress=progress,
        )
        with plane:
            settings.kubernetes = plane.binaries.kubernetes if plane.binaries else ""
            affinities = compared(plane, work)
            for shape, affinity in affinities.items():
                required = affinity["nodeAffinity"][
                    "requiredDuringSchedulingIgnoredDuringExecution"
                ]
                terms = required["nodeSelectorTerms"]
                settings.extra[f"terms: {shape}"] = len(terms)
                settings.extra[f"expressions: {shape}"] = sum(
                    len(t.get("matchExpressions", [])) for t in terms
                )
                into.injected[shape] = required
            into.schedules += measure_schedule(plane, size, settings.scheduled, affinities)
            into.matches += measure_match(plane, work, affinities)


def main(argv: Sequence[str] | None = None) -> int:
    what = (package.__doc__ or "").split("\n\nThe modules:")[0]  # the modules are no help
    parser = argparse.ArgumentParser(prog="python -m benchmarks.controlplane", description=what)
    parser.add_argument("--pods", type=int, default=1000, help="pods per create series")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds of creates")
    parser.add_argument("--scheduled", type=int, default=1000, help="pods per scheduler run")
    parser.add_argument("--nodes", default=None, help="fleet sizes, e.g. 1000,5000")
    parser.add_argument("--only", choices=("create", "schedule"), default=None)
    parser.add_argument(
        "--kubernetes",
        metavar="MINOR",
        default=None,
        help="the Kubernetes minor the create part runs on (1.37 measures the policy mode "
        "too; default: the harness's, 1.35, without it)",
    )
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    parser.add_argument("--json", default=None, help="also write the raw numbers here")
    args = parser.parse_args(argv)
    if args.quick:
        args.pods, args.rounds, args.scheduled = 60, 2, 60
    sizes = comma_list(args.nodes, int, (100,) if args.quick else (1000, 5000))
    settings = Settings(args.pods, args.rounds, args.scheduled, sizes, loadavg_before=loadavg())
    creates: list[CreateResult] = []
    scheduled = Scheduled()
    with tempfile.TemporaryDirectory(prefix="cudasched-bench-cp-") as tmp:
        work = Path(tmp)
        if args.only in (None, "create"):
            creates = _measure_create(work, settings, args.kubernetes)
        if args.only in (None, "schedule"):
            _measure_schedule(work, settings, scheduled)
    settings.loadavg_after = loadavg()
    report(
        "controlplane",
        argv,
        asdict(settings),
        render(creates, scheduled.schedules, scheduled.matches, sizes),
        args.json,
        {
            "settings": asdict(settings),
            "create": [asdict(r) for r in creates],
            "schedule": [asdict(r) for r in scheduled.schedules],
            "match": [asdict(r) for r in scheduled.matches],
            "affinities": scheduled.injected,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
