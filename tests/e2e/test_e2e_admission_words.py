"""What admission says reaches a person whole, through the real API server and kubectl (issue
27, item 4): a warning about an unreadable value keeps what was expected (it was cut at the
120th character, mid-word, exactly there); a misspelt ``cudasched.io/*`` key is named with the
key meant; a GPU pod whose CUDA cannot be told carries ``cudasched.io/requirement: unknown
(why)``, as the README's check of what the webhook recorded expects.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml

from tests.harness.controlplane.plane import ControlPlane
from tests.harness.kube import Api
from tests.harness.webhook import LiveWebhook, registered
from tests.harness.workloads import gpu_pod

NS = "e2e-words"
TRITON = "nvcr.io/nvidia/tritonserver:24.05-py3"


@pytest.fixture(scope="module")
def words(plane: ControlPlane, api: Api, webhook: LiveWebhook) -> Iterator[ControlPlane]:
    """The webhook registered for this module's namespace only."""
    api.ensure_namespace(NS)
    config = webhook.registration(name="cudasched-webhook-words", only_namespaces=[NS])
    with registered(api, config):
        yield plane


def _create(plane: ControlPlane, pod: dict[str, object]) -> str:
    """``kubectl create`` the pod; kubectl's stderr (one ``Warning:`` line per warning)."""
    return plane.kubectl("create", "-f", "-", input=yaml.safe_dump(pod)).stderr


def _warnings(stderr: str) -> list[str]:
    return [line.removeprefix("Warning: ") for line in stderr.splitlines() if "cudasched:" in line]


def test_an_unreadable_value_is_warned_with_what_was_expected(words: ControlPlane) -> None:
    pod = gpu_pod("bad-version", NS, TRITON, annotations={"cudasched.io/cuda-version": "twelve"})
    (warning,) = _warnings(_create(words, pod))
    assert warning == (
        "cudasched: pod not constrained: invalid cudasched.io/cuda-version on pod bad-version: "
        "invalid CUDA version 'twelve': expected MAJOR[.MINOR[.PATCH]] (12, 12.4, 12.4.1), a "
        "wheel tag (cu124) or a code (12040)"
    )


def test_a_misspelt_key_is_named_with_the_key_meant(words: ControlPlane, api: Api) -> None:
    pod = gpu_pod("typo", NS, TRITON, annotations={"cudasched.io/cuda-verison": "12.4"})
    said = _warnings(_create(words, pod))
    assert (
        "cudasched: annotation cudasched.io/cuda-verison is not one cudasched reads; did you "
        "mean cudasched.io/cuda-version?"
    ) in said
    # Still judged by its image, as before.
    stored = api.get(f"/api/v1/namespaces/{NS}/pods/typo")
    assert stored["metadata"]["annotations"]["cudasched.io/requirement"].startswith("cuda>=12.4")


def test_a_gpu_pod_of_unknown_cuda_is_recorded_as_unknown(words: ControlPlane, api: Api) -> None:
    said = _warnings(_create(words, gpu_pod("in-house", NS, "registry.local/team/llm:7")))
    assert said[0] == (
        "cudasched: not constrained, CUDA unknown: image not in the image table: "
        "registry.local/team/llm:7"
    )
    stored = api.get(f"/api/v1/namespaces/{NS}/pods/in-house")
    assert stored["metadata"]["annotations"]["cudasched.io/requirement"] == (
        "unknown (image not in the image table: registry.local/team/llm:7)"
    )
    assert "affinity" not in stored["spec"]  # nothing constrains it
