"""Install manifests: schema-valid, least privilege, and webhook settings chosen on purpose."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml
from cryptography import x509
from typer.testing import CliRunner

from cudasched.cli import app
from cudasched.cluster.snapshot import bundled_snapshot
from cudasched.install import access, naming, webhook
from cudasched.install.policycontroller import CONTROLLER
from cudasched.settings.config import load_config
from cudasched.webhook.server.app import ISVC_PATH, LLMISVC_PATH, POD_PATH, WORKLOAD_PATH
from cudasched.workloads.pods import is_skipped
from tests.support.k8s_schema import assert_valid
from tests.support.rbac import granted

CERT_MANAGER_KINDS = {"Issuer", "Certificate"}


def _render(*args: str) -> list[dict[str, Any]]:
    result = CliRunner().invoke(app, ["manifests", *args])
    assert result.exit_code == 0, result.output
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def _one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


@pytest.mark.parametrize("mode", ["--cert-manager", "--self-signed"])
def test_every_object_is_schema_valid(mode: str) -> None:
    objects = _render(mode, "--namespace", "gpu-system")
    kinds = {o["kind"] for o in objects}
    assert {
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "PodDisruptionBudget",
        "Service",
        "ConfigMap",
        "MutatingWebhookConfiguration",
        "DaemonSet",
    } <= kinds
    for obj in objects:
        if obj["kind"] in CERT_MANAGER_KINDS:
            assert obj["apiVersion"] == "cert-manager.io/v1"
            continue
        assert_valid(obj)
        cluster_scoped = {
            "Namespace",
            "CustomResourceDefinition",
            "ClusterRole",
            "ClusterRoleBinding",
            "MutatingWebhookConfiguration",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        }
        if obj["kind"] not in cluster_scoped:
            assert obj["metadata"]["namespace"] == "gpu-system"


def test_webhook_configuration_settings() -> None:
    config = _one(_render("--namespace", "gpu-system"), "MutatingWebhookConfiguration")
    hooks = {h["name"]: h for h in config["webhooks"]}
    assert set(hooks) == {
        "pods.cudasched.io",
        "inferenceservices.cudasched.io",
        "llminferenceservices.cudasched.io",
        "workloads.cudasched.io",
    }
    for hook in hooks.values():
        assert hook["admissionReviewVersions"] == ["v1"]
        # Pods too: a pod no node can run gets an Event, as its controller does (not dry runs).
        assert hook["sideEffects"] == "NoneOnDryRun"
        # The workload controllers' answers patch nothing: nothing to re-invoke for.
        warn_only = hook["name"].startswith("workloads")
        assert hook["reinvocationPolicy"] == ("Never" if warn_only else "IfNeeded")
        assert hook["failurePolicy"] == "Ignore"
        assert 1 <= hook["timeoutSeconds"] <= 5
        (expr,) = hook["namespaceSelector"]["matchExpressions"]
        assert expr["operator"] == "NotIn"
        assert {"kube-system", "gpu-system"} <= set(expr["values"])
        assert hook["clientConfig"]["service"]["namespace"] == "gpu-system"
    assert hooks["pods.cudasched.io"]["rules"][0]["operations"] == ["CREATE"]
    assert hooks["inferenceservices.cudasched.io"]["rules"][0]["operations"] == [
        "CREATE",
        "UPDATE",
    ]
    # LLMInferenceServices at both served versions (v1alpha1 since KServe 0.16, v1alpha2, the
    # storage version, since 0.17), on the path the server answers them on.
    (llm_rule,) = hooks["llminferenceservices.cudasched.io"]["rules"]
    assert llm_rule["apiVersions"] == ["v1alpha1", "v1alpha2"]
    assert llm_rule["resources"] == ["llminferenceservices"]
    assert llm_rule["operations"] == ["CREATE", "UPDATE"]
    assert hooks["llminferenceservices.cudasched.io"]["clientConfig"]["service"]["path"] == (
        LLMISVC_PATH
    )
    assert hooks["pods.cudasched.io"]["clientConfig"]["service"]["path"] == POD_PATH
    # Deployments, StatefulSets, Jobs, CronJobs and LeaderWorkerSets, on the server's path.
    workloads = hooks["workloads.cudasched.io"]
    assert workloads["clientConfig"]["service"]["path"] == WORKLOAD_PATH
    assert {(r["apiGroups"][0], res) for r in workloads["rules"] for res in r["resources"]} == {
        ("apps", "deployments"),
        ("apps", "statefulsets"),
        ("batch", "jobs"),
        ("batch", "cronjobs"),
        ("leaderworkerset.x-k8s.io", "leaderworkersets"),
    }
    assert all(r["operations"] == ["CREATE", "UPDATE"] for r in workloads["rules"])
    assert hooks["inferenceservices.cudasched.io"]["clientConfig"]["service"]["path"] == (ISVC_PATH)
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        f"gpu-system/{naming.CA_CERTIFICATE}"
    )


def test_fail_closed_flag() -> None:
    config = _one(_render("--fail-closed"), "MutatingWebhookConfiguration")
    assert {h["failurePolicy"] for h in config["webhooks"]} == {"Fail"}


def test_deployment_is_highly_available_and_probed() -> None:
    objects = _render()
    deployment = _one(objects, "Deployment", naming.APP)
    assert deployment["spec"]["replicas"] == 2
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert container["securityContext"]["runAsNonRoot"] is True
    pdb = _one(objects, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    service = _one(objects, "Service", naming.APP)
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


def test_bundled_config_is_accepted_by_the_webhook(tmp_path: Path) -> None:
    config_map = _one(_render(), "ConfigMap")
    path = tmp_path / "config.yaml"
    path.write_text(config_map["data"]["config.yaml"])
    config = load_config(path)
    assert config.server.port == naming.PORT


def test_self_signed_ca_bundle_signs_the_serving_certificate() -> None:
    objects = _render("--self-signed", "--namespace", "gpu-system")
    secret = _one(objects, "Secret")
    config = _one(objects, "MutatingWebhookConfiguration")
    ca = x509.load_pem_x509_certificate(
        base64.b64decode(config["webhooks"][0]["clientConfig"]["caBundle"])
    )
    serving = x509.load_pem_x509_certificates(base64.b64decode(secret["data"]["tls.crt"]))[0]
    serving.verify_directly_issued_by(ca)
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"{naming.APP}.gpu-system.svc" in names.get_values_for_type(x509.DNSName)
    assert "cert-manager.io/inject-ca-from" not in config["metadata"].get("annotations", {})


def test_no_agent_flag_drops_the_daemonset() -> None:
    assert not [o for o in _render("--no-agent") if o["kind"] == "DaemonSet"]


def test_bad_namespace_is_one_line_exit_2() -> None:
    result = CliRunner().invoke(app, ["manifests", "--namespace", "Not_A_Namespace"])
    assert result.exit_code == 2
    assert "Not_A_Namespace" in result.output


def _conditions(webhook_name: str) -> list[Any]:
    config = _one(_render(), "MutatingWebhookConfiguration")
    (hook,) = [h for h in config["webhooks"] if h["name"] == webhook_name]
    env = celpy.Environment()
    return [env.program(env.compile(c["expression"])) for c in hook["matchConditions"]]


def _sent(programs: list[Any], obj: dict[str, Any]) -> bool:
    activation = {"object": celpy.json_to_cel(obj)}
    return all(bool(p.evaluate(activation)) for p in programs)


def test_match_conditions_send_every_pod_the_webhook_may_change() -> None:
    """Evaluate the CEL conditions (with a CEL interpreter) on every sample pod: each pod the
    webhook would constrain is sent; a plain CPU pod and a skipped GPU pod are not."""
    programs = _conditions("pods.cudasched.io")
    for pod in bundled_snapshot().pods:
        labels = pod["metadata"].get("labels", {})
        annotations = pod["metadata"].get("annotations", {})
        limits = [
            c.get("resources", {}).get("limits", {}) for c in pod["spec"].get("containers", [])
        ]
        may_need = (
            "serving.kserve.io/inferenceservice" in labels
            or labels.get("app.kubernetes.io/part-of") == "llminferenceservice"
            or any(k.startswith("cudasched.io/") for k in annotations)
            or any(k.startswith("nvidia.com/") for lim in limits for k in lim)
        )
        if is_skipped(annotations):
            may_need = False
        assert _sent(programs, pod) == may_need, pod["metadata"]["name"]

    cpu = {"metadata": {"name": "web"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
    gpu = {
        "metadata": {"name": "train"},
        "spec": {
            "containers": [
                {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ]
        },
    }
    skipped = {**gpu, "metadata": {"name": "t", "annotations": {"cudasched.io/skip": "true"}}}
    claim = {
        "metadata": {"name": "dra"},
        "spec": {"containers": [{"name": "c"}], "resourceClaims": [{"name": "gpu"}]},
    }
    assert not _sent(programs, cpu)
    assert _sent(programs, gpu)
    assert not _sent(programs, skipped)
    assert _sent(programs, claim)
    # An LLMInferenceService's model server is sent even before its GPUs show (they may come
    # from the LLMInferenceServiceConfigs); another part-of value is not.
    model_server = {
        "metadata": {
            "name": "qwen-kserve-0",
            "labels": {
                "app.kubernetes.io/part-of": "llminferenceservice",
                "app.kubernetes.io/name": "qwen",
                "app.kubernetes.io/component": "llminferenceservice-workload",
            },
        },
        "spec": {"containers": [{"name": "main", "image": "ghcr.io/llm-d/llm-d-cuda:v0.8.0"}]},
    }
    assert _sent(programs, model_server)
    other_labels = {"app.kubernetes.io/part-of": "y"}
    other = {**model_server, "metadata": {"name": "x", "labels": other_labels}}
    assert not _sent(programs, other)


@pytest.mark.parametrize(
    "value", ["true", "TRUE", " yes ", "Yes", "1", "false", "no", "", "0", "truee", "yeſ", "1 1"]
)
def test_skip_condition_reads_the_switch_like_the_webhook(value: str) -> None:
    """The CEL pre-filter and the webhook agree on every value of ``cudasched.io/skip``."""
    programs = _conditions("pods.cudasched.io")
    pod = {
        "metadata": {"name": "t", "annotations": {"cudasched.io/skip": value}},
        "spec": {
            "containers": [
                {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ]
        },
    }
    assert _sent(programs, pod) is not is_skipped(pod["metadata"]["annotations"])


# --------------------------------------------------------------------------- hardening (issue 13)


def test_webhook_rbac_has_no_unused_verbs() -> None:
    """The cache only lists and watches (never a single GET), pods are only listed (the
    unbound pods of a controller no node can run, for their Events), and the webhook only
    creates Events (events.k8s.io): nothing more is granted."""
    role = _one(_render(), "ClusterRole", naming.APP)
    granted = {
        (group, resource): set(rule["verbs"])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert granted == {
        ("", "nodes"): {"list", "watch"},
        ("", "pods"): {"list"},
        ("serving.kserve.io", "inferenceservices"): {"list", "watch"},
        ("serving.kserve.io", "servingruntimes"): {"list", "watch"},
        ("serving.kserve.io", "clusterservingruntimes"): {"list", "watch"},
        ("serving.kserve.io", "llminferenceservices"): {"list", "watch"},
        ("events.k8s.io", "events"): {"create"},
    }


def _webhook_pod_labels(objects: list[dict[str, Any]]) -> dict[str, str]:
    deployment = _one(objects, "Deployment", naming.APP)
    return deployment["spec"]["template"]["metadata"]["labels"]


def test_network_policy_admits_only_the_webhook_port_from_the_api_server_ranges() -> None:
    objects = _render("--namespace", "gpu-system")
    policy = _one(objects, "NetworkPolicy")
    assert_valid(policy)
    assert policy["metadata"]["namespace"] == "gpu-system"
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= _webhook_pod_labels(objects).items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": naming.PORT, "protocol": "TCP"}]
    assert all(set(peer) == {"ipBlock"} for peer in rule["from"])
    cidrs = [peer["ipBlock"]["cidr"] for peer in rule["from"]]
    # By default the private ranges where pod and node (and most control-plane) addresses live.
    assert cidrs == list(access.DEFAULT_API_SERVER_CIDRS)
    assert "0.0.0.0/0" not in cidrs

    strict = _one(
        _render("--api-server-cidr", "10.0.0.10/32", "--api-server-cidr", "fd00::1/128"),
        "NetworkPolicy",
    )
    assert_valid(strict)
    assert [p["ipBlock"]["cidr"] for p in strict["spec"]["ingress"][0]["from"]] == [
        "10.0.0.10/32",
        "fd00::1/128",
    ]
    assert not [o for o in _render("--no-network-policy") if o["kind"] == "NetworkPolicy"]


@pytest.mark.parametrize("cidr", ["10.0.0.300/32", "10.0.0.0/33", "example.com", "", "10.0.0.1/8"])
def test_bad_api_server_cidr_is_one_line_exit_2(cidr: str) -> None:
    result = CliRunner().invoke(app, ["manifests", "--api-server-cidr", cidr])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cudasched: error: ") and "CIDR" in lines[0]


def test_priority_class_is_an_option_with_a_quota_for_system_classes() -> None:
    """system-cluster-critical outside kube-system needs a ResourceQuota scoped to that class
    (GKE refuses the pods otherwise): the manifests ship one; another class needs none, and an
    empty class drops the field."""
    objects = _render("--namespace", "gpu-system")
    pod_spec = _one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod_spec["priorityClassName"] == "system-cluster-critical"
    quota = _one(objects, "ResourceQuota")
    assert_valid(quota)
    assert quota["metadata"]["namespace"] == "gpu-system"
    assert quota["spec"]["scopeSelector"] == {
        "matchExpressions": [
            {
                "scopeName": "PriorityClass",
                "operator": "In",
                "values": ["system-cluster-critical"],
            }
        ]
    }
    replicas = _one(objects, "Deployment")["spec"]["replicas"]
    assert int(quota["spec"]["hard"]["pods"]) >= replicas + 1  # room for a rolling update

    own = _render("--priority-class", "gpu-platform-critical")
    assert _one(own, "Deployment")["spec"]["template"]["spec"]["priorityClassName"] == (
        "gpu-platform-critical"
    )
    assert not [o for o in own if o["kind"] == "ResourceQuota"]
    none = _render("--priority-class", "")
    assert "priorityClassName" not in _one(none, "Deployment")["spec"]["template"]["spec"]
    assert not [o for o in none if o["kind"] == "ResourceQuota"]


DIGEST = "sha256:" + "ab" * 32


def test_image_is_referenced_by_digest_when_one_is_given() -> None:
    objects = _render("--image", "registry.example/cudasched:0.1.0", "--image-digest", DIGEST)
    images = [
        c["image"]
        for o in objects
        if o["kind"] in ("Deployment", "DaemonSet")
        for c in o["spec"]["template"]["spec"]["containers"]
    ]
    assert images and set(images) == {f"registry.example/cudasched@{DIGEST}"}


@pytest.mark.parametrize(
    "args",
    [
        ["--image", ""],
        ["--image", "", "--no-agent"],
        ["--image", "has space:1"],
        ["--image", "Registry/UPPER:1"],
        ["--image-digest", "sha256:abc"],
        ["--image-digest", "md5:" + "ab" * 16],
    ],
)
def test_bad_image_is_one_line_exit_2(args: list[str]) -> None:
    result = CliRunner().invoke(app, ["manifests", *args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cudasched: error: ")


def test_an_image_name_over_the_distribution_specs_255_characters_is_refused() -> None:
    from cudasched.install.webhook import checked_image
    from cudasched.vocab.errors import InputError

    ok = "registry.example.com/" + "a" * (255 - len("registry.example.com/")) + ":1"
    assert checked_image(ok) == ok
    with pytest.raises(InputError) as err:
        checked_image("registry.example.com/" + "a" * 5000 + ":1")
    assert "5,021 characters (at most 255, registry host included)" in str(err.value)
    assert len(str(err.value)) < 200  # the reference itself is not echoed whole


def test_cert_manager_chain_keeps_the_trust_root_across_renewals() -> None:
    """A self-signed root, a CA Issuer and a serving certificate: the caBundle is injected from
    the root, which a renewal of the serving certificate (new key each time) never touches."""
    objects = webhook.all_objects("gpu-system", cert_manager=True)
    by = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    root = by[("Certificate", "cudasched-webhook-ca")]["spec"]
    assert root["isCA"] is True and root["privateKey"]["rotationPolicy"] == "Never"
    assert root["issuerRef"] == {"name": "cudasched-webhook-selfsigned", "kind": "Issuer"}
    assert by[("Issuer", "cudasched-webhook-selfsigned")]["spec"] == {"selfSigned": {}}
    assert by[("Issuer", "cudasched-webhook-ca")]["spec"] == {
        "ca": {"secretName": "cudasched-webhook-ca"}
    }
    leaf = by[("Certificate", "cudasched-webhook")]["spec"]
    assert leaf["issuerRef"] == {"name": "cudasched-webhook-ca", "kind": "Issuer"}
    assert leaf["privateKey"]["rotationPolicy"] == "Always" and "isCA" not in leaf
    [config] = [o for o in objects if o["kind"] == "MutatingWebhookConfiguration"]
    source = config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
    assert source == "gpu-system/cudasched-webhook-ca"
    # The root outlives many renewals of the leaf.
    hours = int(root["duration"].rstrip("h")) // int(leaf["duration"].rstrip("h"))
    assert hours >= 40


def test_pull_secrets_are_granted_only_with_the_flag(tmp_path: Path) -> None:
    """Nothing about Secrets by default; ``--pull-secrets`` adds ``get`` (only) on secrets
    and serviceaccounts in a ClusterRole of its own, bound to the webhook, and a config that
    turns the resolver on with pull secrets (one the webhook accepts)."""
    plain = _render("--namespace", "gpu-system")
    opted = _render("--namespace", "gpu-system", "--pull-secrets")
    name = f"{naming.APP}-pull-secrets"

    def grants(objects: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
        return {
            (o["metadata"]["name"], resource, verb)
            for o in objects
            if o["kind"] == "ClusterRole"
            for rule in o["rules"]
            for resource in rule["resources"]
            for verb in rule["verbs"]
        }

    added = grants(opted) - grants(plain)
    # the pull secrets' own grant, and the image resolver's (pull secrets need the resolver)
    facts = f"{naming.APP}-image-facts"
    assert added == {
        (name, "secrets", "get"),
        (name, "serviceaccounts", "get"),
        (facts, "imagefacts", "get"),
        (facts, "imagefacts", "create"),
        (facts, "imagefacts/status", "patch"),
    }
    assert not [g for g in grants(plain) if g[1] in ("secrets", "serviceaccounts")]
    binding = _one(opted, "ClusterRoleBinding", name)
    assert binding["roleRef"]["name"] == name
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": naming.APP, "namespace": "gpu-system"}
    ]
    for obj in opted:
        if obj["kind"] not in CERT_MANAGER_KINDS:
            assert_valid(obj)
    settings = tmp_path / "config.yaml"
    settings.write_text(_one(opted, "ConfigMap")["data"]["config.yaml"])
    resolver = load_config(settings).image_resolver
    assert (resolver.enabled, resolver.pull_secrets) == (True, True)
    plain_settings = tmp_path / "plain.yaml"
    plain_settings.write_text(_one(plain, "ConfigMap")["data"]["config.yaml"])
    assert not load_config(plain_settings).image_resolver.pull_secrets


def test_the_background_audit_is_granted_and_turned_on_only_with_its_flag(
    tmp_path: Path,
) -> None:
    """``--audit-interval N``: a ClusterRole of its own, bound to the webhook, with list on
    every kind the audit's live read lists and what server-side apply of PolicyReports needs,
    and a config that runs the audit every N minutes and publishes (one the webhook accepts).
    Nothing of it by default."""
    from cudasched.kube.live import LIVE_KINDS
    from cudasched.vocab.kinds import CLUSTER_POLICY_REPORT, POLICY_REPORT

    plain = _render("--namespace", "gpu-system")
    opted = _render("--namespace", "gpu-system", "--audit-interval", "30")
    name = f"{naming.APP}-audit"
    role = _one(opted, "ClusterRole", name)
    grants = granted(role)
    needed = {(k.group, k.plural, "list") for k in LIVE_KINDS}
    needed |= {
        (k.group, k.plural, verb)
        for k in (POLICY_REPORT, CLUSTER_POLICY_REPORT)
        for verb in ("create", "patch")
    }
    assert grants == needed
    binding = _one(opted, "ClusterRoleBinding", name)
    assert binding["roleRef"]["name"] == name
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": naming.APP, "namespace": "gpu-system"}
    ]
    assert not [o for o in plain if o["metadata"]["name"] == name]
    for obj in opted:
        if obj["kind"] not in CERT_MANAGER_KINDS:
            assert_valid(obj)
    settings = tmp_path / "config.yaml"
    settings.write_text(_one(opted, "ConfigMap")["data"]["config.yaml"])
    audit = load_config(settings).audit
    assert (audit.interval_minutes, audit.publish_reports) == (30, True)
    plain_settings = tmp_path / "plain.yaml"
    plain_settings.write_text(_one(plain, "ConfigMap")["data"]["config.yaml"])
    assert load_config(plain_settings).audit.interval_minutes == 0
    assert _render("--audit-interval", "0") == _render()
    refused = CliRunner().invoke(app, ["manifests", "--audit-interval", "5000"])
    assert refused.exit_code == 2 and refused.stdout == ""
    assert refused.stderr.startswith("cudasched: error: invalid --audit-interval 5000:")


def test_the_webhook_follows_the_knowledge_bundle_the_manifests_name(tmp_path: Path) -> None:
    """``--knowledge REF --knowledge-key PEM``: the ConfigMap's settings follow REF and require
    the key's signature, the key shipped beside them in ``/config`` (what the Deployment
    mounts); a path, a bare name or a key without a reference is refused."""
    from cudasched.cli.knowledgesource import read_trusted
    from tests.support.bundles import ed25519_pair

    _, public = ed25519_pair()
    key = tmp_path / "knowledge.pub"
    key.write_bytes(public)
    ref = "registry.example.com/cudasched/knowledge:stable"
    opted = _render("--knowledge", ref, "--knowledge-key", str(key))
    config = _one(opted, "ConfigMap")["data"]
    mounted = tmp_path / "config"
    mounted.mkdir()
    for name, text in config.items():
        (mounted / name).write_text(text)
    knowledge = load_config(mounted / "config.yaml").knowledge
    deployment = _one(opted, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    pinned = _render("--knowledge", "registry.example.com/k@sha256:" + "a" * 64)
    assert knowledge.reference == ref and knowledge.public_keys == ("/config/knowledge.pub",)
    assert config["knowledge.pub"].encode() == public and mounts["/config"] == "config"
    assert read_trusted([mounted / "knowledge.pub"]), (
        "the shipped key reads as the webhook reads it"
    )
    assert "publicKeys" not in _one(pinned, "ConfigMap")["data"]["config.yaml"]
    assert "knowledge" not in _one(_render(), "ConfigMap")["data"]["config.yaml"]
    refusals = {
        "./bundle": ["--knowledge", "./bundle"],
        "knowledge:stable": ["--knowledge", "knowledge:stable"],
        "needs --knowledge": ["--knowledge-key", str(key)],
        "public key": [
            "--knowledge",
            ref,
            "--knowledge-key",
            str(tmp_path / "config" / "config.yaml"),
        ],
    }
    said = {word: CliRunner().invoke(app, ["manifests", *args]) for word, args in refusals.items()}
    assert {word: (r.exit_code, word in r.stderr) for word, r in said.items()} == {
        word: (2, True) for word in refusals
    }


def test_the_image_resolver_gets_its_grant_and_an_egress_policy_only_with_its_flag(
    tmp_path: Path,
) -> None:
    """``--image-resolver``: the ImageFacts grant (get, create; patch of the status) in a
    ClusterRole of its own; an egress NetworkPolicy beside the ingress one: DNS, the API
    server's ranges on 443/6443, public addresses on 443 with every private, link-local and
    metadata range excepted, and ``--registry-cidr``'s internal registries; a config that
    turns the resolver on (layers and shared facts with it). The CRD and the policy that
    keeps its status to the webhook are there either way."""
    plain = _render("--namespace", "gpu-system")
    opted = _render(
        "--namespace", "gpu-system", "--image-resolver", "--registry-cidr", "10.20.0.0/16"
    )
    for objects in (plain, opted):
        crd = _one(objects, "CustomResourceDefinition", "imagefacts.cudasched.io")
        assert crd["spec"]["scope"] == "Cluster"
        assert crd["spec"]["versions"][0]["subresources"] == {"status": {}}
    policy = _one(plain, "ValidatingAdmissionPolicy", f"{naming.APP}-gpu-system-image-facts")
    rule = policy["spec"]["matchConstraints"]["resourceRules"][0]
    assert rule["resources"] == ["imagefacts/status"]
    assert (
        "system:serviceaccount:gpu-system:cudasched"
        in policy["spec"]["validations"][0]["expression"]
    )
    assert not [o for o in plain if o["metadata"]["name"] == "cudasched-webhook-egress"]
    egress = _one(opted, "NetworkPolicy", "cudasched-webhook-egress")
    assert egress["spec"]["policyTypes"] == ["Egress"]
    rules = egress["spec"]["egress"]
    public = rules[2]["to"][0]["ipBlock"]
    assert public["cidr"] == "0.0.0.0/0"
    assert {"10.0.0.0/8", "169.254.0.0/16", "100.64.0.0/10", "127.0.0.0/8"} <= set(public["except"])
    assert "fc00::/7" in rules[2]["to"][1]["ipBlock"]["except"]
    assert rules[2]["ports"] == [{"port": 443, "protocol": "TCP"}]
    assert rules[3] == {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}]}
    for obj in opted:
        if obj["kind"] not in CERT_MANAGER_KINDS:
            assert_valid(obj)
    settings = tmp_path / "config.yaml"
    settings.write_text(_one(opted, "ConfigMap")["data"]["config.yaml"])
    resolver = load_config(settings).image_resolver
    assert (resolver.enabled, resolver.layers.enabled, resolver.shared_facts) == (True,) * 3
    refused = CliRunner().invoke(app, ["manifests", "--registry-cidr", "10.20.0.0/16"])
    assert refused.exit_code == 2 and "--image-resolver" in refused.output


def test_dra_registers_the_claims_webhook_and_grants_get_on_pods_only_with_its_flag(
    tmp_path: Path,
) -> None:
    """``--dra``: the settings carry ``dra.mode``, the ResourceClaims webhook is registered
    (Ignore, never re-invoked, only claims made from a pod's template) and ``get`` on pods is
    granted in a ClusterRole of its own; without it none of them. The policy mode's
    controller gets ``--dra claim`` as the webhook does."""
    plain = _render("--namespace", "gpu-system")
    opted = _render("--namespace", "gpu-system", "--dra", "extended-resource", "--fail-closed")
    hooks = {
        name: [h for h in _one(o, "MutatingWebhookConfiguration")["webhooks"]]
        for name, o in (("plain", plain), ("opted", opted))
    }
    (claims,) = [h for h in hooks["opted"] if h["name"] == "resourceclaims.cudasched.io"]
    assert "resourceclaims.cudasched.io" not in {h["name"] for h in hooks["plain"]}
    assert claims["clientConfig"]["service"]["path"] == "/mutate/resourceclaims"
    assert (claims["failurePolicy"], claims["reinvocationPolicy"]) == ("Ignore", "Never")
    assert claims["rules"][0]["apiGroups"] == ["resource.k8s.io"]
    role = _one(opted, "ClusterRole", f"{naming.APP}-claim-pods")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
    assert not [o for o in plain if o["metadata"]["name"] == f"{naming.APP}-claim-pods"]
    assert all(assert_valid(o) is None for o in opted if o["kind"] not in CERT_MANAGER_KINDS)
    settings = tmp_path / "config.yaml"
    settings.write_text(_one(opted, "ConfigMap")["data"]["config.yaml"])
    assert load_config(settings).dra.mode.value == "extended-resource"
    env = celpy.Environment()
    programs = [env.program(env.compile(c["expression"])) for c in claims["matchConditions"]]
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u", "controller": True}
    made = {"annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"}}
    cases = {
        "made for a pod": {**made, "ownerReferences": [owner]},
        "a person's": {"name": "mine"},
        "the scheduler's": {
            "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
            "ownerReferences": [owner],
        },
        "not controlled": {**made, "ownerReferences": [{**owner, "controller": False}]},
    }
    sent = {case: _sent(programs, {"metadata": meta}) for case, meta in cases.items()}
    assert sent == {k: k == "made for a pod" for k in cases}
    # The policy mode serves claim too: its controller reads the same dra settings.
    policy = _render("--dra", "claim", "--mode", "policy")
    controller = tmp_path / "controller.yaml"
    config = _one(policy, "ConfigMap", f"{CONTROLLER}-config")
    controller.write_text(config["data"]["config.yaml"])
    assert load_config(controller).dra.mode.value == "claim"
