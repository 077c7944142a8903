"""End-to-end tests against a real control plane (etcd, kube-apiserver, kube-scheduler,
kube-controller-manager built from source at the versions ``go.mod`` beside this file pins).

Every test here is marked ``e2e`` (``pytest -m 'not e2e'`` leaves them out). The control plane
and cudasched's webhook are started once for the package (and stopped when its last test
ends, so nothing runs behind the rest of the suite). Without a Go toolchain (and no binaries
cached from an earlier build) the tests skip with one line, except under CI (``$CI`` set),
where they fail: CI must run them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.binaries import Binaries
from tests.harness.controlplane.plane import ControlPlane
from tests.harness.kube import Api
from tests.harness.sample import Sample, load_sample
from tests.harness.session import built_or_skip, running_plane
from tests.harness.webhook import LiveWebhook, webhook_process

E2E_DIR = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if E2E_DIR in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def binaries() -> Binaries:
    """The default minor's binaries (``tests/e2e/go.mod``); ``tests/e2e/k8s137`` asks 1.37's."""
    return built_or_skip()


@pytest.fixture(scope="package")
def plane(binaries: Binaries, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with running_plane(binaries, tmp_path_factory.mktemp("controlplane")) as control:
        yield control


@pytest.fixture(scope="package")
def api(plane: ControlPlane) -> Api:
    return plane.api()


@pytest.fixture(scope="package")
def webhook(plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveWebhook]:
    """cudasched's webhook on the host, watching the real API server (not yet registered)."""
    with webhook_process(
        tmp_path_factory.mktemp("webhook"),
        plane.kubeconfig,
        config={"events": {"noCompatibleNode": True, "perObjectIntervalSeconds": 1}},
    ) as hook:
        yield hook


@pytest.fixture(scope="package")
def sample(
    plane: ControlPlane, api: Api, webhook: LiveWebhook, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Sample]:
    """The sample cluster's runtimes, InferenceServices and pods, applied with kubectl while
    the webhook is registered (for the sample namespaces only, for the whole package)."""
    with load_sample(plane, webhook, tmp_path_factory.mktemp("sample")) as loaded:
        yield loaded
