"""``python -m benchmarks.heldout``: the counts, then one row per image that is not exact."""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from benchmarks.common import Table, report
from benchmarks.heldout import SET, evaluate, load_set

VERDICTS = ("exact", "over-strict", "unsafe", "unknown")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the held-out evaluation of issue 29")
    parser.add_argument("--set", default=str(SET), help="the set to score (default: the first set)")
    parser.add_argument("--json", help="also write every outcome as JSON")
    args = parser.parse_args(argv)
    outcomes = evaluate(load_set(Path(args.set)))
    counts = Counter(o.verdict for o in outcomes)
    families = sorted({o.family for o in outcomes})
    table = Table(["family", *VERDICTS])
    for family in families:
        mine = Counter(o.verdict for o in outcomes if o.family == family)
        table.add(family, *(mine[v] for v in VERDICTS))
    table.add("all", *(counts[v] for v in VERDICTS))
    misses = Table(["image", "needs", "answer", "verdict"])
    for o in outcomes:
        if o.verdict != "exact":
            misses.add(o.image, o.truth, o.answer, o.verdict)
    text = table.render() + ("\n\n" + misses.render() if misses.rows else "")
    data = {"counts": dict(counts), "outcomes": [asdict(o) for o in outcomes]}
    report("heldout", argv, {"set": args.set, "images": len(outcomes)}, text, args.json, data)
    return 1 if counts["unsafe"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
