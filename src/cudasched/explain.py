"""Why a workload can or cannot land on each node: the ``cudasched explain`` answer.

For every node the answer has three parts:

* ``eligible``: exactly what Kubernetes' required node affinity would decide for the pod spec
  *as cudasched would admit it*: the spec as given, with the workload's CUDA requirement compiled
  to node-selector terms and ANDed in by :func:`cudasched.merge.merge_required`, then matched by
  the faithful port in :mod:`cudasched.nodeaffinity` (``spec.nodeSelector`` AND required terms).
  Nothing here re-implements matching, so ``explain`` cannot disagree with the webhook's patch.
* ``score``: the raw preferred-affinity sum the scheduler's NodeAffinity plugin starts from
  (before normalisation), or ``"error"`` when the preferred terms do not parse (the scheduler
  then fails the scoring step for the pod).
* ``reasons``: the compatibility engine's reasons for the node, plus ``node-selector-mismatch``
  / ``affinity-mismatch`` when the user's own constraints exclude it, plus
  ``requirement-labels-missing`` when the engine would accept the node but it lacks the labels
  the chosen label scheme selects on (an agent or GFD not rolled out there yet).

A workload states its requirement with annotations on the object or on its pod template
(``cudasched.io/cuda-version``, ``min-compute-capability``, ``policy``, ``ships-cuda-compat``);
a caller that resolved it another way (a KServe runtime, the image) passes ``requirement=``.

Cost: large fleets repeat the same few GPU label sets (one per node pool). :class:`Fleet` reads
GPU facts once per set, and :func:`explain` decides once per (facts, values of the label keys the
workload's selectors read) signature, so 5,000 nodes cost a few dozen decisions per workload.
Only ``matchFields`` (which look at the node *name*) force per-node matching.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal

import orjson

from cudasched import labels as L
from cudasched.engine import Reason, VerdictStatus, check, resolve_policy
from cudasched.errors import InputError
from cudasched.merge import merge_required
from cudasched.nodeaffinity import (
    CompileCache,
    Node,
    NodeSelector,
    NodeSelectorError,
    PreferredTerms,
    RequiredNodeAffinity,
)
from cudasched.nodes import NodeFacts, facts_from_labels
from cudasched.objects import as_mapping as _mapping
from cudasched.placement import GfdKeys, choose_gfd_keys, choose_scheme, compile_requirement
from cudasched.requirements import Policy, Requirement
from cudasched.resolution import requirement_from_annotations as declared_requirement

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase

__all__ = [
    "AFFINITY_MISMATCH",
    "NODE_SELECTOR_MISMATCH",
    "REQUIREMENT_LABELS_MISSING",
    "Explanation",
    "Fleet",
    "NodeExplanation",
    "explain",
    "explain_many",
    "pod_spec_of",
    "pod_template_metadata_of",
    "requirement_from_annotations",
    "workload_id",
]

NODE_SELECTOR_MISMATCH = "node-selector-mismatch"
AFFINITY_MISMATCH = "affinity-mismatch"
REQUIREMENT_LABELS_MISSING = "requirement-labels-missing"

SCORE_ERROR = "error"

# Controllers whose pods come from ``spec.template`` (CronJob nests one level deeper).
_TEMPLATE_KINDS = frozenset(
    {"Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "ReplicationController"}
)

# The skip switch is the admission webhook's (cudasched.webhook.admission), not part of the
# requirement: the values it accepts are its own.
_SKIP_TRUE = frozenset({"true", "yes", "1"})

Score = int | Literal["error"]


# --------------------------------------------------------------------------- workload reading


def workload_id(obj: Mapping[str, Any]) -> str:
    """``namespace/Kind/name`` (namespace ``default`` when unset, as kubectl would apply it)."""
    meta = _mapping(obj.get("metadata"), "metadata")
    name = meta.get("name") or meta.get("generateName") or "<unnamed>"
    return f"{meta.get('namespace') or 'default'}/{obj.get('kind') or '?'}/{name}"


def _template_of(obj: Mapping[str, Any], who: str) -> Mapping[str, Any] | None:
    """The pod template of a controller (``None`` for a Pod or a bare pod spec holder)."""
    kind = obj.get("kind")
    spec = _mapping(obj.get("spec"), f"spec of {who}")
    if kind == "CronJob":
        job = _mapping(spec.get("jobTemplate"), f"spec.jobTemplate of {who}")
        job_spec = _mapping(job.get("spec"), f"spec.jobTemplate.spec of {who}")
        return _mapping(job_spec.get("template"), f"pod template of {who}")
    if kind == "PodTemplate":
        return _mapping(obj.get("template"), f"template of {who}")
    if kind in _TEMPLATE_KINDS or isinstance(spec.get("template"), Mapping):
        return _mapping(spec.get("template"), f"spec.template of {who}")
    return None


def _checked(obj: Mapping[str, Any]) -> tuple[str, Mapping[str, Any] | None]:
    """The workload's id and pod template (``None`` for a Pod), read once for every part."""
    if not isinstance(obj, Mapping):
        raise InputError(f"invalid workload {obj!r}: expected a Kubernetes object (a mapping)")
    who = workload_id(obj)
    return who, None if obj.get("kind") == "Pod" else _template_of(obj, who)


