"""Webhook configuration: defaults, camelCase YAML, and errors that name field and values."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudasched.placement.merge import AffinityMode
from cudasched.settings.config import OnNoFit, OnUnknownRequirement, WebhookConfig, load_config
from cudasched.vocab.errors import InputError
from cudasched.vocab.labels import LabelScheme
from cudasched.vocab.requirements import Policy
from cudasched.vocab.versions import CudaVersion


def test_defaults_are_the_documented_ones() -> None:
    c = load_config(None)
    assert c.mode is AffinityMode.REQUIRED
    assert c.policy is Policy.STRICT
    assert c.label_scheme is LabelScheme.AUTO
    assert c.on_no_fit is OnNoFit.WARN
    assert c.on_unknown_requirement is OnUnknownRequirement.WARN
    assert c.image_mirrors == {}
    assert c.namespaces.include == ()
    assert c.namespaces.exclude == ("kube-system",)
    assert c.constrain_gpu_pods_by_image is True
    assert c.isvc_affinity is False
    assert c.image_overrides == ()
    assert c.fail_closed is False
    assert c.server.host == "0.0.0.0"
    assert c.server.port == 8443
    assert c.server.cert_file is None and c.server.key_file is None
    assert c.server.self_signed is False
    assert c.server.max_body_bytes == 3_145_728
    assert c.server.request_timeout_seconds == 2.5
    assert c.server.workers is None
    assert c.kube.kubeconfig is None
    assert c.kube.resync_seconds == 300


def test_full_yaml_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        """
mode: preferred
policy: minor-compat
labelScheme: gfd
onNoFit: deny
onUnknownRequirement: Deny
imageMirrors:
  ngc/tritonserver: nvidia/tritonserver
  mirror/vllm-openai: vllm/vllm-openai
namespaces:
  include: [ml, serving]
  exclude: [kube-system, ml-sandbox]
constrainGpuPodsByImage: false
isvcAffinity: true
imageOverrides:
  - pattern: "registry.local/llm/*:cu124"
    cuda: "12.4"
  - pattern: "registry.local/old/*"
    cuda: 11.8
failClosed: true
server:
  host: 127.0.0.1
  port: 9443
  certFile: /tls/tls.crt
  keyFile: /tls/tls.key
  maxBodyBytes: 1048576
  requestTimeoutSeconds: 1.5
  workers: 2
kube:
  kubeconfig: /home/me/.kube/config
  resyncSeconds: 60
