"""Objects named the way kubectl names them (``isvc/llama3-8b``, ``pod/NAME``, ``deploy/NAME``,
``llmisvc/NAME``, with ``-n NAMESPACE``), and the workloads such a reference stands for in a
cluster snapshot.

Pods, InferenceServices and LLMInferenceServices are in every snapshot; a controller
(Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob) is in a dump only if it was
dumped, and a live read fetches it by name (:meth:`Reference.to_fetch`). An LLMInferenceService
stands for its model-server pods (its image usually comes from KServe's configs, not from the
object itself), or, while KServe has created none, for itself, as admission and the audit judge
it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cudasched.cluster.snapshot import ClusterSnapshot
from cudasched.kube.live import LIVE_KINDS, ObjectRef
from cudasched.vocab.errors import InputError
from cudasched.vocab.kinds import (
    CRON_JOB,
    DAEMON_SET,
    DEPLOYMENT,
    INFERENCE_SERVICE,
    JOB,
    LLM_INFERENCE_SERVICE,
    POD,
    REPLICA_SET,
    STATEFUL_SET,
    Kind,
)
from cudasched.vocab.objects import DEFAULT_NAMESPACE, name_of, namespace_of
from cudasched.workloads.kserve.llm import llmisvc_pods

__all__ = ["ALIASES", "Reference", "parse_reference"]

#: kubectl's names for the kinds a reference may name (singular, plural, short name).
ALIASES: Mapping[str, Kind] = {
    **dict.fromkeys(("po", "pod", "pods"), POD),
    **dict.fromkeys(("isvc", "inferenceservice", "inferenceservices"), INFERENCE_SERVICE),
    **dict.fromkeys(
        ("llmisvc", "llminferenceservice", "llminferenceservices"), LLM_INFERENCE_SERVICE
    ),
    **dict.fromkeys(("deploy", "deployment", "deployments"), DEPLOYMENT),
    **dict.fromkeys(("sts", "statefulset", "statefulsets"), STATEFUL_SET),
    **dict.fromkeys(("ds", "daemonset", "daemonsets"), DAEMON_SET),
    **dict.fromkeys(("rs", "replicaset", "replicasets"), REPLICA_SET),
    **dict.fromkeys(("job", "jobs"), JOB),
    **dict.fromkeys(("cj", "cronjob", "cronjobs"), CRON_JOB),
}
_SHORT = "isvc, llmisvc, pod, deploy, sts, ds, rs, job, cj"


@dataclass(frozen=True, slots=True)
class Reference:
    """One namespaced object named on the command line."""

    kind: Kind
    name: str
    namespace: str

    def __str__(self) -> str:
        return f"{self.kind.kind} {self.namespace}/{self.name}"

    def to_fetch(self) -> ObjectRef | None:
        """What a live read must fetch by name: the object itself unless its kind is listed
        anyway."""
        if self.kind in LIVE_KINDS:
            return None
        return ObjectRef(self.kind, self.namespace, self.name)

    def workloads(self, snapshot: ClusterSnapshot) -> list[dict[str, Any]]:
        """The workloads this reference stands for in ``snapshot`` (at least one), or an
        ``InputError`` saying what is missing."""
        where = snapshot.source or "the cluster"
        if self.kind == LLM_INFERENCE_SERVICE:
            services = self._matching(snapshot.llm_inference_services)
            if not services:
                raise self._missing(where)
            pods = llmisvc_pods(snapshot.pods, self.namespace, self.name)
            # Before KServe creates its pods, the service is judged as admission and the
            # audit judge it: by the model-server pod its own spec describes.
            return [dict(p) for p in pods] if pods else [dict(services[0])]
        if self.kind == POD:
            candidates = snapshot.pods
        elif self.kind == INFERENCE_SERVICE:
            candidates = snapshot.inference_services
        else:
            candidates = tuple(
                o
                for o in snapshot.workloads
                if o.get("kind") == self.kind.kind and o.get("apiVersion") == self.kind.api_version
            )
        found = self._matching(candidates)
        if not found:
            raise self._missing(where)
        return [dict(found[0])]

    def _matching(self, objects: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
        return [o for o in objects if name_of(o) == self.name and namespace_of(o) == self.namespace]

    def _missing(self, where: str) -> InputError:
        return InputError(f"{self} not found in {where} (another namespace? pass -n NAMESPACE)")


def parse_reference(
    text: str, namespace: str | None, default: Callable[[], str] = lambda: DEFAULT_NAMESPACE
) -> Reference:
    """``TYPE/NAME`` (kubectl's spelling: ``isvc/llama3-8b``, ``deployment/web``) in
    ``namespace`` (``-n``), else in the namespace ``default`` gives (kubectl's: the context's).
    Also the forms cudasched prints an object in, pasted back: ``NAMESPACE/Kind/NAME``
    (``explain``) and ``Kind/NAMESPACE/NAME`` (``audit``), whose namespace must agree with a
    given ``-n``. ``InputError`` for anything else."""
    parts = [part.strip() for part in text.strip().split("/")]
    kind: Kind | None = None
    name, where = "", None
    if len(parts) == 2:
        kind, name = _kind(parts[0]), parts[1]
    elif len(parts) == 3:
        first, middle, last = parts
        if _kind(middle) is not None:  # NAMESPACE/Kind/NAME
            kind, where, name = _kind(middle), first, last
        else:  # Kind/NAMESPACE/NAME
            kind, where, name = _kind(first), middle, last
    if kind is None or not name or where == "":
        raise InputError(
            f"invalid reference {text!r}: expected TYPE/NAME with TYPE one of {_SHORT} "
            "(or their kubectl long names), e.g. isvc/llama3-8b"
        )
    if where is not None and namespace is not None and where != namespace:
        raise InputError(
            f"{text!r} names the namespace {where!r} but -n/--namespace says {namespace!r}"
        )
    return Reference(kind, name, where or namespace or default())


def _kind(text: str) -> Kind | None:
    """The kind kubectl's ``TYPE`` names (``isvc``, ``deployments.apps``, ``InferenceService``)."""
    alias, dot, group = text.lower().partition(".")
    kind = ALIASES.get(alias)
    if kind is not None and dot and group != kind.group:  # deployments.apps, isvc.serving.kserve.io
        return None
    return kind
