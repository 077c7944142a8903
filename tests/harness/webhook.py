"""cudasched's admission webhook on the host, registered with the harness's real API server.

The webhook runs as its own process, exactly as deployed but outside the cluster:
``cudasched webhook --kubeconfig K --self-signed --host 127.0.0.1 --port P`` (it watches the
API server for nodes and serving runtimes as it does in a pod). The API server reaches it through
a URL client config: the MutatingWebhookConfiguration is the one ``cudasched manifests`` prints
(rules, ``matchConditions`` CEL, failure policy, timeout, reinvocation, namespace selector), with
each webhook's ``clientConfig.service`` replaced by ``url: https://127.0.0.1:P/<its path>`` and
the self-signed CA as ``caBundle``. (An Endpoint to loopback is refused by the API server's own
validation, and a Service needs kube-proxy; a URL is what ``clientConfig`` offers for this.)

:func:`webhook_process` is also the one way the unit tests start the real command (load and
attack tests in ``tests/webhook``, through ``tests/support/webhook_process``, where it serves a
cluster file (``--cluster``) instead of watching an API server; fault tests, where it watches a
mock API server and serves configured certificates they rotate).
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import signal
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.harness.controlplane.processes import free_port
from tests.harness.fleet import cudasched_command
from tests.harness.kube import Api

__all__ = ["LiveWebhook", "manifests", "registered", "registration", "webhook_process"]

_CONFIGS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"

JSON = dict[str, Any]


def manifests(*args: str) -> list[JSON]:
    """The objects ``cudasched manifests ARGS`` prints."""
    done = subprocess.run(
        [*cudasched_command(), "manifests", *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"cudasched manifests {' '.join(args)}: {done.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def registration(
    base_url: str,
    ca_pem: bytes,
    *,
    name: str = "cudasched-webhook-e2e",
    fail_closed: bool = False,
    only_namespaces: list[str] | None = None,
    timeout_seconds: int | None = None,
    beside_policy: bool = False,
    dra: str | None = None,
) -> JSON:
    """The MutatingWebhookConfiguration of ``cudasched manifests`` pointed at ``base_url``.

    ``only_namespaces`` narrows every webhook to those namespaces (tests isolate their
    registrations this way); ``timeout_seconds`` overrides the manifests' timeout;
    ``beside_policy`` takes the one ``--mode both`` prints (pods the policy placed skipped);
    ``dra`` the one ``--dra MODE`` prints (ResourceClaims made for pods sent too).
    """
    args = ["--self-signed", "--no-agent"] + (["--fail-closed"] if fail_closed else [])
    args += ["--mode", "both"] if beside_policy else []
    args += ["--dra", dra] if dra else []
    found = [o for o in manifests(*args) if o["kind"] == "MutatingWebhookConfiguration"]
    if len(found) != 1:
        raise RuntimeError(f"cudasched manifests printed {len(found)} webhook configurations")
    config = found[0]
    config["metadata"] = {"name": name, "labels": config["metadata"].get("labels", {})}
    bundle = base64.b64encode(ca_pem).decode()
    for hook in config["webhooks"]:
        service = hook["clientConfig"]["service"]
        hook["clientConfig"] = {"url": f"{base_url}{service.get('path', '/')}", "caBundle": bundle}
        if only_namespaces is not None:
            hook["namespaceSelector"] = {
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "In",
                        "values": list(only_namespaces),
                    }
                ]
            }
        if timeout_seconds is not None:
            hook["timeoutSeconds"] = timeout_seconds
    return config


@dataclass
class LiveWebhook:
    process: subprocess.Popen[bytes]
    port: int
    ca_file: Path
    log_file: Path

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")

    def rss_bytes(self) -> int:
        """The process's resident set size now (Linux ``/proc``)."""
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        match = re.search(r"^VmRSS:\s+(\d+) kB$", status, re.MULTILINE)
        if match is None:
            raise RuntimeError(f"no VmRSS line in /proc/{self.process.pid}/status")
        return int(match.group(1)) * 1024

    def tls(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def metrics(self) -> str:
        return httpx.get(self.url + "/metrics", verify=self.tls(), timeout=10).text

    def cached(self, plural: str) -> int:
        """How many objects of a kind (``clusterservingruntimes``) the webhook's cache holds."""
        pattern = rf'^cudasched_cache_objects\{{kind="{re.escape(plural)}"\}} (\S+)$'
        match = re.search(pattern, self.metrics(), re.MULTILINE)
        return int(float(match.group(1))) if match else -1

    def wait_cached(self, plural: str, count: int, *, timeout: float = 30.0) -> None:
        """Wait until the cache holds ``count`` objects of a kind and has published a decision
        state with them (debounced 50 ms)."""
        limit = time.monotonic() + timeout
        while self.cached(plural) < count:
            if time.monotonic() > limit:
                raise TimeoutError(
                    f"the webhook's cache holds {self.cached(plural)} {plural}, not {count}"
                )
            time.sleep(0.1)
        time.sleep(0.3)

    def registration(self, **kwargs: Any) -> JSON:
        return registration(self.url, self.ca_file.read_bytes(), **kwargs)


@contextlib.contextmanager
def webhook_process(
    workdir: Path,
    kubeconfig: Path | None = None,
    *,
    cluster: Path | None = None,
    config: JSON | None = None,
    port: int | None = None,
    startup_timeout: float = 90.0,
    ca_file: Path | None = None,
    log_level: str = "warning",
) -> Iterator[LiveWebhook]:
    """Run ``cudasched webhook`` until the block ends (SIGTERM, then SIGKILL after 30 s); ready
    when ``/readyz`` answers 200 (caches synced). It watches the API server of
    ``kubeconfig``, or serves the ``cluster`` file.

    It serves a self-signed certificate written to ``workdir/tls``, or, when ``config`` names
    ``server.certFile`` and ``server.keyFile`` (configured certificates, e.g. a Secret volume
    a test rotates), those, verified against ``ca_file`` (the CA bundle clients trust).
    ``log_level``: ``debug`` logs one line per decision."""
    if (kubeconfig is None) == (cluster is None):
        raise ValueError(
            "webhook_process: give a kubeconfig (a live API server) or a cluster file, not "
            f"{'both' if kubeconfig else 'neither'}"
        )
    server = (config or {}).get("server") or {}
    configured = bool(server.get("certFile") or server.get("keyFile"))
    if configured != (ca_file is not None):
        raise ValueError(
            "webhook_process: a ca_file goes with server.certFile and server.keyFile in the "
            f"config (got ca_file={ca_file}, certFile={server.get('certFile')}, "
            f"keyFile={server.get('keyFile')})"
        )
    source = ["--kubeconfig", str(kubeconfig)] if kubeconfig else ["--cluster", str(cluster)]
    workdir.mkdir(parents=True, exist_ok=True)
    tls_dir = workdir / "tls"
    tls: list[str] = []
    if ca_file is None:
        tls_dir.mkdir(exist_ok=True)
        tls = ["--self-signed", "--tls-dir", str(tls_dir)]
    config_file = workdir / "webhook.yaml"
    config_file.write_text(yaml.safe_dump(config or {}))
    port = port or free_port()
    log_file = workdir / "webhook.log"
    args = [
        *cudasched_command(),
        "webhook",
        *source,
        "--config",
        str(config_file),
        *tls,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        log_level,
    ]
    with log_file.open("wb") as log:
        process = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    hook = LiveWebhook(process, port, ca_file or tls_dir / "ca.crt", log_file)
    try:
        limit = time.monotonic() + startup_timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"cudasched webhook exited {process.returncode}:\n{hook.log()}")
            if hook.ca_file.exists():
                with contextlib.suppress(httpx.HTTPError):
                    ready = httpx.get(hook.url + "/readyz", verify=hook.tls(), timeout=2)
                    if ready.status_code == 200:
                        break
            if time.monotonic() > limit:
                raise RuntimeError(
                    f"cudasched webhook not ready after {startup_timeout}s:\n{hook.log()}"
                )
            time.sleep(0.1)
        yield hook
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)


@contextlib.contextmanager
def registered(api: Api, config: JSON, *, settle: float = 1.5) -> Iterator[None]:
    """A MutatingWebhookConfiguration for the duration of the block (replacing one of the same
    name). The API server picks configurations up through an informer: ``settle`` seconds is
    ample on loopback."""
    name = config["metadata"]["name"]
    api.delete(f"{_CONFIGS}/{name}")
    api.create(config)
    time.sleep(settle)
    try:
        yield
    finally:
        api.delete(f"{_CONFIGS}/{name}")
        time.sleep(0.5)
