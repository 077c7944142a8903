"""Whose pull secrets a look-up may use: the workload's own ``imagePullSecrets``, else its
ServiceAccount's, always in the request's namespace (the kubelet's and the ServiceAccount
admission plugin's order)."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.knowledge.imageconfig import PullScope
from cudasched.workloads.pullscope import kserve_merged_names, pull_scope
from tests.support.shapes import JSON, planted_many

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


def runtime_with(kind: str, namespace: str | None, *pull: str) -> dict[str, Any]:
    meta = {"name": "rt"} | ({"namespace": namespace} if namespace else {})
    spec: dict[str, Any] = {"containers": [{"name": "kserve-container", "image": "x"}]}
    if pull:
        spec["imagePullSecrets"] = [{"name": n} for n in pull]
    api = "serving.kserve.io/v1alpha1"
    return {"apiVersion": api, "kind": kind, "metadata": meta, "spec": spec}


def test_a_predictor_pulls_with_its_runtimes_secrets_too_in_its_own_namespace() -> None:
    """KServe merges the runtime's ``imagePullSecrets`` into the predictor pod (MergePodSpec),
    whichever kind the runtime is; the names are the InferenceService's namespace's. A
    ServingRuntime alone pulls with its own, an LLMInferenceService without a template with
    its worker's."""
    isvc = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "llm", "namespace": "ml"},
        "spec": {"predictor": {"imagePullSecrets": [{"name": "own"}]}},
    }
    bare = {**isvc, "spec": {"predictor": {"serviceAccountName": "runner"}}}
    cluster = runtime_with("ClusterServingRuntime", None, "hub", "own")
    namespaced = runtime_with("ServingRuntime", "ml", "rt-cred")
    worker_only = {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "LLMInferenceService",
        "metadata": {"name": "big", "namespace": "llm"},
        "spec": {"worker": {"imagePullSecrets": [{"name": "lws"}], "containers": []}},
    }
    found = [
        pull_scope(isvc, runtime=cluster),
        pull_scope(isvc, "team", runtime=namespaced),
        pull_scope(bare, runtime=namespaced),
        pull_scope(bare, runtime=runtime_with("ServingRuntime", "ml")),
        pull_scope(namespaced),
        pull_scope(worker_only),
    ]
    assert found == [
        PullScope("ml", ("hub", "own")),
        PullScope("team", ("own", "rt-cred")),
        PullScope("ml", ("rt-cred",), "runner"),
        PullScope("ml", (), "runner"),
        PullScope("ml", ("rt-cred",)),
        PullScope("llm", ("lws",)),
    ]


KUBECTL = shutil.which("kubectl")
SECRET_NAMES = st.lists(st.sampled_from(list("abcdef")), max_size=5)


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (Debian kubernetes-client)")
@settings(max_examples=25, deadline=None)
@given(runtime=SECRET_NAMES, predictor=SECRET_NAMES)
def test_the_merged_order_is_a_strategic_merge_patchs(
    runtime: list[str], predictor: list[str]
) -> None:
    """What ``kubectl patch --local --type strategic`` (the apimachinery code KServe's
    MergePodSpec calls) makes of the runtime's list patched with the predictor's."""
    runtime, predictor = list(dict.fromkeys(runtime)), list(dict.fromkeys(predictor))
    base: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}]}
    if runtime:
        base["imagePullSecrets"] = [{"name": n} for n in runtime]
    pod_doc = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": base}
    patch = {"spec": {"imagePullSecrets": [{"name": n} for n in predictor]}} if predictor else {}
    command = [KUBECTL or "kubectl", "patch", "--local", "-f", "-", "--type", "strategic"]
    done = subprocess.run(
        [*command, "-p", json.dumps(patch), "-o", "json"],
        input=json.dumps(pod_doc),
        capture_output=True,
        text=True,
        check=True,
    )
    merged = json.loads(done.stdout)["spec"].get("imagePullSecrets") or []
    assert kserve_merged_names(runtime, predictor) == [e["name"] for e in merged]


# --------------------------------------------------------------------------- odd shapes

