"""``audit``: what is wrong in a cluster right now, as findings with a fix.

Pure: a cluster snapshot and its fleet in, an
:class:`~cudasched.operations.audit.findings.AuditReport`
out. Every rule is an existing one, asked again of objects that already exist:

* a workload's requirement is what the webhook would enforce
  (:func:`cudasched.workloads.resolution.resolve_workload`, LLMInferenceServices included; runtimes
  through :func:`~cudasched.workloads.resolution.resolve_runtime`), so a CPU workload has none and
  never
  gets a workload finding, and ``cudasched.io/skip`` leaves a workload out as it does at admission;
  LLMInferenceServices and their pods are read by :mod:`cudasched.workloads.kserve.llm`;
* verdicts are :func:`cudasched.compat.engine.check` on the fleet's node facts, under the workload's
  own policy when it names one, else the audit's
  (:class:`~cudasched.operations.reach.FleetVerdicts`);
* node facts and the label source decisions use are
:func:`cudasched.nodes.facts.facts_from_labels`'s;
* the recorded requirement is :meth:`cudasched.vocab.requirements.Requirement.record`'s text.

Objects a finding is about: pods bound to a node are judged one by one (each may sit on a
different node); "no node can run it" and "requirement unknown" are said once per service, so the
pods of an InferenceService or LLMInferenceService that the snapshot lists are covered by it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from cudasched.compat import engine
from cudasched.operations.audit.findings import (
    DRIVER_UPGRADE_FAILED,
    DRIVER_UPGRADE_IN_PROGRESS,
    LABELS_CONFLICT,
    LABELS_DEPRECATED_ONLY,
    LABELS_MISSING,
    NO_COMPATIBLE_NODE,
    POD_ON_INCOMPATIBLE_NODE,
    REQUIREMENT_INVALID,
    REQUIREMENT_UNKNOWN,
    RUNTIME_WITHOUT_NODE,
    STALE_REQUIREMENT,
    AuditReport,
    Finding,
)
from cudasched.operations.audit.nodegroups import NodeGroup, groups_from_snapshot, scale_up_hint
from cudasched.operations.nodelabels import (
    GFD_NEW_KEYS_RELEASE,
    UPGRADE_DONE,
    UPGRADE_FAILED,
    UPGRADE_STATE_KEY,
    conflicts,
    deprecated_only,
    gpu_capacity,
    is_gpu_node,
    upgrade_state,
)
from cudasched.operations.reach import FleetVerdicts, Reach, blocking, driver_fix
from cudasched.operations.refs import controller_kind, finished, names, node_name, object_ref
from cudasched.operations.runtimes import RuntimeRow, runtime_rows
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.objects import annotations_of, labels_of, name_of, namespace_of
from cudasched.vocab.requirecuda import DISABLE_ENV
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.workloads.gpu import gpu_container, uses_gpu
from cudasched.workloads.kserve import (
    SERVING_RUNTIME,
    is_predictor_pod,
    isvc_name_of,
    predictor_image,
)
from cudasched.workloads.kserve.llm import llmisvc_main_container, llmisvc_of_pod, llmisvc_uses_gpu
from cudasched.workloads.pods import is_skipped, workload_uses_gpu
from cudasched.workloads.resolution import resolve_workload

if TYPE_CHECKING:
    from cudasched.cluster.fleet import Fleet
    from cudasched.cluster.snapshot import ClusterSnapshot
    from cudasched.knowledge.images import ImageTable
    from cudasched.nodes.facts import NodeFacts
    from cudasched.workloads.kserve import RuntimeChoice

__all__ = ["Progress", "audit", "object_ref"]

#: Called after each object is checked with (objects done, objects in all).
Progress = Callable[[int, int], None]


def _wants(req: Requirement, policy: Policy) -> str:
    source = f" ({req.source})" if req.source else ""
    return f"{req.describe()} [{policy.value}]{source}"


@dataclass(frozen=True, slots=True)
class _Resolved:
    """A workload's requirement as the webhook sees it (``error`` when unreadable)."""

    req: Requirement
    gpu: bool
    skipped: bool
    runtime: RuntimeChoice | None = None
    image: str | None = None
    error: str | None = None


