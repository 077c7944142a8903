"""node-template: the declared labels are the agent's own, every declaration reads back to them
the way its autoscaler reads it, tags obey their cloud's rules, and the Karpenter NodePool is a
valid ``karpenter.sh/v1`` object that fixes the values instead of letting Karpenter invent them.

The NodePool rules below are the ``karpenter.sh_nodepools.yaml`` CRD's (kubernetes-sigs/karpenter,
v1 API, as vendored by the providers), restated here: the CRD file itself is not part of this
repository. Unknown fields are rejected on top of the CRD (the API server would prune them
silently, so a misspelt field must fail here).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from typer.testing import CliRunner

from cudasched import __version__
from cudasched.agent.nvidia_smi import parse_nvidia_smi
from cudasched.cli import app
from cudasched.knowledge import KnowledgeBase
from cudasched.nodes.autoscaling import (
    AWS_LABEL_TAG_PREFIX,
    AZURE_LABEL_TAG_PREFIX,
    CAPI_LABELS_ANNOTATION,
    NodeClassRef,
    NodePoolOptions,
    Provider,
    aws_tags,
    azure_tag_name,
    azure_tags,
    karpenter_nodepool,
    kubelet_flag,
    node_template,
    parse_label_list,
    template_labels,
)
from cudasched.nodes.facts import facts_from_labels
from cudasched.nodes.labelers import build_labels, enrich
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.versions import parse_driver

SMI = Path(__file__).parents[1] / "data" / "nvidia-smi"
H100 = "NVIDIA H100 80GB HBM3"

# Cloud tag rules (AWS tagging docs; Azure "tag resources" limitations).
AWS_TAG = re.compile(r"^(?!aws:)[\w .:/=+\-@]{1,128}$")
AWS_VALUE = re.compile(r"^[\w .:/=+\-@]{0,256}$")
AZURE_TAG = re.compile(r"^(?!(?i:azure|microsoft|windows))[^<>%&\\?/]{1,512}$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
QUALIFIED_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$"
)


# ------------------------------------------------------------------ the labels are the agent's


def _recordings() -> list[Path]:
    return sorted(p for p in SMI.iterdir() if p.suffix in (".txt", ".xml"))


@pytest.mark.parametrize("path", _recordings(), ids=lambda p: p.name)
def test_template_labels_equal_what_the_agent_publishes_from_a_real_nvidia_smi(
    path: Path, kb: KnowledgeBase
) -> None:
    """The probe path (a recorded nvidia-smi output through the agent's parser, enrichment and
    labelers) and the template path (GPU name and driver only) give the same labels. GFD's
    memory label is the one fact a template cannot know before boot."""
    if path.name.startswith("error"):
        pytest.skip("no facts in an error output")
    facts = enrich(parse_nvidia_smi(path.read_text()), kb)
    names = {g.name for g in facts.gpus}
    if len(names) != 1 or facts.cuda is None or kb.gpu(next(iter(names))) is None:
        pytest.skip("mixed GPUs, no CUDA, or a truncated name: nothing to template")
    agent = build_labels(facts, archs=kb, gfd_compatible=True)
    agent.pop("nvidia.com/gpu.memory", None)
    template = template_labels(
        next(iter(names)), facts.driver, kb, gpus=len(facts.gpus), gfd_compatible=True
    )
    assert template == agent


def test_at_least_five_recordings_are_compared(kb: KnowledgeBase) -> None:
    compared = 0
    for path in _recordings():
        if path.name.startswith("error"):
            continue
        facts = parse_nvidia_smi(path.read_text())
        names = {g.name for g in facts.gpus}
        compared += len(names) == 1 and facts.cuda is not None and kb.gpu(names.pop()) is not None
    assert compared >= 5


def test_a_short_name_with_one_board_and_the_gfd_label_both_work(kb: KnowledgeBase) -> None:
    exact = template_labels("NVIDIA B200", "580.95.05", kb)
    assert template_labels("B200", "580.95.05", kb) == exact
    assert template_labels("NVIDIA-H100-80GB-HBM3", "570.124.06", kb) == template_labels(
        H100, "570.124.06", kb
    )
    assert exact[L.GPU_PRODUCT] == "NVIDIA-B200"
    assert exact[L.CUDA_VERSION] == "13.0"


@pytest.mark.parametrize(
    ("gpu", "driver", "fragment"),
    [
        ("H100", "570.124.06", "give the name nvidia-smi prints, one of 'NVIDIA H100 PCIe'"),
        ("A100", "570.124.06", "'NVIDIA A100-SXM4-80GB'"),
        ("Quadro 9999", "570.124.06", "unknown GPU 'Quadro 9999'"),
        (H100, "300.10", "driver 300.10 is older than every CUDA toolkit"),
        (H100, "latest", "'latest'"),
    ],
)
def test_bad_input_names_the_value(gpu: str, driver: str, fragment: str, kb: KnowledgeBase) -> None:
    with pytest.raises(InputError, match=re.escape(fragment)):
        template_labels(gpu, driver, kb)


# ------------------------------------------------------------------ declarations read back


def _read_aws(tags: dict[str, str]) -> dict[str, str]:
    """What the Cluster Autoscaler's AWS provider takes from ASG tags: everything after the
    prefix is the label key."""
    return {k[len(AWS_LABEL_TAG_PREFIX) :]: v for k, v in tags.items()}


def _read_azure(tags: dict[str, str]) -> dict[str, str]:
    """The Azure provider: the rest of the tag name with '_' read as '/'."""
    return {k[len(AZURE_LABEL_TAG_PREFIX) :].replace("_", "/"): v for k, v in tags.items()}


def _read_kubelet(flag: str) -> dict[str, str]:
    prefix = "--node-labels="
    assert flag.startswith(prefix)
    return parse_label_list(flag[len(prefix) :])


def _every_declaration(doc: dict[str, Any]) -> dict[str, dict[str, str]]:
    d = doc["declarations"]
    return {
        "aws": _read_aws(d["aws"]["tags"]),
        "azure": _read_azure(d["azure"]["tags"]),
        "capi": parse_label_list(d["capi"]["annotations"][CAPI_LABELS_ANNOTATION]),
        "karpenter": d["karpenter"]["spec"]["template"]["metadata"]["labels"],
        "kubelet": _read_kubelet(d["kubelet"]),
    }


def _gpu_driver_pairs(kb: KnowledgeBase) -> list[tuple[str, str]]:
    """Every board the knowledge base names, with every driver a CUDA 11+ toolkit needs."""
    drivers = sorted(
        {str(row.effective_min_driver) for row in kb.toolkits() if row.effective_min_driver}
    )
    boards = [name for info in kb.gpus() for name in info.names]
    return [(b, d) for b in boards for d in drivers if kb.max_cuda_for_driver(parse_driver(d))]


@settings(max_examples=60)
@given(data=st.data(), gfd=st.booleans())
def test_every_declaration_reads_back_to_the_labels(data: st.DataObject, gfd: bool) -> None:
    kb = KnowledgeBase.load()
    gpu, driver = data.draw(st.sampled_from(_gpu_driver_pairs(kb)))
    doc = node_template(gpu, driver, kb, gfd_compatible=gfd, instance_types=("p5.48xlarge",))
    labels = doc["labels"]
    for provider, read in _every_declaration(doc).items():
        assert read == labels, provider
    # And the node reader the webhook and the audit use sees the driver, CUDA and GPU declared.
    facts = facts_from_labels("template", labels, kb)
    assert str(facts.driver) == str(parse_driver(driver))
    assert facts.cuda == kb.max_cuda_for_driver(parse_driver(driver))
    assert facts.compute == kb.gpu(gpu).compute
    # Cloud tag rules.
    for tag, value in doc["declarations"]["aws"]["tags"].items():
        assert AWS_TAG.match(tag), tag
        assert AWS_VALUE.match(value), value
    for tag, value in doc["declarations"]["azure"]["tags"].items():
        assert AZURE_TAG.match(tag), tag
        assert len(value) <= 256
    assert len(doc["declarations"]["aws"]["tags"]) <= 50
    assert len(doc["declarations"]["azure"]["tags"]) <= 50
    assert_valid_nodepool(doc["declarations"]["karpenter"])


def test_the_json_shape_is_the_documented_one(kb: KnowledgeBase) -> None:
    doc = node_template(H100, "570.124.06", kb)
    assert list(doc) == ["labels", "declarations"]
    assert list(doc["declarations"]) == [
        "aws",
        "azure",
        "gke",
        "aks",
        "capi",
        "karpenter",
        "kubelet",
    ]
    assert list(doc["declarations"]["gke"]) == ["nodeLabels", "gcloud"]
    assert list(doc["declarations"]["aks"]) == ["labels", "az"]
    assert list(doc["declarations"]["aws"]) == ["tags"]
    assert list(doc["declarations"]["azure"]) == ["tags"]
    assert list(doc["declarations"]["capi"]) == ["annotations"]
    assert doc["declarations"]["karpenter"]["kind"] == "NodePool"
    assert doc["declarations"]["kubelet"].startswith("--node-labels=cudasched.io/cuda.code=12080,")
    assert doc["declarations"]["aws"]["tags"][
        "k8s.io/cluster-autoscaler/node-template/label/cudasched.io/cuda.code"
    ] == ("12080")
    assert doc["declarations"]["azure"]["tags"][
        "k8s.io_cluster-autoscaler_node-template_label_cudasched.io_cuda.code"
    ] == ("12080")
    only = node_template(H100, "570.124.06", kb, providers=(Provider.CAPI,))
    assert list(only["declarations"]) == ["capi", "kubelet"]


# ------------------------------------------------------------------ cloud rules refuse


def test_azure_spells_an_underscore_as_tilde_2() -> None:
    """The autoscaler reads a VMSS tag name's '_' as '/', then '~2' as '_'
    (kubernetes/autoscaler cloudprovider/azure/azure_template.go extractLabelsFromTags): a key
    with '_' is written '~2' first, and reads back as itself."""
    from cudasched.nodes.autoscaling import azure_label_key, azure_tag_name

    [tag] = azure_tags({"example.com/has_underscore": "1"})
    assert tag == AZURE_LABEL_TAG_PREFIX + "example.com_has~2underscore"
    keys = ["example.com/has_underscore", "cudasched.io/cuda.code", "a_b/c_d", "plain"]
    assert [azure_label_key(azure_tag_name(k)) for k in keys] == keys


def test_nodepool_names_are_label_values() -> None:
    """A NodePool's name is the value of karpenter.sh/nodepool on its nodes: 63 characters."""
    from cudasched.nodes.autoscaling import default_nodepool_name
    from cudasched.vocab.versions import parse_driver

    with pytest.raises(InputError, match="at most 63 characters"):
        karpenter_nodepool({}, NodePoolOptions("n" * 64))
    long_product = {
        "cudasched.io/gpu.product": "NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edition-X"
    }
    name = default_nodepool_name(long_product, parse_driver("580.95.05"))
    assert len(name) <= 63 and name.endswith("-580-95-05")


