"""The pod view: parsed once, agreeing with the readers it replaces, never raising on odd
shapes; and the InferenceService GPU question that used to raise TypeError on them."""

from __future__ import annotations

import contextlib
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.cluster.snapshot import ClusterSnapshot, bundled_snapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.settings.config import WebhookConfig
from cudasched.vocab.errors import InputError
from cudasched.webhook.admission.admitter import Admitter
from cudasched.workloads.gpu import gpu_container, uses_gpu
from cudasched.workloads.kserve import isvc_uses_gpu
from cudasched.workloads.kserve.llm import is_llmisvc_pod, llmisvc_main_container, llmisvc_of_pod
from cudasched.workloads.kserve.pods import is_predictor_pod, isvc_name_of
from cudasched.workloads.pods import workload_uses_gpu
from cudasched.workloads.resolution import runs_gpu_workload
from cudasched.workloads.view import Role, view_pod
from tests.support import builders
from tests.support.admission import ask, isvcs, nodes, runtimes, state_of

# Any JSON value, small.
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
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


def test_the_view_agrees_with_every_reader_on_the_sample_cluster() -> None:
    """For each pod of the bundled sample, the view gives the answers the separate readers
    give (role, owner, GPU, CUDA container, constrained)."""
    pods = bundled_snapshot().pods
    roles: dict[Role, int] = {}
    for pod in pods:
        view = view_pod(pod).checked()
        spec = pod["spec"]
        roles[view.role] = roles.get(view.role, 0) + 1
        assert view.requests_gpu == uses_gpu(spec)
        assert view.runs_gpu_workload == runs_gpu_workload(pod)
        if is_llmisvc_pod(pod):
            assert view.role is Role.MODEL_SERVER
            assert view.owner == llmisvc_of_pod(pod)
            main = llmisvc_main_container(spec)
            assert view.cuda_container == (main if main is not None else gpu_container(spec))
        else:
            assert view.cuda_container == gpu_container(spec)
            if is_predictor_pod(pod):
                assert view.role is Role.PREDICTOR
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
