"""The NVIDIA container toolkit's gate (an image's or container's ``NVIDIA_REQUIRE_CUDA``) as
the engine reads it: ``require-cuda-unmet`` when the toolkit would not start the container on
a node, how a compatibility mode gets through it, and the data-center branches it names for an
image's compat libraries (forward-compatibility targets beyond NVIDIA's matrix).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cudasched.compat.verdict import REQUIRE_CUDA_UNMET, Reason, node_cuda_text
from cudasched.nodes.facts import NodeFacts
from cudasched.vocab.requirecuda import DATACENTER_BRANDS, OTHER_BRANDS, brands_for
from cudasched.vocab.requirements import Requirement

if TYPE_CHECKING:
    pass

__all__ = [
    "gate_forward_compat_branches",
    "gate_reason",
    "with_gate_note",
]


def gate_forward_compat_branches(req: Requirement) -> frozenset[int]:
    """Data-center driver branches an image's own ``NVIDIA_REQUIRE_CUDA`` names for its compat
    libraries (``brand=tesla,driver>=550,driver<551``): forward-compatibility targets by the
    image's claim, on top of NVIDIA's matrix. Empty without a gate or without cuda-compat."""
    if req.gate is None or not req.ships_cuda_compat:
        return frozenset()
    return req.gate.branches(DATACENTER_BRANDS)


def _fmt_branches(branches: frozenset[int]) -> str:
    return ", ".join(f"R{b}" for b in sorted(branches))


def _gate_needs(req: Requirement) -> str:
    """What the gate asks for, in words: its CUDA floor and the branches its brand
    alternatives admit."""
    assert req.gate is not None
    parts = []
    floor = req.gate.cuda_floor()
    if floor is not None:
        parts.append(f"a driver that supports CUDA >= {floor}")
    dc = req.gate.branches(DATACENTER_BRANDS)
    other = req.gate.branches(OTHER_BRANDS)
    if dc:
        parts.append(f"driver branch {_fmt_branches(dc)} on a data-center GPU")
    if other:
        parts.append(f"driver branch {_fmt_branches(other)} on other GPUs")
    return " or ".join(parts) or f"'{req.gate.text}'"


def gate_reason(facts: NodeFacts, req: Requirement) -> Reason | None:
    """``require-cuda-unmet`` when the container toolkit would not start the container here
    (or it cannot be told: a fact the gate reads is unknown)."""
    gate = req.gate
    if gate is None:
        return None
    holds = gate.holds(
        facts.cuda,
        facts.driver.code if facts.driver is not None else None,
        facts.compute.code if facts.compute is not None else None,
        brands_for(facts.datacenter),
    )
    if holds is True:
        return None
    where = f"NVIDIA_REQUIRE_CUDA ({gate.source})" if gate.source else "NVIDIA_REQUIRE_CUDA"
    host = node_cuda_text(facts) if facts.driver is not None or facts.cuda else "node facts"
    if holds is False:
        return Reason(
            REQUIRE_CUDA_UNMET,
            f"the NVIDIA container toolkit would refuse to start the container: {where} needs "
            f"{_gate_needs(req)}, and {host}"
            + ("" if facts.datacenter is not None else " (GPU class not reported)")
            + "; NVIDIA_DISABLE_REQUIRE=true on the container turns the check off",
        )
    return Reason(
        REQUIRE_CUDA_UNMET,
        f"cannot confirm the NVIDIA container toolkit starts the container: {where} needs "
        f"{_gate_needs(req)}, and the node does not report every fact it reads ({host})",
    )


def with_gate_note(reason: Reason, facts: NodeFacts, req: Requirement) -> Reason:
    """A compatibility-mode verdict says how the gate lets the container start."""
    assert req.gate is not None
    floor = req.gate.cuda_floor()
    if floor is None or facts.cuda is None or facts.cuda >= floor or facts.driver is None:
        return reason
    return Reason(
        reason.code,
        f"{reason.message}; the image's NVIDIA_REQUIRE_CUDA admits driver branch "
        f"R{facts.driver.branch} through its brand/driver alternative",
    )
