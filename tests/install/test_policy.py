"""``cudasched manifests --mode policy|both``: the policy mode's objects, their agreement with the
webhook's registration, the controller's grants, and the both mode's split of the work."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml
from typer.testing import CliRunner

from cudasched.cli import app
from cudasched.install import naming
from cudasched.install.policy import policy_objects, table_crd
from cudasched.install.registration import webhook_configuration
from cudasched.placement.merge import INJECTED_KEY
from cudasched.settings.config import load_config
from cudasched.vocab.kinds import LEASE, PLACEMENT_TABLE
from cudasched.vocab.placementtable import MAX_PLACEMENTS, MAX_PODS_TEXT, TABLE_LABEL
from tests.support.rbac import granted

JSON = dict[str, Any]


def _render(*args: str) -> list[JSON]:
    result = CliRunner().invoke(app, ["manifests", "--no-agent", *args])
    assert result.exit_code == 0, result.output
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def _one(objects: list[JSON], kind: str) -> JSON:
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, kind
    return found[0]


def test_policy_mode_has_no_webhook_and_the_policies() -> None:
    objects = _render("--mode", "policy")
    kinds = [o["kind"] for o in objects]
    assert "MutatingWebhookConfiguration" not in kinds
    assert "Service" not in kinds
    assert kinds.index("CustomResourceDefinition") < kinds.index("MutatingAdmissionPolicy")
    policy = _one(objects, "MutatingAdmissionPolicy")
    assert policy["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert policy["spec"]["reinvocationPolicy"] == "IfNeeded"
    assert policy["spec"]["failurePolicy"] == "Ignore"
    assert policy["spec"]["paramKind"] == {
        "apiVersion": PLACEMENT_TABLE.api_version,
        "kind": PLACEMENT_TABLE.kind,
    }
    binding = _one(objects, "MutatingAdmissionPolicyBinding")
    assert binding["spec"]["paramRef"]["selector"]["matchLabels"] == {TABLE_LABEL: "pods"}
    assert binding["spec"]["paramRef"]["parameterNotFoundAction"] == "Allow"
    assert "namespace" not in binding["spec"]["paramRef"]  # the admitted pod's namespace
    (mutation,) = policy["spec"]["mutations"]
    assert mutation["patchType"] == "JSONPatch"


def test_the_policy_matches_what_the_webhook_matches() -> None:
    """The webhook's conditions, and one more: not a pod the policy's placement is intact on
    (the API server's reinvocation after the policy's own change)."""
    hook = webhook_configuration("cudasched")["webhooks"][0]
    objects = policy_objects("cudasched")
    policy = next(o for o in objects if o["kind"] == "MutatingAdmissionPolicy")["spec"]
    assert policy["matchConditions"][:-1] == hook["matchConditions"]
    assert policy["matchConditions"][-1]["name"] == "not-placed-yet"
    assert policy["matchConstraints"]["namespaceSelector"] == hook["namespaceSelector"]
    (rule,) = policy["matchConstraints"]["resourceRules"]
    assert rule["operations"] == ["CREATE"] and rule["resources"] == ["pods"]


def test_fail_closed_and_deny_unplaced_are_carried() -> None:
    objects = policy_objects("cudasched", fail_closed=True, deny_unplaced=True)
    policy = next(o for o in objects if o["kind"] == "MutatingAdmissionPolicy")
    assert policy["spec"]["failurePolicy"] == "Fail"
    binding = next(o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["validationActions"] == ["Deny"]
    warn = next(
        o for o in policy_objects("cudasched") if o["kind"] == "ValidatingAdmissionPolicyBinding"
    )
    assert warn["spec"]["validationActions"] == ["Warn"]


def test_the_table_schema_states_the_controllers_bounds() -> None:
    spec = table_crd()["spec"]
    assert spec["scope"] == "Namespaced"  # one table per namespace: a pod reads its own
    schema = spec["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert schema["pods"] == {"type": "string", "maxLength": MAX_PODS_TEXT}  # the key lines
    assert schema["placements"]["maxProperties"] == MAX_PLACEMENTS


def test_both_mode_sends_the_webhook_only_what_the_policy_did_not_place() -> None:
    objects = _render("--mode", "both", "--self-signed")
    hook = _one(objects, "MutatingWebhookConfiguration")
    names = [c["name"] for c in hook["webhooks"][0]["matchConditions"]]
    assert names == ["may-need-gpu", "not-skipped", "not-placed-by-policy"]
    assert "MutatingAdmissionPolicy" in {o["kind"] for o in objects}
    webhook_only = _one(_render("--self-signed"), "MutatingWebhookConfiguration")
    assert [c["name"] for c in webhook_only["webhooks"][0]["matchConditions"]] == names[:2]


def test_the_controller_may_do_what_it_does_and_no_more() -> None:
    def grants(*args: str) -> set[tuple[str, str, str]]:
        objects = _render("--mode", "policy", *args)
        return {g for o in objects if o["kind"] in ("ClusterRole", "Role") for g in granted(o)}

    rights = grants()
    assert {
        ("", "pods", "watch"),
        ("apps", "replicasets", "list"),
        (PLACEMENT_TABLE.group, PLACEMENT_TABLE.plural, "delete"),
        (LEASE.group, LEASE.plural, "update"),
    } <= rights
    assert ("", "pods", "create") not in rights
    assert ("", "secrets", "get") not in rights
    assert ("", "secrets", "get") in grants("--pull-secrets")


@pytest.mark.parametrize("mode", ["policy", "both"])
def test_the_controller_follows_the_bundle_the_webhook_follows(mode: str, tmp_path: Path) -> None:
    """``--knowledge REF --knowledge-key PEM`` with the policy: the controller's ConfigMap names
    the same bundle and key as the webhook's (its tables hold the webhook's answers under the
    same facts), ships the key where its Deployment mounts it, and it may say a refused bundle
    in an Event; without ``--knowledge`` it judges with the knowledge of its image."""
    from cudasched.cli.knowledgesource import read_trusted
    from cudasched.install.policycontroller import CONTROLLER
    from tests.support.bundles import ed25519_pair

    _, public = ed25519_pair()
    key = tmp_path / "knowledge.pub"
    key.write_bytes(public)
    ref = "registry.example.com/cudasched/knowledge:stable"
    objects = _render("--mode", mode, "--knowledge", ref, "--knowledge-key", str(key))
    maps = {o["metadata"]["name"]: o["data"] for o in objects if o["kind"] == "ConfigMap"}
    data = maps[f"{CONTROLLER}-config"]
    mounted = tmp_path / "config"
    mounted.mkdir()
    for name, text in data.items():
        (mounted / name).write_text(text)
    knowledge = load_config(mounted / "config.yaml").knowledge
    assert knowledge.reference == ref and knowledge.public_keys == ("/config/knowledge.pub",)
    assert read_trusted([mounted / "knowledge.pub"])
    if mode == "both":  # the webhook's names the same
        webhook = yaml.safe_load(maps[f"{naming.APP}-config"]["config.yaml"])["knowledge"]
        assert webhook == yaml.safe_load(data["config.yaml"])["knowledge"]
    (deployment,) = [
        o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == CONTROLLER
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert [m["mountPath"] for m in container["volumeMounts"]] == ["/config"]
    role = next(o for o in objects if o["kind"] == "Role" and o["metadata"]["name"] == CONTROLLER)
    assert ("events.k8s.io", "events", "create") in granted(role)
    plain = _render("--mode", mode)
    plain_role = next(
        o for o in plain if o["kind"] == "Role" and o["metadata"]["name"] == CONTROLLER
    )
    assert ("events.k8s.io", "events", "create") not in granted(plain_role)
    plain_maps = {o["metadata"]["name"]: o["data"] for o in plain if o["kind"] == "ConfigMap"}
    assert "knowledge" not in yaml.safe_load(plain_maps[f"{CONTROLLER}-config"]["config.yaml"])


@pytest.mark.parametrize("mode", ["policy", "both"])
def test_the_controllers_resolver_may_share_image_facts_as_the_webhooks(mode: str) -> None:
    """``--image-resolver`` beside the policy: the controller's resolver reads the same
    ImageFacts as the webhook's (a person's ``spec.override`` reaches the tables) and shares
    what it reads, so its account gets the same grant, and the status policy (installed in
    every mode, with the CRD) admits it beside the webhook's and nobody else."""
    from cudasched.install.policycontroller import CONTROLLER

    objects = _render("--mode", mode, "--image-resolver")
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert ("CustomResourceDefinition", "imagefacts.cudasched.io") in kinds
    (role,) = [
        o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == CONTROLLER
    ]
    assert {
        ("cudasched.io", "imagefacts", "get"),
        ("cudasched.io", "imagefacts", "create"),
        ("cudasched.io", "imagefacts/status", "patch"),
    } <= granted(role)
    plain = _render("--mode", mode)
    (plain_role,) = [
        o for o in plain if o["kind"] == "ClusterRole" and o["metadata"]["name"] == CONTROLLER
    ]
    assert not any(g[1].startswith("imagefacts") for g in granted(plain_role))
    (guard,) = [
        o
        for o in plain
        if o["kind"] == "ValidatingAdmissionPolicy" and o["metadata"]["name"].endswith("facts")
    ]
    env = celpy.Environment()
    (rule,) = guard["spec"]["validations"]
    program = env.program(env.compile(rule["expression"]))

    def admits(user: str) -> bool:
        request = {"userInfo": {"username": user}}
        return bool(program.evaluate({"request": celpy.json_to_cel(request)}))

    account = "system:serviceaccount:cudasched:"
    assert admits(account + CONTROLLER) and admits(account + naming.APP)
    assert not admits(account + "default") and not admits("kubernetes-admin")
    assert not admits("system:serviceaccount:other:" + CONTROLLER)


