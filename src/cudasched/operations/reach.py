"""Where a requirement can run in a fleet, and when nowhere, the nearest miss.

Every verdict is :func:`cudasched.compat.engine.check` on the fleet's node facts, decided once per
group
of nodes with identical GPU labels (a pool of 500 alike nodes costs one check) and remembered per
(requirement, policy), so the audit, the report and their tests ask the same engine the same
question once.

The nearest node, when no node fits, is the GPU node a newer driver alone would fix (the driver
is too old for the toolkit, for the image's ``NVIDIA_REQUIRE_CUDA`` or for the GPU product:
:func:`driver_fix`), else any; then the one whose incompatible verdict has the fewest distinct
blocking reasons; ties go to the newest CUDA, then the newest driver, then the name. "Only the
driver is too old" thus beats "the architecture is dropped", and among nodes that only need a
newer driver, the one that needs the smallest step wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cudasched.compat import engine
from cudasched.compat.engine import check, resolve_policy
from cudasched.compat.fixes import driver_remedy
from cudasched.compat.verdict import (
    ARCH_DROPPED,
    ARCH_TOO_NEW,
    COMPAT_BRANCH_UNSUPPORTED,
    COMPUTE_CAPABILITY_OK,
    COMPUTE_CAPABILITY_TOO_LOW,
    DRIVER_BRANCH_UNSUPPORTED_GPU,
    DRIVER_TOO_OLD,
    FORWARD_COMPAT,
    FRAMEWORK_ARCH_UNSUPPORTED,
    MINOR_VERSION_COMPAT,
    NATIVE,
    NO_FORWARD_COMPAT_ON_GEFORCE,
    NO_GPU_FACTS,
    NO_REQUIREMENT,
    REQUIRE_CUDA_UNMET,
    UNKNOWN_ARCH,
    UNKNOWN_COMPUTE_CAPABILITY,
    UNKNOWN_DATACENTER,
    UNKNOWN_DRIVER,
    UNKNOWN_TOOLKIT,
    Reason,
    Verdict,
)

if TYPE_CHECKING:
    from cudasched.cluster.fleet import Fleet
    from cudasched.knowledge import KnowledgeBase
    from cudasched.nodes.facts import NodeFacts
    from cudasched.vocab.requirements import Policy, Requirement
    from cudasched.vocab.versions import DriverVersion

__all__ = ["FleetVerdicts", "Nearest", "Reach", "driver_fix", "lacks_of"]

# Reasons that say why a verdict holds, not what blocks it.
_POSITIVE = frozenset(
    {
        NATIVE,
        MINOR_VERSION_COMPAT,
        FORWARD_COMPAT,
        COMPUTE_CAPABILITY_OK,
        NO_REQUIREMENT,
    }
)

_ARCH = "a GPU architecture the workload's CUDA and kernels support"
# What a node lacks, by blocking reason code (in the order they are named).
_LACKS = {
    NO_GPU_FACTS: "GPU labels",
    UNKNOWN_TOOLKIT: "nothing a node can offer: the CUDA release is unknown",
    DRIVER_TOO_OLD: "a newer driver",
    UNKNOWN_DRIVER: "a reported driver version",
    DRIVER_BRANCH_UNSUPPORTED_GPU: "a driver branch that supports its GPU",
    REQUIRE_CUDA_UNMET: "a driver the image's NVIDIA_REQUIRE_CUDA accepts",
    NO_FORWARD_COMPAT_ON_GEFORCE: "a data-center GPU (forward compatibility)",
    COMPAT_BRANCH_UNSUPPORTED: "a driver branch the image's compat library supports",
    UNKNOWN_DATACENTER: "a known GPU class (data-center or not)",
    ARCH_DROPPED: _ARCH,
    ARCH_TOO_NEW: _ARCH,
    FRAMEWORK_ARCH_UNSUPPORTED: _ARCH,
    UNKNOWN_ARCH: _ARCH,
    COMPUTE_CAPABILITY_TOO_LOW: "a GPU with a higher compute capability",
    UNKNOWN_COMPUTE_CAPABILITY: "a reported compute capability",
}


def blocking(verdict: Verdict) -> tuple[Reason, ...]:
    """The reasons of a verdict that stand in the way."""
    return tuple(r for r in verdict.reasons if r.code not in _POSITIVE)


def lacks_of(reasons: tuple[Reason, ...]) -> tuple[str, ...]:
    """What the blocking ``reasons`` say a node lacks, each once, in a stable order."""
    found = dict.fromkeys(_LACKS.get(r.code, r.code) for r in reasons)
    return tuple(found)


# Blocking reasons a newer driver on the same GPU can remove.
_DRIVER_FIXABLE = frozenset({DRIVER_TOO_OLD, REQUIRE_CUDA_UNMET, DRIVER_BRANCH_UNSUPPORTED_GPU})


def driver_fix(
    facts: NodeFacts, reasons: tuple[Reason, ...], req: Requirement, kb: KnowledgeBase
) -> DriverVersion | None:
    """The oldest driver that removes every blocking ``reason`` of a node, when a newer driver
    on the same GPU is all it lacks: NVIDIA's minimum for the workload's CUDA (Table 3), the
    minimum for the CUDA floor of the image's ``NVIDIA_REQUIRE_CUDA`` and the GPU product's
    first driver, whichever of them the reasons name. ``None`` when anything else stands in the
    way: an architecture, a driver branch too new for the GPU (Kepler after R470), an unknown
    fact or minimum; ``None`` too when that driver is past the last branch of the GPU's
    architecture (:func:`cudasched.compat.fixes.driver_remedy`, the one judge of driver
    fixes)."""
    codes = {r.code for r in reasons}
    if not codes or not codes <= _DRIVER_FIXABLE or facts.driver is None:
        return None
    floors: list[DriverVersion] = []
    if DRIVER_TOO_OLD in codes:
        cuda = engine.effective_cuda(req)
        need = kb.min_driver(cuda) if cuda is not None else None
        if need is None:
            return None
        floors.append(need)
    if REQUIRE_CUDA_UNMET in codes:
        floor = req.gate.cuda_floor() if req.gate is not None else None
        need = kb.min_driver(floor) if floor is not None else None
        if need is None:
            return None
        floors.append(need)
    if DRIVER_BRANCH_UNSUPPORTED_GPU in codes:
        first = facts.first_driver
        if first is None or facts.driver >= first:
            return None  # the branch is past the architecture's last one: no newer driver helps
        floors.append(first)
    return driver_remedy(facts, max(floors), kb).driver


@dataclass(frozen=True, slots=True)
class Nearest:
    """The GPU node that comes closest to running a requirement no node can run."""

    node: str
    facts: NodeFacts
    reasons: tuple[Reason, ...]  # the blocking ones
    alike: int  # other nodes with the same GPU labels
    driver: DriverVersion | None = None  # the driver that would fix it (:func:`driver_fix`)

    @property
    def lacks(self) -> tuple[str, ...]:
        return lacks_of(self.reasons)

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.code for r in self.reasons))

    def describe(self) -> str:
        """``nearest node n1 (driver ..., CUDA ...) lacks a newer driver: <engine's words>``."""
        more = f" and {self.alike} alike" if self.alike else ""
        because = "; ".join(dict.fromkeys(r.message for r in self.reasons))
        return (
            f"nearest node {self.node}{more} ({self.facts.describe()}) lacks "
            f"{' and '.join(self.lacks)}: {because}"
        )


