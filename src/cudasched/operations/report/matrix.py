"""The compatibility matrix: every serving runtime against every GPU node pool.

Each cell is the compatibility engine's verdict for the runtime's requirement (what an
InferenceService that only names the runtime would need, see
:func:`cudasched.workloads.sources.resolve_runtime`) on the pool's GPU facts, under the
runtime's own
policy when it names one and the report's otherwise. A pool whose nodes carry different facts
(labels that differ beyond product, driver and OS) gets one verdict per set of facts; when they
disagree the cell is ``mixed``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from cudasched.compat.engine import check, resolve_policy
from cudasched.compat.verdict import Verdict, VerdictStatus

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.operations.pools import Pool
    from cudasched.operations.runtimes import RuntimeRow
    from cudasched.vocab.requirements import Policy

__all__ = ["Cell", "CellStatus", "Matrix", "compatibility_matrix"]


class CellStatus(StrEnum):
    COMPATIBLE = "compatible"
    CAVEATS = "compatible-with-caveats"
    INCOMPATIBLE = "incompatible"
    MIXED = "mixed"  # the pool's nodes disagree
    NO_REQUIREMENT = "no-requirement"  # not a GPU runtime: the webhook leaves it alone
    UNKNOWN = "unknown"  # a GPU runtime whose CUDA no source names: unprotected
    NOT_NVIDIA = "not-nvidia"  # a runtime for another accelerator
    UNREADABLE = "unreadable"  # the runtime's CUDA keys do not parse


@dataclass(frozen=True, slots=True)
class Cell:
    """One verdict: its reason codes (distinct, in the engine's order) and the engine's words."""

    status: CellStatus
    codes: tuple[str, ...] = ()
    detail: str = ""

    @property
    def headline(self) -> str:
        """The one word a cell shows: the mode that makes it work, or the first thing that
        blocks it."""
        if self.codes and self.status in (
            CellStatus.COMPATIBLE,
            CellStatus.CAVEATS,
            CellStatus.INCOMPATIBLE,
        ):
            return self.codes[0]
        return {
            CellStatus.MIXED: "mixed",
            CellStatus.NO_REQUIREMENT: "no requirement",
            CellStatus.UNKNOWN: "CUDA unknown",
            CellStatus.NOT_NVIDIA: "not NVIDIA",
            CellStatus.UNREADABLE: "unreadable",
        }.get(self.status, self.status.value)


@dataclass(frozen=True, slots=True)
class Matrix:
    """Rows are runtimes, columns pools; ``cells[row][column]``."""

    policy: Policy
    rows: tuple[RuntimeRow, ...]
    pools: tuple[Pool, ...]
    cells: tuple[tuple[Cell, ...], ...]

    def to_dict(self) -> dict[str, object]:
        return {
            "policy": self.policy.value,
            "pools": [p.name for p in self.pools],
            "runtimes": [
                {
                    "runtime": row.ref,
                    "cells": {
                        p.name: {"status": c.status.value, "codes": list(c.codes)}
                        for p, c in zip(self.pools, cells, strict=True)
                    },
                }
                for row, cells in zip(self.rows, self.cells, strict=True)
            ],
        }


_STATUS = {
    VerdictStatus.COMPATIBLE: CellStatus.COMPATIBLE,
    VerdictStatus.COMPATIBLE_WITH_CAVEATS: CellStatus.CAVEATS,
    VerdictStatus.INCOMPATIBLE: CellStatus.INCOMPATIBLE,
}


def _cell(verdicts: list[tuple[str, Verdict]]) -> Cell:
    statuses = {v.status for _, v in verdicts}
    codes = tuple(dict.fromkeys(code for _, v in verdicts for code in v.codes))
    if len(statuses) > 1:
        detail = "\n".join(
            f"{node}: {v.status.value}: " + "; ".join(r.code for r in v.reasons)
            for node, v in verdicts
        )
        return Cell(CellStatus.MIXED, codes, detail)
    verdict = verdicts[0][1]
    detail = "\n".join(
        dict.fromkeys(f"{r.code}: {r.message}" for _, v in verdicts for r in v.reasons)
    )
    return Cell(_STATUS[verdict.status], codes, detail)


def _row_cells(
    row: RuntimeRow, pools: tuple[Pool, ...], policy: Policy, kb: KnowledgeBase
) -> tuple[Cell, ...]:
    req = row.requirement
    if req is None:
        cell = Cell(CellStatus.UNREADABLE, detail=row.error or "")
        return tuple(cell for _ in pools)
    if row.unknown is not None:
        detail = "\n".join(row.unknown.warnings())
        return tuple(Cell(CellStatus.UNKNOWN, detail=detail) for _ in pools)
    if req.is_empty:
        status = CellStatus.NOT_NVIDIA if row.not_nvidia else CellStatus.NO_REQUIREMENT
        detail = (
            req.source
            or "the runtime names no CUDA version and its image is not in the image table"
        )
        return tuple(Cell(status, detail=detail) for _ in pools)
    pol = resolve_policy(req, policy)
    return tuple(_cell([(f.name, check(f, req, pol, kb)) for f in pool.facts]) for pool in pools)


def compatibility_matrix(
    rows: tuple[RuntimeRow, ...], pools: tuple[Pool, ...], policy: Policy, kb: KnowledgeBase
) -> Matrix:
    """Every runtime of ``rows`` judged on every pool of ``pools``."""
    return Matrix(policy, rows, pools, tuple(_row_cells(r, pools, policy, kb) for r in rows))
