"""End-to-end tests on Kubernetes 1.37 (``go.mod`` beside this file pins v1.37.2): what needs a
newer API server than the webhook's tests, first the policy mode (MutatingAdmissionPolicy v1,
GA since 1.36). Every fixture the parent package's tests use is given again here for 1.37, so
no control plane, webhook or binaries of the default minor are shared with this package (a
package-scoped fixture of the parent would otherwise be cached with whichever plane asked
first).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.harness.binaries import Binaries
from tests.harness.controlplane.plane import ControlPlane
from tests.harness.kube import Api
from tests.harness.session import built_or_skip, running_plane
from tests.harness.webhook import LiveWebhook, webhook_process

#: The minor this package runs on.
MINOR = "1.37"


@pytest.fixture(scope="package")
def binaries() -> Binaries:
    return built_or_skip(MINOR)


@pytest.fixture(scope="package")
def plane(binaries: Binaries, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with running_plane(binaries, tmp_path_factory.mktemp("controlplane137")) as control:
        yield control


@pytest.fixture(scope="package")
def api(plane: ControlPlane) -> Api:
    return plane.api()


@pytest.fixture(scope="package")
def webhook(plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveWebhook]:
    """cudasched's webhook on the host, watching the 1.37 API server (not yet registered)."""
    with webhook_process(tmp_path_factory.mktemp("webhook137"), plane.kubeconfig) as hook:
        yield hook