def test_aws_refuses_a_tag_longer_than_128_characters() -> None:
    key = "gpus.team.example.com/" + "k" * 63
    assert len(AWS_LABEL_TAG_PREFIX + key) > 128
    with pytest.raises(InputError, match="keys take at most 128"):
        aws_tags({key: "1"})


def test_more_than_50_labels_do_not_fit_in_tags() -> None:
    many = {f"example.com/k{i}": "1" for i in range(51)}
    with pytest.raises(InputError, match="more than the 50"):
        aws_tags(many)
    with pytest.raises(InputError, match="more than the 50"):
        azure_tags(many)


def test_kubelet_may_not_set_kubernetes_io_labels() -> None:
    with pytest.raises(InputError, match="NodeRestriction"):
        kubelet_flag({"node.kubernetes.io/gpu": "true"})
    assert kubelet_flag({"cudasched.io/cuda.code": "12080"}) == (
        "--node-labels=cudasched.io/cuda.code=12080"
    )


# ------------------------------------------------------------------ Karpenter NodePool

_NAME = {"type": "string", "minLength": 1}
_REQUIREMENT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["key", "operator"],
    "properties": {
        "key": {"type": "string", "maxLength": 316, "pattern": QUALIFIED_KEY.pattern},
        "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]},
        "values": {
            "type": "array",
            "items": {"type": "string", "maxLength": 63, "pattern": LABEL_VALUE.pattern},
        },
        "minValues": {"type": "integer", "minimum": 1, "maximum": 50},
    },
}
NODEPOOL_V1 = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "karpenter.sh/v1"},
        "kind": {"const": "NodePool"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string", "maxLength": 253}},
        },
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["template"],
            "properties": {
                "disruption": {"type": "object"},
                "limits": {"type": "object"},
                "replicas": {"type": "integer", "minimum": 0},
                "weight": {"type": "integer", "minimum": 1, "maximum": 100},
                "template": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["spec"],
                    "properties": {
                        "metadata": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "annotations": {"type": "object"},
                                "labels": {
                                    "type": "object",
                                    "maxProperties": 100,
                                    "propertyNames": {"pattern": QUALIFIED_KEY.pattern},
                                    "additionalProperties": {
                                        "type": "string",
                                        "maxLength": 63,
                                        "pattern": LABEL_VALUE.pattern,
                                    },
                                },
                            },
                        },
                        "spec": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["nodeClassRef", "requirements"],
                            "properties": {
                                "expireAfter": {"type": "string"},
                                "terminationGracePeriod": {"type": "string"},
                                "taints": {"type": "array"},
                                "startupTaints": {"type": "array"},
                                "nodeClassRef": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "required": ["group", "kind", "name"],
                                    "properties": {
                                        "group": {**_NAME, "pattern": "^[^/]*$"},
                                        "kind": _NAME,
                                        "name": _NAME,
                                    },
                                },
                                "requirements": {
                                    "type": "array",
                                    "maxItems": 100,
                                    "items": _REQUIREMENT,
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}
# Label domains a NodePool may not set (core Karpenter, and the AWS and Azure providers), with
# the well-known exceptions. Checked as the CRD's validation rules do, on the key's domain.
_RESTRICTED = (
    "kubernetes.io",
    "k8s.io",
    "karpenter.sh",
    "karpenter.k8s.aws",
    "karpenter.azure.com",
)
_ALLOWED = ("node.kubernetes.io", "node-restriction.kubernetes.io", "kops.k8s.io")
# Keys whose values a pod's CUDA affinity reads: never left for Karpenter to invent.
_CUDA_KEYS = (L.PREFIX, "nvidia.com/")


