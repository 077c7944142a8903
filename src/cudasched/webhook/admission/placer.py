"""Node-selector terms and merged affinities for admission, remembered in bounded memos.

Compiling a requirement into terms for the cluster's label scheme, and ANDing those terms into a
pod's own affinity, are the two expensive steps of a first-seen decision; both are pure, so
their results are remembered: compiled terms per (every rule-relevant field of the
requirement, policy, scheme, GFD key generation), which is valid across snapshots, and merged
affinities per (the object's own affinity as JSON, our terms), which pods of one Deployment
repeat. Both memos are bounded in bytes (``selectorCacheBytes``, ``affinityCacheBytes``): the
merge memo's key holds the pod's own affinity, whose size the request chooses. A race between
review threads only computes an entry twice.

Compiled terms are validated for merging once, with the compilation
(:func:`~cudasched.placement.merge.checked_terms`), and named in the merge memo by the SHA-256
of their JSON (a large cluster's terms are tens of KB: checking and serialising them on every
merge was a fifth of a first-seen decision at 5,000 nodes, issue 22).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from cudasched.explain.fit import Selection, has_own_selection, selection_of
from cudasched.explain.selectors import selector_identity
from cudasched.placement.compile import compile_requirement
from cudasched.placement.deviceclass import device_class
from cudasched.placement.merge import (
    AffinityMode,
    CheckedTerms,
    checked_terms,
    merge_preferred,
    merge_required,
)
from cudasched.vocab.errors import InputError
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.webhook.admission.patch import Op, Scope, diff
from cudasched.webhook.memo.bounded import BoundedMemo

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.settings.config import WebhookConfig
    from cudasched.webhook.state.clusterstate import ClusterState

__all__ = [
    "PREFERRED_WEIGHT",
    "ClassChoice",
    "Compiled",
    "Deferred",
    "FitCheck",
    "Placer",
    "cheap_only",
]

#: The weight of cudasched's terms in ``preferred`` mode.
PREFERRED_WEIGHT = 100

#: Bytes of DeviceClasses remembered per requirement (``dra.mode``): their names and selectors.
_CLASS_MEMO_BYTES = 512 * 1024

# Merge-memo keys embed the pod's own affinity; unusually large ones are merged every time.
_MERGE_MEMO_MAX_KEY_BYTES = 16_384


class Deferred(Exception):  # noqa: N818 - not an error: a decision handed on
    """A step whose cost grows with the cluster (compiling a requirement, finding whether any
    node fits it) or with our terms (a merge) is not remembered yet, and the placer was told to
    stay cheap (:func:`cheap_only`): the decision is left to a review thread."""


_CHEAP: ContextVar[bool] = ContextVar("cudasched_placer_cheap_only", default=False)


@contextlib.contextmanager
def cheap_only() -> Iterator[None]:
    """Within the block, :meth:`Placer.compile` and :meth:`Placer.merge` raise
    :class:`Deferred` instead of doing work that is not remembered."""
    token = _CHEAP.set(True)
    try:
        yield
    finally:
        _CHEAP.reset(token)


#: ``(key, selection)``: what :meth:`ClusterState.fits` asks, to re-check a later snapshot
#: (the NoCompatibleNode reporter).
FitCheck = tuple[Any, Callable[[], Selection]]


class ClassChoice(NamedTuple):
    """A requirement's CUDA-aware DeviceClass as admission asks it: its name, and its CEL
    selectors in order (the full-GPU guard first)."""

    name: str
    selectors: tuple[str, ...]


class Compiled(NamedTuple):
    """What :meth:`Placer.compile` found: the terms (``None`` when no selector can exist), the
    "no node can ever run it" message when none can, the key of the terms (their digest, or
    the requirement's memo key when there are no terms), and what :meth:`Placer.merge` needs
    of them."""

    terms: list[dict[str, Any]] | None
    no_fit: str | None
    key: Any
    checked: CheckedTerms | None = None  # the terms validated for merging, when they are valid
    tag: bytes = b""  # the SHA-256 of the terms' JSON: their name in the merge memo


class Placer:
    """Compiles requirements and merges terms under one configuration (see the module
    docstring); shared by the review threads of one Admitter."""

    def __init__(self, config: WebhookConfig, kb: KnowledgeBase) -> None:
        self.config = config
        self.kb = kb
        # The source is left out of the key because it can quote an image reference of any
        # length and never changes the terms.
        self.compiled: BoundedMemo[tuple[Any, ...], _Entry] = BoundedMemo(
            config.selector_cache_bytes
        )
        self.merged: BoundedMemo[bytes, _Merge] = BoundedMemo(config.affinity_cache_bytes)
        self.classes: BoundedMemo[tuple[Any, ...], ClassChoice | None] = BoundedMemo(
            _CLASS_MEMO_BYTES
        )

    def device_class(self, requirement: Requirement, policy: Policy) -> ClassChoice | None:
        """The CUDA-aware DeviceClass ``cudasched device-classes`` writes for ``requirement``
        under ``policy``, its name and selectors (``None`` when no GPU can meet it),
        remembered: they cost as much as compiling terms."""
        key = (requirement.needs, policy)
        found = self.classes.get(key)
        if found is not None:
            return found[0]
        if _CHEAP.get():
            raise Deferred("device class")
        try:
            draft = device_class(requirement, policy, self.kb)
        except InputError:
            self.classes.put(key, None, 64)
            return None
        selectors = tuple(s["cel"]["expression"] for s in draft.obj["spec"]["selectors"])
        choice = ClassChoice(draft.name, selectors)
        self.classes.put(key, choice, len(draft.name) + sum(len(s) for s in selectors))
        return choice

    def compile(self, requirement: Requirement, policy: Policy, state: ClusterState) -> Compiled:
        """The node-selector terms for ``requirement`` in the cluster's label scheme.

        Terms are ``None`` when no selector can exist (a toolkit or compute capability no GPU
        could ever satisfy): the pod is then annotated but its affinity is left alone, and the
        "no node can ever run it" message (``no_fit``) applies. Whether any node of the
        snapshot can run the workload is :meth:`no_fit`'s question.
        """
        scheme = state.scheme(self.config.label_scheme)
        # Every rule-relevant field of the requirement, never its source.
        key = (requirement.needs, policy, scheme, state.gfd_keys)
        found = self.compiled.get(key)
        cheap = _CHEAP.get()
        if found is None:
            if cheap:
                raise Deferred("compile")
            entry = _compile(
                requirement, policy, scheme, self.kb, state, self.config.placement.bound_cuda_class
            )
            self.compiled.put(key, entry, entry.size)
        else:
            entry = found[0]
        terms = entry.terms
        if terms is None:
            what = _what(requirement)
            return Compiled(None, f"cudasched: no node can ever run {what}: {entry.error}", key)
        # The terms' digest names them for the fit memo: hashed once (bytes keep their hash),
        # where the requirement's key hashes its nested fields on every lookup.
        return Compiled(terms, None, entry.tag, entry.checked, entry.tag)

    def no_fit(
        self,
        requirement: Requirement,
        compiled: Compiled,
        spec: Mapping[str, Any],
        gpu_requests: frozenset[str],
        state: ClusterState,
        *,
        whose: str = "the pod's",
    ) -> tuple[str | None, FitCheck | None]:
        """The "no node can run it" message when no node of the snapshot can run a workload of
        pod ``spec`` (which asks for ``gpu_requests``) under ``compiled`` (``None``: some node
        can), and the check that asks it again of a later snapshot (``None`` when no selector
        can exist).

        Whether a node can run it is :class:`~cudasched.explain.fit.Selection`'s rule, the one
        ``explain`` and the audit use: the spec's own ``nodeSelector`` and required affinity
        ANDed with the terms, and the GPU resources it asks for offered. Remembered per
        snapshot by (the terms' tag, the spec's own selection, the resources): a pod without a
        selection of its own pays one look-up. Only a synced snapshot ever says no: an empty
        or half-listed cache must never produce warnings or denials. ``whose`` names the
        selection in the message (``its predictor's``)."""
        terms = compiled.terms
        if terms is None:
            return compiled.no_fit, None
        own = None
        if has_own_selection(spec):
            identity = selector_identity(spec)
            if identity is None:
                return None, None  # not plain JSON: nothing to key it by
            # Named by its digest: the request chooses the selection's size, and the fit memo
            # counts its entries, not their keys.
            own = hashlib.sha256(identity).digest()
        key = (compiled.tag, own, gpu_requests)
        chosen = terms if compiled.checked is None else compiled.checked

        def selection() -> Selection:
            return selection_of(spec if own is not None else {}, chosen, gpu_requests)

        check: FitCheck = (key, selection)
        if not state.synced:
            return None, check
        if _CHEAP.get() and state.known_fit(key) is None:
            raise Deferred("fit")
        try:
            if state.fits(key, selection):
                return None, check
        except InputError:  # an affinity that cannot be merged: said by the merge itself
            return None, None
        return self._why_not(requirement, compiled, chosen, own, gpu_requests, state, whose), check

    def _why_not(
        self,
        requirement: Requirement,
        compiled: Compiled,
        terms: Sequence[Mapping[str, Any]],
        own: bytes | None,
        gpu_requests: frozenset[str],
        state: ClusterState,
        whose: str,
    ) -> str:
        """Why no node can run it: the requirement alone, the workload's own selection, or
        the GPU resources it asks for (asked in that order, each remembered like the whole)."""
        what = _what(requirement)
        alone: frozenset[str] = frozenset()
        if not state.fits((compiled.tag, None, alone), lambda: selection_of({}, terms, alone)):
            return f"cudasched: no node can run {what}; {state.drivers.describe()}"
        if own is not None and state.fits(
            (compiled.tag, None, gpu_requests), lambda: selection_of({}, terms, gpu_requests)
        ):
            return (
                f"cudasched: {whose} own nodeSelector or node affinity excludes every node "
                f"that can run {what}"
            )
        asked = ", ".join(sorted(gpu_requests))
        return f"cudasched: no node that can run {what} offers {asked}"

    def merge(self, spec: Mapping[str, Any], compiled: Compiled) -> dict[str, Any]:
        """``spec`` with the ``compiled`` terms merged into its node affinity (required or
        preferred, per ``mode``). The merge only ever changes ``spec.affinity`` (everything
        else is copied as it is), so it runs on the affinity alone and its result is memoised
        by (the affinity's JSON, the terms' tag); each call still gets its own copy of the
        merged affinity."""
        out = dict(spec)
        found = self._remembered(out, compiled)
        if found is None:
            return self._merge_affinity(out, self._terms(compiled))
        if found.affinity is None:
            out.pop("affinity", None)
        else:
            out["affinity"] = orjson.loads(found.affinity)
        return out

    def merge_ops(self, spec: Mapping[str, Any], compiled: Compiled, at: str) -> list[Op]:
        """The JSON patch that turns ``spec`` into :meth:`merge`'s result, with paths under
        ``at`` (the pointer of ``spec`` in the admitted object): the operations of
        :func:`~cudasched.webhook.admission.patch.diff` over ``spec.affinity``, in its order.

        A remembered merge keeps these operations with their values already written as JSON,
        handed on as ``orjson.Fragment`` values: a first-seen pod whose merge is remembered neither
        decodes the merged affinity, nor compares it with its own, nor encodes it again (a
        fifth of such a decision, issue 22). The answer's bytes are the same."""
        found = self._remembered(spec, compiled)
        if found is None:
            merged = self._merge_affinity(dict(spec), self._terms(compiled))
            return diff(spec, merged, (_AFFINITY,), at)
        return found.patch(at)

    @staticmethod
    def _terms(compiled: Compiled) -> list[dict[str, Any]] | CheckedTerms:
        assert compiled.terms is not None
        return compiled.checked if compiled.checked is not None else compiled.terms

    def _remembered(self, spec: Mapping[str, Any], compiled: Compiled) -> _Merge | None:
        """The merge memo's entry for ``spec`` and ``compiled``, merged and stored when missing;
        ``None`` when the spec's affinity is too large to remember or not plain JSON (the
        caller then merges it itself). Raises :class:`Deferred` for a merge not remembered
        under :func:`cheap_only`."""
        cheap = _CHEAP.get()
        try:
            own = orjson.dumps(["affinity" in spec, spec.get("affinity")])
        except TypeError:  # not plain JSON data: no memo
            own = None
        if own is None or len(own) > _MERGE_MEMO_MAX_KEY_BYTES:
            if cheap:
                raise Deferred("merge")
            return None
        key = own + compiled.tag  # the tag has a fixed length: the key reads one way only
        remembered = self.merged.get(key)
        if remembered is not None:
            return remembered[0]
        if cheap:
            raise Deferred("merge")
        before = {"affinity": spec["affinity"]} if "affinity" in spec else {}
        merged = self._merge_affinity(dict(before), self._terms(compiled))
        entry = _Merge.of(before, merged)
        self.merged.put(key, entry, len(key) + entry.size)
        return entry

    def _merge_affinity(
        self, spec: dict[str, Any], terms: list[dict[str, Any]] | CheckedTerms
    ) -> dict[str, Any]:
        if self.config.mode is AffinityMode.PREFERRED:
            return merge_preferred(spec, terms, PREFERRED_WEIGHT)
        return merge_required(spec, terms)


def _what(requirement: Requirement) -> str:
    """The requirement as the "no node can run" messages name it."""
    if (
        requirement.cuda is not None
        and requirement.min_compute is None
        and requirement.framework is None
    ):
        return f"CUDA {requirement.cuda.release}"
    return requirement.describe()


#: The one subtree a merge changes, relative to the spec.
_AFFINITY = Scope(("affinity",))
#: Bytes a remembered merge is counted per patch operation besides its values (the tuple, its
#: operation and path).
_OP_OVERHEAD = 64


class _Merge(NamedTuple):
    """A merge as the merge memo keeps it: the merged affinity as JSON (``None`` when the
    result has none) and the patch from the spec's own affinity to it: operation, path relative
    to the spec, and value (``None`` for none; else where its JSON lies in ``affinity``, which
    holds every value a merge writes, or the JSON itself when it does not)."""

    affinity: bytes | None
    ops: tuple[tuple[str, str, tuple[int, int] | bytes | None], ...]
    size: int

    @classmethod
    def of(cls, before: Mapping[str, Any], merged: Mapping[str, Any]) -> _Merge:
        affinity = orjson.dumps(merged["affinity"]) if "affinity" in merged else None
        ops: list[tuple[str, str, tuple[int, int] | bytes | None]] = []
        size = len(affinity or b"")
        for op in diff(before, merged, (_AFFINITY,)):
            where: tuple[int, int] | bytes | None = None
            if "value" in op:  # every op but a remove
                written = orjson.dumps(op["value"])
                # JSON is written part by part: a value of the merged affinity is a run of its
                # bytes (any run equal to it reads as the same value).
                start = affinity.find(written) if affinity is not None else -1
                if start < 0:
                    where = written
                    size += len(written)
                else:
                    where = (start, start + len(written))
            ops.append((op["op"], op["path"], where))
        return cls(affinity, tuple(ops), size + _OP_OVERHEAD * len(ops))

    def patch(self, at: str) -> list[Op]:
        """The operations with paths under ``at``, their values as ``orjson.Fragment``."""
        out: list[Op] = []
        for op, path, where in self.ops:
            if where is None:
                out.append({"op": op, "path": at + path})
                continue
            if type(where) is tuple:
                assert self.affinity is not None
                where = self.affinity[where[0] : where[1]]
            out.append({"op": op, "path": at + path, "value": orjson.Fragment(where)})
        return out


class _Entry(NamedTuple):
    """A compiled requirement as the compile memo keeps it."""

    terms: list[dict[str, Any]] | None
    error: str
    checked: CheckedTerms | None
    tag: bytes
    size: int


def _compile(
    requirement: Requirement,
    policy: Policy,
    scheme: Any,
    kb: KnowledgeBase,
    state: ClusterState,
    class_bound: bool,
) -> _Entry:
    try:
        terms = compile_requirement(
            requirement, policy, scheme, kb, state.gfd_keys, class_bound=class_bound
        )
    except InputError as exc:
        return _Entry(None, str(exc), None, b"", len(str(exc)))
    text = orjson.dumps(terms)
    try:
        checked: CheckedTerms | None = checked_terms(terms)
    except InputError:  # the merge says why, as it always did
        checked = None
    # The checked copy is counted too, unless it is the same as the terms (it usually is).
    size = len(text) if checked is None or list(checked) == terms else 2 * len(text)
    return _Entry(terms, "", checked, hashlib.sha256(text).digest(), size)
