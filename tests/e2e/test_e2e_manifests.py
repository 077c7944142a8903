"""``cudasched manifests`` applied with the pinned kubectl to the real API server: every object
is accepted with strict field validation (an unknown or duplicate field is an error, not a
warning), in each variant a person would install.

The cert-manager variant's Issuer and Certificate need cert-manager's CRDs, which the harness
does not install: its other objects are applied, those two are checked to be cert-manager's.
"""

from __future__ import annotations

import pytest
import yaml

from tests.harness.controlplane.plane import ControlPlane
from tests.harness.kube import Api
from tests.harness.webhook import manifests

VARIANTS = {
    "self-signed": ["--self-signed"],
    "fail-closed-all-nodes": [
        "--self-signed",
        "--fail-closed",
        "--agent-nodes",
        "all",
        "--agent-runtime-class",
        "nvidia",
        "--image-digest",
        "sha256:" + "0" * 64,
        "--api-server-cidr",
        "10.0.0.0/24",
        "--priority-class",
        "",
    ],
    "no-agent-no-netpol": ["--self-signed", "--no-agent", "--no-network-policy"],
    "cert-manager": ["--cert-manager"],
    "image-resolver": [
        "--self-signed",
        "--image-resolver",
        "--pull-secrets",
        "--registry-cidr",
        "10.1.0.0/16",
        "--toolkit-mode",
        "cdi",
    ],
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_manifests_apply_strictly(
    plane: ControlPlane, api: Api, variant: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    namespace = f"e2e-install-{variant}"
    objects = manifests("--namespace", namespace, *VARIANTS[variant])
    cert_manager = [o for o in objects if o["apiVersion"].startswith("cert-manager.io/")]
    objects = [o for o in objects if o not in cert_manager]
    if variant == "cert-manager":
        assert {o["kind"] for o in cert_manager} == {"Issuer", "Certificate"}
    else:
        assert not cert_manager
    path = tmp_path_factory.mktemp("manifests") / f"{variant}.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    try:
        applied = plane.kubectl("apply", "--validate=strict", "-f", str(path))
        assert "Warning" not in applied.stderr, applied.stderr
        lines = [line for line in applied.stdout.splitlines() if line.strip()]
        assert len(lines) == len(objects), applied.stdout
        # and the server agrees on a second, server-side apply (field manager conflicts aside)
        again = plane.kubectl(
            "apply", "--server-side", "--force-conflicts", "--validate=strict", "-f", str(path)
        )
        assert "Warning" not in again.stderr, again.stderr
        kinds = {o["kind"] for o in objects}
        assert {"MutatingWebhookConfiguration", "Deployment", "Service"} <= kinds
        assert {"CustomResourceDefinition", "ValidatingAdmissionPolicy"} <= kinds
        if "--no-agent" not in VARIANTS[variant]:
            assert "DaemonSet" in kinds
        if "--image-resolver" in VARIANTS[variant]:
            egress = [o for o in objects if o["metadata"]["name"] == "cudasched-webhook-egress"]
            assert [o["kind"] for o in egress] == ["NetworkPolicy"]
        # The API server type-checked each policy's CEL (the agent's against Node, the image
        # facts' against ImageFacts, a CRD): no warnings recorded.
        policies = [
            o["metadata"]["name"] for o in objects if o["kind"] == "ValidatingAdmissionPolicy"
        ]
        checked = [_type_checked(api, name) for name in policies]
        assert all(not c.get("expressionWarnings") for c in checked), checked
    finally:
        # The ImageFacts CRD is every variant's: left installed, so the next variant's apply
        # does not meet it terminating.
        kept = [o for o in objects if o["kind"] != "CustomResourceDefinition"]
        path.write_text(yaml.safe_dump_all(kept))
        plane.kubectl("delete", "-f", str(path), "--wait=false", "--ignore-not-found", check=False)
        plane.kubectl(
            "delete",
            "pods",
            "--all",
            "-n",
            namespace,
            "--force",
            "--grace-period=0",
            "--wait=false",
            check=False,
        )


def _type_checked(api: Api, name: str) -> dict[str, object]:
    """The ``status.typeChecking`` of a ValidatingAdmissionPolicy, once the API server wrote
    it; its failure policy is ``Fail``."""
    path = f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{name}"
    api.wait_for(
        f"type checking of {name}",
        lambda: "typeChecking" in api.get(path).get("status", {}),
        timeout=30,
    )
    stored = api.get(path)
    assert stored["spec"]["failurePolicy"] == "Fail"
    checked: dict[str, object] = stored["status"]["typeChecking"]
    return checked