def _domain(key: str) -> str:
    return key.split("/")[0] if "/" in key else ""


def assert_valid_nodepool(pool: dict[str, Any]) -> None:
    errors = sorted(Draft202012Validator(NODEPOOL_V1).iter_errors(pool), key=str)
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", pool["metadata"]["name"])
    spec = pool["spec"]["template"]
    labels = spec.get("metadata", {}).get("labels", {})
    requirements = spec["spec"]["requirements"]
    assert len(labels) + len(requirements) <= 100
    for key in [*labels, *(r["key"] for r in requirements)]:
        domain = _domain(key)
        restricted = any(domain == d or domain.endswith("." + d) for d in _RESTRICTED)
        allowed = any(domain == d or domain.endswith("." + d) for d in _ALLOWED)
        assert allowed or not restricted, f"label domain of {key!r} is restricted"
        assert key not in ("kubernetes.io/hostname", "karpenter.sh/nodepool")
    for req in requirements:
        values = req.get("values", [])
        if req["operator"] == "In":
            assert values, req
        if req["operator"] in ("Gt", "Lt"):
            assert len(values) == 1 and int(values[0]) >= 0, req
        assert not req["key"].startswith(_CUDA_KEYS), f"Karpenter would invent {req['key']}"


def test_the_nodepool_fixes_every_value_and_pins_the_instance_types(kb: KnowledgeBase) -> None:
    doc = node_template(
        H100,
        "570.124.06",
        kb,
        providers=(Provider.KARPENTER,),
        gfd_compatible=True,
        node_class=NodeClassRef.parse("karpenter.k8s.aws/EC2NodeClass/gpu-r570"),
        instance_types=("p5.48xlarge", "p5e.48xlarge", "p5.48xlarge"),
    )
    pool = doc["declarations"]["karpenter"]
    assert_valid_nodepool(pool)
    template = pool["spec"]["template"]
    assert template["metadata"]["labels"] == doc["labels"]
    assert template["spec"]["requirements"] == [
        {
            "key": "node.kubernetes.io/instance-type",
            "operator": "In",
            "values": ["p5.48xlarge", "p5e.48xlarge"],
        }
    ]
    assert template["spec"]["nodeClassRef"] == {
        "group": "karpenter.k8s.aws",
        "kind": "EC2NodeClass",
        "name": "gpu-r570",
    }
    assert pool["metadata"]["name"] == "nvidia-h100-80gb-hbm3-570-124-06"


