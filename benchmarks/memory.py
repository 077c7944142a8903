"""Resident memory of a real webhook server process, with and without a cluster cached.

The server is the one :mod:`benchmarks.admission` starts (uvicorn + TLS + the production ASGI
app and Admitter), holding what the watch cache would hold for the cluster: the listed objects
(Nodes trimmed the way ``cudasched.webhook.background.watchcache`` trims them, runtimes and
InferenceServices whole) and the :class:`~cudasched.webhook.state.clusterstate.ClusterState` built
from them. After it answers a burst of admission requests (so lazily built tables and the review
threads exist, and the decision memo holds an answer for every distinct pod: by default every
predictor pod is sent twice), ``VmRSS`` and ``VmHWM`` (peak) are read from ``/proc/<pid>/status``.
The baseline is the same server with an empty cache; the difference is what the cluster costs.

Run ``python -m benchmarks.memory --help``; ``--quick`` is a small smoke run.
"""

from __future__ import annotations

import argparse
import ssl
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.admission import HOST, start_server, write_cluster
from benchmarks.common import Table, loadavg, progress, report

__all__ = ["MemoryResult", "main", "run"]


@dataclass(slots=True)
class Sample:
    label: str
    nodes: int
    runtimes: int
    isvcs: int
    rss_mib: float
    hwm_mib: float
    answered: int


@dataclass(slots=True)
class MemoryResult:
    settings: dict[str, Any]
    samples: list[Sample] = field(default_factory=list)
    ratios: dict[str, float] = field(default_factory=dict)

    def table(self) -> str:
        t = Table(["server", "nodes", "runtimes", "isvcs", "VmRSS MiB", "VmHWM MiB", "answered"])
        for s in self.samples:
            t.add(s.label, s.nodes, s.runtimes, s.isvcs, s.rss_mib, s.hwm_mib, s.answered)
        r = Table(["ratio", "value"])
        for name, value in self.ratios.items():
            r.add(name, value)
        return t.render() + "\n\n" + r.render()


def _status_mib(pid: int) -> tuple[float, float]:
    values: dict[str, float] = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"]


def _post_all(port: int, ca: Path, bodies: Sequence[bytes]) -> int:
    """Send the reviews over one keep-alive HTTPS connection; returns how many got a 200."""
    import httpx

    context = ssl.create_default_context(cafile=str(ca))
    ok = 0
    with httpx.Client(base_url=f"https://{HOST}:{port}", verify=context, timeout=10) as client:
        for body in bodies:
            response = client.post(
                "/mutate/pods", content=body, headers={"Content-Type": "application/json"}
            )
            ok += response.status_code == 200
    return ok


def run(
    *, nodes: int = 5000, runtimes: int = 200, isvcs: int = 1000, requests: int = 2000
) -> MemoryResult:
    from tests.support import synth

    from cudasched.webhook.server.tls import generate_self_signed, write_self_signed

    result = MemoryResult(
        {
            "nodes": nodes,
            "runtimes": runtimes,
            "isvcs": isvcs,
            "requests": requests,
            "loadavg_before": loadavg(),
        }
    )
    cluster = synth.make_cluster(nodes, runtimes, max(isvcs, 1))
    bodies = synth.review_bodies(cluster, requests)
    with tempfile.TemporaryDirectory(prefix="cudasched-bench-") as tmp:
        cluster_file = Path(tmp) / "cluster.json"
        write_cluster(cluster, cluster_file)
        del cluster
        cert, key, ca = write_self_signed(tmp, generate_self_signed(ip_addresses=(HOST,)))
        for label, n, r, i, path in (
            ("empty cache", 0, 0, 0, None),
            ("cluster cached", nodes, runtimes, isvcs, cluster_file),
        ):
            progress(f"memory: starting the server with {label} ({n} nodes, {r} runtimes)")
            with start_server("mutation", cert, key, ca, cluster_file=path, cpu=None) as server:
                answered = _post_all(server.port, ca, bodies)
                rss, hwm = _status_mib(server.process.pid)
            result.samples.append(Sample(label, n, r, i, rss, hwm, answered))
    empty, full = result.samples
    result.ratios["RSS cached/empty"] = full.rss_mib / empty.rss_mib
    result.ratios["RSS added by the cluster (MiB)"] = full.rss_mib - empty.rss_mib
    if nodes:
        result.ratios["KiB per node (all added memory / nodes)"] = (
            (full.rss_mib - empty.rss_mib) * 1024 / nodes
        )
    result.settings["loadavg_after"] = loadavg()
    return result


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.memory",
        description="Resident memory of the webhook server with a cluster cached vs empty.",
    )
    p.add_argument("--quick", action="store_true", help="small, fast smoke run")
    p.add_argument("--nodes", type=int, default=None)
    p.add_argument("--runtimes", type=int, default=None)
    p.add_argument("--isvcs", type=int, default=None)
    p.add_argument("--requests", type=int, default=None)
    p.add_argument("--json", default=None, help="also write the results to this file")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    quick = args.quick
    result = run(
        nodes=args.nodes if args.nodes is not None else (500 if quick else 5000),
        runtimes=args.runtimes if args.runtimes is not None else (40 if quick else 200),
        isvcs=args.isvcs if args.isvcs is not None else (200 if quick else 1000),
        requests=args.requests if args.requests is not None else (50 if quick else 2000),
    )
    report(
        "memory",
        argv,
        result.settings,
        result.table(),
        args.json,
        {
            "settings": result.settings,
            "samples": [asdict(s) for s in result.samples],
            "ratios": result.ratios,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
