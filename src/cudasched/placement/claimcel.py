""":func:`~cudasched.placement.drarequest.claim_rewrite` written in CEL, for the policy mode
(``dra.mode: claim``): every container (init containers first) asking ``nvidia.com/gpu: N``
has it taken out of its limits and requests and consumes a pod-level claim of its own, named
``cudasched-gpu-<k>`` (the first names the pod's own claims leave free), made from the
template for the placement's ``claimClass`` and N (``<class>`` for one, ``x<N>.<class>``
otherwise).

Why the count is read in CEL and not kept in the table: the pod key records only that a GPU
quantity is a positive whole number, so pods asking one and four GPUs share a placement; the
template name is the one part of the answer that depends on the count, and the API server
hands CEL the quantity as its canonical string (``4``; ``1k`` for a thousand), with requests
defaulted from limits before admission, so ``^[1-9][0-9]{0,5}$`` on that string is the
webhook's own test of a whole count.

**Whole or nothing, as the webhook.** If any container asking ``nvidia.com/gpu`` cannot be
moved (a count past six digits, limits and requests that differ), ``claimLeft`` is true and
the policy leaves the whole pod alone: no claims, no requirement annotation, no affinity. The
webhook would keep such a pod on node affinity instead, but the table holds no terms for a
claim placement (the key pod always moves), and such counts are past any node's GPUs. Left
unannotated, the pod is what the unplaced ValidatingAdmissionPolicy warns about (``policy``
mode), and in the ``both`` mode the webhook, which skips only pods the policy placed, sees it
and places it by node affinity with its warning: the webhook's answer either way.

**A pod cudasched already asked through a class is left alone** (:data:`DRA_ASKED`). After a
rewrite, by the policy or the webhook, a later webhook that changes the pod (KServe's pod
mutator, a sidecar injector) makes the API server run the policy again, now on a pod with no
``nvidia.com/gpu`` and a claim: a key of its own, which the controller learns from the pods
that run, and whose key pod (one claim of no template) the webhook would place by node
affinity. The webhook, shown the pod itself, sees it already asking through its class and only
records the requirement it already carries; the policy matches that by leaving it as it is.

The rewrite is built in two steps: :func:`claim_variables` computes the operations as plain
CEL maps (checked in process against ``claim_rewrite`` with a CEL interpreter, which has no
``JSONPatch`` type), and :func:`claim_patch` turns them into the API server's ``JSONPatch``
values. Every map value is wrapped in ``dyn`` for the API server's homogeneous-literal rule.
"""

from __future__ import annotations

from cudasched.placement.deviceclass import CLASS_DOMAIN, EXTENDED_RESOURCE_PREFIX
from cudasched.placement.drarequest import CLAIM_PREFIX, WHOLE_COUNT
from cudasched.vocab import labels as L
from cudasched.vocab.kserve import NVIDIA_GPU

__all__ = ["DRA_ASKED", "claim_patch", "claim_variables"]


_GPU_POINTER = NVIDIA_GPU.replace("/", "~1")
_SPEC = "object.spec"


def _dra_asked() -> str:
    """CEL over ``object``: the pod carries cudasched's requirement and asks GPUs the way a
    rewrite writes them: a ``cudasched-gpu-*`` claim from a template, or a container resource
    ``deviceclass.resource.kubernetes.io/<a cudasched class>``. The annotation is tested
    first: a pod admitted for the first time has none, and the rest is not evaluated."""
    suffix = f".{CLASS_DOMAIN}"
    resource = (
        f"has(c.resources) && has(c.resources.limits) && c.resources.limits.exists(r, "
        f"r.startsWith('{EXTENDED_RESOURCE_PREFIX}') && r.endsWith('{suffix}'))"
    )
    return (
        f"(has(object.metadata.annotations) && '{L.ANN_REQUIREMENT}' in "
        f"object.metadata.annotations && ((has({_SPEC}.resourceClaims) && "
        f"{_SPEC}.resourceClaims.exists(c, c.name.startsWith('{CLAIM_PREFIX}') && "
        f"has(c.resourceClaimTemplateName))) || {_SPEC}.containers.exists(c, {resource})))"
    )


#: CEL over ``object``: cudasched already asked this pod's GPUs through a class (either
#: ``dra.mode``); the policy leaves it alone, as the webhook would (see the module docstring).
DRA_ASKED = _dra_asked()


