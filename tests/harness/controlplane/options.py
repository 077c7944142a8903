"""What a control plane starts (:class:`Options`: the number of nodes, whether they are kept
Ready, the CRDs, scheduler and controller-manager settings) and which controllers
kube-controller-manager runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["CONTROLLERS", "Options"]

#: kube-controller-manager controllers the harness runs: what makes namespaces usable
#: (default ServiceAccounts, deletion), owner references work, kube-root-ca.crt appear, and
#: Deployments make pods, ValidatingAdmissionPolicies get their type-checking status, and pods
#: naming a ResourceClaimTemplate get their claims (DRA).
#: ``node-lifecycle-controller`` is added when nodes are kept Ready.
CONTROLLERS = (
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "namespace-controller",
    "garbage-collector-controller",
    "root-ca-certificate-publisher-controller",
    "deployment-controller",
    "replicaset-controller",
    "validatingadmissionpolicy-status-controller",
    "resourceclaim-controller",
)


@dataclass
class Options:
    """What to start. The defaults are what a person gets from ``up``."""

    nodes: int = 60
    #: Keep nodes Ready (Lease renewals, status heartbeats) and run the node lifecycle
    #: controller that would mark them NotReady otherwise. Off for 5,000-node benchmarks.
    keep_nodes_ready: bool = True
    crds: bool = True
    #: kube-apiserver's own etcd compaction interval (its default is 5m).
    compaction_interval: str = "5m"
    #: kube-scheduler client QPS/burst (scheduler_perf runs its scheduler at 5,000).
    scheduler_qps: int = 5000
    scheduler: bool = True
    controller_manager: bool = True
    apiserver_args: list[str] = field(default_factory=list)
    #: The Kubernetes minor (``"1.37"``) whose pinned binaries run; ``None``: the harness's
    #: default (:func:`tests.harness.binaries.selected_minor`).
    kubernetes: str | None = None
    startup_timeout: float = 180.0
