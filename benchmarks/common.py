"""Helpers shared by the benchmark scripts: CPU pinning, percentiles, progress, tables."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "Table",
    "comma_list",
    "loadavg",
    "percentile",
    "pin",
    "progress",
    "report",
    "rss_kib",
    "scaling_exponent",
]

_START = time.monotonic()
_T = TypeVar("_T")


def progress(message: str) -> None:
    """One plain progress line on stderr (keeps stdout for the final table), with the
    seconds since the script started: long runs show they are alive."""
    print(f"[{time.monotonic() - _START:7.1f}s] {message}", file=sys.stderr, flush=True)


def pin(cpu: int | None) -> str:
    """Pin this process to one CPU when the machine has it; returns what was done, for the
    report. Benchmarks that share a 2-core machine between a server and a load generator
    must not let them compete for the same core."""
    if cpu is None or not hasattr(os, "sched_setaffinity"):
        return "not pinned"
    available = os.sched_getaffinity(0)
    if cpu not in available:
        return f"not pinned (cpu {cpu} not available: {sorted(available)})"
    os.sched_setaffinity(0, {cpu})
    return f"pinned to cpu {cpu}"


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by the nearest-rank method; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q * len(ordered) + 0.5) - 1))
    return ordered[rank]


def loadavg() -> str:
    """The 1/5/15-minute load averages: numbers from a busy machine are not comparable with
    numbers from an idle one, so every report carries them."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, all its threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> int:
    """Resident set size of a live process, from ``/proc/<pid>/status`` (``VmRSS``)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS line in /proc/{pid}/status")


@dataclass(slots=True)
class Table:
    """A plain-text table for the final report (also valid Markdown)."""

    headers: Sequence[str]
    rows: list[list[str]] = field(default_factory=list)

    def add(self, *cells: object) -> None:
        self.rows.append([_cell(c) for c in cells])

    def render(self) -> str:
        widths = [
            max(len(str(h)), *(len(r[i]) for r in self.rows)) if self.rows else len(str(h))
            for i, h in enumerate(self.headers)
        ]
        lines = [
            "| " + " | ".join(str(h).ljust(w) for h, w in zip(self.headers, widths, strict=True)),
            "|" + "|".join("-" * (w + 2) for w in widths),
        ]
        lines[0] += " |"
        lines[1] += "|"
        for row in self.rows:
            lines.append(
                "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
            )
        return "\n".join(lines)


def _cell(value: object) -> str:
    if isinstance(value, float):
        if value != value:  # NaN
            return "-"
        return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def report(
    module: str,
    argv: Sequence[str] | None,
    settings: Mapping[str, Any],
    table: str,
    json_path: str | None,
    data: Mapping[str, Any],
) -> None:
    """Print what every script ends with (the command, the settings, the result table) and,
    when asked, write ``data`` (which should include the settings) as JSON."""
    shown = " ".join(sys.argv[1:] if argv is None else argv)
    print(f"command: python -m benchmarks.{module} {shown}".rstrip())
    print("settings: " + json.dumps(settings))
    print(table)
    if json_path:
        Path(json_path).write_text(json.dumps(data, indent=2))


def comma_list(
    text: str | None, convert: Callable[[str], _T], default: Sequence[_T]
) -> tuple[_T, ...]:
    """A ``--sizes 500,5000``-style option as a tuple (``default`` when not given)."""
    if not text:
        return tuple(default)
    return tuple(convert(part) for part in text.split(",") if part)


def scaling_exponent(ratio: float, growth: float) -> float | None:
    """``log(ratio) / log(growth)``: how cost grew with size (1 = linear), or ``None`` when it
    cannot be told (no growth, or a ratio that is not a positive number)."""
    if not (ratio > 0 and growth > 1):
        return None
    return math.log(ratio) / math.log(growth)
