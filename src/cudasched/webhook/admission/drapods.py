"""Admission of a GPU pod through DRA (``dra.mode`` not ``off``): its ``nvidia.com/gpu: N``
asked through the CUDA-aware DeviceClass of its requirement instead of node affinity
(:mod:`cudasched.placement.drarequest` writes the patch).

The class does the placing: kube-scheduler's DRA allocator hands the pod only devices whose
attributes the class's selectors admit, on whichever node has them. So no node affinity is
added (on a cluster whose driver runs in DRA mode nodes need not carry GPU labels at all, and
the affinity would then exclude every node), and no "no node can run it" is said from node
labels: whether a device can is the allocator's answer (``cudasched explain`` judges the
ResourceSlices the same way).

The webhook refers to the class by the name ``cudasched device-classes`` gives it and does not
watch DeviceClasses (that would be one more cluster-wide list and watch, and a grant, for a
fact the operator settles once by applying the classes); the first pod of each class in a
process is told which class it now asks for, and where it comes from. A container whose GPU
request cannot be moved (a fraction, limits and requests that differ, the class already named)
keeps the whole pod on node affinity, with a warning: half a pod on DRA and half on the device
plugin would be placed by neither rule.

A pod that asks through DRA already, with claims all made from templates and no
``nvidia.com/gpu``, is not rewritten: its requirement is recorded, no node affinity is added,
and each claim kube-controller-manager makes for it is narrowed to the class when it is created
(:mod:`cudasched.webhook.admission.claimrules`). A pod naming a claim made before it keeps node
affinity: that claim is not narrowed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from cudasched.placement.drarequest import (
    GpuRewrite,
    asks_class,
    claim_rewrite,
    claim_template_name,
    claims_from_templates,
    extended_resource_rewrite,
    gpu_counts,
)
from cudasched.settings.config import DraMode
from cudasched.vocab import labels as L
from cudasched.webhook.admission.review import Decision, ReviewRequest, clip
from cudasched.webhook.admission.reviewed import pod_for_mutation, set_annotation
from cudasched.webhook.admission.steps import RuleContext, finish

if TYPE_CHECKING:
    from cudasched.vocab.requirements import Policy, Requirement
    from cudasched.webhook.admission.patch import Scope

__all__ = ["DraAnswer", "admit_through_class"]

#: ``(decision, None)`` when the pod is answered through its class; ``(None, warnings)`` when
#: it is left to node affinity, with what to say (possibly nothing).
DraAnswer = tuple[Decision | None, tuple[str, ...]]


def _rewrite(mode: DraMode, spec: Mapping[str, Any], name: str) -> GpuRewrite:
    if mode is DraMode.CLAIM:
        return claim_rewrite(spec, name)
    return extended_resource_rewrite(spec, name)


def _first_words(ctx: RuleContext, mode: DraMode, name: str, rewrite: GpuRewrite) -> str | None:
    """What the first pod of a class in this process is told: what it asks for now and that
    the class (and, for claims, its template) must exist."""
    if not ctx.said.first(("dra-class", mode.value, name)):
        return None
    if mode is DraMode.CLAIM:
        asked = f"claims from ResourceClaimTemplate {claim_template_name(name, 1)} (xN. for N)"
        source = "cudasched device-classes --claim-templates 1,2,..."
    else:
        asked = f"deviceclass.resource.kubernetes.io/{name}"
        source = "cudasched device-classes"
    return clip(
        f"cudasched: GPUs of {', '.join(rewrite.moved)} asked through DeviceClass {name} "
        f"({asked}; dra.mode {mode.value}): the class must exist in the cluster ({source} "
        "prints it)"
    )


def admit_through_class(
    ctx: RuleContext,
    req: ReviewRequest,
    pod: Mapping[str, Any],
    spec: Mapping[str, Any],
    requirement: Requirement,
    policy: Policy,
    scopes: tuple[Scope, ...],
    notes: Callable[[], tuple[str, ...]],
) -> DraAnswer:
    """The pod's answer with its GPUs asked through its class, or ``None`` (with a warning
    when there is something to say) for the pod to be placed by node affinity as usual: DRA
    off, no ``nvidia.com/gpu`` asked, no GPU can meet the requirement (the affinity path says
    so), or a container whose request cannot be moved. A pod that already asks through its
    class (admitted again) gets the record alone. ``notes`` gives the warnings said once
    per process, asked only once nothing can be deferred to a review thread."""
    mode = ctx.config.dra.mode
    if mode is DraMode.OFF:
        return None, ()
    asks_gpus = bool(gpu_counts(spec))
    choice = ctx.placer.device_class(requirement, policy)
    if choice is None:
        return None, ()
    name = choice.name
    if not asks_gpus:
        if not (asks_class(spec, name) or claims_from_templates(spec)):
            return None, ()
        # Admitted again (reinvocation, a controller's template): its GPUs already come from
        # the class, so it gets the record and no node affinity, as the first time. A pod
        # whose claims all come from templates: its claims are narrowed to the class when
        # they are made (claimrules), so it gets the record and no node affinity either.
        rewrite = GpuRewrite((), (), ())
        return _answer(ctx, req, pod, requirement, policy, scopes, notes, rewrite, None), ()
    rewrite = _rewrite(mode, spec, name)
    if rewrite.left or not rewrite.moved:
        why = "; ".join(rewrite.left)
        return None, (
            clip(
                f"cudasched: GPUs not asked through DeviceClass {name}, node affinity kept: {why}"
            ),
        )
    first = _first_words(ctx, mode, name, rewrite)
    return _answer(ctx, req, pod, requirement, policy, scopes, notes, rewrite, first), ()


def _answer(
    ctx: RuleContext,
    req: ReviewRequest,
    pod: Mapping[str, Any],
    requirement: Requirement,
    policy: Policy,
    scopes: tuple[Scope, ...],
    notes: Callable[[], tuple[str, ...]],
    rewrite: GpuRewrite,
    first: str | None,
) -> Decision:
    """The requirement recorded and the rewrite's patch after it; no node affinity, and no
    "no node can run it" from node labels (the allocator judges devices)."""
    record = requirement.record(policy)
    said = notes()
    mutated = pod_for_mutation(pod)
    set_annotation(mutated, L.ANN_REQUIREMENT, record)
    return finish(
        ctx.config,
        req,
        pod,
        mutated,
        scopes,
        record=record,
        no_fit=None,
        may_deny=False,
        notes=(*said, first) if first else said,
        then=rewrite.ops,
    )