""",
        encoding="utf-8",
    )
    c = load_config(path)
    assert c.mode is AffinityMode.PREFERRED
    assert c.policy is Policy.MINOR_COMPAT
    assert c.label_scheme is LabelScheme.GFD
    assert c.on_no_fit is OnNoFit.DENY
    assert c.on_unknown_requirement is OnUnknownRequirement.DENY
    assert c.image_mirrors == {
        "ngc/tritonserver": "nvidia/tritonserver",
        "mirror/vllm-openai": "vllm/vllm-openai",
    }
    assert c.namespaces.admits("ml") and not c.namespaces.admits("default")
    assert not c.namespaces.admits("kube-system")
    assert c.constrain_gpu_pods_by_image is False
    assert c.isvc_affinity is True
    assert [o.cuda for o in c.image_overrides] == ["12.4", "11.8"]
    assert c.image_overrides[0].cuda_version == CudaVersion(12, 4)
    assert c.image_overrides[0].matches("registry.local/llm/vllm:cu124")
    assert not c.image_overrides[0].matches("registry.local/llm/vllm:cu118")
    assert c.fail_closed is True
    assert (c.server.host, c.server.port, c.server.workers) == ("127.0.0.1", 9443, 2)
    assert c.server.cert_file == "/tls/tls.crt"
    assert c.server.request_timeout_seconds == 1.5
    assert c.kube.kubeconfig == "/home/me/.kube/config" and c.kube.resync_seconds == 60


def test_enum_values_are_case_insensitive() -> None:
    c = WebhookConfig.from_mapping({"mode": "Required", "policy": "STRICT", "onNoFit": "Warn"})
    assert c.mode is AffinityMode.REQUIRED and c.policy is Policy.STRICT
    assert c.on_no_fit is OnNoFit.WARN


def test_empty_file_means_defaults(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing set\n", encoding="utf-8")
    assert load_config(path) == WebhookConfig()


def test_exclude_wins_over_include() -> None:
    c = WebhookConfig.from_mapping({"namespaces": {"include": ["a"], "exclude": ["a"]}})
    assert not c.namespaces.admits("a")


@pytest.mark.parametrize(
    ("data", "fragments"),
    [
        ({"mode": "soft"}, ["mode", "'required' or 'preferred'"]),
        ({"policy": "loose"}, ["policy", "'strict'", "'minor-compat'", "'forward-compat'"]),
        ({"labelScheme": "nfd"}, ["labelScheme", "'cudasched'", "'gfd'", "'auto'"]),
        ({"onNoFit": "panic"}, ["onNoFit", "'warn'", "'deny'", "'allow'"]),
        ({"onUnknownRequirement": "guess"}, ["onUnknownRequirement", "'warn'", "'deny'"]),
        ({"imageMirrors": ["ngc/tritonserver"]}, ["imageMirrors", "expected a mapping"]),
        ({"imageMirrors": {"ngc/triton server": "nvidia/tritonserver"}}, ["repository paths"]),
        (
            {"imageMirrors": {"harbor.example.com:https/ngc": "nvcr.io/nvidia"}},
            ["imageMirrors", "not a registry host", "harbor.example.com:https"],
        ),
        ({"imageMirrors": {"harbor.example.com/ngc": "nvcr.io/Nvidia Corp"}}, ["paths"]),
        (
            {"imageResolver": {"pullSecrets": True}},
            ["imageResolver", "pullSecrets needs enabled: true"],
        ),
        ({"server": {"port": 70000}}, ["server.port", "65535", "70000"]),
        ({"server": {"port": "https"}}, ["server.port", "integer"]),
        ({"server": {"certFile": "/tls/tls.crt"}}, ["server", "certFile and keyFile"]),
        ({"server": {"requestTimeoutSeconds": 0}}, ["server.requestTimeoutSeconds"]),
        ({"kube": {"resyncSeconds": 0}}, ["kube.resyncSeconds"]),
        ({"imageOverrides": [{"pattern": "x/*", "cuda": "twelve"}]}, ["imageOverrides.0.cuda"]),
        ({"imageOverrides": [{"pattern": "x/*"}]}, ["imageOverrides.0.cuda", "required"]),
        ({"namespaces": {"include": [""]}}, ["namespaces.include", "non-empty"]),
        ({"failClosed": "sometimes"}, ["failClosed", "boolean"]),
        ({"labelschema": "gfd"}, ["labelschema", "unknown setting"]),
        ({"server": {"tls": True}}, ["server.tls", "unknown setting"]),
        # snake_case is the Python name, not the file format: reject so typos are visible.
        ({"on_no_fit": "deny"}, ["on_no_fit", "unknown setting"]),
    ],
)
def test_invalid_settings_name_field_and_expected_values(
    data: dict[str, object], fragments: list[str]
) -> None:
    with pytest.raises(InputError) as info:
        WebhookConfig.from_mapping(data)
    message = str(info.value)
    assert message.startswith("invalid config: ")
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_several_problems_reported_at_once() -> None:
    with pytest.raises(InputError) as info:
        WebhookConfig.from_mapping({"mode": "x", "policy": "y"})
    assert "mode:" in str(info.value) and "policy:" in str(info.value)


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(InputError, match="no such file"):
        load_config(missing)
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("mode: [unclosed\n", encoding="utf-8")
    with pytest.raises(InputError, match="invalid YAML at line 2"):
        load_config(bad_yaml)
    not_map = tmp_path / "list.yaml"
    not_map.write_text("- mode: required\n", encoding="utf-8")
    with pytest.raises(InputError, match="expected a mapping"):
        load_config(not_map)
    bad_value = tmp_path / "value.yaml"
    bad_value.write_text("onNoFit: explode\n", encoding="utf-8")
    with pytest.raises(InputError) as info:
        load_config(bad_value)
    assert str(bad_value) in str(info.value) and "onNoFit" in str(info.value)


def test_config_is_immutable() -> None:
    c = WebhookConfig()
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises its own ValidationError
        c.mode = AffinityMode.PREFERRED  # type: ignore[misc]


def test_kube_section_is_cluster_access_with_unchanged_keys() -> None:
    """The ``kube:`` model does not shadow lightkube's ``KubeConfig``; users' keys stay."""
    from cudasched.settings import config as config_module

    c = WebhookConfig.from_mapping({"kube": {"kubeconfig": "/k", "resyncSeconds": 5}})
    assert isinstance(c.kube, config_module.ClusterAccess)
    assert c.kube.model_dump(by_alias=True) == {
        "kubeconfig": "/k",
        "resyncSeconds": 5,
        "runtimeReadSeconds": 1.0,
    }
    assert not hasattr(config_module, "KubeConfig")


def test_the_toolkit_mode_reaches_the_image_table() -> None:
    from cudasched.knowledge.images import ImageTable
    from cudasched.vocab.requirements import ToolkitMode

    config = WebhookConfig.from_mapping({"toolkitMode": "CDI"})
    assert config.toolkit_mode is ToolkitMode.CDI
    assert ImageTable.from_config(config).toolkit is ToolkitMode.CDI
    assert ImageTable.from_config(WebhookConfig()).toolkit is ToolkitMode.LEGACY
    with pytest.raises(InputError, match="toolkitMode"):
        WebhookConfig.from_mapping({"toolkitMode": "jit-cdi"})


def test_the_knowledge_section_names_a_bundle_and_how_to_trust_it() -> None:
    default = load_config(None).knowledge
    assert default.reference is None and default.max_age_days == 120
    assert default.interval_seconds == 300 and default.public_keys == ()
    given = WebhookConfig.from_mapping(
        {
            "knowledge": {
                "reference": " registry.example.com/cudasched/knowledge:stable ",
                "publicKeys": ["/etc/cudasched/knowledge.pub"],
                "overlays": ["/etc/cudasched/overlay"],
                "maxAgeDays": 60,
            }
        }
    ).knowledge
    assert given.reference == "registry.example.com/cudasched/knowledge:stable"
    assert given.public_keys == ("/etc/cudasched/knowledge.pub",) and given.max_age_days == 60
    with pytest.raises(InputError, match="knowledge"):
        WebhookConfig.from_mapping({"knowledge": {"reference": "  "}})
    with pytest.raises(InputError, match="knowledge"):
        WebhookConfig.from_mapping({"knowledge": {"intervalSeconds": 1}})