def test_the_nodepool_check_can_fail() -> None:
    """The validity check rejects what Karpenter's CRD rejects, and an Exists on a CUDA key."""
    good = karpenter_nodepool({"cudasched.io/cuda.code": "12080"}, NodePoolOptions("gpu"))
    assert_valid_nodepool(good)
    bad_value = json.loads(json.dumps(good))
    bad_value["spec"]["template"]["metadata"]["labels"]["cudasched.io/cuda.code"] = "-12080-"
    exists = json.loads(json.dumps(good))
    exists["spec"]["template"]["spec"]["requirements"] = [
        {"key": "cudasched.io/cuda.code", "operator": "Exists"}
    ]
    restricted = json.loads(json.dumps(good))
    restricted["spec"]["template"]["metadata"]["labels"]["karpenter.sh/capacity"] = "x"
    misspelt = json.loads(json.dumps(good))
    misspelt["spec"]["template"]["spec"]["nodeClass"] = {"name": "x"}
    no_group = json.loads(json.dumps(good))
    del no_group["spec"]["template"]["spec"]["nodeClassRef"]["group"]
    for pool in (bad_value, exists, restricted, misspelt, no_group):
        with pytest.raises(AssertionError):
            assert_valid_nodepool(pool)


@pytest.mark.parametrize("pool", ["l4-r580\n", "-l4", "l4 r580", "x" * 64])
def test_a_driver_pool_that_is_not_a_label_value_is_an_input_error(
    kb: KnowledgeBase, pool: str
) -> None:
    """``l4-r580\n`` once passed (``$`` matches before a final newline) into every label
    declaration."""
    with pytest.raises(InputError, match="invalid --driver-pool"):
        node_template("NVIDIA-L4", "580.95.05", kb, driver_pool=pool)


