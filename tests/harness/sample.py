"""cudasched's bundled sample cluster (its runtimes, InferenceServices and pods; the nodes are
the fleet's templates) created in a live control plane through kubectl and the webhook."""

from __future__ import annotations

import contextlib
import copy
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.harness.controlplane.plane import ControlPlane
from tests.harness.fleet import sample_objects
from tests.harness.webhook import LiveWebhook, registered

__all__ = ["SAMPLE_NAMESPACES", "Sample", "clean", "load_sample"]

JSON = dict[str, Any]

#: The sample cluster's namespaces.
SAMPLE_NAMESPACES = ("team-vision", "team-nlp", "ml-batch")


@dataclass
class Sample:
    """What :func:`load_sample` created, and kubectl's answer to the InferenceServices."""

    objects: list[JSON]
    isvc_apply: subprocess.CompletedProcess[str]
    files: Path


def clean(obj: JSON) -> JSON:
    """``obj`` as a person would apply it: no server-set metadata, no status, pods unbound."""
    obj = copy.deepcopy(obj)
    meta = obj["metadata"]
    for key in ("uid", "resourceVersion", "creationTimestamp", "generation", "finalizers"):
        meta.pop(key, None)
    meta.pop("ownerReferences", None)
    obj.pop("status", None)
    if obj["kind"] == "Pod":
        obj["spec"].pop("nodeName", None)
        obj["spec"]["terminationGracePeriodSeconds"] = 0
    return obj


@contextlib.contextmanager
def load_sample(plane: ControlPlane, webhook: LiveWebhook, files: Path) -> Iterator[Sample]:
    """Create the sample's objects with the webhook registered for the sample namespaces,
    kept registered until the block ends."""
    api = plane.api()
    objects = [clean(o) for o in sample_objects() if o["kind"] != "Node"]
    for name in SAMPLE_NAMESPACES:
        api.ensure_namespace(name)
    config = webhook.registration(
        name="cudasched-webhook-sample", only_namespaces=list(SAMPLE_NAMESPACES)
    )
    with registered(api, config):
        runtimes = [o for o in objects if o["kind"].endswith("ServingRuntime")]
        files.joinpath("runtimes.yaml").write_text(yaml.safe_dump_all(runtimes))
        plane.kubectl("apply", "--validate=strict", "-f", str(files / "runtimes.yaml"))
        for plural, kind in (
            ("clusterservingruntimes", "ClusterServingRuntime"),
            ("servingruntimes", "ServingRuntime"),
        ):
            webhook.wait_cached(plural, sum(1 for o in runtimes if o["kind"] == kind))
        isvcs = [o for o in objects if o["kind"] == "InferenceService"]
        files.joinpath("isvcs.yaml").write_text(yaml.safe_dump_all(isvcs))
        isvc_apply = plane.kubectl("apply", "--validate=strict", "-f", str(files / "isvcs.yaml"))
        webhook.wait_cached("inferenceservices", len(isvcs))
        pods = [o for o in objects if o["kind"] == "Pod"]
        files.joinpath("pods.yaml").write_text(yaml.safe_dump_all(pods))
        plane.kubectl("create", "--validate=strict", "-f", str(files / "pods.yaml"))
        yield Sample(objects, isvc_apply, files)
