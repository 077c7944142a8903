"""KServe runtime selection and pod helpers, case by case against KServe's own rules
(predictor_model.go, servingruntime_types.go, inference_service_defaults.go, predictor.go)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.vocab.errors import InputError
from cudasched.workloads.kserve import (
    CLUSTER_SERVING_RUNTIME,
    SERVING_RUNTIME,
    RuntimeRef,
    component_of,
    effective_model,
    explain_runtime_selection,
    is_multinode_worker,
    is_predictor_pod,
    isvc_name_of,
    predictor_container,
    predictor_image,
    recorded_runtime,
    runtime_containers,
    runtime_of_pod,
    select_runtime,
    supporting_runtimes,
)
from cudasched.workloads.view import view_pod
from tests.support import builders

DATA = Path(__file__).parents[1] / "data" / "kserve"


def load(name: str) -> list[dict[str, Any]]:
    return yaml.safe_load((DATA / name).read_text())["items"]


def by_name(items: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(i for i in items if i["metadata"]["name"] == name)


def runtime(
    name: str,
    formats: list[dict[str, Any]],
    *,
    protocols: list[str] | None = None,
    created: str | None = "2025-01-01T00:00:00Z",
    namespace: str | None = "ns",
    kind: str = SERVING_RUNTIME,
    image: str = "example/server:1.0",
    **spec: Any,
) -> dict[str, Any]:
    return builders.runtime(
        name,
        namespace if kind == SERVING_RUNTIME else None,
        kind=kind,
        image=image,
        formats=formats,
        protocols=protocols,
        created=created,
        spec=spec,
    )


def cluster_runtime(name: str, formats: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    return runtime(name, formats, kind=CLUSTER_SERVING_RUNTIME, **kw)


def fmt(name: str, version: str | None = None, auto: bool | None = True, prio: int | None = None):
    entry: dict[str, Any] = {"name": name}
    if version is not None:
        entry["version"] = version
    if auto is not None:
        entry["autoSelect"] = auto
    if prio is not None:
        entry["priority"] = prio
    return entry


def isvc(model: dict[str, Any] | None = None, **predictor: Any) -> dict[str, Any]:
    pred = dict(predictor)
    if model is not None:
        pred["model"] = model
    return builders.isvc("m", "ns", predictor=pred)


def model(name: str, version: str | None = None, **extra: Any) -> dict[str, Any]:
    mf: dict[str, Any] = {"name": name}
    if version is not None:
        mf["version"] = version
    return {"modelFormat": mf, **extra}


def chosen(obj: dict[str, Any], ns: list, cluster: list) -> str | None:
    choice = select_runtime(obj, ns, cluster)
    return None if choice is None else choice.name


# --------------------------------------------------------------------------- auto-selection


def test_namespace_runtime_beats_any_cluster_runtime_priority() -> None:
    ns = [runtime("ns-sk", [fmt("sklearn", prio=1)])]
    cluster = [cluster_runtime("cl-sk", [fmt("sklearn", prio=100)])]
    choice = select_runtime(isvc(model("sklearn")), ns, cluster)
    assert choice is not None
    assert (choice.kind, choice.name) == (SERVING_RUNTIME, "ns-sk")
    assert "namespace runtimes before cluster runtimes" in choice.reason


def test_cluster_runtime_used_when_no_namespace_runtime_fits() -> None:
    ns = [runtime("ns-xgb", [fmt("xgboost")])]
    cluster = [cluster_runtime("cl-sk", [fmt("sklearn")])]
    choice = select_runtime(isvc(model("sklearn")), ns, cluster)
    assert choice is not None and choice.kind == CLUSTER_SERVING_RUNTIME
    assert choice.obj is cluster[0]


def test_disabled_runtime_skipped() -> None:
    ns = [runtime("off", [fmt("sklearn", prio=9)], disabled=True), runtime("on", [fmt("sklearn")])]
    assert chosen(isvc(model("sklearn")), ns, []) == "on"


@pytest.mark.parametrize("auto", [False, None])
def test_autoselect_false_or_unset_is_invisible_to_auto_selection(auto: bool | None) -> None:
    ns = [runtime("manual", [fmt("sklearn", auto=auto, prio=5)])]
    assert chosen(isvc(model("sklearn")), ns, []) is None
    # ...but an explicit runtime name counts every entry (RuntimeSupportsModel with Runtime set)
    assert chosen(isvc(model("sklearn", runtime="manual")), ns, []) == "manual"


def test_autoselect_is_per_format_entry() -> None:
    ns = [runtime("mixed", [fmt("sklearn", auto=False), fmt("xgboost", auto=True)])]
    assert chosen(isvc(model("sklearn")), ns, []) is None
    assert chosen(isvc(model("xgboost")), ns, []) == "mixed"


@pytest.mark.parametrize(
    ("model_version", "runtime_version", "matches"),
    [
        (None, "1", True),  # a model without version matches any version of the name
        ("1", "1", True),
        ("1.0", "1", False),  # exact string equality, no semver
        ("1", "1.0", False),
        ("2", "1", False),
        ("1", None, False),  # the runtime offers only mt:name
        (None, None, True),
    ],
)
def test_version_match_is_exact_name_version_label(
    model_version: str | None, runtime_version: str | None, matches: bool
) -> None:
    ns = [runtime("rt", [fmt("sklearn", runtime_version)])]
    assert (chosen(isvc(model("sklearn", model_version)), ns, []) == "rt") is matches


def test_format_name_is_case_sensitive_like_kserve() -> None:
    ns = [runtime("rt", [fmt("sklearn")])]
    assert chosen(isvc(model("SKLearn")), ns, []) is None
    assert chosen(isvc(model("sklearn")), ns, []) == "rt"


def test_protocol_defaults_to_v1() -> None:
    v2_only = runtime("v2-only", [fmt("sklearn", prio=9)], protocols=["v2"])
    any_proto = runtime("any", [fmt("sklearn")], protocols=None)
    v1 = runtime("v1", [fmt("sklearn")], protocols=["v1", "v2"])
    assert chosen(isvc(model("sklearn")), [v2_only], []) is None
    assert chosen(isvc(model("sklearn")), [v2_only, any_proto], []) == "any"
    assert chosen(isvc(model("sklearn")), [v2_only, v1], []) == "v1"
    assert chosen(isvc(model("sklearn", protocolVersion="v2")), [v2_only, v1], []) == "v2-only"


def test_priority_higher_first_and_with_priority_before_without() -> None:
    ns = [
        runtime("none", [fmt("sklearn")]),
        runtime("low", [fmt("sklearn", prio=1)]),
        runtime("high", [fmt("sklearn", prio=7)]),
    ]
    assert chosen(isvc(model("sklearn")), ns, []) == "high"
    assert chosen(isvc(model("sklearn")), ns[:2], []) == "low"


def test_priority_is_read_from_first_entry_of_the_format_name() -> None:
    # GetPriority returns the first entry whose name matches, even if a later one is higher.
    a = runtime("a", [fmt("sklearn", "0", prio=1), fmt("sklearn", "1", prio=9)])
    b = runtime("b", [fmt("sklearn", "1", prio=5)])
    assert chosen(isvc(model("sklearn", "1")), [a, b], []) == "b"


def test_ties_fall_back_to_protocol_then_newest_then_name() -> None:
    old = runtime("old", [fmt("sklearn", prio=2)], created="2024-01-01T00:00:00Z")
    new = runtime("new", [fmt("sklearn", prio=2)], created="2025-01-01T00:00:00Z")
    assert chosen(isvc(model("sklearn")), [old, new], []) == "new"
    b = runtime("b", [fmt("sklearn", prio=2)])
    a = runtime("a", [fmt("sklearn", prio=2)])
    assert chosen(isvc(model("sklearn")), [b, a], []) == "a"
    # a runtime listing v1 outranks a newer one listing only v2 (after protocol filtering, a
    # model with protocol v2 accepts both)
    v1v2 = runtime(
        "z-v1", [fmt("sklearn", prio=2)], protocols=["v2", "v1"], created="2020-01-01T00:00:00Z"
    )
    v2 = runtime("a-v2", [fmt("sklearn", prio=2)], protocols=["v2"])
    assert chosen(isvc(model("sklearn", protocolVersion="v2")), [v2, v1v2], []) == "z-v1"
    # no protocolVersions sorts last ("Unknown")
    bare = runtime("a-bare", [fmt("sklearn", prio=2)], created="2030-01-01T00:00:00Z")
    assert chosen(isvc(model("sklearn", protocolVersion="v2")), [bare, v2], []) == "a-v2"


def test_missing_creation_timestamp_sorts_oldest() -> None:
    none = runtime("a", [fmt("sklearn")], created=None)
    dated = runtime("b", [fmt("sklearn")])
    assert chosen(isvc(model("sklearn")), [none, dated], []) == "b"


def test_priority_outranks_list_order() -> None:
    newer = runtime("newer", [fmt("sklearn", prio=1)], created="2026-01-01T00:00:00Z")
    older = runtime("older", [fmt("sklearn", prio=3)], created="2020-01-01T00:00:00Z")
    assert chosen(isvc(model("sklearn")), [newer, older], []) == "older"


def test_multi_model_runtime_skipped() -> None:
    ns = [
        runtime("mms", [fmt("sklearn", prio=9)], multiModel=True),
        runtime("sms", [fmt("sklearn")]),
    ]
    assert chosen(isvc(model("sklearn")), ns, []) == "sms"


def test_multi_node_runtime_only_for_worker_spec_predictors() -> None:
    single = cluster_runtime("hf", [fmt("huggingface", "1", prio=1)], protocols=["v2", "v1"])
    multi = cluster_runtime(
        "hf-multinode",
        [fmt("huggingface", "1", prio=2)],
        protocols=["v2", "v1"],
        workerSpec={"containers": [{"name": "worker-container", "image": "x:1"}]},
    )
    plain = isvc(model("huggingface"))
    assert chosen(plain, [], [single, multi]) == "hf"
    with_workers = isvc(model("huggingface"), workerSpec={"tensorParallelSize": 2})
    assert chosen(with_workers, [], [single, multi]) == "hf-multinode"


def test_runtimes_of_other_namespaces_ignored() -> None:
    other = runtime("elsewhere", [fmt("sklearn", prio=9)], namespace="other")
    mine = runtime("mine", [fmt("sklearn")])
    assert chosen(isvc(model("sklearn")), [other, mine], []) == "mine"


def test_no_candidate_explains_why() -> None:
    choice, why = explain_runtime_selection(isvc(model("sklearn")), [], [])
    assert choice is None
    assert "mt:sklearn" in why and "v1" in why


# --------------------------------------------------------------------------- explicit runtime


def test_explicit_runtime_namespace_first_then_cluster() -> None:
    ns = [runtime("rt", [fmt("sklearn", auto=False)])]
    cluster = [
        cluster_runtime("rt", [fmt("sklearn")]),
        cluster_runtime("only-cl", [fmt("sklearn")]),
    ]
    choice = select_runtime(isvc(model("sklearn", runtime="rt")), ns, cluster)
    assert choice is not None and choice.kind == SERVING_RUNTIME
    assert choice.reason == "spec.predictor.model.runtime"
    choice = select_runtime(isvc(model("sklearn", runtime="only-cl")), ns, cluster)
    assert choice is not None and choice.kind == CLUSTER_SERVING_RUNTIME


@pytest.mark.parametrize(
    ("rt", "mdl", "why"),
    [
        (
            runtime("rt", [fmt("sklearn")], disabled=True),
            model("sklearn", runtime="rt"),
            "disabled",
        ),
        (
            runtime("rt", [fmt("sklearn")], protocols=["v2"]),
            model("sklearn", runtime="rt", protocolVersion="v1"),
            "protocol v1",
        ),
        (runtime("rt", [fmt("xgboost")]), model("sklearn", runtime="rt"), "mt:sklearn"),
        (runtime("rt", [fmt("sklearn")]), model("sklearn", runtime="missing"), "exists"),
    ],
)
def test_explicit_runtime_rejections(rt: dict, mdl: dict, why: str) -> None:
    choice, reason = explain_runtime_selection(isvc(mdl), [rt], [])
    assert choice is None
    assert why in reason


def test_explicit_runtime_with_unset_protocol_is_not_protocol_checked() -> None:
    # reconcileModel checks the protocol only when the InferenceService sets one.
    rt = runtime("rt", [fmt("sklearn")], protocols=["v2"])
    assert chosen(isvc(model("sklearn", runtime="rt")), [rt], []) == "rt"


# --------------------------------------------------------------------------- status


def test_status_names_win_over_everything() -> None:
    ns = [runtime("auto", [fmt("sklearn", prio=9)])]
    cluster = [cluster_runtime("recorded", [fmt("xgboost")])]
    obj = isvc(model("sklearn"))
    obj["status"] = {"clusterServingRuntimeName": "recorded"}
    choice = select_runtime(obj, ns, cluster)
    assert choice is not None and choice.name == "recorded"
    assert choice.reason == "status.clusterServingRuntimeName"
    obj["status"] = {"servingRuntimeName": "auto"}
    choice = select_runtime(obj, ns, cluster)
    assert choice is not None and (choice.kind, choice.reason) == (
        SERVING_RUNTIME,
        "status.servingRuntimeName",
    )


def test_spec_runtime_edit_beats_stale_status() -> None:
    ns = [runtime("old", [fmt("sklearn")]), runtime("new", [fmt("sklearn")])]
    obj = isvc(model("sklearn", runtime="new"))
    obj["status"] = {"servingRuntimeName": "old"}
    choice = select_runtime(obj, ns, [])
    assert choice is not None and choice.name == "new"
    assert choice.reason == "spec.predictor.model.runtime (status still names old)"
    # the same name: the status answers
    obj["spec"]["predictor"]["model"]["runtime"] = "old"
    choice = select_runtime(obj, ns, [])
    assert choice is not None and choice.reason == "status.servingRuntimeName"
    # a named runtime KServe refuses leaves the recorded one serving
    ns[1]["spec"]["disabled"] = True
    obj["spec"]["predictor"]["model"]["runtime"] = "new"
    choice = select_runtime(obj, ns, [])
    assert choice is not None and (choice.name, choice.reason) == (
        "old",
        "status.servingRuntimeName",
    )


def test_status_name_not_found_falls_back_to_selection() -> None:
    obj = isvc(model("sklearn"))
    obj["status"] = {"servingRuntimeName": "deleted"}
    assert chosen(obj, [runtime("auto", [fmt("sklearn")])], []) == "auto"


def test_recorded_runtime_and_runtime_of_pod() -> None:
    isvcs = load("isvcs.yaml")
    iris = by_name(isvcs, "sklearn-iris")
    assert recorded_runtime(iris) == RuntimeRef(CLUSTER_SERVING_RUNTIME, "kserve-sklearnserver")
    pods = load("pods.yaml")
    iris_pod = pods[3]
    assert runtime_of_pod(iris_pod, iris) == RuntimeRef(
        CLUSTER_SERVING_RUNTIME, "kserve-sklearnserver"
    )
    assert runtime_of_pod(pods[0], iris) is None  # another InferenceService's pod
    assert recorded_runtime(by_name(isvcs, "llama3")) is None


# --------------------------------------------------------------------------- legacy fields


@pytest.mark.parametrize(
    ("field", "fmt_name", "protocol"),
    [
        ("sklearn", "sklearn", None),
        ("xgboost", "xgboost", None),
        ("tensorflow", "tensorflow", None),
        ("pytorch", "pytorch", None),
        ("triton", "triton", "v2"),
        ("onnx", "onnx", "v2"),
        ("huggingface", "huggingface", "v2"),
        ("pmml", "pmml", None),
        ("lightgbm", "lightgbm", None),
        ("paddle", "paddle", None),
    ],
)
def test_legacy_framework_fields_become_model_formats(
    field: str, fmt_name: str, protocol: str | None
) -> None:
    m = effective_model(isvc(**{field: {"storageUri": "s3://b/m"}}))
    assert m is not None
    assert (m.format_name, m.format_version, m.protocol, m.runtime) == (
        fmt_name,
        None,
        protocol,
        None,
    )
    assert m.origin == f"spec.predictor.{field}"


def test_legacy_explicit_protocol_kept_and_legacy_field_overwrites_model() -> None:
    m = effective_model(isvc(triton={"protocolVersion": "grpc-v2"}))
    assert m is not None and m.protocol == "grpc-v2"
    # setPredictorModelDefaults assigns Model from the first legacy field it finds
    both = isvc(model("xgboost"), sklearn={})
    m = effective_model(both)
    assert m is not None and m.format_name == "sklearn"
    # switch order: sklearn before tensorflow before ... paddle
    m = effective_model(isvc(paddle={}, xgboost={}))
    assert m is not None and m.format_name == "xgboost"


def test_triton_and_vllm_models_default_to_v2() -> None:
    for name in ("triton", "vLLM"):
        m = effective_model(isvc(model(name)))
        assert m is not None and m.protocol == "v2"
    m = effective_model(isvc(model("sklearn")))
    assert m is not None and m.protocol is None and m.effective_protocol == "v1"


def test_legacy_triton_selects_the_v2_triton_runtime() -> None:
    cluster = load("cluster-runtimes.yaml")
    obj = by_name(load("isvcs.yaml"), "triton-legacy")
    choice = select_runtime(obj, [], cluster)
    assert choice is not None and choice.name == "kserve-tritonserver"


def test_custom_container_predictor_uses_no_runtime() -> None:
    obj = isvc(containers=[{"name": "kserve-container", "image": "me/app:1"}])
    choice, why = explain_runtime_selection(obj, [], load("cluster-runtimes.yaml"))
    assert choice is None and "custom containers" in why


def test_modelmesh_isvc_not_modelled() -> None:
    obj = isvc(model("sklearn"))
    obj["metadata"]["annotations"] = {"serving.kserve.io/deploymentMode": "ModelMesh"}
    choice, why = explain_runtime_selection(obj, [], load("cluster-runtimes.yaml"))
    assert choice is None and "ModelMesh" in why


# --------------------------------------------------------------------------- real objects


def test_builtin_runtime_set_choices() -> None:
    cluster = load("cluster-runtimes.yaml")
    # mlserver is multi-model and v2-only, so sklearn (v1 default) goes to sklearnserver
    assert chosen(isvc(model("sklearn")), [], cluster) == "kserve-sklearnserver"
    # xgboost: only mlserver lists it, and it is multi-model -> nothing
    assert chosen(isvc(model("xgboost")), [], cluster) is None
    # pytorch v1: torchserve (triton lists pytorch but only over v2/grpc-v2)
    assert chosen(isvc(model("pytorch")), [], cluster) == "kserve-torchserve"
    # tensorflow over v2: only triton speaks v2
    assert (
        chosen(isvc(model("tensorflow", protocolVersion="v2")), [], cluster)
        == "kserve-tritonserver"
    )
    # tensorflow over v1: TF serving (priority 2)
    assert chosen(isvc(model("tensorflow")), [], cluster) == "kserve-tensorflow-serving"
    llama = by_name(load("isvcs.yaml"), "llama3")
    assert chosen(llama, [], cluster) == "kserve-huggingfaceserver"
    alauda = by_name(load("isvcs.yaml"), "qwen-alauda")
    assert chosen(alauda, [], cluster) == "aml-vllm-cuda-12.6"


def test_inputs_are_not_mutated() -> None:
    cluster = load("cluster-runtimes.yaml")
    objs = load("isvcs.yaml")
    before = copy.deepcopy((cluster, objs))
    for obj in objs:
        choice = select_runtime(obj, [], cluster)
        predictor_image(obj, choice.obj if choice else None)
    assert (cluster, objs) == before


@pytest.mark.parametrize(
    "bad",
    [
        runtime("rt", [{"name": "sklearn", "autoSelect": True, "priority": "high"}]),
        runtime("rt", [{"name": "sklearn", "autoSelect": "yes"}]),
        runtime("rt", [fmt("sklearn")], created="yesterday"),
        runtime("rt", "sklearn"),  # type: ignore[arg-type]
    ],
)
def test_malformed_runtime_raises_input_error(bad: dict) -> None:
    with pytest.raises(InputError, match="rt"):
        select_runtime(isvc(model("sklearn")), [bad], [])


def test_malformed_isvc_raises_input_error() -> None:
    with pytest.raises(InputError):
        select_runtime(["not", "an", "isvc"], [], [])  # type: ignore[arg-type]
    with pytest.raises(InputError, match="modelFormat"):
        select_runtime(isvc({"modelFormat": {}}), [], [])


# --------------------------------------------------------------------------- pods


def test_pod_helpers_on_kserve_pods() -> None:
    predictor, transformer, worker, knative = load("pods.yaml")
    assert all(view_pod(p).is_kserve for p in (predictor, transformer, worker, knative))
    assert [isvc_name_of(p) for p in (predictor, transformer, worker)] == [
        "llama3",
        "llama3",
        "big-llm",
    ]
    assert [component_of(p) for p in (predictor, transformer, worker, knative)] == [
        "predictor",
        "transformer",
        "predictor",
        "predictor",
    ]
    assert is_predictor_pod(predictor) and not is_predictor_pod(transformer)
    assert is_multinode_worker(worker)
    assert not is_multinode_worker(predictor) and not is_multinode_worker(knative)


def test_pod_helpers_on_plain_pods() -> None:
    pod = {"metadata": {"name": "x", "labels": {"component": "predictor"}}, "spec": {}}
    assert not view_pod(pod).is_kserve
    assert isvc_name_of(pod) is None
    assert component_of(pod) is None
    assert not is_predictor_pod(pod)
    assert not view_pod({}).is_kserve


def test_a_pod_with_the_service_label_but_no_known_component_is_kserves() -> None:
    """One answer to "is it KServe's": the label KServe puts on every pod of an
    InferenceService (and its own pod mutator keys on), whatever the ``component`` says; such
    a pod plays no role cudasched knows, so it is judged as a plain pod."""
    pod = {
        "metadata": {"labels": {"serving.kserve.io/inferenceservice": "x", "component": "?"}},
        "spec": {},
    }
    view = view_pod(pod)
    assert view.is_kserve and view.role.value == "pod" and view.owner is None


def test_worker_detected_by_container_name_alone() -> None:
    pod = {
        "metadata": {
            "labels": {"component": "predictor", "serving.kserve.io/inferenceservice": "x"}
        },
        "spec": {"containers": [{"name": "worker-container", "image": "i:1"}]},
    }
    assert is_multinode_worker(pod)


# --------------------------------------------------------------------------- containers


def test_runtime_containers_and_worker_containers() -> None:
    multi = by_name(load("cluster-runtimes.yaml"), "kserve-huggingfaceserver-multinode")
    assert [c["name"] for c in runtime_containers(multi)] == ["kserve-container"]
    assert [c["name"] for c in runtime_containers(multi, worker=True)] == ["worker-container"]


def test_predictor_image_appends_gpu_for_huggingface_with_gpu_limit() -> None:
    cluster = load("cluster-runtimes.yaml")
    llama = by_name(load("isvcs.yaml"), "llama3")
    hf = by_name(cluster, "kserve-huggingfaceserver")
    assert predictor_image(llama, hf) == "kserve/huggingfaceserver:v0.15.0-gpu"
    cpu = isvc(model("huggingface"))
    assert predictor_image(cpu, hf) == "kserve/huggingfaceserver:v0.15.0"


def test_predictor_image_runtime_version_replaces_tag() -> None:
    cluster = load("cluster-runtimes.yaml")
    obj = by_name(load("isvcs.yaml"), "triton-legacy")
    triton = by_name(cluster, "kserve-tritonserver")
    assert predictor_image(obj, triton) == "nvcr.io/nvidia/tritonserver:23.05-py3"
    untagged = cluster_runtime("u", [fmt("triton")], image="nvcr.io/nvidia/tritonserver")
    assert predictor_image(obj, untagged) == "nvcr.io/nvidia/tritonserver:23.05-py3"


def test_predictor_image_digest_left_alone_and_model_image_wins() -> None:
    digest = "nvcr.io/nvidia/tritonserver@sha256:" + "0" * 64
    rt = cluster_runtime("kserve-huggingfaceserver", [fmt("huggingface")], image=digest)
    obj = isvc(
        model("huggingface", runtimeVersion="v9", resources={"limits": {"nvidia.com/gpu": 1}})
    )
    assert predictor_image(obj, rt) == digest
    own = isvc(model("huggingface", image="me/hf:2.0"))
    rt2 = cluster_runtime("other", [fmt("huggingface")], image="kserve/huggingfaceserver:v1")
    assert predictor_image(own, rt2) == "me/hf:2.0"


def test_predictor_container_merges_env_and_resources() -> None:
    rt = cluster_runtime("rt", [fmt("sklearn")])
    rt["spec"]["containers"][0].update(
        env=[{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
        resources={"limits": {"cpu": "1", "memory": "1Gi"}},
    )
    obj = isvc(
        model(
            "sklearn",
            env=[{"name": "B", "value": "3"}],
            resources={"limits": {"nvidia.com/gpu": "1"}},
        )
    )
    container = predictor_container(obj, rt)
    assert container is not None
    assert {e["name"]: e["value"] for e in container["env"]} == {"A": "1", "B": "3"}
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}
    assert "modelFormat" not in container


def test_predictor_container_without_runtime_reads_custom_containers() -> None:
    obj = isvc(
        containers=[{"name": "side", "image": "a:1"}, {"name": "kserve-container", "image": "b:2"}]
    )
    assert predictor_image(obj, None) == "b:2"
    assert predictor_image(isvc(containers=[{"name": "x", "image": "c:3"}]), None) == "c:3"
    assert predictor_image(isvc(), None) is None
    no_main = cluster_runtime("rt", [fmt("sklearn")])
    no_main["spec"]["containers"][0]["name"] = "other"
    assert predictor_image(isvc(model("sklearn")), no_main) is None


# --------------------------------------------------------------------------- properties

_FORMATS = ["sklearn", "xgboost", "pytorch"]
_runtime_strategy = st.builds(
    lambda i, name, version, auto, prio, protos, day, disabled, mms: runtime(
        f"rt-{i}",
        [fmt(name, version, auto, prio)],
        protocols=protos,
        created=f"2025-01-{day:02d}T00:00:00Z",
        **({"disabled": True} if disabled else {}),
        **({"multiModel": True} if mms else {}),
    ),
    st.integers(0, 10_000),
    st.sampled_from(_FORMATS),
    st.sampled_from([None, "1", "2"]),
    st.sampled_from([True, False, None]),
    st.sampled_from([None, 1, 2, 3]),
    st.sampled_from([None, ["v1"], ["v2"], ["v1", "v2"], ["grpc-v2", "v2"]]),
    st.integers(1, 28),
    st.booleans(),
    st.booleans(),
)


def _unique(rts: list[dict]) -> list[dict]:
    seen: dict[str, dict] = {}
    for r in rts:
        seen.setdefault(r["metadata"]["name"], r)
    return list(seen.values())


@settings(max_examples=60)
@given(
    ns=st.lists(_runtime_strategy, max_size=6).map(_unique),
    cl=st.lists(_runtime_strategy, max_size=6).map(_unique),
    name=st.sampled_from(_FORMATS),
    version=st.sampled_from([None, "1", "2"]),
    protocol=st.sampled_from([None, "v1", "v2"]),
    data=st.data(),
)
def test_selection_properties(ns, cl, name, version, protocol, data) -> None:
    cl = [{**r, "kind": CLUSTER_SERVING_RUNTIME} for r in cl]
    extra = {"protocolVersion": protocol} if protocol else {}
    obj = isvc(model(name, version, **extra))
    choice = select_runtime(obj, ns, cl)
    # order of the input lists never matters (KServe sorts them with a total order)
    shuffled = select_runtime(obj, data.draw(st.permutations(ns)), data.draw(st.permutations(cl)))
    assert (choice and (choice.kind, choice.name)) == (shuffled and (shuffled.kind, shuffled.name))
    if choice is None:
        return
    spec = choice.obj["spec"]
    entry = spec["supportedModelFormats"][0]
    assert not spec.get("disabled") and not spec.get("multiModel")
    assert entry["autoSelect"] is True and entry["name"] == name
    assert version is None or entry.get("version") == version
    assert (
        spec.get("protocolVersions") in (None, []) or (protocol or "v1") in spec["protocolVersions"]
    )
    # a fitting namespace runtime always wins over every cluster runtime
    ns_fit = select_runtime(obj, ns, [])
    assert (choice.kind == SERVING_RUNTIME) == (ns_fit is not None)


# --------------------------------------------------------------------------- KServe's own table
# The scenario set of KServe's TestGetSupportingRuntimes (predictor_model_test.go), restated:
# seven namespace runtimes and three cluster runtimes, all without creation timestamps.


def _kserve_fixture() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    v1v2, v2 = ["v1", "v2"], ["v2"]
    specs: dict[str, tuple[list[dict[str, Any]], list[str], dict[str, Any]]] = {
        "tf-runtime": ([fmt("tensorflow", "1", True, 1)], v1v2, {"disabled": False}),
        "sklearn-runtime": ([fmt("sklearn", "0", True, 1)], v1v2, {"disabled": False}),
        "pmml-runtime": ([fmt("pmml", "4", None, 1)], v1v2, {"disabled": True}),
        "mlserver-runtime-mms": (
            [
                fmt("sklearn", "0", True, 2),
                fmt("xgboost", "1", True, 2),
                fmt("lightgbm", "3", True, 2),
            ],
            v2,
            {"multiModel": True},
        ),
        "mlserver-runtime": (
            [fmt("sklearn", "0", True, 2), fmt("lightgbm", "3", True, 2)],
            v2,
            {"multiModel": False},
        ),
        "xgboost-runtime": ([fmt("xgboost", "0", True, 1)], v2, {}),
        "triton-runtime": (
            [fmt("sklearn", "0", True), fmt("triton", "1", True, 1), fmt("lightgbm", "3", True)],
            v2,
            {"multiModel": False},
        ),
        "test-runtime": ([fmt("sklearn", "0", True)], v2, {}),
        "huggingface-multinode-runtime": (
            [fmt("huggingface", "1", True, 2)],
            v1v2,
            {"workerSpec": {}},
        ),
    }

    def make(name: str, kind: str, prefix: str = "") -> dict[str, Any]:
        formats, protos, extra = specs[name]
        return runtime(prefix + name, formats, protocols=protos, created=None, kind=kind, **extra)

    ns_names = [
        "tf-runtime",
        "sklearn-runtime",
        "pmml-runtime",
        "mlserver-runtime",
        "triton-runtime",
        "test-runtime",
        "huggingface-multinode-runtime",
    ]
    ns = [make(n, SERVING_RUNTIME) for n in ns_names]
    cluster = [
        make(n, CLUSTER_SERVING_RUNTIME, "cluster-")
        for n in ("mlserver-runtime-mms", "tf-runtime", "xgboost-runtime")
    ]
    return ns, cluster


@pytest.mark.parametrize(
    ("name", "protocol", "mms", "workers", "expected"),
    [
        ("tensorflow", None, False, False, ["tf-runtime", "cluster-tf-runtime"]),
        ("nonexistent-modelformat", None, False, False, []),
        ("pmml", None, False, False, []),
        ("sklearn", "v2", True, False, ["cluster-mlserver-runtime-mms"]),
        ("sklearn", None, False, False, ["sklearn-runtime"]),
        ("xgboost", "v2", False, False, ["cluster-xgboost-runtime"]),
        ("xgboost", "v1", False, False, []),
        (
            "sklearn",
            "v2",
            False,
            False,
            ["mlserver-runtime", "sklearn-runtime", "test-runtime", "triton-runtime"],
        ),
        ("huggingface", "v2", False, True, ["huggingface-multinode-runtime"]),
        ("huggingface", "v2", False, False, []),
    ],
)
def test_supporting_runtimes_match_kserve_scenarios(
    name: str, protocol: str | None, mms: bool, workers: bool, expected: list[str]
) -> None:
    ns, cluster = _kserve_fixture()
    extra = {"protocolVersion": protocol} if protocol else {}
    predictor = {"workerSpec": {"pipelineParallelSize": 2}} if workers else {}
    obj = isvc(model(name, **extra), **predictor)
    obj["metadata"]["namespace"] = "ns"
    got = supporting_runtimes(obj, ns, cluster, multi_model=mms)
    assert [c.name for c in got] == expected
    if not mms:
        first = select_runtime(obj, ns, cluster)
        assert (first.name if first else None) == (expected[0] if expected else None)


def test_runtimes_parsed_once_per_run_select_the_same() -> None:
    """Indexing a whole cluster shares one ``parsed`` dict across InferenceServices: every
    choice (and reason) must be what a call without it returns."""
    from cudasched.cluster.fleet import Fleet
    from cudasched.cluster.snapshot import bundled_snapshot
    from cudasched.knowledge import KnowledgeBase
    from cudasched.vocab.objects import namespace_of

    snap = bundled_snapshot()
    fleet = Fleet.from_snapshot(snap, KnowledgeBase.load())
    parsed: dict = {}
    isvcs = list(snap.inference_services) * 2  # the second round is served from `parsed`
    for isvc in isvcs:
        runtimes = fleet.serving_runtimes(namespace_of(isvc))
        alone = select_runtime(isvc, runtimes, snap.cluster_serving_runtimes)
        shared = select_runtime(isvc, runtimes, snap.cluster_serving_runtimes, parsed=parsed)
        assert shared == alone
    assert parsed  # the runtimes were parsed into it