@dataclass(frozen=True, slots=True)
class Reach:
    """The nodes that can run a requirement under a policy (names, grouped by GPU labels)."""

    policy: Policy
    compatible: tuple[str, ...]
    nearest: Nearest | None

    @property
    def anywhere(self) -> bool:
        return bool(self.compatible)


class FleetVerdicts:
    """Engine verdicts over a fleet's node groups, remembered per (requirement, policy)."""

    __slots__ = ("_cache", "_facts", "_groups", "_number", "fleet")

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        facts: dict[int, NodeFacts] = {}
        groups: dict[int, list[str]] = {}
        number_of: dict[str, int] = {}
        for node, number, found in fleet.members():
            facts.setdefault(number, found)
            groups.setdefault(number, []).append(node.name)
            number_of.setdefault(node.name, number)
        self._facts = facts
        self._groups = {n: tuple(names) for n, names in groups.items()}
        self._number = number_of
        self._cache: dict[tuple[Requirement, Policy], dict[int, Verdict]] = {}

    def policy_for(self, req: Requirement, policy: Policy) -> Policy:
        """The policy a requirement is judged by: its own, else ``policy``."""
        return resolve_policy(req, policy)

    def _verdicts(self, req: Requirement, policy: Policy) -> dict[int, Verdict]:
        pol = resolve_policy(req, policy)
        key = (req, pol)
        found = self._cache.get(key)
        if found is None:
            kb = self.fleet.kb
            found = {n: check(f, req, pol, kb) for n, f in self._facts.items()}
            self._cache[key] = found
        return found

    def facts_of(self, node: str) -> NodeFacts | None:
        """The GPU facts of a node of the fleet (``None`` for a node it does not have)."""
        number = self._number.get(node)
        return self._facts[number] if number is not None else None

    def on_node(self, node: str, req: Requirement, policy: Policy) -> Verdict | None:
        """The verdict for one node (``None`` for a node the fleet does not have)."""
        number = self._number.get(node)
        if number is None:
            return None
        return self._verdicts(req, policy)[number]

    def reach(
        self, req: Requirement, policy: Policy, *, exclude: frozenset[str] = frozenset()
    ) -> Reach:
        """Which nodes (minus ``exclude``) can run ``req``; the nearest miss when none can."""
        verdicts = self._verdicts(req, policy)
        compatible = tuple(
            name
            for number, verdict in verdicts.items()
            if verdict.compatible
            for name in self._groups[number]
            if name not in exclude
        )
        nearest = None if compatible else self._nearest(req, verdicts, exclude)
        return Reach(resolve_policy(req, policy), compatible, nearest)

    def _nearest(
        self, req: Requirement, verdicts: dict[int, Verdict], exclude: frozenset[str]
    ) -> Nearest | None:
        best: tuple[tuple[int, int, int, int, str], Nearest] | None = None
        for number, verdict in verdicts.items():
            facts = self._facts[number]
            names = [n for n in self._groups[number] if n not in exclude]
            if not facts.has_gpu or not names or verdict.compatible:
                continue
            reasons = blocking(verdict)
            driver = driver_fix(facts, reasons, req, self.fleet.kb)
            key = (
                int(driver is None),
                len({r.code for r in reasons}),
                -(facts.cuda.code if facts.cuda is not None else 0),
                -(facts.driver.code if facts.driver is not None else 0),
                names[0],
            )
            if best is None or key < best[0]:
                best = (key, Nearest(names[0], facts, reasons, len(names) - 1, driver))
        return best[1] if best is not None else None
