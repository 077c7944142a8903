"""Node-selector terms and merged affinities for admission, remembered in bounded memos.

Compiling a requirement into terms for the cluster's label scheme, and ANDing those terms into a
pod's own affinity, are the two expensive steps of a first-seen decision; both are pure, so
their results are remembered: compiled terms per (every rule-relevant field of the
requirement, policy, scheme, GFD key generation), which is valid across snapshots, and merged
affinities per (the object's own affinity, our terms) as JSON, which pods of one Deployment
repeat. Both memos are bounded in bytes (``selectorCacheBytes``, ``affinityCacheBytes``): the
merge memo's key holds the pod's own affinity, whose size the request chooses. A race between
review threads only computes an entry twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson

from cudasched.placement.compile import compile_requirement
from cudasched.placement.merge import AffinityMode, merge_preferred, merge_required
from cudasched.vocab.errors import InputError
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.webhook.bounded import BoundedMemo

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.webhook.config import WebhookConfig
    from cudasched.webhook.state import ClusterState

__all__ = ["PREFERRED_WEIGHT", "Placer"]

#: The weight of cudasched's terms in ``preferred`` mode.
PREFERRED_WEIGHT = 100

# Merge-memo keys embed the pod's own affinity; unusually large ones are merged every time.
_MERGE_MEMO_MAX_KEY_BYTES = 16_384


class Placer:
    """Compiles requirements and merges terms under one configuration (see the module
    docstring); shared by the review threads of one Admitter."""

    def __init__(self, config: WebhookConfig, kb: KnowledgeBase) -> None:
        self.config = config
        self.kb = kb
        # The source is left out of the key because it can quote an image reference of any
        # length and never changes the terms.
        self.compiled: BoundedMemo[tuple[Any, ...], tuple[list[dict[str, Any]] | None, str]] = (
            BoundedMemo(config.selector_cache_bytes)
        )
        self.merged: BoundedMemo[bytes, bytes | None] = BoundedMemo(config.affinity_cache_bytes)

    def compile(
        self, requirement: Requirement, policy: Policy, state: ClusterState
    ) -> tuple[list[dict[str, Any]] | None, str | None, tuple[Any, ...]]:
        """The node-selector terms for ``requirement`` in the cluster's label scheme, and the
        "no node can run it" message when it applies.

        Terms are ``None`` when no selector can exist (a toolkit or compute capability no GPU
        could ever satisfy): the pod is then annotated but its affinity is left alone, and the
        message always applies. Otherwise the message needs a synced snapshot, because an
        empty or half-listed cache must never produce warnings or denials.
        The key of the terms (for :meth:`ClusterState.fits`) comes last.
        """
        what = (
            f"CUDA {requirement.cuda.release}"
            if requirement.cuda is not None
            and requirement.min_compute is None
            and requirement.framework is None
            else requirement.describe()
        )
        scheme = state.scheme(self.config.label_scheme)
        # Every rule-relevant field of the requirement, never its source.
        key = (requirement.needs, policy, scheme, state.gfd_keys)
        found = self.compiled.get(key)
        if found is None:
            try:
                compiled = (
                    compile_requirement(requirement, policy, scheme, self.kb, state.gfd_keys),
                    "",
                )
            except InputError as exc:
                compiled = (None, str(exc))
            self.compiled.put(key, compiled, len(orjson.dumps(compiled)))
        else:
            compiled = found[0]
        terms, error = compiled
        if terms is None:
            return None, f"cudasched: no node can ever run {what}: {error}", key
        if not state.synced or not terms:
            return terms, None, key
        if state.fits(key, terms):
            return terms, None, key
        return terms, f"cudasched: no node can run {what}; {state.drivers.describe()}", key

    def merge(self, spec: Mapping[str, Any], terms: list[dict[str, Any]]) -> dict[str, Any]:
        """``spec`` with ``terms`` merged into its node affinity (required or preferred, per
        ``mode``). The merge only ever changes ``spec.affinity`` (everything else is copied
        as it is), so it runs on the affinity alone and its result is memoised by the JSON of
        (affinity, terms); each call still gets its own copy of the merged affinity."""
        out = dict(spec)
        try:
            key = orjson.dumps(["affinity" in out, out.get("affinity"), terms])
        except TypeError:  # not plain JSON data: no memo
            return self._merge_affinity(out, terms)
        if len(key) > _MERGE_MEMO_MAX_KEY_BYTES:
            return self._merge_affinity(out, terms)
        remembered = self.merged.get(key)
        if remembered is None:
            merged = self._merge_affinity(
                {"affinity": out["affinity"]} if "affinity" in out else {}, terms
            )
            found = orjson.dumps(merged["affinity"]) if "affinity" in merged else None
            self.merged.put(key, found, len(key) + len(found or b""))
        else:
            found = remembered[0]
        if found is None:
            out.pop("affinity", None)
        else:
            out["affinity"] = orjson.loads(found)
        return out

    def _merge_affinity(self, spec: dict[str, Any], terms: list[dict[str, Any]]) -> dict[str, Any]:
        if self.config.mode is AffinityMode.PREFERRED:
            return merge_preferred(spec, terms, PREFERRED_WEIGHT)
        return merge_required(spec, terms)