class _Auditor:
    """One audit run: the cluster, its verdicts and each pod's requirement, resolved once."""

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        fleet: Fleet,
        images: ImageTable,
        policy: Policy,
        node_groups: Sequence[NodeGroup] = (),
    ) -> None:
        self.snapshot = snapshot
        self.node_groups = [*node_groups, *groups_from_snapshot(snapshot)]
        self.fleet = fleet
        self.kb = fleet.kb
        self.images = images
        self.policy = policy
        self.verdicts = FleetVerdicts(fleet)
        self.isvcs = set(fleet.inference_services)
        self.llms = {(namespace_of(o), name_of(o)) for o in snapshot.llm_inference_services}
        self.upgrading = frozenset(
            name_of(n)
            for n in snapshot.nodes
            if upgrade_state(labels_of(n)) not in (None, UPGRADE_DONE)
        )
        self._pods: dict[int, _Resolved] = {}

    # ------------------------------------------------------------------ helpers

    def _policy(self, req: Requirement) -> Policy:
        return self.verdicts.policy_for(req, self.policy)

    def _resolve_pod(self, pod: Mapping[str, Any]) -> _Resolved:
        found = self._pods.get(id(pod))
        if found is not None:
            return found
        skipped = is_skipped(annotations_of(pod))
        spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
        try:
            gpu = uses_gpu(spec)
        except InputError:
            gpu = False  # an unreadable GPU quantity: the requirement step says what is wrong
        try:
            _, req, choice = resolve_workload(pod, self.fleet, self.images)
            container = gpu_container(spec)
            image = container.get("image") if container is not None else None
            found = _Resolved(req, gpu, skipped, choice, image)
        except InputError as exc:
            found = _Resolved(Requirement(), gpu, skipped, error=str(exc))
        self._pods[id(pod)] = found
        return found

    def _resolve_isvc(self, isvc: Mapping[str, Any]) -> _Resolved:
        skipped = is_skipped(annotations_of(isvc))
        try:
            _, req, choice = resolve_workload(isvc, self.fleet, self.images)
            gpu = workload_uses_gpu(isvc, choice)
            image = predictor_image(isvc, choice.obj if choice is not None else None)
        except InputError as exc:
            return _Resolved(Requirement(), False, skipped, error=str(exc))
        return _Resolved(req, gpu, skipped, choice, image)

    def _resolve_llm(self, obj: Mapping[str, Any]) -> _Resolved:
        skipped = is_skipped(annotations_of(obj))
        try:
            pod, req, _ = resolve_workload(obj, self.fleet, self.images)
            # Its pods usually take resources from the configs: only a GPU the object itself
            # asks for makes a service the audit reports as unprotected.
            gpu = llmisvc_uses_gpu(obj)
            main = llmisvc_main_container(pod["spec"])
        except InputError as exc:
            return _Resolved(Requirement(), False, skipped, error=str(exc))
        image = main.get("image") if main is not None else None
        return _Resolved(req, gpu, skipped, image=image if isinstance(image, str) else None)

    def _covered(self, pod: Mapping[str, Any]) -> bool:
        """A pod whose service the snapshot lists (findings about it go to the service)."""
        ns = namespace_of(pod)
        if is_predictor_pod(pod) and (ns, isvc_name_of(pod) or "") in self.isvcs:
            return True
        llm = llmisvc_of_pod(pod)
        return llm is not None and (ns, llm) in self.llms

    def _unplaceable_fix(self, req: Requirement, reach: Reach) -> str | None:
        """How to give a requirement no node can run a home, from what the nearest node lacks."""
        steps: list[str] = []
        cuda = engine.effective_cuda(req)
        nearest = reach.nearest
        # A newer driver helps only when the driver is all the nearest node lacks (for the
        # toolkit, the image's NVIDIA_REQUIRE_CUDA or the GPU product); a Kepler GPU, say,
        # cannot take a newer branch at all.
        if nearest is not None and nearest.driver is not None:
            need = nearest.driver
            steps.append(
                f"upgrade the driver of {nearest.node}"
                + (" and the nodes like it" if nearest.alike else "")
                + f" to {need} or newer (R{need.branch}+)"
            )
        # The container toolkit's gate holds under every policy: say what turning it off gives.
        if (
            req.gate is not None
            and nearest is not None
            and engine.REQUIRE_CUDA_UNMET in nearest.codes
        ):
            ungated = self.verdicts.reach(replace(req, gate=None), self.policy)
            if ungated.anywhere:
                steps.append(
                    f"set {DISABLE_ENV}=true on its container (the container toolkit then skips "
                    f"the image's NVIDIA_REQUIRE_CUDA), which {len(ungated.compatible)} node(s) "
                    f"would run under {ungated.policy.value}"
                )
        if reach.policy is Policy.STRICT and cuda is not None:
            relaxed_req = replace(req, policy=Policy.MINOR_COMPAT)
            relaxed = self.verdicts.reach(relaxed_req, self.policy)
            compat = f"allow minor-version compatibility (annotation {L.ANN_POLICY}: minor-compat)"
            if relaxed.anywhere:
                steps.append(f"{compat}, which {len(relaxed.compatible)} node(s) would satisfy")
            elif req.gate is not None:
                ungated = self.verdicts.reach(replace(relaxed_req, gate=None), self.policy)
                if ungated.anywhere:
                    steps.append(
                        f"{compat} and set {DISABLE_ENV}=true on its container (the image's "
                        "NVIDIA_REQUIRE_CUDA refuses older drivers under every policy), which "
                        f"{len(ungated.compatible)} node(s) would satisfy"
                    )
        newest = self.fleet.drivers.newest_cuda
        if cuda is not None and newest is not None and newest < cuda:
            steps.append(f"use an image built for CUDA {newest} or older")
        if nearest is not None and any("architecture" in lack for lack in nearest.lacks):
            steps.append("run it on GPUs its CUDA and kernels support")
        return "; or ".join(steps) or None

    def _unplaceable_message(self, req: Requirement, reach: Reach, subject: str = "") -> str:
        drivers = self.fleet.drivers.describe()
        text = f"no node can run {subject}{_wants(req, reach.policy)}; {drivers}"
        if reach.nearest is not None:
            return f"{text}; {reach.nearest.describe()}"
        return f"{text}; the cluster has no node with GPU facts"

    # ------------------------------------------------------------------ nodes

    def nodes(self) -> Iterator[Finding]:
        for node in self.snapshot.nodes:
            yield from self._node(node)

    def _node(self, node: Mapping[str, Any]) -> Iterator[Finding]:
        name = name_of(node)
        ref = object_ref(node)
        labels = labels_of(node)
        facts = self.verdicts.facts_of(name)
        if facts is None:
            return
        if is_gpu_node(node) and facts.driver is None and facts.cuda is None:
            yield self._labels_missing(ref, name, node, facts)
        if deprecated_only(labels):
            reads = (
                "decisions read its cudasched.io/ labels"
                if any(k.startswith(L.PREFIX) for k in labels)
                else "decisions read these keys, and label scheme gfd falls back to them for "
                "every node"
            )
            yield Finding(
                LABELS_DEPRECATED_ONLY,
                ref,
                f"only GPU Feature Discovery's deprecated keys (nvidia.com/cuda.driver.*, "
                f"nvidia.com/cuda.runtime.*): GFD older than {GFD_NEW_KEYS_RELEASE}; it works, "
                f"{reads}",
                node=name,
                fix=f"upgrade GFD (NVIDIA k8s-device-plugin, or the GPU Operator that ships it) "
                f"to {GFD_NEW_KEYS_RELEASE} or newer, which adds nvidia.com/cuda.driver-version.* "
                "and nvidia.com/cuda.runtime-version.*",
            )
        found = conflicts(labels, facts)
        if found:
            yield Finding(
                LABELS_CONFLICT,
                ref,
                "label sources disagree: " + "; ".join(c.describe() for c in found),
                node=name,
                fix="one publisher is stale: restart GPU Feature Discovery and the cudasched "
                "agent on the node so both read the running driver (GFD refreshes every 60 s "
                "by default)",
            )
        state = upgrade_state(labels)
        if state is not None and state != UPGRADE_DONE:
            yield self._upgrade(ref, name, state)

    def _labels_missing(
        self, ref: str, name: str, node: Mapping[str, Any], facts: NodeFacts
    ) -> Finding:
        gpus = gpu_capacity(node)
        why = f"{gpus} nvidia.com/gpu in its status" if gpus else f"{L.GFD_PRESENT}=true"
        unreadable = f" (unreadable: {'; '.join(facts.problems)})" if facts.problems else ""
        return Finding(
            LABELS_MISSING,
            ref,
            f"GPU node ({why}) without usable driver or CUDA labels{unreadable}: every pod with "
            "a CUDA requirement avoids it",
            node=name,
            fix="run GPU Feature Discovery (GPU Operator) or `cudasched agent` on the node so "
            "it publishes its driver and CUDA version",
        )

    def _upgrade(self, ref: str, name: str, state: str) -> Finding:
        pods = [
            p
            for p in self.snapshot.pods
            if node_name(p) == name and not finished(p) and self._resolve_pod(p).gpu
        ]
        homes: list[str] = []
        homeless: list[str] = []
        for pod in pods:
            who = f"{namespace_of(pod)}/{name_of(pod)}"
            req = self._resolve_pod(pod).req
            if req.is_empty:
                homes.append(f"{who} (no CUDA requirement)")
                continue
            reach = self.verdicts.reach(req, self.policy, exclude=self.upgrading)
            if reach.anywhere:
                homes.append(f"{who} ({len(reach.compatible)} other node(s) can run it)")
            else:
                homeless.append(who)
                homes.append(f"{who} (no other node can run {req.describe()})")
        listed = "; ".join(homes) if homes else "none"
        label = f"{UPGRADE_STATE_KEY}={state}"
        if state == UPGRADE_FAILED:
            return Finding(
                DRIVER_UPGRADE_FAILED,
                ref,
                f"the GPU Operator's driver upgrade failed on this node ({label}); GPU pods on "
                f"it: {listed}",
                node=name,
                fix=f"inspect the GPU Operator's driver pod on {name} and its logs "
                f"(kubectl get pods -A -o wide --field-selector spec.nodeName={name})",
            )
        fix = None
        if homeless:
            have, them = ("has", "it") if len(homeless) == 1 else ("have", "them")
            fix = (
                f"{names(homeless)} {have} no other compatible node and will stay Pending "
                f"until the upgrade ends: add a node whose driver runs {them}, or pause the "
                "upgrade for this node"
            )
        return Finding(
            DRIVER_UPGRADE_IN_PROGRESS,
            ref,
            f"driver upgrade in progress ({label}); GPU pods on it that will need another "
            f"home: {listed}",
            node=name,
            fix=fix,
        )

    # ------------------------------------------------------------------ runtimes

    def runtimes(self) -> Iterator[Finding]:
        users: dict[tuple[str, str], list[str]] = {}
        for ns, isvc in self.isvcs:
            choice = self.fleet.runtime_of(ns, isvc)
            if choice is not None:
                users.setdefault((choice.kind, choice.name), []).append(f"{ns}/{isvc}")
        for row in runtime_rows(self.fleet, self.images):
            yield from self._runtime(row, users.get((row.kind, row.name), []))

    def _runtime(self, row: RuntimeRow, users: list[str]) -> Iterator[Finding]:
        if row.error is not None:
            yield Finding(
                REQUIREMENT_INVALID,
                row.ref,
                row.error,
                fix="correct the value named in the message",
            )
            return
        req = row.requirement
        if row.disabled or req is None or req.is_empty:
            return
        reach = self.verdicts.reach(req, self.policy)
        if reach.anywhere:
            return
        used = f"; used by {names(users)}" if users else ""
        yield Finding(
            RUNTIME_WITHOUT_NODE,
            row.ref,
            self._unplaceable_message(req, reach, "the runtime's ") + used,
            node=reach.nearest.node if reach.nearest is not None else None,
            fix=self._unplaceable_fix(req, reach),
        )

    # ------------------------------------------------------------------ workloads

    def pods(self) -> Iterator[Finding]:
        for pod in self.snapshot.pods:
            if finished(pod):
                continue
            found = self._resolve_pod(pod)
            ref = object_ref(pod)
            if found.error is not None:
                yield _invalid(ref, found.error)
                continue
            if found.skipped:
                continue
            node = node_name(pod)
            if node is not None:
                yield from self._bound(pod, ref, node, found.req)
            if not self._covered(pod):
                yield from self._placeable(ref, found, pending=node is None)
                yield from self._unknown(ref, found, "pod")
            yield from self._stale(pod, ref, found.req, "pod")

    def _bound(
        self, pod: Mapping[str, Any], ref: str, node: str, req: Requirement
    ) -> Iterator[Finding]:
        if req.is_empty:
            return
        verdict = self.verdicts.on_node(node, req, self.policy)
        facts = self.verdicts.facts_of(node)
        if verdict is None or facts is None or verdict.compatible:
            return
        pol = self._policy(req)
        reasons = blocking(verdict)
        codes = ", ".join(dict.fromkeys(r.code for r in reasons))
        others = self.verdicts.reach(req, self.policy, exclude=self.upgrading | {node})
        cuda = engine.effective_cuda(req)
        need = driver_fix(facts, reasons, req, self.kb)
        restore = None
        if need is not None:
            runs = f"CUDA {cuda}" if cuda is not None else "it"
            restore = f"give {node} a driver that runs {runs} ({need} or newer)"
        if others.anywhere:
            owner = controller_kind(pod)
            again = f"its {owner} makes a new one" if owner else "then create it again"
            fix = (
                f"recreate the pod (kubectl delete pod -n {namespace_of(pod)} {name_of(pod)}; "
                f"{again}) so the webhook places it on one of the {len(others.compatible)} "
                f"node(s) that can run it ({names(others.compatible)})"
                + (f"; or {restore}" if restore else "")
            )
        else:
            fix = "no other node can run it either" + (f": {restore}" if restore else "")
        yield Finding(
            POD_ON_INCOMPATIBLE_NODE,
            ref,
            f"needs {_wants(req, pol)} but runs on {node}: {facts.describe()} ({codes}): "
            + "; ".join(dict.fromkeys(r.message for r in reasons)),
            node=node,
            fix=fix,
        )

    def _placeable(
        self, ref: str, found: _Resolved, *, pending: bool, pods: str = ""
    ) -> Iterator[Finding]:
        if not pending or found.req.is_empty:
            return
        reach = self.verdicts.reach(found.req, self.policy)
        if reach.anywhere:
            return
        fix = self._unplaceable_fix(found.req, reach)
        # A group scaled to zero may be the home it is waiting for (docs/operations.md).
        hint = scale_up_hint(self.node_groups, found.req, reach.policy, self.kb)
        if hint is not None:
            fix = f"{hint}; otherwise {fix}" if fix else hint
        yield Finding(
            NO_COMPATIBLE_NODE,
            ref,
            self._unplaceable_message(found.req, reach) + pods,
            node=reach.nearest.node if reach.nearest is not None else None,
            fix=fix,
        )

    def _unknown(self, ref: str, found: _Resolved, kind: str) -> Iterator[Finding]:
        if not found.gpu or not found.req.is_empty or found.req.source:
            return  # CPU-only, resolved, or decided: a runtime for another accelerator
        image = (
            f"image {found.image} is not in the image table"
            if found.image
            else "no image is named in its spec"
        )
        if found.runtime is not None:
            why = f"{found.runtime.describe()} names no CUDA version and {image}"
            runtime = found.runtime
            where = "" if runtime.kind != SERVING_RUNTIME else f" -n {namespace_of(runtime.obj)}"
            fix = (
                f"kubectl annotate {runtime.kind.lower()}{where} {runtime.name} "
                f"{L.ANN_CUDA_VERSION}=<the CUDA version its image was built with>"
            )
        else:
            why = f"it declares no CUDA version and {image}"
            where = "the pod template of its controller" if kind == "pod" else f"the {kind}"
            fix = (
                f"add the annotation {L.ANN_CUDA_VERSION}: <the CUDA version its image was built "
                f"with> to {where}, or add the image to the webhook's image table"
            )
        yield Finding(
            REQUIREMENT_UNKNOWN,
            ref,
            f"uses a GPU but no CUDA requirement can be resolved ({why}): the webhook cannot "
            "keep it off nodes whose driver is too old",
            fix=fix,
        )

    def _stale(
        self, obj: Mapping[str, Any], ref: str, req: Requirement, kind: str
    ) -> Iterator[Finding]:
        recorded = annotations_of(obj).get(L.ANN_REQUIREMENT)
        if not isinstance(recorded, str) or not recorded.strip():
            return
        now = None if req.is_empty else req.record(self._policy(req))
        if recorded == now:
            return
        # The audit cannot know the webhook's default policy: a record that differs only in it
        # is not reported (see docs/operations.md).
        if (
            now is not None
            and req.policy is None
            and any(req.record(p) == recorded for p in Policy)
        ):
            return
        resolves = f"{now!r}" if now is not None else "no requirement"
        if kind == "pod":
            owner = controller_kind(obj)
            how = (
                f"delete it; its {owner} makes a new one" if owner else "delete it, create it again"
            )
            fix = f"recreate the pod ({how}) so admission records and enforces the current one"
        else:
            fix = (
                f"update the {kind} (any change re-runs admission), then restart its pods so "
                "they are placed by the current requirement"
            )
        yield Finding(
            STALE_REQUIREMENT,
            ref,
            f"recorded {L.ANN_REQUIREMENT} {recorded!r} but it resolves to {resolves} now "
            "(a runtime label, annotation or image changed after admission)",
            node=node_name(obj) if kind == "pod" else None,
            fix=fix,
        )

    def services(self) -> Iterator[Finding]:
        pending: dict[tuple[str, str], list[str]] = {}
        for pod in self.snapshot.pods:
            if node_name(pod) is None and not finished(pod) and self._covered(pod):
                ns = namespace_of(pod)
                owner = isvc_name_of(pod) if is_predictor_pod(pod) else llmisvc_of_pod(pod)
                pending.setdefault((ns, owner or ""), []).append(name_of(pod))
        for obj in self.snapshot.inference_services:
            yield from self._service(obj, self._resolve_isvc(obj), "InferenceService", pending)
        for obj in self.snapshot.llm_inference_services:
            yield from self._service(obj, self._resolve_llm(obj), "LLMInferenceService", pending)

    def _service(
        self,
        obj: Mapping[str, Any],
        found: _Resolved,
        kind: str,
        pending: Mapping[tuple[str, str], list[str]],
    ) -> Iterator[Finding]:
        ref = object_ref(obj)
        if found.error is not None:
            yield _invalid(ref, found.error)
            return
        if found.skipped:
            return
        waiting = pending.get((namespace_of(obj), name_of(obj)), [])
        pods = f"; pending pods: {names(waiting)}" if waiting else ""
        yield from self._placeable(ref, found, pending=True, pods=pods)
        yield from self._unknown(ref, found, kind)
        yield from self._stale(obj, ref, found.req, kind)


