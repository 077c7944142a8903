"""What the real API server does when cudasched's webhook is down or stuck, with the webhook
configuration ``cudasched manifests`` prints (``failurePolicy: Ignore``) and its
``--fail-closed`` variant (``Fail``), and that its ``matchConditions`` keep CPU pods and opted-out
pods away from the webhook even then.

Down: the URL points at a loopback port nothing listens on. Stuck: at a listener that accepts
TCP connections and never answers (the TLS handshake never completes), so the API server waits
out the configuration's ``timeoutSeconds`` (3).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.harness.controlplane.plane import ControlPlane
from tests.harness.controlplane.processes import free_port
from tests.harness.kube import Api, ApiError
from tests.harness.webhook import LiveWebhook, registered, registration
from tests.harness.workloads import gpu_pod

NS = "e2e-failure"
IMAGE = "nvcr.io/nvidia/tritonserver:24.05-py3"


@contextlib.contextmanager
def silent_listener() -> Iterator[int]:
    """A loopback port that accepts connections and never sends a byte."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                conn, _ = server.accept()
                held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(server.getsockname()[1])
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()


@pytest.fixture(scope="module")
def ns(api: Api) -> str:
    api.ensure_namespace(NS)
    return NS


def _create(api: Api, name: str, **kwargs: object) -> dict[str, object]:
    pod = gpu_pod(name, NS, IMAGE, **kwargs)  # type: ignore[arg-type]
    return api.create(pod, dry_run=True)


def _constrained(pod: dict[str, object]) -> bool:
    annotations = pod["metadata"].get("annotations", {})  # type: ignore[union-attr]
    return "cudasched.io/requirement" in annotations


def _config(webhook: LiveWebhook, url: str, *, fail_closed: bool) -> dict[str, object]:
    return registration(
        url,
        webhook.ca_file.read_bytes(),
        name="cudasched-failure-e2e",
        fail_closed=fail_closed,
        only_namespaces=[NS],
    )


def test_webhook_up_constrains_the_pod(api: Api, ns: str, webhook: LiveWebhook) -> None:
    with registered(api, _config(webhook, webhook.url, fail_closed=True)):
        assert _constrained(_create(api, "up"))


def test_webhook_down_ignore_admits_unconstrained(api: Api, ns: str, webhook: LiveWebhook) -> None:
    down = f"https://127.0.0.1:{free_port()}"
    with registered(api, _config(webhook, down, fail_closed=False)):
        pod = _create(api, "down-ignore")
    assert not _constrained(pod)
    assert "affinity" not in pod["spec"]  # type: ignore[operator]


def test_webhook_down_fail_refuses_gpu_pods_only(api: Api, ns: str, webhook: LiveWebhook) -> None:
    down = f"https://127.0.0.1:{free_port()}"
    with registered(api, _config(webhook, down, fail_closed=True)):
        with pytest.raises(ApiError) as refused:
            _create(api, "down-fail")
        # matchConditions: a CPU pod and an opted-out GPU pod never reach the webhook
        cpu = _create(api, "down-fail-cpu", gpus=0)
        skipped = _create(api, "down-fail-skip", annotations={"cudasched.io/skip": "true"})
    assert refused.value.status_code == 500
    assert 'failed calling webhook "pods.cudasched.io"' in refused.value.message
    assert "connection refused" in refused.value.message
    assert not _constrained(cpu) and not _constrained(skipped)


@pytest.mark.parametrize("fail_closed", [False, True], ids=["Ignore", "Fail"])
def test_webhook_stuck_times_out(
    api: Api, ns: str, webhook: LiveWebhook, plane: ControlPlane, fail_closed: bool
) -> None:
    with silent_listener() as port:
        config = _config(webhook, f"https://127.0.0.1:{port}", fail_closed=fail_closed)
        timeout = config["webhooks"][0]["timeoutSeconds"]  # type: ignore[index]
        assert timeout == 3
        with registered(api, config):
            began = time.monotonic()
            try:
                pod = _create(api, f"stuck-{'fail' if fail_closed else 'ignore'}")
                error = None
            except ApiError as exc:
                error = exc
            waited = time.monotonic() - began
    # the API server gave up after the configured timeout, not its own 30 s request timeout
    assert timeout - 0.5 <= waited < timeout + 10, waited
    if fail_closed:
        assert error is not None and error.status_code == 500
        assert "context deadline exceeded" in error.message or "timeout" in error.message.lower()
    else:
        assert error is None and not _constrained(pod)
