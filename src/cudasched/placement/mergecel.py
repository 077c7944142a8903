""":func:`~cudasched.placement.merge.merge_required` written in CEL, for the API server's
MutatingAdmissionPolicy: cudasched's terms ANDed into every ``nodeSelectorTerm`` a pod already
has, the user's own expressions kept, an earlier injection replaced.

Why JSON patches and not an apply configuration: a node affinity's term list is atomic in the
API's merge rules, so an apply configuration can only replace the user's terms, never AND into
them. The patch rewrites ``nodeSelectorTerms`` whole, computed the way ``merge_required`` does:

1. each existing term loses the marker expression (``cudasched.io/injected``, either writer's)
   and what follows it; a term left empty is dropped, a stripped term equal to an earlier one is
   dropped; a term the user wrote empty (it matches no node) is kept as it is and never crossed;
2. every other term is ANDed with each of cudasched's alternatives (the cross product), the
   first of equal terms only, behind the policy's marker;
3. past ``max(128, terms before)`` terms the pod is left unconstrained, as the webhook leaves it
   (no patch at all); the terms are counted before the product is built, which past the limit
   would run out of the API server's CEL budget;
4. with no required affinity the terms are added at the first level that is missing; with no
   terms of ours (the requirement constrains nothing) only the earlier injection is removed,
   and containers left empty by that removal go too.

The policy's marker is ``cudasched.io/injected NotIn [policy]`` where the webhook writes
``cudasched.io/injected DoesNotExist``: no node carries the label, so both match every node, and
the operator says who placed the pod. The policy leaves a pod the webhook placed alone (the
API server runs policies before webhooks, so this happens only on a reinvocation), and the
webhook's registration in the ``both`` mode skips a pod the policy placed
(:data:`POLICY_PLACED`).

Every value is built as plain CEL maps and lists, wrapped in ``dyn`` where the API server's
homogeneous-literal rule needs it, so the patch never depends on a typed object initializer.
The pod's own terms are copied into plain values first (a typed list of the pod's does not
convert to JSON, :func:`_norm_expressions`); cudasched's terms, read from the
``PlacementTable`` parameter (whose schema requires ``matchExpressions`` in every term),
convert as they are and go into the patch unchanged: rebuilding them expression by expression
made the patch costlier to build and to apply (the API server's time in the mutating policy
per pod fell by about a fifth without it, ``benchmarks/RESULTS.md`` section 12).
"""

from __future__ import annotations

from cudasched.placement.claimcel import claim_patch
from cudasched.placement.deviceclass import EXTENDED_RESOURCE_PREFIX
from cudasched.placement.merge import INJECTED_KEY, MAX_MERGED_TERMS, REQUIRED_KEY
from cudasched.vocab.kserve import NVIDIA_GPU

__all__ = [
    "POLICY_MARKER",
    "POLICY_PLACED",
    "POLICY_PLACEMENT_INTACT",
    "WEBHOOK_PLACED",
    "affinity_variables",
    "dra_moves",
    "patch_expression",
]

PREFERRED_KEY = "preferredDuringSchedulingIgnoredDuringExecution"

#: The expression that starts the policy's part of a term.
POLICY_MARKER = {"key": INJECTED_KEY, "operator": "NotIn", "values": ["policy"]}

_NA = "object.spec.affinity.nodeAffinity"
_REQ = f"{_NA}.{REQUIRED_KEY}"
_PREF = f"{_NA}.{PREFERRED_KEY}"
_HAS_NA = "(has(object.spec.affinity) && has(object.spec.affinity.nodeAffinity))"


def _marked(expressions: str, operator: str) -> str:
    return (
        f"has({expressions}) && {expressions}.exists(e, e.key == '{INJECTED_KEY}' && "
        f"e.operator == '{operator}')"
    )


def _placed_by(operator: str) -> str:
    """CEL: the pod (``object``) carries a term or preference with this marker."""
    return (
        f"({_HAS_NA} && ((has({_REQ}) && has({_REQ}.nodeSelectorTerms) && "
        f"{_REQ}.nodeSelectorTerms.exists(t, {_marked('t.matchExpressions', operator)})) || "
        f"(has({_PREF}) && {_PREF}.exists(p, has(p.preference) && "
        f"{_marked('p.preference.matchExpressions', operator)}))))"
    )


