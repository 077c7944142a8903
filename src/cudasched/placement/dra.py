"""DRA claims: a CUDA requirement as a ``resource.k8s.io/v1`` ResourceClaimTemplate whose
request selects, with CEL over the NVIDIA DRA driver's device attributes, the GPUs the engine
would accept.

The rules are not restated here. The placement compiler
(:func:`cudasched.placement.compile.compile_requirement`, scheme ``cudasched``) already turns a
requirement into ORed terms of integer bounds on our labels; each bound is the same comparison
on a DRA attribute, because the driver publishes versions as semver (``reference/ops-facts.md``
§5) and our integer codes order exactly as those versions do:

* ``cudasched.io/cuda.code``         -> ``cudaDriverVersion``  (12080 -> ``12.8.0``);
* ``cudasched.io/driver.code``       -> ``driverVersion``      (525060013 -> ``525.60.13``);
* ``cudasched.io/gpu.compute.code``  -> ``cudaComputeCapability`` (90 -> ``9.0.0``).

Under ``strict`` the result is ``cudaDriverVersion >= X.Y.0`` (the toolkit's CUDA) plus the
compute capabilities the toolkit builds for and the driver-branch ceilings of old
architectures. Under ``minor-compat`` a node also qualifies when its *driver* is at or above the
CUDA major's minor-compat floor (``driverVersion >= 525.60.13`` for 12.x), exactly the engine's
rule: the floor is a driver version in NVIDIA's table, not a CUDA version, so it is compared as
one. Forward-compatibility alternatives need "data-center GPU", which no DRA attribute says:
they are left out (the claim is then stricter than the engine, never looser) and the caller is
told.

Every selector first checks that the attributes it reads exist (``has(...)``): a reference to a
missing attribute is an evaluation error that aborts the whole allocation, so a GPU whose driver
does not publish one is skipped instead, as a node without labels is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cudasched.compat.engine import effective_cuda, resolve_policy
from cudasched.placement.compile import compile_requirement
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.labels import LabelScheme
from cudasched.vocab.labelsyntax import dns_subdomain_ok
from cudasched.vocab.versions import ComputeCapability, CudaVersion, DriverVersion

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.vocab.requirements import Policy, Requirement

__all__ = [
    "API_VERSION",
    "COMPUTE_CAPABILITY",
    "CUDA_DRIVER_VERSION",
    "DEVICE_ATTRIBUTES",
    "DEVICE_CLASS",
    "DRIVER_DOMAIN",
    "DRIVER_VERSION",
    "MAX_EXPRESSION",
    "VERSION_ATTRIBUTES",
    "CompiledSelectors",
    "DraClaim",
    "claim_template",
    "compiled_selectors",
    "default_name",
    "requirement_selectors",
    "selectors",
    "semver_parts",
]

API_VERSION = "resource.k8s.io/v1"
DRIVER_DOMAIN = "gpu.nvidia.com"
DEVICE_CLASS = "gpu.nvidia.com"
#: The API's limit on one CEL selector expression.
MAX_EXPRESSION = 10 * 1024

CUDA_DRIVER_VERSION = "cudaDriverVersion"
DRIVER_VERSION = "driverVersion"
COMPUTE_CAPABILITY = "cudaComputeCapability"
#: The version attributes a CUDA-aware selector reads.
VERSION_ATTRIBUTES = (DRIVER_VERSION, CUDA_DRIVER_VERSION, COMPUTE_CAPABILITY)
_SEMVER = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:[-+].*)?$")

_DEVICE = f'device.attributes["{DRIVER_DOMAIN}"]'
#: The driver's attributes in CEL: ``device.attributes["gpu.nvidia.com"]``.
DEVICE_ATTRIBUTES = _DEVICE
# Keys of forward-compatibility terms: no DRA attribute carries them.
_NOT_EXPRESSIBLE = frozenset({L.GPU_DATACENTER, L.DRIVER_BRANCH})


def _cuda(code: int) -> str:
    # CUDA codes are multiples of 10; round a bound up to the next release that has one.
    v = CudaVersion.from_code(-(-code // 10) * 10)
    return f"{v.major}.{v.minor}.0"


def _driver(code: int) -> str:
    v = DriverVersion.from_code(code)
    return f"{v.major}.{v.minor}.{v.revision}"  # semver: no leading zeros (570.124.6)


def _compute(code: int) -> str:
    v = ComputeCapability.from_code(code)
    return f"{v.major}.{v.minor}.0"


# label key -> (DRA attribute, integer code -> semver literal)
_ATTRIBUTES = {
    L.CUDA_CODE: (CUDA_DRIVER_VERSION, _cuda),
    L.DRIVER_CODE: (DRIVER_VERSION, _driver),
    L.COMPUTE_CODE: (COMPUTE_CAPABILITY, _compute),
}


@dataclass(frozen=True, slots=True, order=True)
class _Atom:
    """One bound on one attribute: ``attribute >= version`` (``at_least``) or ``< version``."""

    attribute: str
    at_least: bool
    version: str

    def cel(self) -> str:
        op = ">= 0" if self.at_least else "< 0"
        return f'{_DEVICE}.{self.attribute}.compareTo(semver("{self.version}")) {op}'

    def holds(self, versions: Mapping[str, tuple[int, int, int]]) -> bool:
        """What :meth:`cel` says of a device whose attributes have ``versions``."""
        have = versions[self.attribute]
        bound = semver_parts(self.version)
        return have >= bound if self.at_least else have < bound


def _atom(expr: Mapping[str, Any], native: tuple[int, str] | None = None) -> _Atom | None:
    """The DRA form of one compiled expression; ``None`` for a forward-compat one.
    ``native`` is (the driver code the requirement's CUDA needs, that CUDA as semver): the
    compiler writes "runs the CUDA natively" as that driver floor (a node's CUDA is its
    driver's), and the DRA driver publishes the same reading as ``cudaDriverVersion``."""
    key, op, values = expr["key"], expr["operator"], expr.get("values") or []
    if (
        native is not None
        and key == L.DRIVER_CODE
        and op == "Gt"
        and len(values) == 1
        and str(values[0]).isdigit()
        and int(values[0]) + 1 == native[0]
    ):
        return _Atom(CUDA_DRIVER_VERSION, True, native[1])
    if key in _NOT_EXPRESSIBLE:
        return None
    if key not in _ATTRIBUTES or op not in ("Gt", "Lt") or len(values) != 1:
        raise ValueError(f"no DRA attribute for the expression {dict(expr)!r}")
    attribute, literal = _ATTRIBUTES[key]
    bound = int(values[0])
    if op == "Gt":  # code > n  <=>  version >= version(n + 1)
        return _Atom(attribute, True, literal(bound + 1))
    return _Atom(attribute, False, literal(bound))  # code < n  <=>  version < version(n)


def _guarded(atoms: Sequence[_Atom], body: str) -> str:
    guards = [f"has({_DEVICE}.{a})" for a in sorted({a.attribute for a in atoms})]
    return " && ".join([*guards, body])


def _all(atoms: Sequence[_Atom]) -> str:
    return " && ".join(a.cel() for a in atoms)


def _any(parts: Sequence[str]) -> str:
    return parts[0] if len(parts) == 1 else "(" + ") || (".join(parts) + ")"


def _is_alternative(atom: _Atom) -> bool:
    """A floor that says how the driver runs the toolkit (natively, or by minor-version
    compatibility), as opposed to which GPUs and driver branches qualify."""
    return atom.at_least and atom.attribute in (CUDA_DRIVER_VERSION, DRIVER_VERSION)


def _disjunction(terms: Sequence[Sequence[_Atom]]) -> str:
    """``terms`` ORed, with the GPU part each alternative shares written once:
    ``(gpus && (native || minor-compat)) || (...)``."""
    groups: dict[tuple[_Atom, ...], list[list[_Atom]]] = {}
    for term in terms:
        head = tuple(a for a in term if not _is_alternative(a))
        groups.setdefault(head, []).append([a for a in term if _is_alternative(a)])
    parts: list[str] = []
    for head, tails in groups.items():
        if not all(tails):  # one alternative needs nothing beyond the GPU part
            parts.append(_all(head))
            continue
        inner = _any([_all(t) for t in tails])
        if not head:
            parts.append(inner)
        else:
            parts.append(
                f"{_all(head)} && ({inner})" if len(tails) > 1 else _all([*head, *tails[0]])
            )
    return _any(parts)


def selectors(
    terms: Sequence[Mapping[str, Any]], native: tuple[int, str] | None = None
) -> tuple[list[str], bool]:
    """CEL selector expressions (all must hold) equivalent to ORed node-selector ``terms`` over
    the ``cudasched`` label scheme, and whether forward-compat terms had to be left out.

    A bound every term shares becomes a selector of its own (so the CUDA floor under
    ``strict`` reads as the one line ``cudaDriverVersion >= X.Y.0``); the rest is one
    disjunction."""
    compiled = _compiled(terms, native)
    return list(compiled.expressions), compiled.dropped_forward_compat


def _compiled(
    terms: Sequence[Mapping[str, Any]], native: tuple[int, str] | None
) -> CompiledSelectors:
    kept, dropped = _atoms(terms, native)
    if not kept:
        return CompiledSelectors((), (), dropped)
    common = [a for a in kept[0] if all(a in term for term in kept[1:])]
    out = [_guarded([a], a.cel()) for a in common]
    parts = [_Selector((a.attribute,), ((a,),)) for a in common]
    rest = [[a for a in term if a not in common] for term in kept]
    if all(rest):  # an empty remainder is a term that holds already: no disjunction needed
        used = [a for term in rest for a in term]
        out.append(_guarded(used, f"({_disjunction(rest)})"))
        needs = tuple(sorted({a.attribute for a in used}))
        parts.append(_Selector(needs, tuple(tuple(t) for t in rest)))
    for expression in out:
        if len(expression) > MAX_EXPRESSION:
            raise InputError(
                f"the DRA selector for this requirement is {len(expression)} characters, over "
                f"the API's limit of {MAX_EXPRESSION}: narrow it (--min-compute-capability)"
            )
    return CompiledSelectors(tuple(out), tuple(parts), dropped)


def semver_parts(text: str) -> tuple[int, int, int]:
    """``MAJOR.MINOR.PATCH`` of a semver text (a pre-release or build part is not compared);
    a :class:`ValueError` for anything else."""
    match = _SEMVER.match(text.strip())
    if match is None:
        raise ValueError(f"not a semantic version: {text!r}")
    major, minor, patch = (int(g) for g in match.groups())
    return major, minor, patch


@dataclass(frozen=True, slots=True)
class _Selector:
    """One selector as data: every attribute in ``needs`` present (its ``has()`` guards) and
    one of ``terms`` holding in full."""

    needs: tuple[str, ...]
    terms: tuple[tuple[_Atom, ...], ...]

    def holds(self, versions: Mapping[str, tuple[int, int, int]]) -> bool:
        if any(a not in versions for a in self.needs):
            return False
        return any(all(atom.holds(versions) for atom in term) for term in self.terms)


@dataclass(frozen=True, slots=True)
class CompiledSelectors:
    """A requirement's selectors twice from one source: the CEL ``expressions`` a claim or a
    class carries, and the same tests as data, so :meth:`admits` says what the allocator's
    evaluation of those expressions says of a device without a CEL evaluator."""

    expressions: tuple[str, ...]
    parts: tuple[_Selector, ...]
    dropped_forward_compat: bool

    def admits(self, versions: Mapping[str, tuple[int, int, int]]) -> bool:
        """Whether every selector holds for a device of NVIDIA's driver whose version
        attributes (``driverVersion``, ``cudaDriverVersion``, ``cudaComputeCapability``) are
        ``versions``; one it lacks fails the selectors that read it, as ``has()`` does."""
        return all(part.holds(versions) for part in self.parts)


def _atoms(
    terms: Sequence[Mapping[str, Any]], native: tuple[int, str] | None
) -> tuple[list[list[_Atom]], bool]:
    """Each term's expressions as atoms, once each; a term with an expression CEL cannot say
    (forward compatibility) is left out, and the flag says so."""
    kept: list[list[_Atom]] = []
    dropped = False
    for term in terms:
        atoms = [_atom(e, native) for e in term.get("matchExpressions") or []]
        if any(a is None for a in atoms):
            dropped = True
            continue
        kept.append(list(dict.fromkeys(a for a in atoms if a is not None)))
    return kept, dropped


@dataclass(frozen=True, slots=True)
class DraClaim:
    """A ResourceClaimTemplate, and whether forward-compat alternatives were left out."""

    obj: dict[str, Any]
    dropped_forward_compat: bool


def default_name(req: Requirement) -> str:
    """``gpu-cuda-12-8``, ``gpu-cuda-12-4-cc-8-0``, ``gpu-cc-8-0``."""
    parts = ["gpu"]
    cuda = effective_cuda(req)
    if cuda is not None:
        parts.append(f"cuda-{cuda.major}-{cuda.minor}")
    if req.min_compute is not None:
        parts.append(f"cc-{req.min_compute.major}-{req.min_compute.minor}")
    return "-".join(parts)


def requirement_selectors(
    req: Requirement, policy: Policy, kb: KnowledgeBase
) -> tuple[list[str], bool]:
    """The CEL selectors (all must hold) of the GPUs that run ``req`` under ``policy``, compiled
    by the placement compiler as the node affinity is, and whether forward-compat alternatives
    were left out. A claim template and a device class both carry them."""
    compiled = compiled_selectors(req, policy, kb)
    return list(compiled.expressions), compiled.dropped_forward_compat


def compiled_selectors(req: Requirement, policy: Policy, kb: KnowledgeBase) -> CompiledSelectors:
    """:func:`requirement_selectors` with the tests as data (what ``explain`` judges a
    ResourceSlice's devices by)."""
    terms = compile_requirement(req, policy, LabelScheme.CUDASCHED, kb)
    cuda = effective_cuda(req)
    floor = kb.driver_floor(cuda) if cuda is not None else None
    native = (floor.code, _cuda(cuda.release.code)) if cuda and floor else None
    return _compiled(terms, native)


def claim_template(
    req: Requirement,
    policy: Policy | str,
    kb: KnowledgeBase,
    *,
    name: str | None = None,
    count: int = 1,
) -> DraClaim:
    """A ResourceClaimTemplate for ``count`` GPUs of class ``gpu.nvidia.com`` that run ``req``
    (an :class:`InputError` for a requirement no GPU can meet, as for ``affinity``)."""
    pol = resolve_policy(req, policy)
    name = name or default_name(req)
    if not dns_subdomain_ok(name):
        raise InputError(
            f"invalid claim template name {name!r}: expected a DNS subdomain (lower-case "
            "letters, digits, '-' and '.')"
        )
    expressions, dropped = requirement_selectors(req, pol, kb)
    request: dict[str, Any] = {"deviceClassName": DEVICE_CLASS, "count": count}
    if expressions:
        request["selectors"] = [{"cel": {"expression": e}} for e in expressions]
    obj = {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "annotations": {L.ANN_REQUIREMENT: req.record(pol)}},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}},
    }
    return DraClaim(obj, dropped)
