"""The node affinities the scheduler is timed on: the one the webhook injects into the predictor
pod (taken from a dry-run create through it, per ``labelScheme``), and, as the floor of
restricting the pod to those nodes at all, one ``In`` on the harness's template label admitting
exactly the nodes ``cudasched explain`` says can run it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.harness.controlplane.plane import ControlPlane
from tests.harness.fleet import TEMPLATE_LABEL, cudasched_command
from tests.harness.webhook import registered, webhook_process

from benchmarks.controlplane.pods import AUTO, JSON, NS, OURS, SAME, predictor

__all__ = ["compared", "injected_affinity", "same_nodes_affinity"]


def injected_affinity(plane: ControlPlane, work: Path, scheme: str) -> JSON:
    """The node affinity the webhook (``labelScheme: scheme``) writes into the predictor pod,
    from a dry-run create."""
    api = plane.api()
    api.ensure_namespace(NS)
    with (
        webhook_process(
            work / f"webhook-affinity-{scheme}", plane.kubeconfig, config={"labelScheme": scheme}
        ) as hook,
        registered(api, hook.registration()),
    ):
        mutated = api.create(predictor("affinity-probe"), dry_run=True)
    affinity = mutated["spec"].get("affinity")
    if not affinity:
        raise RuntimeError("the webhook injected no affinity into the predictor pod")
    return dict(affinity)


def same_nodes_affinity(plane: ControlPlane, work: Path) -> JSON:
    """One expression admitting exactly the nodes cudasched says can run the predictor pod
    (``explain --live``), over the harness's template label: what restricting the pod to those
    nodes costs the scheduler at the least, without cudasched's compiled terms."""
    path = work / "predictor.yaml"
    path.write_text(json.dumps(predictor("explained")))
    done = subprocess.run(
        [
            *cudasched_command(),
            "explain",
            "--workload",
            str(path),
            "--kubeconfig",
            str(plane.kubeconfig),
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    eligible = {n["node"] for n in json.loads(done.stdout)["nodes"] if n["eligible"]}
    api = plane.api()
    templates = set()
    for node in api.list("/api/v1/nodes"):
        if node["metadata"]["name"] in eligible:
            templates.add(node["metadata"]["labels"][TEMPLATE_LABEL])
    expression = {"key": TEMPLATE_LABEL, "operator": "In", "values": sorted(templates)}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [expression]}]
            }
        }
    }


def compared(plane: ControlPlane, work: Path) -> dict[str, JSON]:
    """Shape -> affinity, for the shapes that carry one: the floor, then the webhook's with the
    default ``labelScheme: auto`` (GFD's keys on the sample fleet) and with ``cudasched``."""
    return {
        SAME: same_nodes_affinity(plane, work),
        AUTO: injected_affinity(plane, work, "auto"),
        OURS: injected_affinity(plane, work, "cudasched"),
    }