#: CEL over ``object``: the webhook placed this pod.
WEBHOOK_PLACED = _placed_by("DoesNotExist")
#: CEL over ``object``: the policy placed this pod (the webhook's ``matchConditions`` in the
#: ``both`` mode skip it).
POLICY_PLACED = _placed_by("NotIn")
#: CEL over ``object``: the policy's placement is intact, every required term carrying its
#: marker (the policy's own ``matchConditions`` skip such a pod, ``install/policy``).
POLICY_PLACEMENT_INTACT = (
    f"({_HAS_NA} && has({_REQ}) && has({_REQ}.nodeSelectorTerms) && "
    f"size({_REQ}.nodeSelectorTerms) > 0 && "
    f"{_REQ}.nodeSelectorTerms.all(t, {_marked('t.matchExpressions', 'NotIn')}))"
)


def _norm_expressions(of: str) -> str:
    """CEL: a typed list of node-selector requirements as plain maps, every value copied into
    a plain CEL string or list (a typed list of the pod's own does not convert to JSON inside a
    ``dyn`` on Kubernetes 1.37: "type conversion error from 'list(dyn)'")."""
    return (
        f"(has({of}) ? {of}.map(x, {{'key': dyn(string(x.key)), "
        f"'operator': dyn(string(x.operator)), "
        f"'values': dyn(has(x.values) ? x.values.map(v, string(v)) : [])}}) : [])"
    )


def _term(expressions: str, fields: str) -> str:
    """CEL: a node-selector term as a plain map, ``matchFields`` only when there are any."""
    return (
        f"(size({fields}) > 0 ? {{'matchExpressions': dyn({expressions}), "
        f"'matchFields': dyn({fields})}} : {{'matchExpressions': dyn({expressions})}})"
    )


_MARKER_CEL = (
    f"{{'key': dyn('{INJECTED_KEY}'), 'operator': dyn('NotIn'), 'values': dyn(['policy'])}}"
)