def _pod_spec(
    obj: Mapping[str, Any], who: str, template: Mapping[str, Any] | None
) -> dict[str, Any]:
    if template is not None:
        spec = _mapping(template.get("spec"), f"pod template spec of {who}")
        if spec:
            return dict(spec)
        raise InputError(f"{who}: its pod template has no spec")
    spec = _mapping(obj.get("spec"), f"spec of {who}")
    if obj.get("kind") == "Pod" or "containers" in spec:
        return dict(spec)
    raise InputError(
        f"{who}: no pod spec found; expected a Pod, a workload with spec.template "
        "(Deployment, StatefulSet, DaemonSet, ReplicaSet, Job), a CronJob, or an object "
        "whose spec has containers"
    )


def pod_spec_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The pod spec a workload's pods get: a Pod's ``spec``, a controller's
    ``spec.template.spec``, a CronJob's ``spec.jobTemplate.spec.template.spec``, or the ``spec``
    of any object that holds ``containers`` directly. Raises :class:`InputError` otherwise."""
    return _pod_spec(obj, *_checked(obj))


def _template_metadata(
    obj: Mapping[str, Any], who: str, template: Mapping[str, Any] | None
) -> Mapping[str, Any]:
    if obj.get("kind") == "Pod":
        return _mapping(obj.get("metadata"), "metadata")
    if template is None:
        return {}
    return _mapping(template.get("metadata"), f"pod template metadata of {who}")


def pod_template_metadata_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The metadata the workload's pods get (the template's; a Pod's own)."""
    return _template_metadata(obj, *_checked(obj))


