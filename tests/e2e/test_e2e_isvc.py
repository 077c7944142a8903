"""InferenceService admission through the real API server: the webhook's warnings reach
``kubectl`` on CREATE and UPDATE, the resolved requirement is recorded on the object, and the
``NoCompatibleNode`` Event it records afterwards is visible with ``kubectl events``.

The objects are the bundled sample cluster's (``nemotron-nano-fp4`` asks CUDA 13.2, which no
driver of the fleet supports), applied by the session's ``sample`` fixture.
"""

from __future__ import annotations

import time

from tests.harness.controlplane.plane import ControlPlane
from tests.harness.kube import Api
from tests.harness.sample import Sample

NOFIT = "cudasched: no node can run CUDA 13.2; newest driver supports 13.0"


def test_create_warning_reaches_kubectl(sample: Sample) -> None:
    stderr = sample.isvc_apply.stderr
    assert f"Warning: {NOFIT}" in stderr, stderr
    # one warning line per no-fit service, none for the services that fit
    assert stderr.count("no node can run") == 1, stderr


def test_requirement_is_recorded_on_the_service(sample: Sample, api: Api) -> None:
    isvc = api.get(
        "/apis/serving.kserve.io/v1beta1/namespaces/team-nlp/inferenceservices/nemotron-nano-fp4"
    )
    annotations = isvc["metadata"]["annotations"]
    assert annotations["cudasched.io/requirement"].startswith("cuda>=13.2")


def test_update_warning_reaches_kubectl(sample: Sample, plane: ControlPlane) -> None:
    updated = plane.kubectl(
        "annotate",
        "isvc/nemotron-nano-fp4",
        "-n",
        "team-nlp",
        f"e2e.cudasched.io/touched={time.time_ns()}",
        "--overwrite",
    )
    assert f"Warning: {NOFIT}" in updated.stderr, updated.stderr
    # a dry run warns as well and records nothing (sideEffects: NoneOnDryRun)
    dry = plane.kubectl(
        "annotate",
        "isvc/nemotron-nano-fp4",
        "-n",
        "team-nlp",
        "e2e.cudasched.io/dry=1",
        "--dry-run=server",
    )
    assert f"Warning: {NOFIT}" in dry.stderr, dry.stderr


def test_no_compatible_node_event_with_kubectl_events(
    sample: Sample, plane: ControlPlane, api: Api
) -> None:
    seen = ""

    def event_listed() -> bool:
        nonlocal seen
        seen = plane.kubectl(
            "events", "-n", "team-nlp", "--for", "inferenceservice/nemotron-nano-fp4"
        ).stdout
        return "NoCompatibleNode" in seen

    api.wait_for("a NoCompatibleNode event", event_listed, timeout=60, interval=1)
    line = next(row for row in seen.splitlines() if "NoCompatibleNode" in row)
    assert "Warning" in line and "13.2" in line, seen