def _asking(containers: str, field: str) -> str:
    """CEL: one map per container of ``containers`` asking ``nvidia.com/gpu``, in order:
    ``at`` (its resources' pointer), ``n`` (the count's text), ``ok`` (whether it moves),
    ``l``/``r`` (whether limits/requests name it), ``claims`` (whether it has claims)."""
    c = f"{containers}[i]"
    limits, requests = f"{c}.resources.limits", f"{c}.resources.requests"
    in_limits = f"(has({limits}) && '{NVIDIA_GPU}' in {limits})"
    in_requests = f"(has({requests}) && '{NVIDIA_GPU}' in {requests})"
    limit, request = f"string({limits}['{NVIDIA_GPU}'])", f"string({requests}['{NVIDIA_GPU}'])"
    text = f"({in_limits} ? {limit} : {request})"
    ok = (
        f"(!{in_limits} || !{in_requests} || {limit} == {request}) && "
        f"{text}.matches('{WHOLE_COUNT}')"
    )
    entry = (
        f"{{'at': dyn('/spec/{field}/' + string(i) + '/resources'), 'n': dyn({text}), "
        f"'ok': dyn({ok}), 'l': dyn({in_limits}), 'r': dyn({in_requests}), "
        f"'claims': dyn(has({c}.resources.claims))}}"
    )
    return (
        f"lists.range(size({containers})).filter(i, has({c}.resources) && "
        f"({in_limits} || {in_requests})).map(i, {entry})"
    )


def _claim(j: str) -> str:
    """CEL: the pod-level claim of the ``j``-th asking container."""
    ask = f"variables.claimAsks[{j}]"
    template = (
        f"({ask}.n == '1' ? variables.entry.claimClass : "
        f"'x' + string({ask}.n) + '.' + variables.entry.claimClass)"
    )
    return (
        f"{{'name': dyn(variables.claimNames[{j}]), "
        f"'resourceClaimTemplateName': dyn(string({template}))}}"
    )


def _container_ops() -> str:
    """CEL: per asking container, its GPU removed from limits and requests, then its claim."""
    ask = "variables.claimAsks[j]"
    name = "variables.claimNames[j]"

    def removed(part: str, flag: str) -> str:
        path = f"{ask}.at + '/{part}/{_GPU_POINTER}'"
        return f"({ask}.{flag} ? [{{'op': dyn('remove'), 'path': dyn({path})}}] : [])"

    consumed = (
        f"[{ask}.claims ? {{'op': dyn('add'), 'path': dyn({ask}.at + '/claims/-'), "
        f"'value': dyn({{'name': {name}}})}} : {{'op': dyn('add'), "
        f"'path': dyn({ask}.at + '/claims'), 'value': dyn([{{'name': {name}}}])}}]"
    )
    return (
        f"lists.range(size(variables.claimAsks)).map(j, {removed('limits', 'l')} + "
        f"{removed('requests', 'r')} + {consumed}).flatten()"
    )


def claim_variables() -> list[tuple[str, str]]:
    """The policy's variables (name, CEL) of the claim rewrite, after ``variables.entry``:
    ``claimAsks`` (the asking containers, none unless the placement has a ``claimClass``),
    ``claimLeft`` (one of them cannot move: the policy leaves the pod alone), ``claimNames``
    (the free claim names, one per asking container) and ``claimOps`` (the operations as
    plain maps, ``op``, ``path`` and, for an add, ``value``)."""
    inits = f"{_SPEC}.initContainers"
    taken = f"(has({_SPEC}.resourceClaims) ? {_SPEC}.resourceClaims.map(r, r.name) : [])"
    count = "size(variables.claimAsks)"
    every = f"lists.range({count}).map(j, {_claim('j')})"
    claims = (
        f"has({_SPEC}.resourceClaims) ? lists.range({count}).map(j, {{'op': dyn('add'), "
        f"'path': dyn('/spec/resourceClaims/-'), 'value': dyn({_claim('j')})}}) : "
        f"[{{'op': dyn('add'), 'path': dyn('/spec/resourceClaims'), 'value': dyn({every})}}]"
    )
    return [
        (
            "claimAsks",
            "!has(variables.entry.claimClass) ? [] : "
            f"(has({inits}) ? {_asking(inits, 'initContainers')} : []) + "
            f"{_asking(f'{_SPEC}.containers', 'containers')}",
        ),
        ("claimLeft", "variables.claimAsks.exists(a, !a.ok)"),
        (
            "claimNames",
            f"{count} == 0 ? [] : lists.range({count} + size({taken}))"
            f".map(n, '{CLAIM_PREFIX}' + string(n)).filter(x, !(x in {taken}))",
        ),
        (
            "claimOps",
            f"variables.claimLeft || {count} == 0 ? [] : ({_container_ops()}) + ({claims})",
        ),
    ]


def claim_patch() -> str:
    """CEL: ``variables.claimOps`` as the API server's ``JSONPatch`` values."""
    return (
        "variables.claimOps.map(o, o.op == 'remove' ? "
        "JSONPatch{op: 'remove', path: string(o.path)} : "
        "JSONPatch{op: 'add', path: string(o.path), value: o.value})"
    )
