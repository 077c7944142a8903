"""The pod view: parsed once, agreeing with the readers it replaces, never raising on odd
shapes; and the InferenceService GPU question that used to raise TypeError on them."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.cluster.snapshot import ClusterSnapshot, bundled_snapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.settings.config import WebhookConfig
from cudasched.vocab.errors import InputError
from cudasched.webhook.admission.admitter import Admitter
from cudasched.workloads.gpu import uses_gpu
from cudasched.workloads.kserve import isvc_uses_gpu
from cudasched.workloads.kserve.llm import is_llmisvc_pod, llmisvc_main_container, llmisvc_of_pod
from cudasched.workloads.kserve.pods import is_predictor_pod, isvc_name_of
from cudasched.workloads.pods import workload_uses_gpu
from cudasched.workloads.pullscope import pull_scope
from cudasched.workloads.view import Role, view_pod
from tests.support import builders
from tests.support.admission import ask, isvcs, nodes, runtimes, state_of
from tests.support.shapes import JSON, planted_many

CONTAINER_KEYS = st.sampled_from(["name", "image", "env", "resources", "ports"])
NAMES = st.sampled_from(["kserve-container", "worker-container", "main", "sidecar", 7])


@st.composite
def odd_pods(draw: st.DrawFn) -> Any:
    """Pods whose every part may be of the wrong shape: real keys, any values."""
    container = draw(
        st.one_of(
            JSON,
            st.fixed_dictionaries(
                {"name": NAMES},
                optional={
                    "image": JSON,
                    "resources": st.one_of(
                        JSON,
                        st.fixed_dictionaries(
                            {"limits": st.one_of(JSON, st.just({"nvidia.com/gpu": 1}))}
                        ),
                    ),
                    "env": JSON,
                },
            ),
        )
    )
    labels = draw(
        st.one_of(
            JSON,
            st.fixed_dictionaries(
                {},
                optional={
                    "component": st.sampled_from(["predictor", "transformer", "explainer", 3]),
                    "serving.kserve.io/inferenceservice": st.one_of(st.just("svc"), JSON),
                    "app.kubernetes.io/part-of": st.just("llminferenceservice"),
                    "app.kubernetes.io/component": st.sampled_from(
                        ["llminferenceservice-workload", "router", 1]
                    ),
                    "app.kubernetes.io/name": JSON,
                },
            ),
        )
    )
    spec = draw(
        st.one_of(
            JSON,
            st.fixed_dictionaries(
                {"containers": st.one_of(JSON, st.lists(st.just(container), max_size=2))},
                optional={"resourceClaims": JSON, "initContainers": JSON},
            ),
        )
    )
    return draw(
        st.one_of(
            JSON,
            st.fixed_dictionaries(
                {"metadata": st.one_of(JSON, st.fixed_dictionaries({"labels": st.just(labels)}))},
                optional={"spec": st.just(spec)},
            ),
        )
    )


@settings(max_examples=400)
@given(odd_pods())
def test_a_view_never_raises_and_keeps_reader_errors_as_input_errors(pod: Any) -> None:
    view = view_pod(pod)
    assert view.error is None or isinstance(view.error, InputError)
    assert isinstance(view.role, Role)
    if view.role is Role.AUXILIARY:
        assert not view.runs_gpu_workload
    if view.error is None:
        assert view.checked() is view


def _first_gpu_container(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The container whose CUDA matters, found by hand: the first asking for an NVIDIA GPU,
    else KServe's predictor or worker container."""
    containers = spec.get("containers") or []
    for c in containers:
        resources = c.get("resources") or {}
        asked = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
        if any(k.startswith("nvidia.com/") and float(v) > 0 for k, v in asked.items()):
            return c
    names = [c.get("name") for c in containers]
    for name in ("kserve-container", "worker-container"):
        if name in names:
            return containers[names.index(name)]
    return None


def test_the_view_agrees_with_every_reader_on_the_sample_cluster() -> None:
    """For each pod of the bundled sample, the view gives the answers the separate readers
    give (role, owner, KServe, GPU, CUDA container, constrained, pull scope)."""
    pods = bundled_snapshot().pods
    roles: dict[Role, int] = {}
    for pod in pods:
        view = view_pod(pod).checked()
        spec = pod["spec"]
        roles[view.role] = roles.get(view.role, 0) + 1
        assert view.requests_gpu == uses_gpu(spec)
        assert view.pull_scope() == pull_scope(pod)
        main = llmisvc_main_container(spec) if is_llmisvc_pod(pod) else None
        runs = view.requests_gpu or (main is not None and not main.get("resources"))
        assert view.runs_gpu_workload == (runs and view.role is not Role.AUXILIARY)
        if is_llmisvc_pod(pod):
            assert view.role is Role.MODEL_SERVER and view.is_kserve
            assert view.owner == llmisvc_of_pod(pod)
            assert view.cuda_container == (main if main is not None else _first_gpu_container(spec))
        else:
            assert view.cuda_container == _first_gpu_container(spec)
            if is_predictor_pod(pod):
                assert view.role is Role.PREDICTOR and view.is_kserve
                assert view.owner == isvc_name_of(pod)
    assert len(pods) == sum(roles.values()) >= 9
    assert roles.get(Role.PREDICTOR, 0) >= 1