#: Every kind the scope reads, written as the API server returns it.
SHAPED: dict[str, dict[str, Any]] = {
    "Pod": pod("ml", {"imagePullSecrets": [{"name": "a"}], "containers": []}),
    "InferenceService": {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "llm", "namespace": "ml"},
        "spec": {"predictor": {"imagePullSecrets": [{"name": "a"}], "serviceAccountName": "r"}},
    },
    "LLMInferenceService": {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "LLMInferenceService",
        "metadata": {"name": "q", "namespace": "llm"},
        "spec": {"template": {"imagePullSecrets": [{"name": "a"}], "containers": []}},
    },
    "Deployment": {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"template": {"spec": {"serviceAccountName": "d", "containers": []}}},
    },
    "CronJob": {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "cj"},
        "spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": []}}}}},
    },
    "ServingRuntime": runtime_with("ServingRuntime", "ml", "rt-cred"),
}

#: The fields the scope reads, and the parents they hang from.
PULL_FIELDS: tuple[tuple[str | int, ...], ...] = (
    (),
    ("kind",),
    ("apiVersion",),
    ("metadata",),
    ("metadata", "namespace"),
    ("spec",),
    ("spec", "imagePullSecrets"),
    ("spec", "imagePullSecrets", 0),
    ("spec", "imagePullSecrets", 0, "name"),
    ("spec", "serviceAccountName"),
    ("spec", "serviceAccount"),
    ("spec", "predictor"),
    ("spec", "predictor", "imagePullSecrets"),
    ("spec", "predictor", "imagePullSecrets", 0, "name"),
    ("spec", "predictor", "serviceAccountName"),
    ("spec", "template"),
    ("spec", "template", "imagePullSecrets"),
    ("spec", "template", "spec"),
    ("spec", "template", "spec", "imagePullSecrets"),
    ("spec", "template", "spec", "serviceAccountName"),
    ("spec", "worker"),
    ("spec", "jobTemplate"),
    ("spec", "jobTemplate", "spec", "template"),
    ("template",),
)


@settings(max_examples=600)
@given(
    kind=st.sampled_from(sorted(SHAPED)),
    grafts=st.lists(st.tuples(st.sampled_from(PULL_FIELDS), JSON), min_size=1, max_size=3),
    runtime_grafts=st.lists(st.tuples(st.sampled_from(PULL_FIELDS), JSON), max_size=2),
    namespace=st.sampled_from(["", "team"]),
)
def test_the_scope_never_raises_and_always_names_text(
    kind: str,
    grafts: list[tuple[tuple[str | int, ...], Any]],
    runtime_grafts: list[tuple[tuple[str | int, ...], Any]],
    namespace: str,
) -> None:
    """Whatever JSON sits at the fields the scope reads (a list where a kind belongs, a
    mapping for a service account), the scope is an answer, never an exception: admission
    asks it of every object it resolves, and an exception there became "internal error;
    admitted unchanged" (a fuzzed ``kind: []`` raised ``TypeError`` in ``_spec_of``)."""
    obj = planted_many(SHAPED[kind], grafts)
    runtime = planted_many(SHAPED["ServingRuntime"], runtime_grafts)
    scope = pull_scope(obj, namespace, runtime=runtime) if isinstance(obj, dict) else None
    if scope is None:
        return  # not an object at all: the callers hold mappings
    assert isinstance(scope.namespace, str) and scope.namespace
    assert all(isinstance(name, str) and name for name in scope.secrets)
    assert isinstance(scope.service_account, str) and scope.service_account
    if namespace:
        assert scope.namespace == namespace


@pytest.mark.parametrize("kind", [[], {}, ["Pod"], {"kind": "Pod"}])
def test_an_unhashable_kind_reads_as_an_unknown_kind(kind: Any) -> None:
    obj = {**SHAPED["Deployment"], "kind": kind}
    assert pull_scope(obj, "team") == PullScope("team", (), "d")


def test_a_service_account_that_is_not_text_falls_back_to_the_next_field() -> None:
    """``serviceAccountName`` wins; when it is not text, the deprecated ``serviceAccount`` is
    the one the pod names (the admission plugin copies one into the other)."""
    spec = {"serviceAccountName": ["x"], "serviceAccount": "legacy", "containers": []}
    assert pull_scope(pod("ml", spec)).service_account == "legacy"
    spec = {"serviceAccountName": {"name": "x"}, "containers": []}
    assert pull_scope(pod("ml", spec)).service_account == "default"
