"""Rollout waves: the order in which the nodes of a driver plan change.

A node is unavailable while its driver changes. Waves are built greedily, pool by pool (pools
that give workloads new homes first), so that

* no wave holds more than ``capacity`` nodes (``--max-unavailable`` of the GPU nodes, rounded up
  as the GPU Operator rounds its own ``maxUnavailable``), and
* every workload that runs somewhere today keeps at least one available node during every wave:
  a node that has not changed yet counts for what its current driver runs, a node of an earlier
  wave for what its new driver runs, a node that does not change for what it runs.

Nodes of one pool are interchangeable (same GPU, OS, kernel, driver before and after), so a wave
takes as many nodes of a pool as the workloads it serves can spare at once: the work is per
pool and demand group, not per node. When no node at all can go without leaving some workload
without a node (its only home is a single node that must change), that node goes alone and the
plan says which workloads wait for it.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cudasched.vocab.errors import InputError

__all__ = ["WaveInput", "Waves", "parse_max_unavailable", "plan_waves", "wave_capacity"]


def parse_max_unavailable(value: object) -> int | str:
    """``25%`` (a percentage, kept as text) or ``3`` (a node count), as the GPU Operator's
    ``maxUnavailable`` takes them; an :class:`InputError` for anything else."""
    text = str(value).strip()
    m = re.fullmatch(r"(\d{1,3})%", text)
    if m is not None and 1 <= int(m.group(1)) <= 100:
        return text
    if re.fullmatch(r"\d{1,6}", text) and int(text) >= 1:
        return int(text)
    raise InputError(
        f"invalid --max-unavailable {value!r}: expected a percentage of the GPU nodes (1%..100%, "
        "e.g. 25%) or a number of nodes (1 or more)"
    )


def wave_capacity(max_unavailable: int | str, gpu_nodes: int) -> int:
    """How many nodes one wave may hold: a count as given, a percentage of the GPU nodes
    rounded up (never less than one node)."""
    if isinstance(max_unavailable, int):
        return max(1, max_unavailable)
    percent = int(max_unavailable.rstrip("%"))
    return max(1, math.ceil(percent * gpu_nodes / 100))


@dataclass(frozen=True, slots=True)
class WaveInput:
    """The nodes of one pool and the demand groups they run before and after their change
    (``nodes`` empty for a pool that does not change: it only counts as homes)."""

    name: str
    nodes: tuple[str, ...]
    before: frozenset[int]
    after: frozenset[int]
    changes: bool
    gains: int = 0  # how many workloads the change gives a new home (earlier waves first)


@dataclass(frozen=True, slots=True)
class Waves:
    waves: tuple[tuple[str, ...], ...]
    capacity: int
    stranded: tuple[tuple[str, tuple[int, ...]], ...] = ()  # (node, groups without a node)


def plan_waves(pools: Sequence[WaveInput], capacity: int, needed: Iterable[int]) -> Waves:
    """Waves over the changing pools' nodes (see the module docstring). ``needed``: the demand
    groups that run somewhere today (the only ones a wave must keep a node for)."""
    need = frozenset(needed)
    available: Counter[int] = Counter()
    for pool in pools:
        for group in pool.before & need:
            available[group] += len(pool.nodes)
    order = sorted((p for p in pools if p.changes and p.nodes), key=lambda p: (-p.gains, p.name))
    remaining = {p.name: list(p.nodes) for p in order}
    waves: list[tuple[str, ...]] = []
    stranded: list[tuple[str, tuple[int, ...]]] = []
    while any(remaining.values()):
        wave = _fill(order, remaining, available, need, capacity)
        if not wave:
            # Every pending node is the last available home of some workload: one goes alone.
            pool = next(p for p in order if remaining[p.name])
            node = remaining[pool.name].pop(0)
            guarded = pool.before & need
            for group in guarded:
                available[group] -= 1
            stranded.append((node, tuple(sorted(g for g in guarded if available[g] <= 0))))
            wave.append((pool, [node]))
        for pool, nodes in wave:
            for group in pool.after & need:
                available[group] += len(nodes)
        waves.append(tuple(n for _, nodes in wave for n in nodes))
    return Waves(tuple(waves), capacity, tuple(stranded))


def _fill(
    order: list[WaveInput],
    remaining: dict[str, list[str]],
    available: Counter[int],
    need: frozenset[int],
    capacity: int,
) -> list[tuple[WaveInput, list[str]]]:
    """One wave: from each pool in turn, as many pending nodes as the wave has room for and as
    leave every group it serves today at least one other home (taken from ``remaining`` and
    ``available``)."""
    wave: list[tuple[WaveInput, list[str]]] = []
    room = capacity
    for pool in order:
        left = remaining[pool.name]
        if not left or room == 0:
            continue
        guarded = pool.before & need
        spare = min((available[g] - 1 for g in guarded), default=len(left))
        take = min(room, len(left), spare)
        if take <= 0:
            continue
        nodes, remaining[pool.name] = left[:take], left[take:]
        for group in guarded:
            available[group] -= take
        wave.append((pool, nodes))
        room -= take
    return wave
