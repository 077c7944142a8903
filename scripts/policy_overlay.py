"""Write ``deploy/overlays/policy``: the kustomize overlay of ``deploy/base`` that renders what
``cudasched manifests --mode both`` prints (the objects the mode adds, in ``policy.yaml``, and
the one change it makes to the base, the pod webhook's ``not-placed-by-policy`` condition, as
a patch). Run from the repository root after a change of the manifests:
``python scripts/policy_overlay.py``; ``tests/install/test_deploy.py`` fails until it is."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from cudasched.cli import app
from cudasched.placement.mergecel import POLICY_PLACED

OVERLAY = Path(__file__).resolve().parents[1] / "deploy" / "overlays" / "policy"

HEAD = """\
# The policy mode beside the webhook, as an overlay of the base: exactly what
#   cudasched manifests --mode both
# prints. The MutatingAdmissionPolicy places every pod whose requirement the PlacementTables
# already hold, in the API server; the webhook is called only for the others (first sight of an
# image or service), its pod webhook skipping pods the policy placed. policy.yaml holds the
# objects the mode adds (the policy controller, the PlacementTable CRD, the policies and their
# bindings). Regenerate both files after a change of the manifests with
#   python scripts/policy_overlay.py
# (tests/install/test_deploy.py fails while they differ from `cudasched manifests --mode both`).
# Without the webhook at all: cudasched manifests --mode policy (Kubernetes >= 1.36).
"""


def _objects(*args: str) -> list[dict[str, Any]]:
    result = CliRunner().invoke(app, ["manifests", *args])
    if result.exit_code != 0:
        raise SystemExit(result.output)
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def _key(obj: dict[str, Any]) -> tuple[str, ...]:
    meta = obj.get("metadata") or {}
    return (obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])


def overlay() -> tuple[str, str]:
    """The overlay's ``kustomization.yaml`` and ``policy.yaml``."""
    base = {_key(o) for o in _objects()}
    added = [o for o in _objects("--mode", "both") if _key(o) not in base]
    condition = {"name": "not-placed-by-policy", "expression": "!" + POLICY_PLACED}
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["../../base", "policy.yaml"],
        "patches": [
            {
                "target": {
                    "group": "admissionregistration.k8s.io",
                    "version": "v1",
                    "kind": "MutatingWebhookConfiguration",
                    "name": "cudasched-webhook",
                },
                "patch": yaml.safe_dump(
                    [{"op": "add", "path": "/webhooks/0/matchConditions/-", "value": condition}],
                    width=10_000,
                ),
            }
        ],
    }
    return (
        HEAD + yaml.safe_dump(kustomization, sort_keys=False, width=10_000),
        yaml.safe_dump_all(added, sort_keys=False, explicit_start=True),
    )


def main() -> int:
    kustomization, policy = overlay()
    (OVERLAY / "kustomization.yaml").write_text(kustomization, encoding="utf-8")
    (OVERLAY / "policy.yaml").write_text(policy, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