def test_a_transformer_is_auxiliary_and_never_constrained() -> None:
    pod = {
        "metadata": {
            "labels": {"component": "transformer", "serving.kserve.io/inferenceservice": "s"}
        },
        "spec": {"containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
    }
    view = view_pod(pod)
    assert (view.role, view.owner, view.requests_gpu) == (Role.AUXILIARY, "s", True)
    assert not view.runs_gpu_workload


def test_an_unreadable_pod_keeps_the_readers_message() -> None:
    pod = {
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "x"}}}]}
    }
    view = view_pod(pod)
    assert view.error is not None
    try:
        uses_gpu(pod["spec"])
    except InputError as exc:
        assert str(view.error) == str(exc)
    else:  # pragma: no cover - the reader must refuse the quantity
        raise AssertionError("uses_gpu accepted an invalid quantity")


def _isvc(predictor: Any) -> dict[str, Any]:
    return builders.isvc("odd", predictor=predictor)


def test_worker_containers_that_are_a_number_read_as_none() -> None:
    """The fuzzed shape that made admission answer "internal error" (TypeError)."""
    isvc = _isvc({"model": {"modelFormat": {"name": "vllm"}}, "workerSpec": {"containers": 3}})
    assert isvc_uses_gpu(isvc, None) is False
    gpu = _isvc(
        {
            "containers": 3,
            "workerSpec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}]},
        }
    )
    assert isvc_uses_gpu(gpu, None) is True


@settings(max_examples=300)
@given(JSON, JSON, JSON)
def test_the_isvc_gpu_question_raises_only_input_errors(
    containers: Any, worker: Any, claims: Any
) -> None:
    isvc = _isvc({"containers": containers, "workerSpec": worker, "resourceClaims": claims})
    with contextlib.suppress(InputError):
        workload_uses_gpu(isvc)


def test_admission_answers_an_isvc_with_numeric_worker_containers(kb: KnowledgeBase) -> None:
    snap = ClusterSnapshot(
        nodes=tuple(nodes()), serving_runtimes=tuple(runtimes()), inference_services=tuple(isvcs())
    )
    state = state_of(snap, kb)
    adm = Admitter.from_config(WebhookConfig(), kb)
    isvc = _isvc(
        {
            "model": {"modelFormat": {"name": "vllm"}, "runtime": "vllm-cuda-12-4"},
            "workerSpec": {"containers": 3},
        }
    )
    review = builders.review(isvc, uid="odd-1")
    resp = ask(adm, "isvc", review, state)
    assert resp["allowed"] is True
    assert not any("internal error" in w for w in resp.get("warnings", [])), orjson.dumps(resp)


# --------------------------------------------------------------------------- any JSON, anywhere

#: Pods of every role, as the API server returns them, to plant odd values into.
ROLE_PODS: dict[str, dict[str, Any]] = {
    "predictor": builders.pod(predictor="svc"),
    "transformer": builders.pod(
        labels={"component": "transformer", "serving.kserve.io/inferenceservice": "svc"}
    ),
    "model-server": builders.pod(
        labels={
            "app.kubernetes.io/part-of": "llminferenceservice",
            "app.kubernetes.io/component": "llminferenceservice-workload",
            "app.kubernetes.io/name": "qwen",
        }
    ),
    "gpu": builders.pod(annotations={"cudasched.io/skip": "true"}),
}

_LABELS = ("metadata", "labels")
_CONTAINER = ("spec", "containers", 0)