def affinity_variables() -> list[tuple[str, str]]:
    """The policy's variables (name, CEL) the patch reads, in order (each may use those before
    it). ``variables.entry`` must be defined before them: the placement looked up for the pod,
    with ``terms`` (a list of ``{matchExpressions}``) when the webhook would merge terms."""
    terms = f"{_REQ}.nodeSelectorTerms"
    n = "variables.norms"
    # A kept term is crossed unless the user wrote it empty (a stripped one is never empty).
    crossable = f"(size({n}[i].e) > 0 || size({n}[i].f) > 0)"
    anded = f"{n}[i].e + [{_MARKER_CEL}] + dyn(o.matchExpressions)"
    return [
        ("hasNodeAffinity", _HAS_NA),
        (
            "hasRequired",
            f"variables.hasNodeAffinity && has({_REQ}) && has({terms}) && size({terms}) > 0",
        ),
        (
            # Each existing term as plain maps: e (expressions before any marker), f (fields),
            # m (whether it had a marker).
            "norms",
            f"variables.hasRequired ? {terms}.map(t, {{"
            f"'e': dyn(has(t.matchExpressions) && "
            f"t.matchExpressions.map(x, x.key).indexOf('{INJECTED_KEY}') >= 0 ? "
            f"{_norm_expressions('t.matchExpressions')}.slice(0, "
            f"t.matchExpressions.map(x, x.key).indexOf('{INJECTED_KEY}')) : "
            f"{_norm_expressions('t.matchExpressions')}), "
            f"'f': dyn({_norm_expressions('t.matchFields')}), "
            f"'m': dyn(has(t.matchExpressions) && "
            f"t.matchExpressions.map(x, x.key).indexOf('{INJECTED_KEY}') >= 0)}}) : []",
        ),
        (
            # The indexes of the terms kept after stripping (step 1).
            "kept",
            f"lists.range(size({n})).filter(i, !{n}[i].m || "
            f"((size({n}[i].e) > 0 || size({n}[i].f) > 0) && "
            f"!lists.range(i).exists(j, {n}[j].e == {n}[i].e && {n}[j].f == {n}[i].f)))",
        ),
        ("ours", "has(variables.entry.terms) ? variables.entry.terms : []"),
        (
            "fresh",
            f"variables.ours.map(o, {{'matchExpressions': dyn([{_MARKER_CEL}]) + "
            f"dyn(o.matchExpressions)}})",
        ),
        (
            # How many terms step 2 makes, counted without making them: user-empty terms, and
            # our alternatives for the first occurrence of each other term. Checked before the
            # product is built (step 3), which past the limit would run out of the API server's
            # CEL budget (measured: 4 terms x 128 alternatives of 34 expressions did).
            "crossedCount",
            f"size(variables.kept.filter(i, !({crossable}))) + size(variables.kept.filter(i, "
            f"{crossable} && !variables.kept.exists(j, j < i && {n}[j].e == {n}[i].e && "
            f"{n}[j].f == {n}[i].f))) * size(variables.ours)",
        ),
        (
            # The webhook leaves such a pod as it is: a required affinity without terms, or a
            # cross product past the limit (step 3).
            "unmergeable",
            f"has(variables.entry.terms) && ((variables.hasNodeAffinity && has({_REQ}) && "
            f"!variables.hasRequired) || (variables.hasRequired && size(variables.ours) > 0 && "
            f"size(variables.kept) > 0 && variables.crossedCount > "
            f"({MAX_MERGED_TERMS} > size({n}) ? {MAX_MERGED_TERMS} : size({n}))))",
        ),
        (
            # Step 2: user-empty terms as they are, each other term (its first occurrence)
            # crossed with our alternatives.
            "crossed",
            f"variables.kept.map(i, !({crossable}) ? [{_term(f'{n}[i].e', f'{n}[i].f')}] : "
            f"variables.kept.exists(j, j < i && {n}[j].e == {n}[i].e && {n}[j].f == {n}[i].f) "
            f"? [] : variables.ours.map(o, {_term(anded, f'{n}[i].f')})).flatten()",
        ),
    ]


def _add_required(terms: str) -> str:
    required = f"{{'{REQUIRED_KEY}': {{'nodeSelectorTerms': {terms}}}}}"
    return (
        f"variables.hasNodeAffinity ? [JSONPatch{{op: 'add', "
        f"path: '/spec/affinity/nodeAffinity/{REQUIRED_KEY}', "
        f"value: {{'nodeSelectorTerms': {terms}}}}}] : "
        f"has(object.spec.affinity) ? [JSONPatch{{op: 'add', path: '/spec/affinity/nodeAffinity', "
        f"value: {required}}}] : "
        f"[JSONPatch{{op: 'add', path: '/spec/affinity', value: {{'nodeAffinity': {required}}}}}]"
    )


def _remove_required() -> str:
    """Remove the required affinity and the containers that removal leaves empty."""
    return (
        f"has({_PREF}) ? [JSONPatch{{op: 'remove', "
        f"path: '/spec/affinity/nodeAffinity/{REQUIRED_KEY}'}}] : "
        "has(object.spec.affinity.podAffinity) || has(object.spec.affinity.podAntiAffinity) ? "
        "[JSONPatch{op: 'remove', path: '/spec/affinity/nodeAffinity'}] : "
        "[JSONPatch{op: 'remove', path: '/spec/affinity'}]"
    )


_GPU_POINTER = NVIDIA_GPU.replace("/", "~1")
_CLASS_POINTER = EXTENDED_RESOURCE_PREFIX.replace("/", "~1")


