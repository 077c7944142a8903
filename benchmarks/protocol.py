"""The cost of the webhook's connection limits (request head size and time, connection cap:
``cudasched.webhook.server.protocol``).

Two servers run the same no-op-stack application (cudasched's server stack around the fake
admission that decodes and allows): one on cudasched's limited httptools protocol, one on
uvicorn's own. wrk saturates them in turn, alternating, several rounds, so a change in the
machine's load hits both. Two ratios per round: throughput (unlimited/limited, 1.0 = no cost), which
moves with whatever else the shared machine runs, and the server process's CPU time per answered
request (limited/unlimited, read from /proc), which moves much less: it is the one to trust.

Run ``python -m benchmarks.protocol --help``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks.admission import _UNLIMITED, _WRK_LUA, start_server, wrk_load
from benchmarks.common import cpu_seconds, loadavg, progress

__all__ = ["main"]

#: ``(limited req/s, unlimited req/s, limited CPU us/request, unlimited CPU us/request)``
Round = tuple[float, float, float, float]


def run(rounds: int, duration: float, bodies: int, connections: int) -> list[Round]:
    from tests.support import synth

    from cudasched.webhook.server.tls import generate_self_signed, write_self_signed

    out: list[Round] = []
    with tempfile.TemporaryDirectory(prefix="cudasched-bench-") as tmp:
        cert, key, ca = write_self_signed(tmp, generate_self_signed(ip_addresses=("127.0.0.1",)))
        cluster = synth.make_cluster(50, 10, 10)
        bodies_file = Path(tmp) / "bodies.jsonl"
        bodies_file.write_bytes(b"\n".join(synth.review_bodies(cluster, bodies)) + b"\n")
        lua_file = Path(tmp) / "post.lua"
        lua_file.write_text(_WRK_LUA)
        with (
            start_server("noop-stack", cert, key, ca) as limited,
            start_server(_UNLIMITED, cert, key, ca) as unlimited,
        ):
            for number in range(1, rounds + 1):
                rates: list[float] = []
                costs: list[float] = []
                for server in (limited, unlimited):
                    cpu = cpu_seconds(server.process.pid)
                    found = wrk_load(
                        server.url,
                        bodies_file,
                        lua_file,
                        connections=connections,
                        duration=duration,
                    )
                    if found is None:
                        raise SystemExit("wrk is not installed (apt-get install wrk)")
                    rates.append(found.rps)
                    costs.append((cpu_seconds(server.process.pid) - cpu) / max(found.ok, 1) * 1e6)
                progress(
                    f"round {number}: limited {rates[0]:,.0f}/s {costs[0]:.0f} us, "
                    f"unlimited {rates[1]:,.0f}/s {costs[1]:.0f} us"
                )
                out.append((rates[0], rates[1], costs[0], costs[1]))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.protocol", description=__doc__)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--duration", type=float, default=5.0, help="seconds per wrk run")
    p.add_argument("--bodies", type=int, default=200)
    p.add_argument("--connections", type=int, default=8)
    args = p.parse_args(argv)
    before = loadavg()
    results = run(args.rounds, args.duration, args.bodies, args.connections)
    print(f"load average {before} -> {loadavg()}")
    print(
        "| round | limited req/s | unlimited req/s | unlimited/limited | limited CPU us/req "
        "| unlimited CPU us/req | limited/unlimited CPU |"
    )
    print("|---|---|---|---|---|---|---|")
    rates, cpus = [], []
    for number, (lim, unl, lim_cpu, unl_cpu) in enumerate(results, start=1):
        rates.append(unl / lim)
        cpus.append(lim_cpu / unl_cpu)
        print(
            f"| {number} | {lim:,.0f} | {unl:,.0f} | {rates[-1]:.3f} | {lim_cpu:.0f} "
            f"| {unl_cpu:.0f} | {cpus[-1]:.3f} |"
        )
    print(
        f"| median | | | {statistics.median(rates):.3f} | | | **{statistics.median(cpus):.3f}** |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
