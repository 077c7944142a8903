"""Audit findings about the driver branches a cluster's pools run: a branch past its end of
life, a legacy branch NVIDIA no longer maintains (R470, Kepler's last), and a branch that ends
within a number of months.

One finding per pool (:func:`cudasched.operations.pools.node_pools`, the pools ``report`` and
``plan-drivers`` name the same way), judged by the knowledge base's lifecycle table
(:func:`cudasched.compat.branches.lifecycle`) on the audit's date. The fix names what is possible
for the pool's GPU: a newer branch when its architecture has one, else that the GPU ends on this
branch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import date
from typing import TYPE_CHECKING

from cudasched.compat.branches import LEGACY_BRANCHES, LifecycleState, lifecycle, months_left
from cudasched.operations.audit.findings import (
    DRIVER_BRANCH_ENDED,
    DRIVER_BRANCH_ENDING,
    DRIVER_BRANCH_LEGACY,
    Finding,
)

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.operations.pools import Pool

__all__ = ["lifecycle_findings"]


def _subject(pool: Pool) -> tuple[str, str]:
    shown = ", ".join(pool.nodes[:3]) + (
        f" and {len(pool.nodes) - 3} more" if len(pool.nodes) > 3 else ""
    )
    return f"Pool/{pool.name}", f"{len(pool.nodes)} node(s): {shown}"


def _fix(pool: Pool) -> str:
    arch = pool.target.arch if pool.target is not None else None
    current = pool.driver
    if arch is not None and current is not None and arch.last_driver_branch == current.branch:
        return (
            f"{arch.name} GPUs end at R{current.branch}: no newer branch can drive them; replace "
            "the GPUs, or keep the pool isolated and accept that it gets no fixes"
        )
    return f"move the pool to a supported branch: cudasched plan-drivers (pool {pool.name})"


def lifecycle_findings(
    pools: Iterable[Pool], kb: KnowledgeBase, today: date, min_support_months: int = 12
) -> Iterator[Finding]:
    """The lifecycle findings of ``pools`` on ``today`` (module docstring)."""
    for pool in pools:
        if pool.driver is None:
            continue
        branch = pool.driver.branch
        lc = lifecycle(kb, branch, today)
        obj, nodes = _subject(pool)
        first = pool.nodes[0] if pool.nodes else None
        if lc.state is LifecycleState.END_OF_LIFE:
            yield Finding(
                DRIVER_BRANCH_ENDED,
                obj,
                f"pool {pool.name} ({nodes}) runs driver {pool.driver}: R{branch} is "
                f"{lc.describe()}, it gets no security or bug fixes",
                node=first,
                nodes=tuple(pool.nodes),
                fix=_fix(pool),
            )
        elif lc.state is LifecycleState.UNKNOWN and branch in LEGACY_BRANCHES:
            yield Finding(
                DRIVER_BRANCH_LEGACY,
                obj,
                f"pool {pool.name} ({nodes}) runs driver {pool.driver}: R{branch} is a legacy "
                "branch NVIDIA no longer maintains",
                node=first,
                nodes=tuple(pool.nodes),
                fix=_fix(pool),
            )
        else:
            left = months_left(lc.eol, today)
            if (
                lc.state is LifecycleState.SUPPORTED
                and left is not None
                and left < min_support_months
            ):
                yield Finding(
                    DRIVER_BRANCH_ENDING,
                    obj,
                    f"pool {pool.name} ({nodes}) runs driver {pool.driver}: R{branch} "
                    f"({lc.describe()}) ends within {min_support_months} months",
                    node=first,
                    nodes=tuple(pool.nodes),
                    fix=f"plan the move to a branch supported longer: cudasched plan-drivers "
                    f"--min-support-months {min_support_months}",
                )