def test_an_unknown_mode_is_refused() -> None:
    result = CliRunner().invoke(app, ["manifests", "--mode", "sidecar"])
    assert result.exit_code == 2
    assert "invalid --mode 'sidecar'" in result.output


def _term(*operators: str) -> JSON:
    expressions = [{"key": "zone", "operator": "Exists"}]
    expressions += [{"key": INJECTED_KEY, "operator": op, "values": ["policy"]} for op in operators]
    return {"matchExpressions": expressions}


def test_a_pod_is_placed_again_unless_every_term_carries_the_policys_marker() -> None:
    """The ``not-placed-yet`` condition (evaluated with a CEL interpreter): a pod whose every
    required term carries the policy's marker is left alone; one with no affinity, an empty
    term list, a term without the marker (a later webhook added it), or the webhook's marker
    instead is placed."""
    policy = _one(policy_objects("cudasched"), "MutatingAdmissionPolicy")
    (condition,) = [c for c in policy["spec"]["matchConditions"] if c["name"] == "not-placed-yet"]
    env = celpy.Environment()
    program = env.program(env.compile(condition["expression"]))

    def sent(terms: list[JSON] | None, *, affinity: JSON | None = None) -> bool:
        spec: JSON = {"containers": [{"name": "c"}]}
        if terms is not None:
            required = {"nodeSelectorTerms": terms}
            affinity = {"requiredDuringSchedulingIgnoredDuringExecution": required}
        if affinity is not None:
            spec["affinity"] = {"nodeAffinity": affinity}
        return bool(program.evaluate({"object": celpy.json_to_cel({"spec": spec})}))

    assert sent([_term("NotIn"), _term("NotIn")]) is False
    assert sent(None) is True
    assert sent(None, affinity={}) is True
    assert sent([]) is True
    assert sent([_term("NotIn"), _term()]) is True
    assert sent([_term("DoesNotExist")]) is True
