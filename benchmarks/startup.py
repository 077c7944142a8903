"""Command-line start-up: ``cudasched --help`` and a ``cudasched check`` against the import of
the CLI libraries alone.

A platform engineer runs ``cudasched check`` or ``explain`` by hand and in scripts, many times;
what it costs is mostly start-up. Measured as whole processes (what a user waits for), each
command run ``--runs`` times, the commands interleaved round by round so a busy machine slows
all of them alike, and the median compared with the baseline measured in the same run:

* **baseline**: ``python -c "import typer, rich"`` (the floor any typer + rich CLI pays);
* **help**: ``cudasched --help``;
* **check**: ``cudasched check --gpu A100 --driver 535.104.05 --cuda 12.2`` with the knowledge
  base's parsed-data cache warm (``CUDASCHED_CACHE_DIR`` set to a fresh directory that the
  first, unmeasured round fills);
* **check-cold**: the same with the cache turned off (``CUDASCHED_CACHE_DIR=off``: every run
  parses the YAML), to show what the cache saves.

Goals (issue 11): help <= 1.5x and check <= 2.5x the baseline. Run
``python -m benchmarks.startup --help``; ``--quick`` is a small smoke run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common import Table, loadavg, progress, report

__all__ = ["main", "run"]

CHECK_ARGS = ("check", "--gpu", "A100", "--driver", "535.104.05", "--cuda", "12.2")


def _commands(python: str, cache: str) -> dict[str, tuple[list[str], dict[str, str]]]:
    cli = [python, "-c", "from cudasched.cli import main; main()"]
    warm = {"CUDASCHED_CACHE_DIR": cache}
    cold = {"CUDASCHED_CACHE_DIR": "off"}
    return {
        "baseline": ([python, "-c", "import typer, rich"], warm),
        "help": ([*cli, "--help"], warm),
        "check": ([*cli, *CHECK_ARGS], warm),
        "check-cold": ([*cli, *CHECK_ARGS], cold),
    }


def _time(argv: list[str], extra_env: dict[str, str]) -> float:
    env = {**os.environ, **extra_env}
    started = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{argv!r} exited {proc.returncode}: {proc.stderr.decode()[-500:]}")
    return elapsed


def run(runs: int, python: str = sys.executable) -> dict[str, list[float]]:
    """Seconds per run for every command, rounds interleaved, after one warm-up round."""
    with tempfile.TemporaryDirectory(prefix="cudasched-startup-") as cache:
        commands = _commands(python, str(Path(cache) / "cache"))
        for argv, env in commands.values():  # warm-up: page cache, bytecode, the KB cache
            _time(argv, env)
        times: dict[str, list[float]] = {name: [] for name in commands}
        for round_no in range(runs):
            for name, (argv, env) in commands.items():
                times[name].append(_time(argv, env))
            if (round_no + 1) % 10 == 0:
                progress(f"{round_no + 1}/{runs} rounds")
    return times


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="rounds (default 30)")
    parser.add_argument("--quick", action="store_true", help="3 rounds: a smoke run")
    parser.add_argument("--json", help="also write the raw numbers to this file")
    args = parser.parse_args(argv)
    runs = 3 if args.quick else args.runs
    before = loadavg()
    progress(f"{runs} rounds of {', '.join(_commands(sys.executable, ''))}")
    times = run(runs)
    medians = {name: statistics.median(values) for name, values in times.items()}
    base = medians["baseline"]
    table = Table(["command", "median ms", "min ms", "ratio to baseline", "goal"])
    goals = {"help": "<= 1.5", "check": "<= 2.5"}
    for name, values in times.items():
        table.add(
            name,
            medians[name] * 1000,
            min(values) * 1000,
            medians[name] / base,
            goals.get(name, ""),
        )
    settings = {"runs": runs, "python": sys.version.split()[0], "load": [before, loadavg()]}
    ratios = {name: medians[name] / base for name in medians}
    report(
        "startup",
        argv,
        settings,
        table.render(),
        args.json,
        {"settings": settings, "seconds": times, "ratios": ratios},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
