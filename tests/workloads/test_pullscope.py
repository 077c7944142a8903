"""Whose pull secrets a look-up may use: the workload's own ``imagePullSecrets``, else its
ServiceAccount's, always in the request's namespace (the kubelet's and the ServiceAccount
admission plugin's order)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from cudasched.knowledge.imageconfig import PullScope
from cudasched.workloads.pullscope import pull_scope

NAMES = st.text(alphabet="abcdefghij-", min_size=0, max_size=6)


def pod(namespace: str | None, spec: dict[str, Any]) -> dict[str, Any]:
    meta = {"name": "p"} | ({"namespace": namespace} if namespace else {})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def test_each_kind_gives_the_pod_spec_kubernetes_pulls_with() -> None:
    secrets = [{"name": "regcred"}, {"name": ""}, {"name": "regcred"}, {"name": "other"}]
    isvc = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "llm", "namespace": "ml"},
        "spec": {"predictor": {"imagePullSecrets": secrets, "serviceAccountName": "runner"}},
    }
    llmisvc = {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "LLMInferenceService",
        "metadata": {"name": "qwen", "namespace": "llm"},
        "spec": {"template": {"imagePullSecrets": [{"name": "hub"}], "containers": []}},
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "web"},
        "spec": {"template": {"spec": {"serviceAccountName": "deployer", "containers": []}}},
    }
    found = [
        pull_scope(pod("ml", {"imagePullSecrets": secrets, "containers": []})),
        pull_scope(pod(None, {"containers": []}), "team"),
        pull_scope(isvc),
        pull_scope(llmisvc),
        pull_scope(deployment),
    ]
    assert found == [
        PullScope("ml", ("regcred", "other")),
        PullScope("team"),
        PullScope("ml", ("regcred", "other"), "runner"),
        PullScope("llm", ("hub",)),
        PullScope("web", (), "deployer"),
    ]


@given(
    request_ns=st.sampled_from(["team-a", "team-b"]),
    object_ns=st.sampled_from([None, "team-a", "kube-system"]),
    names=st.lists(NAMES, max_size=5),
    account=st.one_of(st.none(), NAMES),
)
def test_the_request_namespace_always_wins_and_only_named_secrets_count(
    request_ns: str, object_ns: str | None, names: list[str], account: str | None
) -> None:
    spec: dict[str, Any] = {"containers": [], "imagePullSecrets": [{"name": n} for n in names]}
    if account is not None:
        spec["serviceAccountName"] = account
    scope = pull_scope(pod(object_ns, spec), request_ns)
    assert scope.namespace == request_ns
    assert list(scope.secrets) == list(dict.fromkeys(n for n in names if n))
    assert scope.service_account == (account or "default")
