"""Why a driver plan decides what it decides, in words: each pool's reasons (:func:`pool_why`),
what a driver installed another way than the GPU Operator's containers would give
(:func:`blocked_by_os`), and why a workload has no home after the plan (:func:`unservable`).
Pure: options, verdicts and the knowledge base in, sentences out."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import TYPE_CHECKING

from cudasched.compat.branches import (
    LifecycleState,
    kernel_breakages,
    module_reason,
    release_text,
    running,
)
from cudasched.compat.containers import (
    container_oses,
    precompiled_problem,
)
from cudasched.compat.engine import check
from cudasched.operations.drivers.demand import Demand, DemandGroup
from cudasched.operations.drivers.plan import (
    workload_refs,
)
from cudasched.operations.drivers.planoptions import (
    Judge,
    Option,
    PoolChoice,
    long_term,
    unblocked,
)
from cudasched.operations.pools import Pool
from cudasched.operations.reach import blocking

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.knowledge.operator import OperatorVersion
    from cudasched.vocab.versions import CudaVersion

__all__ = ["blocked_by_os", "pool_why", "short_lived_why", "unservable"]


def pool_why(
    choice: PoolChoice,
    demand: Demand,
    kb: KnowledgeBase,
    precompiled: bool,
    target_cuda: CudaVersion | None,
) -> list[str]:
    """Why the plan takes what it takes for one pool, in the order a reader asks: the choice,
    the repair's pins, the GPU and the target CUDA, how the driver is built and installed, the
    branches left out."""
    pool, chosen = choice.pool, choice.chosen
    target = pool.target
    if target is None:
        return [
            "not planned: the nodes report no GPU product or compute capability cudasched "
            "knows; run GPU Feature Discovery or `cudasched agent` on them and plan again"
        ]
    if chosen is None:
        left_out = choice.offer.left_out
        return [
            "no branch can be installed here: " + "; ".join(f"R{b}: {w}" for b, w in left_out[:3])
        ]
    why = _kept_why(choice, chosen, demand) if chosen.keep else _taken_why(choice, chosen, demand)
    short = short_lived_why(choice, chosen, demand)
    if short is not None:
        why.append(short)
    why.extend(choice.pinned)
    cap = target.arch.last_driver_branch
    if cap is not None:
        why.append(f"{target.arch.name} GPUs end at R{cap}")
    if target_cuda is not None:
        if chosen.reaches_target:
            why.append(f"reaches CUDA {target_cuda} natively (--target-cuda)")
        else:
            why.append(f"cannot reach CUDA {target_cuda} natively on any branch it can take")
    if not chosen.keep:
        assert chosen.module is not None
        why.append(module_reason(kb, target, chosen.module))
    if pool.current is not None and chosen.keep:
        current_lc = chosen.lifecycle
        if current_lc.state is LifecycleState.END_OF_LIFE:
            why.append(
                f"R{chosen.branch} is {current_lc.describe()}: no supported branch "
                "serves more workloads here"
            )
    if chosen.forward_compat:
        refs = workload_refs(chosen.forward_compat, demand)
        why.append(
            "runs "
            + ", ".join(refs[:3])
            + (f" and {len(refs) - 3} more" if len(refs) > 3 else "")
            + " only through forward compatibility (cuda-compat in the image)"
        )
    why.extend(_build_why(pool, chosen, kb, precompiled))
    left_note = _left_out_why(choice.offer.left_out, chosen.branch)
    if left_note is not None:
        why.append(left_note)
    return why


def _kept_why(choice: PoolChoice, chosen: Option, demand: Demand) -> list[str]:
    """Why the pool keeps its driver."""
    pool, options = choice.pool, choice.offer.options
    assert pool.target is not None
    if not options:
        return [
            f"keeps driver {pool.current}: no other supported branch can be installed on "
            f"{pool.target.name} here"
        ]
    if any(o.weight > chosen.weight for o in options):
        return [f"keeps driver {pool.current}"]
    return [
        f"keeps driver {pool.current}: it serves {chosen.weight} of {demand.workloads} "
        "workloads and no branch serves more"
    ]


def _taken_why(choice: PoolChoice, chosen: Option, demand: Demand) -> list[str]:
    """Why the pool takes a branch: what it serves against the driver it has, its lifecycle."""
    pool, keep, options = choice.pool, choice.offer.keep, choice.offer.options
    here = f"R{chosen.branch}"
    before = keep.weight if keep is not None else 0
    what = f"driver {pool.current}" if pool.current else "no driver"
    why = [
        f"{here} ({release_text(chosen.release)}) serves {chosen.weight} of {demand.workloads} "
        f"workloads; {what} serves {before}"
    ]
    lc = chosen.lifecycle
    peers = [o for o in options if o.weight == chosen.weight and o is not chosen]
    if lc.long_term and any(not o.lifecycle.long_term for o in peers):
        why.append(
            f"{here} is a long-term support branch ({lc.describe()}), preferred over "
            + ", ".join(f"R{o.branch}" for o in peers if not o.lifecycle.long_term)
        )
    else:
        why.append(f"{here}: {lc.describe()}")
    return why


def short_lived_why(choice: PoolChoice, chosen: Option, demand: Demand) -> str | None:
    """Why a pool takes (or keeps) a branch that is not a supported long-term one when one
    is on offer: the workloads only it runs, or that it serves the same; and how
    ``--prefer-lts`` would choose."""
    if long_term(chosen):
        return None
    lts = [o for o in choice.offer.every if long_term(o) and o is not chosen]
    if not lts:
        return None
    best = max(lts, key=lambda o: (o.weight, o.branch))
    here = f"R{chosen.branch} ({chosen.lifecycle.describe()})"
    if best.weight >= chosen.weight:
        return (
            f"{here} is not a long-term branch and R{best.branch} ({best.lifecycle.describe()}) "
            "serves as many workloads: --prefer-lts takes it"
        )
    refs = workload_refs(chosen.serves - best.serves, demand)
    shown = ", ".join(refs[:3]) + (f" and {len(refs) - 3} more" if len(refs) > 3 else "")
    return (
        f"{here} is short-lived: {shown} need it (the long-term R{best.branch} serves "
        f"{best.weight} of {demand.workloads}); --prefer-lts takes R{best.branch}"
    )


def _build_why(pool: Pool, chosen: Option, kb: KnowledgeBase, precompiled: bool) -> list[str]:
    """How the driver is built on the pool: a precompiled container asked for but not taken,
    reported build failures on its kernel, an unknown kernel."""
    why: list[str] = []
    if precompiled and pool.manager.operator and not chosen.keep and not chosen.precompiled:
        problem = precompiled_problem(kb, pool.os, pool.kernel, chosen.branch, pool.arch)
        if problem is not None:
            why.append(f"usePrecompiled: false: {problem}")
    if pool.kernel is not None and not chosen.keep:
        why.extend(
            f"warning: reported build failure: {broken.describe()}"
            for broken in kernel_breakages(kb, chosen.release, pool.kernel, chosen.module)
        )
    if pool.kernel is None:
        why.append("kernel unknown: the minimum kernel was not checked")
    return why


def _left_out_why(left_out: Sequence[tuple[int, str]], branch: int) -> str | None:
    """The newer branches left out and why, the ended ones named together."""
    newer = [(b, w) for b, w in left_out if b > branch]
    skipped = [f"R{b} ({w})" for b, w in newer if "end of life" not in w]
    ended = [f"R{b}" for b, w in newer if "end of life" in w]
    if ended:
        skipped.append(f"{', '.join(ended)} (end of life)")
    return "left out: " + "; ".join(skipped) if skipped else None


def unservable(
    groups: list[DemandGroup], choices: Sequence[PoolChoice], judge: Judge
) -> list[tuple[str, str]]:
    """(workload, why) for each workload of ``groups``, which no pool serves after the plan."""
    pools = [c.pool for c in choices]
    every = [c.offer.every for c in choices]
    chosen = [c.chosen for c in choices]
    out: list[tuple[str, str]] = []
    kb = judge.kb
    for group in groups:
        # An option that would serve it but was not chosen (it serves fewer workloads there).
        alternatives = [
            (opt, i) for i, opts in enumerate(every) for opt in opts if group.number in opt.serves
        ]
        if alternatives:
            opt, i = max(alternatives, key=lambda a: (a[0].weight, a[0].branch))
            other = chosen[i]
            why = (
                f"needs {group.describe()}: R{opt.branch} on pool {pools[i].name} would run it, "
                f"but serves {opt.weight} workloads there against "
                f"{other.weight if other is not None else 0} for the plan's choice"
            )
        else:
            nearest: tuple[int, str] | None = None
            for i, opts in enumerate(every):
                pool = pools[i]
                for opt in opts:
                    facts = pool.facts[0] if opt.keep else running(pool.facts[0], opt.release, kb)
                    verdict = check(facts, group.requirement, group.policy, kb)
                    reasons = blocking(verdict)
                    text = "; ".join(dict.fromkeys(r.message for r in reasons))
                    score = len({r.code for r in reasons})
                    if text and (nearest is None or score < nearest[0]):
                        nearest = (score, f"nearest: pool {pool.name} on R{opt.branch}: {text}")
            why = f"needs {group.describe()}: no pool can run it on any branch it can take" + (
                f"; {nearest[1]}" if nearest is not None else "; the cluster has no GPU pool"
            )
        out.extend((w, why) for w in group.workloads)
    return sorted(out)


def blocked_by_os(
    choice: PoolChoice,
    judge: Judge,
    today: date,
    total: int,
    operator: OperatorVersion | None = None,
) -> str | None:
    """For a GPU Operator pool: what a driver installed another way would give, when that is
    more than the containers NVIDIA publishes for its OS allow. The OSes it names have
    containers of the branch for the pool's architecture and are supported by ``operator``."""
    pool, chosen, left_out = choice.pool, choice.chosen, choice.offer.left_out
    if pool.target is None:
        return None
    better = unblocked(pool, judge, today)
    if better is None or better.keep:
        return None
    if chosen is not None and (better.weight, better.branch) <= (chosen.weight, chosen.branch):
        return None
    reason = next((w for b, w in left_out if b == better.branch), None)
    if reason is None:
        return None
    found = container_oses(judge.kb, better.branch, pool.arch)
    supported = [o for o in found if operator is None or o in operator.os]
    oses = ", ".join(supported) or "no OS"
    return (
        f"R{better.branch} ({better.release}) would serve {better.weight} of {total} workloads, "
        f"but {reason}; move the nodes to an OS with R{better.branch} driver containers ({oses}), "
        "or install the driver on the hosts (then label them nvidia.com/gpu.deploy.driver=false)"
    )