#: Every field the view reads, and the parents they hang from.
VIEW_FIELDS: tuple[tuple[str | int, ...], ...] = (
    (),
    ("kind",),
    ("metadata",),
    ("metadata", "name"),
    ("metadata", "generateName"),
    ("metadata", "namespace"),
    _LABELS,
    (*_LABELS, "component"),
    (*_LABELS, "serving.kserve.io/inferenceservice"),
    (*_LABELS, "app.kubernetes.io/part-of"),
    (*_LABELS, "app.kubernetes.io/component"),
    (*_LABELS, "app.kubernetes.io/name"),
    ("metadata", "annotations"),
    ("metadata", "annotations", "cudasched.io/skip"),
    ("metadata", "annotations", "cudasched.io/cuda-version"),
    ("spec",),
    ("spec", "containers"),
    _CONTAINER,
    (*_CONTAINER, "name"),
    (*_CONTAINER, "image"),
    (*_CONTAINER, "resources"),
    (*_CONTAINER, "resources", "limits"),
    (*_CONTAINER, "resources", "limits", "nvidia.com/gpu"),
    (*_CONTAINER, "resources", "requests"),
    (*_CONTAINER, "resources", "requests", "nvidia.com/mig-1g.10gb"),
    ("spec", "containers", 1),
    ("spec", "initContainers"),
    ("spec", "initContainers", 0, "resources", "limits"),
    ("spec", "resourceClaims"),
    ("spec", "imagePullSecrets"),
    ("spec", "imagePullSecrets", 0),
    ("spec", "imagePullSecrets", 0, "name"),
    ("spec", "serviceAccountName"),
    ("spec", "serviceAccount"),
)


@settings(max_examples=1500)
@given(
    role=st.sampled_from(sorted(ROLE_PODS)),
    grafts=st.lists(st.tuples(st.sampled_from(VIEW_FIELDS), JSON), min_size=1, max_size=4),
)
def test_any_json_at_any_field_the_view_reads_never_raises(
    role: str, grafts: list[tuple[tuple[str | int, ...], Any]]
) -> None:
    """The parser's promise, on shapes no API server sends (a list for a label value, a
    mapping for a quantity, a number for the containers): the view is built, its answers
    have their types, and a reader's complaint is kept as an :class:`InputError`."""
    pod = planted_many(ROLE_PODS[role], grafts)
    view = view_pod(pod)
    assert view.error is None or isinstance(view.error, InputError)
    memo: dict[bytes, Any] = {}
    for _ in range(2):  # a caller's memo of the GPU reading changes no answer, second time too
        remembered = view_pod(pod, gpu_memo=memo)
        assert remembered._replace(error=None) == view._replace(error=None)
        assert str(remembered.error) == str(view.error)
    assert isinstance(view.role, Role)
    assert view.owner is None or isinstance(view.owner, str)
    assert isinstance(view.requests_gpu, bool) and isinstance(view.skipped, bool)
    assert view.cuda_container is None or isinstance(view.cuda_container, Mapping)


def test_an_unhashable_llm_component_label_is_no_model_server() -> None:
    """A list where ``app.kubernetes.io/component`` belongs made the model-server test ask a
    dict whether it holds a list, which raises ``TypeError`` (the view promises it never
    raises)."""
    pod = planted_many(
        ROLE_PODS["model-server"], [((*_LABELS, "app.kubernetes.io/component"), ["x"])]
    )
    view = view_pod(pod)
    assert view.role is Role.POD and view.owner is None


def _decided(kb: KnowledgeBase, pod: dict[str, Any]) -> Any:
    snap = ClusterSnapshot(nodes=tuple(nodes()), serving_runtimes=tuple(runtimes()))
    adm = Admitter.from_config(WebhookConfig(), kb)
    body = orjson.dumps(builders.review(pod, uid="odd-2"))
    return adm.decide("pod", body, state_of(snap, kb))


def test_a_malformed_quantity_behind_a_gpu_is_unreadable_to_admission_and_explain(
    kb: KnowledgeBase,
) -> None:
    """Admission used to stop reading at the first GPU it found, so a malformed quantity after
    it was constrained by admission and refused by ``explain``: now both read every
    quantity, and say the same thing."""
    from cudasched.explain.eligibility import explain

    pod = builders.pod(
        containers=[
            {
                "name": "main",
                "image": "nvidia/cuda:12.4.1-runtime-ubuntu22.04",
                "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": "x"}},
            }
        ]
    )
    decision = _decided(kb, pod)
    assert decision.reason.startswith("unreadable: invalid resource quantity 'x'")
    with pytest.raises(InputError) as explained:
        explain(pod, nodes(), "strict", kb)
    assert decision.reason == f"unreadable: {explained.value}"


def test_a_pod_that_declares_its_need_is_read_all_the_same(kb: KnowledgeBase) -> None:
    """A pod whose ``cudasched.io/cuda-version`` says what it needs was judged by whichever
    readers happened to look: a malformed init-container quantity went unseen and the pod was
    constrained; undeclared, the same pod was unreadable. The view is read whole for both."""
    pod = builders.pod(annotations={"cudasched.io/cuda-version": "12.4"})
    pod["spec"]["initContainers"] = [
        {"name": "init", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "x"}}}
    ]
    declared = _decided(kb, pod)
    del pod["metadata"]["annotations"]["cudasched.io/cuda-version"]
    undeclared = _decided(kb, pod)
    assert declared.reason == undeclared.reason
    assert declared.reason.startswith("unreadable: invalid resource quantity 'x'")