def test_bad_nodepool_options_are_input_errors() -> None:
    with pytest.raises(InputError, match="invalid NodePool name 'GPU_Pool'"):
        karpenter_nodepool({}, NodePoolOptions("GPU_Pool"))
    # once passed: re.match with $ matches before a final newline
    with pytest.raises(InputError, match=re.escape("invalid NodePool name 'gpu\\n'")):
        karpenter_nodepool({}, NodePoolOptions("gpu\n"))
    with pytest.raises(InputError, match="expected GROUP/KIND/NAME"):
        NodeClassRef.parse("EC2NodeClass/default")


# ------------------------------------------------------------------ the command


def test_cli_json_is_the_versioned_document_and_yaml_the_same(kb: KnowledgeBase) -> None:
    runner = CliRunner()
    args = ["node-template", "--gpu", H100, "--driver", "570.124.06", "--instance-type", "p5.4"]
    as_json = runner.invoke(app, [*args, "-o", "json"])
    as_yaml = runner.invoke(app, args)
    assert as_json.exit_code == 0 and as_yaml.exit_code == 0, as_json.output
    doc = json.loads(as_json.stdout)
    # -o json says which cudasched answered, as every JSON answer does; the YAML is the
    # document alone, as it is pasted into a node group's configuration
    assert doc.pop("cudaschedVersion") == __version__
    assert doc == yaml.safe_load(as_yaml.stdout)
    assert doc == node_template(H100, "570.124.06", kb, instance_types=("p5.4",))