def _invalid(ref: str, error: str) -> Finding:
    return Finding(
        REQUIREMENT_INVALID,
        ref,
        f"its CUDA requirement cannot be read: {error}",
        fix="correct the value named in the message (see the README's annotation reference)",
    )


def audit(
    snapshot: ClusterSnapshot,
    fleet: Fleet,
    images: ImageTable,
    policy: Policy = Policy.STRICT,
    *,
    progress: Progress | None = None,
    node_groups: Sequence[NodeGroup] = (),
) -> AuditReport:
    """Audit a cluster: ``fleet`` must be built from ``snapshot`` (same nodes and KServe
    objects); ``policy`` is the default for workloads that do not name one, as the webhook's
    configured policy is. ``progress`` is told how far the audit has got. ``node_groups``
    (with the Karpenter and Cluster API groups the snapshot declares) may give a pending
    workload no node can run a home once scaled up from zero."""
    auditor = _Auditor(snapshot, fleet, images, policy, node_groups)
    services = len(snapshot.inference_services) + len(snapshot.llm_inference_services)
    runtimes = len(fleet.cluster_serving_runtimes) + sum(1 for _ in fleet.all_serving_runtimes())
    steps = (
        (auditor.nodes, len(snapshot.nodes)),
        (auditor.runtimes, runtimes),
        (auditor.pods, len(snapshot.pods)),
        (auditor.services, services),
    )
    total = sum(count for _, count in steps)
    findings: list[Finding] = []
    done = 0
    for step, count in steps:
        findings.extend(step())
        done += count
        if progress is not None:
            progress(done, total)
    return AuditReport.of(findings)