def patch_expression(annotation_path: str) -> str:
    """The JSON patch (CEL over ``variables.entry``, :func:`affinity_variables` and
    :func:`~cudasched.placement.claimcel.claim_variables`): the requirement annotation at
    ``annotation_path`` (escaped JSON pointer below ``/metadata/annotations``), then the merged
    affinity, then the moves of a DRA placement (:func:`dra_moves`) or its claims
    (:func:`~cudasched.placement.claimcel.claim_patch`); nothing when the merge is unmergeable
    (the webhook admits such a pod as it is) or a container's GPUs cannot be claimed (whole or
    nothing, :mod:`~cudasched.placement.claimcel`)."""
    replace = f"/spec/affinity/nodeAffinity/{REQUIRED_KEY}/nodeSelectorTerms"
    kept_terms = f"variables.kept.map(i, {_term('variables.norms[i].e', 'variables.norms[i].f')})"
    affinity = (
        "!has(variables.entry.terms) ? [] : "
        "variables.hasRequired ? ("
        "size(variables.kept) == 0 ? "
        f"(size(variables.ours) > 0 ? [JSONPatch{{op: 'replace', path: '{replace}', "
        f"value: variables.fresh}}] : {_remove_required()}) : "
        f"size(variables.ours) == 0 ? [JSONPatch{{op: 'replace', path: '{replace}', "
        f"value: {kept_terms}}}] : "
        f"[JSONPatch{{op: 'replace', path: '{replace}', value: variables.crossed}}]) : "
        f"size(variables.ours) == 0 ? [] : ({_add_required('variables.fresh')})"
    )
    annotation = (
        "!has(variables.entry.requirement) ? [] : has(object.metadata.annotations) ? "
        f"[JSONPatch{{op: 'add', path: '/metadata/annotations/{annotation_path}', "
        "value: variables.entry.requirement}] : "
        "[JSONPatch{op: 'add', path: '/metadata/annotations', "
        f"value: {{'{annotation_path.replace('~1', '/')}': variables.entry.requirement}}}}]"
    )
    return (
        f"variables.unmergeable || variables.claimLeft ? [] : "
        f"({annotation}) + ({affinity}) + ({dra_moves()}) + ({claim_patch()})"
    )


def _moves(containers: str, field: str) -> str:
    """CEL: the moves of one container list's ``nvidia.com/gpu`` (see :func:`dra_moves`)."""
    ops = []
    for part in ("limits", "requests"):
        at = f"'/spec/{field}/' + string(i) + '/resources/{part}/"
        ops.append(
            f"(has(c.resources) && has(c.resources.{part}) && "
            f"'{NVIDIA_GPU}' in c.resources.{part} ? [JSONPatch{{op: 'move', "
            f"from: {at}{_GPU_POINTER}', path: {at}{_CLASS_POINTER}' + "
            "variables.entry.deviceClass}] : [])"
        )
    return f"{containers}.transformList(i, c, {' + '.join(ops)}).flatten()"


def dra_moves() -> str:
    """CEL: the JSON patch that asks every container's ``nvidia.com/gpu`` through the
    placement's ``deviceClass`` (``dra.mode: extended-resource``), as
    :func:`cudasched.placement.drarequest.extended_resource_rewrite` does: each limit and
    request moved to ``deviceclass.resource.kubernetes.io/<class>`` (a move keeps the pod's own
    quantity, which the policy's table does not hold). Nothing without a class in the
    placement, or when a container already names a ``deviceclass`` resource (the webhook
    leaves such a pod to node affinity: a move onto the name would replace its count)."""
    every = (
        "(has(object.spec.initContainers) ? object.spec.initContainers : []) + "
        "object.spec.containers"
    )
    named = (
        f"({every}).exists(c, has(c.resources) && ((has(c.resources.limits) && "
        f"c.resources.limits.exists(r, r.startsWith('{EXTENDED_RESOURCE_PREFIX}'))) || "
        f"(has(c.resources.requests) && "
        f"c.resources.requests.exists(r, r.startsWith('{EXTENDED_RESOURCE_PREFIX}')))))"
    )
    inits = (
        "(has(object.spec.initContainers) ? "
        f"{_moves('object.spec.initContainers', 'initContainers')} : [])"
    )
    return (
        f"!has(variables.entry.deviceClass) || {named} ? [] : "
        f"{inits} + {_moves('object.spec.containers', 'containers')}"
    )