def test_cli_warns_when_the_nodepool_is_not_pinned_to_instance_types() -> None:
    result = CliRunner().invoke(
        app, ["node-template", "--gpu", "B200", "--driver", "580.95.05", "-o", "json"]
    )
    assert result.exit_code == 0
    assert "does not restrict instance types" in result.stderr
    assert json.loads(result.stdout)["declarations"]["karpenter"]["kind"] == "NodePool"
    quiet = CliRunner().invoke(
        app, ["node-template", "--gpu", "B200", "--driver", "580.95.05", "--provider", "aws"]
    )
    assert quiet.exit_code == 0 and quiet.stderr == ""


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--gpu", "H100", "--driver", "570.124.06"], "names several H100 boards"),
        (["--gpu", "B200", "--driver", "5x"], "'5x'"),
        (["--gpu", "B200", "--driver", "580.95.05", "--node-class", "x"], "GROUP/KIND/NAME"),
        (["--gpu", "B200", "--driver", "580.95.05", "--provider", "gce"], "'gce' is not one of"),
        (["--gpu", "B200", "--driver", "535.216.01"], "R535 predates Blackwell"),
        (["--gpu", "K80", "--driver", "580.95.05"], "Kepler GPUs end at R470"),
        (["--gpu", "B200", "--driver", "580.95.05", "--driver-pool", "a/b"], "--driver-pool"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(args: list[str], fragment: str) -> None:
    result = CliRunner().invoke(app, ["node-template", *args])
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("cudasched: error: ") and fragment in line


def test_cli_prints_an_impossible_pair_only_when_forced() -> None:
    args = ["node-template", "--gpu", "K80", "--driver", "580.95.05", "--provider", "aws"]
    assert CliRunner().invoke(app, args).exit_code == 2
    forced = CliRunner().invoke(app, [*args, "--force"])
    assert forced.exit_code == 0 and "cudasched.io/driver.branch" in forced.stdout


def test_cli_capi_declares_the_capacity_to_scale_from_zero() -> None:
    """kubernetes/autoscaler clusterapi README, "Scale from zero support": cpu and memory at the
    minimum, gpu-type and gpu-count for GPUs; the plan's pool label rides along."""
    args = ["node-template", "--gpu", "B200", "--driver", "580.95.05", "--provider", "capi"]
    full = CliRunner().invoke(
        app,
        [*args, "--gpus", "8", "--cpu", "224", "--memory", "2000Gi", "--driver-pool", "b200-x",
         "-o", "json"],
    )  # fmt: skip
    assert full.exit_code == 0 and full.stderr == ""
    annotations = json.loads(full.stdout)["declarations"]["capi"]["annotations"]
    prefix = "capacity.cluster-autoscaler.kubernetes.io/"
    assert {
        k.removeprefix(prefix): v for k, v in annotations.items() if k != prefix + "labels"
    } == {
        "cpu": "224",
        "memory": "2000Gi",
        "gpu-type": "nvidia.com/gpu",
        "gpu-count": "8",
    }
    assert "cudasched.io/driver-pool=b200-x" in annotations[prefix + "labels"]
    bare = CliRunner().invoke(app, args)
    assert bare.exit_code == 0 and "give --cpu and --memory" in bare.stderr


def test_the_driver_pool_label_is_declared_everywhere_a_node_gets_labels(
    kb: KnowledgeBase,
) -> None:
    """plan-drivers selects a pool's nodes by cudasched.io/driver-pool: node-template puts it into
    every declaration, so nodes a group creates later carry it from their first boot."""
    doc = node_template("NVIDIA-L4", "580.95.05", kb, driver_pool="l4-ubuntu22.04-r580")
    assert doc["labels"]["cudasched.io/driver-pool"] == "l4-ubuntu22.04-r580"
    found = doc["declarations"]
    aws = found["aws"]["tags"]
    assert aws[AWS_LABEL_TAG_PREFIX + "cudasched.io/driver-pool"] == "l4-ubuntu22.04-r580"
    azure = found["azure"]["tags"]
    assert azure[azure_tag_name("cudasched.io/driver-pool")] == "l4-ubuntu22.04-r580"
    capi = found["capi"]["annotations"][CAPI_LABELS_ANNOTATION].split(",")
    assert "cudasched.io/driver-pool=l4-ubuntu22.04-r580" in capi
    labels = found["karpenter"]["spec"]["template"]["metadata"]["labels"]
    assert labels["cudasched.io/driver-pool"] == "l4-ubuntu22.04-r580"
    assert "cudasched.io/driver-pool=l4-ubuntu22.04-r580" in found["kubelet"]


def test_gke_and_aks_node_pools_declare_the_labels_themselves(kb: KnowledgeBase) -> None:
    """A GKE or AKS node pool's own labels (besides the VMSS tags the cluster autoscaler
    reads): the gcloud and az flags that set them."""
    from cudasched.nodes.autoscaling import Provider, node_template

    doc = node_template(
        "T4G", "580.105.08", kb, providers=(Provider.GKE, Provider.AKS), driver_pool="t4g-r580"
    )
    gke, aks = doc["declarations"]["gke"], doc["declarations"]["aks"]
    assert gke["nodeLabels"] == aks["labels"] == doc["labels"]
    assert (
        gke["gcloud"].startswith("--node-labels=cudasched.io/")
        and ",cudasched.io/" in gke["gcloud"]
    )
    assert (
        aks["az"].startswith("--labels cudasched.io/")
        and " cudasched.io/driver-pool=t4g-r580" in aks["az"]
    )
    assert doc["labels"]["cudasched.io/gpu.product"] == "NVIDIA-T4G"
    everything = node_template("T4G", "580.105.08", kb)["declarations"]
    assert {"aws", "azure", "gke", "aks", "capi", "karpenter", "kubelet"} == set(everything)


def test_aks_refuses_labels_under_its_own_prefixes() -> None:
    from cudasched.nodes.autoscaling import aks_node_labels

    with pytest.raises(InputError, match="AKS reserves"):
        aks_node_labels({"kubernetes.azure.com/agentpool": "x"})