def _overlaid_annotations(
    obj: Mapping[str, Any], who: str, template: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The object's annotations overlaid with its pod template's (those reach the pods)."""
    own = _mapping(_mapping(obj.get("metadata"), "metadata").get("annotations"), "annotations")
    pods = _template_metadata(obj, who, template)
    merged = {**own, **_mapping(pods.get("annotations"), "annotations")}
    return {str(k): v for k, v in merged.items()}


def requirement_from_annotations(obj: Mapping[str, Any]) -> Requirement | None:
    """The CUDA requirement a workload declares with ``cudasched.io/*`` annotations (its own,
    overlaid with its pod template's).

    ``None`` when it declares neither a CUDA version nor a minimum compute capability (a policy
    alone constrains nothing). The values are read by the webhook's own reader
    (:func:`cudasched.resolution.requirement_from_annotations`: same accepted values, same
    ``source``); bad values raise :class:`InputError` naming the annotation and the workload.
    """
    who, template = _checked(obj)
    return declared_requirement(_overlaid_annotations(obj, who, template), who)


# The annotations resolution's reader looks at: what a declared requirement depends on.
_DECLARING = (L.ANN_CUDA_VERSION, L.ANN_MIN_COMPUTE, L.ANN_POLICY, L.ANN_SHIPS_CUDA_COMPAT)


def _declared(annotations: Mapping[str, Any], who: str, shared: _Shared) -> Requirement | None:
    """:func:`requirement_from_annotations`, parsed once per distinct set of values in a call
    (thousands of replicas declare the same few). Only answers are kept: a bad value raises
    for every workload that carries it, naming that workload."""
    values = tuple(annotations.get(k) for k in _DECLARING)
    # Types are part of the key: True == 1 == 1.0 in Python, but not as annotation values.
    key = (*values, *map(type, values))
    try:
        found = shared.annotated.get(key, _MISSING)
    except TypeError:  # an unhashable value (a list): read it every time
        return declared_requirement(annotations, who)
    if found is _MISSING:
        found = shared.annotated[key] = declared_requirement(annotations, who)
    return found


_MISSING = object()


def _skipped(annotations: Mapping[str, Any]) -> bool:
    """``cudasched.io/skip`` read the way the webhook's admission reads it."""
    value = annotations.get(L.ANN_SKIP)
    return isinstance(value, str) and value.strip().lower() in _SKIP_TRUE


# --------------------------------------------------------------------------- fleet


# Label keys that can change a node's GPU facts: everything under our prefix and NVIDIA's,
# except GFD's refresh timestamp (different on every node, meaningless for compatibility).
_FACT_PREFIXES = (L.PREFIX, "nvidia.com/")


def _facts_signature(labels: Mapping[str, str]) -> frozenset[tuple[str, str]]:
    return frozenset(
        (k, v)
        for k, v in labels.items()
        if k.startswith(_FACT_PREFIXES) and k not in L.VOLATILE_KEYS
    )


class Fleet:
    """Nodes prepared once for many :func:`explain` calls.

    Each node is parsed once (:class:`Node` pre-parses integer labels) and nodes with the same
    GPU labels share one :class:`NodeFacts` (read once per pool, not once per node). Every node
    still has unique labels (``kubernetes.io/hostname``), so :func:`explain` groups per workload
    by the values of the keys that workload's selectors actually read. The auto label scheme
    and GFD key generation are resolved once for the whole fleet, as the webhook does.
    """

    __slots__ = (
        "_auto_scheme",
        "_canonical",
        "_facts",
        "_facts_of",
        "_gfd_keys",
        "_partitions",
        "kb",
        "nodes",
    )

    def __init__(self, nodes: Iterable[Mapping[str, Any] | Node], kb: KnowledgeBase) -> None:
        self.kb = kb
        parsed: list[Node] = []
        for item in nodes:
            node = item if isinstance(item, Node) else Node.from_k8s(item)
            if not node.name:
                raise InputError("a Node has no metadata.name")
            parsed.append(node)
        self.nodes: tuple[Node, ...] = tuple(parsed)
        index: dict[frozenset[tuple[str, str]], int] = {}
        facts: list[NodeFacts] = []
        facts_of: list[int] = []
        for node in self.nodes:
            signature = _facts_signature(node.labels)
            number = index.get(signature)
            if number is None:
                number = index[signature] = len(facts)
                facts.append(facts_from_labels(node.name, node.labels, kb))
            facts_of.append(number)
        self._facts: tuple[NodeFacts, ...] = tuple(facts)
        self._facts_of: tuple[int, ...] = tuple(facts_of)
        self._auto_scheme: L.LabelScheme | None = None
        self._gfd_keys: GfdKeys | None = None
        self._partitions: dict[tuple[str, ...], _Partition] = {}
        self._canonical: dict[tuple[tuple[int, ...], ...], _Partition] = {}

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def group_count(self) -> int:
        """How many distinct GPU-fact label sets the fleet has (node pools, roughly)."""
        return len(self._facts)

    def members(self) -> Iterable[tuple[Node, int, NodeFacts]]:
        """Each node with its facts group number and facts, in input order. The facts' ``name``
        is the first node of the group; use the node's own name for display."""
        for node, number in zip(self.nodes, self._facts_of, strict=True):
            yield node, number, self._facts[number]

    def partition(self, keys: tuple[str, ...]) -> _Partition:
        """Nodes grouped by (facts group, values of ``keys``), computed once per key set:
        workloads whose selectors read the same label keys share it, so the per-node signature
        work is paid once per key set instead of once per workload."""
        # Keys that take part in the facts signature add nothing: their values are already
        # fixed by the facts group. Dropping them lets most workloads share a few partitions.
        keys = tuple(
            k for k in keys if not (k.startswith(_FACT_PREFIXES) and k not in L.VOLATILE_KEYS)
        )
        found = self._partitions.get(keys)
        if found is None:
            # Key sets that split the fleet the same way share one partition object, so the
            # answers built per group are shared by their workloads too.
            built = _Partition.build(self, keys)
            found = self._partitions[keys] = self._canonical.setdefault(built.members, built)
        return found

    def resolve_scheme(self, scheme: L.LabelScheme | str) -> L.LabelScheme:
        """``auto`` becomes what every GPU node of this fleet carries."""
        chosen = scheme if isinstance(scheme, L.LabelScheme) else L.LabelScheme.parse(scheme)
        if chosen is not L.LabelScheme.AUTO:
            return chosen
        if self._auto_scheme is None:
            self._auto_scheme = choose_scheme(self.nodes)
        return self._auto_scheme

    @property
    def gfd_keys(self) -> GfdKeys:
        """The GFD key generation every GPU node carries (new keys only if all have them)."""
        if self._gfd_keys is None:
            self._gfd_keys = choose_gfd_keys(self.nodes)
        return self._gfd_keys


class _Partition:
    """A fleet split into groups of nodes that no selector reading ``keys`` can tell apart.

    ``first`` holds each group's first node, ``members`` each group's nodes (positions in fleet
    order). :meth:`gather` turns one block of answers per group (in member order) back into
    fleet order with one C-level pass (``operator.itemgetter``), so assembling a workload's
    5,000 answers costs no Python-level work per node.
    """

    __slots__ = ("_getter", "first", "members", "size")

    def __init__(
        self, first: tuple[int, ...], members: tuple[tuple[int, ...], ...], size: int
    ) -> None:
        self.first = first
        self.members = members
        self.size = size
        offset_of = [0] * size
        offset = 0
        for group in members:
            for position in group:
                offset_of[position] = offset
                offset += 1
        self._getter = operator.itemgetter(*offset_of) if size > 1 else None

    @classmethod
    def build(cls, fleet: Fleet, keys: tuple[str, ...]) -> _Partition:
        index: dict[tuple[Any, ...], int] = {}
        members: list[list[int]] = []
        for position, (node, facts_no) in enumerate(zip(fleet.nodes, fleet._facts_of, strict=True)):
            labels = node.labels
            signature = (facts_no, *[labels.get(k) for k in keys])
            number = index.get(signature)
            if number is None:
                number = index[signature] = len(members)
                members.append([])
            members[number].append(position)
        return cls(
            tuple(group[0] for group in members),
            tuple(tuple(group) for group in members),
            len(fleet.nodes),
        )

    def gather(self, blocks: Sequence[tuple[Any, ...]]) -> tuple[Any, ...]:
        joined = tuple(itertools.chain.from_iterable(blocks))
        return self._getter(joined) if self._getter is not None else joined


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class NodeExplanation:
    """The answer for one node. ``facts`` feeds the table (GPU, driver, CUDA); the JSON
    contract is :meth:`to_dict`."""

    node: str
    eligible: bool
    score: Score
    reasons: tuple[Reason, ...]
    facts: NodeFacts = field(repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "eligible": self.eligible,
            "score": self.score,
            "reasons": [r.to_dict() for r in self.reasons],
        }


class _LazyAnswers:
    """A workload's per-node answers, kept as one decision per partition group until asked for.

    The decision (eligible, score, reasons) is made once per group of nodes that no selector of
    the workload can tell apart; counting eligible nodes needs only the group sizes. The
    per-node :class:`NodeExplanation` tuple is built (and cached) on first access: answers
    for 5,000 nodes x 20,000 workloads are 100 million entries that a summary never reads.
    """

    __slots__ = ("_decisions", "_memo", "_nodes", "_part", "_positions", "eligible_count")

    def __init__(
        self,
        part: _Partition,
        decisions: list[tuple[bool, Score, tuple[Reason, ...], NodeFacts]],
        positions: tuple[Node, ...],
        memo: _Memo | None,
    ) -> None:
        self._part = part
        self._decisions = decisions
        self._positions = positions
        self._memo = memo
        self._nodes: tuple[NodeExplanation, ...] | None = None
        members = part.members
        self.eligible_count = sum(
            len(members[number]) for number, d in enumerate(decisions) if d[0]
        )

    @property
    def total(self) -> int:
        return self._part.size

    def materialise(self) -> tuple[NodeExplanation, ...]:
        found = self._nodes
        if found is not None:
            return found
        part, nodes, memo = self._part, self._positions, self._memo
        blocks: list[tuple[NodeExplanation, ...]] = []
        for number, (eligible, score, reasons, facts) in enumerate(self._decisions):
            block_key = (part, number, eligible, score, reasons)
            block = memo.get(block_key) if memo is not None else None
            if block is None:
                # The engine names the node it was shown (the facts group's first member); only
                # reasons that quote that name need rewording per member.
                quoted = repr(facts.name)
                rename = any(quoted in r.message for r in reasons)
                block = tuple(
                    NodeExplanation(
                        nodes[p].name,
                        eligible,
                        score,
                        _renamed(reasons, facts.name, nodes[p].name) if rename else reasons,
                        facts,
                    )
                    for p in part.members[number]
                )
                if memo is not None:
                    memo[block_key] = block
            blocks.append(block)
        # Two threads may both build it; they build equal tuples and either one is kept.
        found = self._nodes = part.gather(blocks)
        return found


_Answers = tuple[NodeExplanation, ...] | _LazyAnswers


class _AnswerSlot:
    """Where :attr:`Explanation.nodes` really lives: a slot that is not a dataclass field, so
    ``fields()``, ``asdict()`` and ``replace()`` see ``nodes`` exactly as before."""

    __slots__ = ("_answers",)
    _answers: _Answers


@dataclass(frozen=True, slots=True)
class Explanation(_AnswerSlot):
    """Per-node answers for one workload, and what they were computed from.

    ``nodes`` accepts the per-node tuple or the lazy per-group answers :func:`explain` builds;
    reading :attr:`nodes` (or :attr:`eligible`, equality, hashing, :meth:`to_dict`) always gives
    the tuple, materialised on first access. :meth:`summary`, :attr:`eligible_count` and
    :attr:`total` count from the groups without building it.
    """

    workload: str
    nodes: tuple[NodeExplanation, ...]
    requirement: Requirement | None
    policy: Policy
    scheme: L.LabelScheme
    terms: tuple[Mapping[str, Any], ...] = field(default=(), compare=False)
    gfd_keys: GfdKeys | None = None
    skipped: bool = False
    score_error: str | None = None
    requirement_error: str | None = None

    @property
    def eligible(self) -> tuple[NodeExplanation, ...]:
        return tuple(n for n in self.nodes if n.eligible)

    @property
    def eligible_count(self) -> int:
        """How many nodes are eligible (no per-node answers built)."""
        answers = self._answers
        if isinstance(answers, _LazyAnswers):
            return answers.eligible_count
        return sum(1 for n in answers if n.eligible)

    @property
    def total(self) -> int:
        """How many nodes were explained (no per-node answers built)."""
        answers = self._answers
        return answers.total if isinstance(answers, _LazyAnswers) else len(answers)

    def replaced(self, **changes: Any) -> Explanation:
        """:func:`dataclasses.replace` that keeps lazy answers lazy (``replace`` reads
        :attr:`nodes` and so builds every per-node answer)."""
        kept: dict[str, Any] = {
            f.name: getattr(self, f.name) for f in fields(self) if f.name != "nodes"
        }
        kept["nodes"] = self._answers
        kept.update(changes)
        return Explanation(**kept)

    def summary(self) -> dict[str, Any]:
        req = self.requirement
        return {
            "workload": self.workload,
            "eligible": self.eligible_count,
            "total": self.total,
            "requirement": req.describe() if req is not None else None,
            "requirementSource": req.source if req is not None else None,
            "policy": self.policy.value,
            "scheme": self.scheme.value,
            "gfdKeys": self.gfd_keys.value if self.gfd_keys is not None else None,
            "requirementTerms": [dict(t) for t in self.terms],
            "requirementError": self.requirement_error,
            "skipped": self.skipped,
            "scoreError": self.score_error,
        }

    def to_dict(self) -> dict[str, Any]:
        return {"nodes": [n.to_dict() for n in self.nodes], "summary": self.summary()}


def _get_nodes(self: Explanation) -> tuple[NodeExplanation, ...]:
    answers = self._answers
    return answers.materialise() if isinstance(answers, _LazyAnswers) else answers


def _set_nodes(self: Explanation, value: Iterable[NodeExplanation] | _LazyAnswers) -> None:
    # Only the dataclass machinery gets here (__init__, unpickling): the instance is frozen.
    answers = value if isinstance(value, _LazyAnswers) else tuple(value)
    object.__setattr__(self, "_answers", answers)


# The generated __init__, __eq__, __hash__, __repr__, dataclasses.replace and pickling all go
# through the ``nodes`` attribute, so they keep working on the materialised tuple; assigning
# from outside still raises FrozenInstanceError (the dataclass's own __setattr__).
Explanation.nodes = property(  # type: ignore[assignment,method-assign]
    _get_nodes, _set_nodes, doc="One answer per node, in fleet order (built on first access)."
)


# --------------------------------------------------------------------------- explain


def _affinity_terms(spec: Mapping[str, Any]) -> list[Any]:
    """The pod's required node-selector terms and preferred preferences, as written."""
    affinity = spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    if not isinstance(node_affinity, Mapping):
        return []
    terms: list[Any] = []
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if isinstance(required, Mapping) and isinstance(required.get("nodeSelectorTerms"), list):
        terms.extend(required["nodeSelectorTerms"])
    preferred = node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution")
    if isinstance(preferred, list):
        terms.extend(p.get("preference") for p in preferred if isinstance(p, Mapping))
    return terms


def _has_match_fields(spec: Mapping[str, Any]) -> bool:
    """Whether any node-affinity term looks at the node name (then grouping cannot decide)."""
    return any(isinstance(t, Mapping) and t.get("matchFields") for t in _affinity_terms(spec))


def _referenced_keys(spec: Mapping[str, Any]) -> set[str]:
    """Every label key the pod's nodeSelector and node-affinity terms read: two nodes that agree
    on these (and share GPU facts) get the same answer for this pod."""
    keys: set[str] = set()
    selector = spec.get("nodeSelector")
    if isinstance(selector, Mapping):
        keys.update(str(k) for k in selector)
    for term in _affinity_terms(spec):
        expressions = term.get("matchExpressions") if isinstance(term, Mapping) else None
        if isinstance(expressions, list):
            keys.update(
                str(e.get("key")) for e in expressions if isinstance(e, Mapping) and "key" in e
            )
    return keys


def _selector_mismatch(selector: Mapping[str, Any], node: Node) -> Reason | None:
    wrong = []
    for key, want in selector.items():
        have = node.labels.get(key)
        if have != want:
            shown = "absent" if have is None else repr(have)
            wrong.append(f"{key}={want} (node: {shown})")
    if not wrong:
        return None
    return Reason(NODE_SELECTOR_MISMATCH, "the pod's nodeSelector wants " + ", ".join(wrong))


def _selector_identity(spec: Mapping[str, Any]) -> bytes | None:
    """The pod's ``nodeSelector`` and ``affinity`` as JSON: two specs with the same identity get
    the same selectors, merges and answers. ``None`` when they are not plain JSON data (a
    caller's own objects): such a spec shares nothing."""
    try:
        return orjson.dumps([spec.get("nodeSelector"), spec.get("affinity")])
    except TypeError:
        return None


# The only parts of a pod spec that node affinity reads.
_SELECTOR_FIELDS = ("nodeSelector", "affinity")


class _Shared:
    """What the workloads of one :func:`explain` / :func:`explain_many` call have in common,
    computed once per call and dropped with it (no cache outlives the call).

    Thousands of workloads usually state a few dozen requirements and a few dozen selector
    shapes, so: requirement terms are compiled once per (requirement, policy, scheme, GFD keys);
    merges and compiled selectors once per (selectors, requirement terms); and every
    ``matchExpressions`` entry once per distinct expression (:class:`CompileCache`), since a
    merged affinity repeats the requirement's expressions in every term it crosses them into.
    Only compiled results are kept, not the merged pod specs they came from: those are many
    small dicts that would only feed the garbage collector.
    """

    __slots__ = (
        "annotated",
        "compiled",
        "declared",
        "requirement_selectors",
        "requirements",
        "selectors",
        "terms",
    )

    def __init__(self) -> None:
        self.compiled = CompileCache()
        # the values (and their types) of the annotations a requirement is read from -> it
        self.annotated: dict[tuple[Any, ...], Requirement | None] = {}
        # requirement repr -> the first equal requirement read from annotations in this call
        self.declared: dict[str, Requirement] = {}
        # (requirement repr, policy, scheme, GFD keys) -> (terms, requirement error)
        self.requirements: dict[Any, tuple[tuple[Any, ...], str | None]] = {}
        # the JSON of a terms tuple -> the first equal tuple compiled in this call
        self.terms: dict[bytes, tuple[Any, ...]] = {}
        # id of a terms tuple held in ``requirements`` -> its compiled selector
        self.requirement_selectors: dict[int, NodeSelector] = {}
        # (selector identity, has a requirement, id of its terms) -> compiled selectors
        self.selectors: dict[tuple[bytes, bool, int], _Selectors] = {}


@dataclass(frozen=True, slots=True, eq=False)
class _Selectors:
    """A pod's node selection as cudasched would admit it, compiled (see :func:`_selectors`)."""

    user_selector: Mapping[str, Any]
    user_affinity: NodeSelector | None
    req_selector: NodeSelector | None
    preferred: PreferredTerms | None
    score_error: str | None
    required: RequiredNodeAffinity
    match_fields: bool
    keys: tuple[str, ...]


def _selectors(
    spec: Mapping[str, Any], has_req: bool, terms: tuple[Any, ...], shared: _Shared
) -> _Selectors:
    """Merge ``terms`` into the pod's node affinity (when it has a requirement) and compile
    what :func:`_decide` matches with. Steps run in the order they always did, so a spec with
    several problems reports the same one first."""
    cache = shared.compiled
    # Only nodeSelector and affinity matter here; merging just these gives the same selectors
    # as merging the whole spec, without copying its containers.
    only = {k: spec[k] for k in _SELECTOR_FIELDS if k in spec}
    # Our merge strips expressions on keys cudasched owns before ANDing the requirement in;
    # the user's own constraints are what is left after that strip.
    user_spec = merge_required(only, []) if has_req else only
    merged = merge_required(only, terms) if has_req else user_spec
    user_selector = _mapping(spec.get("nodeSelector"), "spec.nodeSelector")
    user_affinity = RequiredNodeAffinity.from_pod_spec(
        {"affinity": user_spec.get("affinity")}, cache=cache
    ).affinity
    req_selector = None
    if terms:
        # ``terms`` is the very tuple the call's requirement cache holds (alive for the whole
        # call), so its id names it.
        req_selector = shared.requirement_selectors.get(id(terms))
        if req_selector is None:
            req_selector = NodeSelector.from_terms(terms, cache=cache)
            shared.requirement_selectors[id(terms)] = req_selector
    preferred: PreferredTerms | None = None
    score_error: str | None = None
    try:
        preferred = PreferredTerms.from_pod_spec(merged, cache=cache)
    except NodeSelectorError as exc:
        score_error = str(exc)
    return _Selectors(
        user_selector=user_selector,
        user_affinity=user_affinity,
        req_selector=req_selector,
        preferred=preferred,
        score_error=score_error,
        required=RequiredNodeAffinity.from_pod_spec(merged, cache=cache),
        match_fields=_has_match_fields(merged),
        keys=tuple(sorted(_referenced_keys(merged))),
    )


class _Plan:
    """Everything about one workload that does not depend on the node."""

    __slots__ = ("requirement", "selectors")

    def __init__(
        self,
        spec: Mapping[str, Any],
        requirement: Requirement | None,
        terms: tuple[Any, ...],
        shared: _Shared,
        identity: bytes | None,
    ) -> None:
        self.requirement = requirement
        has_req = requirement is not None
        if identity is None:  # not plain JSON: nothing to share it with
            self.selectors = _selectors(spec, has_req, terms, shared)
            return
        key = (identity, has_req, id(terms))
        found = shared.selectors.get(key)
        if found is None:
            found = shared.selectors[key] = _selectors(spec, has_req, terms, shared)
        self.selectors = found


def _decide(
    plan: _Plan,
    required: RequiredNodeAffinity,
    node: Node,
    facts: NodeFacts,
    policy: Policy,
    kb: KnowledgeBase,
) -> tuple[bool, Score, tuple[Reason, ...]]:
    eligible = required.match(node)
    sel = plan.selectors
    score: Score = sel.preferred.score(node) if sel.preferred is not None else SCORE_ERROR
    reasons: list[Reason] = []
    if plan.requirement is not None:
        verdict = check(facts, plan.requirement, policy, kb)
        reasons.extend(verdict.reasons)
        accepted = verdict.status is not VerdictStatus.INCOMPATIBLE
        if accepted and sel.req_selector is not None and not sel.req_selector.match(node):
            reasons.append(
                Reason(
                    REQUIREMENT_LABELS_MISSING,
                    "the node could run the workload but lacks the labels the compiled "
                    "requirement selects on (label scheme not published on this node yet)",
                )
            )
    if (mismatch := _selector_mismatch(sel.user_selector, node)) is not None:
        reasons.append(mismatch)
    user_affinity = sel.user_affinity
    if user_affinity is not None and not user_affinity.match(node):
        count = user_affinity.term_count
        detail = f"none of its {count} term(s) match" if count else "it has no usable term"
        if user_affinity.errors:
            detail += "; skipped terms: " + "; ".join(user_affinity.errors)
        reasons.append(
            Reason(AFFINITY_MISMATCH, f"the pod's required node affinity excludes it: {detail}")
        )
    return eligible, score, tuple(reasons)


def _renamed(reasons: tuple[Reason, ...], old: str, new: str) -> tuple[Reason, ...]:
    """Reasons computed for a group's first member, reworded for another member."""
    if old == new:
        return reasons
    quoted_old, quoted_new = repr(old), repr(new)
    return tuple(
        Reason(r.code, r.message.replace(quoted_old, quoted_new)) if quoted_old in r.message else r
        for r in reasons
    )


def explain(
    workload: Mapping[str, Any],
    nodes: Fleet | Iterable[Mapping[str, Any] | Node],
    policy: Policy | str,
    kb: KnowledgeBase,
    scheme: L.LabelScheme | str = L.LabelScheme.AUTO,
    *,
    requirement: Requirement | None = None,
) -> Explanation:
    """Explain, node by node, where ``workload`` (a Pod, a controller, a CronJob) may land.

    ``requirement`` replaces the one read from the workload's annotations (pass what the
    resolution of a KServe runtime or an image found); ``policy`` is the default the
    requirement's own policy overrides; ``scheme`` ``auto`` picks the labels every GPU node
    carries. A workload with ``cudasched.io/skip: "true"`` is explained as given.
    """
    fleet = nodes if isinstance(nodes, Fleet) else Fleet(nodes, kb)
    return _explain(workload, fleet, policy, scheme, requirement, None, _Shared())


# What explain's per-node answers depend on besides the fleet: the pod's nodeSelector and
# affinity (as canonical JSON), the requirement (its repr, patch level included), the effective
# policy and the label scheme. Workloads that agree on all of these get the same answers.
_MemoKey = tuple[bytes, str, Policy, L.LabelScheme]
_Memo = dict[Any, Any]


def _explain(
    workload: Mapping[str, Any],
    fleet: Fleet,
    policy: Policy | str,
    scheme: L.LabelScheme | str,
    requirement: Requirement | None,
    memo: _Memo | None,
    shared: _Shared,
) -> Explanation:
    who, template = _checked(workload)
    spec = _pod_spec(workload, who, template)
    annotations = _overlaid_annotations(workload, who, template)
    skipped = _skipped(annotations)
    declared = requirement is None
    req = requirement if requirement is not None else _declared(annotations, who, shared)
    if req is not None and req.is_empty:
        req = None
    if skipped:
        req = None
    base_policy = policy if isinstance(policy, Policy) else Policy.parse(str(policy))
    effective = resolve_policy(req, base_policy) if req is not None else base_policy
    chosen = fleet.resolve_scheme(scheme)
    gfd_keys = fleet.gfd_keys if chosen is L.LabelScheme.GFD else None
    selectors = _selector_identity(spec)
    req_id = repr(req)  # the repr, not equality: it tells patch levels apart
    if declared and req is not None:
        # Workloads that declare the same requirement share one (frozen) object, so a call
        # over thousands of them does not keep thousands of equal copies alive.
        req = shared.declared.setdefault(req_id, req)
    key: _MemoKey | None = None
    if memo is not None and selectors is not None:
        key = (selectors, req_id, effective, chosen)
    hit = memo.get(key) if memo is not None and key is not None else None
    if hit is None:
        terms, requirement_error, score_error, results = _answers(
            spec, req, req_id, effective, chosen, gfd_keys, fleet, memo, shared, selectors
        )
        if memo is not None and key is not None:
            memo[key] = (terms, requirement_error, score_error, results)
    else:
        terms, requirement_error, score_error, results = hit
    return Explanation(
        workload=who,
        nodes=results,
        requirement=req,
        policy=effective,
        scheme=chosen,
        terms=terms,  # one tuple per requirement, shared by its workloads
        gfd_keys=gfd_keys,
        skipped=skipped,
        score_error=score_error,
        requirement_error=requirement_error,
    )


def _requirement_terms(
    req: Requirement,
    req_id: str,
    effective: Policy,
    chosen: L.LabelScheme,
    gfd_keys: GfdKeys,
    kb: KnowledgeBase,
    shared: _Shared,
) -> tuple[tuple[Any, ...], str | None]:
    """The requirement's node-selector terms (or why there are none), once per call."""
    key = (req_id, effective, chosen, gfd_keys)
    found = shared.requirements.get(key)
    if found is None:
        try:
            terms = tuple(compile_requirement(req, effective, chosen, kb, gfd_keys))
        except InputError as exc:
            # No selector can express "no node": the webhook refuses such a pod, so no node is
            # eligible; the engine's per-node reasons say why.
            found = ((), str(exc))
        else:
            # Requirements that differ only in wording (their source) compile to equal terms:
            # one tuple for all of them lets their workloads share merges and selectors.
            found = (shared.terms.setdefault(orjson.dumps(terms), terms), None)
        shared.requirements[key] = found
    return found


def _answers(
    spec: Mapping[str, Any],
    req: Requirement | None,
    req_id: str,
    effective: Policy,
    chosen: L.LabelScheme,
    gfd_keys: GfdKeys | None,
    fleet: Fleet,
    memo: _Memo | None,
    shared: _Shared,
    selectors: bytes | None,
) -> tuple[tuple[Any, ...], str | None, str | None, _Answers]:
    """The per-node answers for one pod spec and requirement (the expensive part).

    Without ``matchFields`` the answers are one decision per partition group (a
    :class:`_LazyAnswers`); the per-node objects are built on first access. With ``memo``, a
    group's block of answers is built once per distinct decision and shared by every workload
    that gets the same decision there."""
    terms: tuple[Any, ...] = ()
    requirement_error: str | None = None
    if req is not None:
        terms, requirement_error = _requirement_terms(
            req, req_id, effective, chosen, gfd_keys or GfdKeys.NEW, fleet.kb, shared
        )
    plan = _Plan(spec, req, terms, shared, selectors)
    required = plan.selectors.required
    kb = fleet.kb
    results: list[NodeExplanation] = []
    if plan.selectors.match_fields:
        # matchFields look at the node name: no two nodes are alike.
        for node, _, facts in fleet.members():
            eligible, score, reasons = _decide(plan, required, node, facts, effective, kb)
            # The engine names the node it was shown: the facts group's first member.
            reasons = _renamed(reasons, facts.name, node.name)
            if requirement_error is not None:
                eligible = False
            results.append(NodeExplanation(node.name, eligible, score, reasons, facts))
        return terms, requirement_error, plan.selectors.score_error, tuple(results)
    keys = plan.selectors.keys
    part = fleet.partition(keys)
    nodes, facts_of, all_facts = fleet.nodes, fleet._facts_of, fleet._facts
    decisions: list[tuple[bool, Score, tuple[Reason, ...], NodeFacts]] = []
    for position in part.first:
        facts = all_facts[facts_of[position]]
        eligible, score, reasons = _decide(plan, required, nodes[position], facts, effective, kb)
        if requirement_error is not None:
            eligible = False
        decisions.append((eligible, score, reasons, facts))
    # One decision per group; the per-node answers are built only if someone reads them.
    lazy = _LazyAnswers(part, decisions, nodes, memo)
    return terms, requirement_error, plan.selectors.score_error, lazy


def explain_many(
    workloads: Sequence[Mapping[str, Any]],
    nodes: Fleet | Iterable[Mapping[str, Any] | Node],
    policy: Policy | str,
    kb: KnowledgeBase,
    scheme: L.LabelScheme | str = L.LabelScheme.AUTO,
    requirements: Sequence[Requirement | None] | None = None,
) -> list[Explanation]:
    """:func:`explain` for several workloads over one prepared fleet."""
    fleet = nodes if isinstance(nodes, Fleet) else Fleet(nodes, kb)
    if requirements is not None and len(requirements) != len(workloads):
        raise InputError(
            f"got {len(requirements)} requirements for {len(workloads)} workloads: "
            "expected one (or None) per workload"
        )
    reqs = requirements if requirements is not None else [None] * len(workloads)
    # Workloads with the same selectors and requirement share their per-node answers (replicas
    # of one template, pods of one ReplicaSet): computed once, reused as the same tuple.
    memo: _Memo = {}
    shared = _Shared()
    return [
        _explain(w, fleet, policy, scheme, r, memo, shared)
        for w, r in zip(workloads, reqs, strict=True)
    ]
