"""cudasched's policy mode on the harness's real API server: the manifests of
``cudasched manifests --mode policy`` applied with strict field validation, and the policy
controller run on the host as ``cudasched policy-controller`` (its Deployment has no kubelet to
run it here), as many replicas as a test wants.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from cudasched.webhook.policy.table import held_placements
from cudasched.workloads.policykey import KEY_VERSION, pod_key
from tests.harness.controlplane.plane import ControlPlane
from tests.harness.controlplane.processes import free_port
from tests.harness.fleet import cudasched_command
from tests.harness.kube import Api
from tests.harness.webhook import manifests

__all__ = [
    "Controller",
    "controller_process",
    "delete_tables",
    "gpu_replica_set",
    "install_policy",
    "table_keys",
    "table_path",
    "template_key",
    "wait_for_keys",
]

JSON = dict[str, Any]
#: Every namespace's tables (a list across namespaces; one table is at :func:`table_path`).
TABLES = "/apis/cudasched.io/v1alpha1/placementtables"
NAMESPACE = "cudasched"


def table_path(namespace: str, name: str) -> str:
    """The URL path of one ``PlacementTable`` (namespaced: one table set per namespace)."""
    return f"/apis/cudasched.io/v1alpha1/namespaces/{namespace}/placementtables/{name}"


def gpu_replica_set(name: str, image: str, namespace: str) -> JSON:
    """A ReplicaSet of no replicas whose template asks one GPU with ``image``: a template is
    enough for the controller to know its pods' key."""
    labels = {"app": name}
    container = {"name": "main", "image": image, "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }


def template_key(controller: JSON) -> str:
    """The key of the pods ``controller``'s template makes, as the API server admits them
    (the ServiceAccount defaulted)."""
    template = controller["spec"]["template"]
    pod = {**template, "spec": {**template["spec"], "serviceAccountName": "default"}}
    key = pod_key(pod, controller["metadata"]["namespace"])
    assert key is not None
    return key


def delete_tables(api: Api) -> None:
    """Delete every namespace's tables."""
    for table in api.list(TABLES):
        meta = table["metadata"]
        api.delete(table_path(meta["namespace"], meta["name"]))


def install_policy(plane: ControlPlane, directory: Path, *args: str) -> list[JSON]:
    """Apply ``cudasched manifests --mode policy --no-agent ARGS`` with ``--validate=strict``
    and scale the controller's Deployment to none (the tests run it on the host). Returns the
    objects applied."""
    objects = manifests("--mode", "policy", "--no-agent", *args)
    path = directory / "policy.yaml"
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(objects))
    plane.kubectl("apply", "--validate=strict", "-f", str(path))
    plane.kubectl(
        "scale", "-n", NAMESPACE, "deployment/cudasched-policy-controller", "--replicas=0"
    )
    return objects


def table_keys(api: Api) -> dict[str, JSON]:
    """Every key the PlacementTables hold, with its placement (``Placement.as_json``)."""
    held = held_placements(api.list(TABLES), KEY_VERSION)
    return {key: placement.as_json() for key, placement in held.items()}


@dataclass
class Controller:
    process: subprocess.Popen[bytes]
    identity: str
    log_file: Path
    #: Where its ``/metrics``, ``/healthz`` and ``/readyz`` answer (``--http-port``).
    port: int

    def get(self, path: str) -> httpx.Response:
        """GET ``path`` of its HTTP endpoint."""
        return httpx.get(f"http://127.0.0.1:{self.port}{path}", timeout=10)

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL: no lease released, as a crashed pod."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)


@contextlib.contextmanager
def controller_process(
    workdir: Path, kubeconfig: Path, identity: str, *, config: JSON | None = None
) -> Iterator[Controller]:
    """``cudasched policy-controller`` for the harness's API server, until the block ends."""
    workdir.mkdir(parents=True, exist_ok=True)
    config_file = workdir / f"{identity}.yaml"
    config_file.write_text(yaml.safe_dump(config or {}))
    log_file = workdir / f"{identity}.log"
    args = [
        *cudasched_command(),
        "policy-controller",
        "--kubeconfig",
        str(kubeconfig),
        "--config",
        str(config_file),
        "--namespace",
        NAMESPACE,
        "--identity",
        identity,
        "--refresh-seconds",
        "2",
        "--http-port",
        str(port := free_port()),
    ]
    with log_file.open("wb") as log:
        process = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    controller = Controller(process, identity, log_file, port)
    try:
        yield controller
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                controller.kill()


def wait_for_keys(
    api: Api, keys: set[str], *, timeout: float = 120.0, controller: Controller | None = None
) -> dict[str, JSON]:
    """Wait until the tables hold every key in ``keys``; returns the table. A timeout quotes
    the end of ``controller``'s log (what it did instead)."""
    limit = time.monotonic() + timeout
    while True:
        held = table_keys(api)
        if keys <= held.keys():
            return held
        if time.monotonic() > limit:
            missing = sorted(keys - held.keys())
            seen = (
                f"\n{controller.identity}'s log ends:\n{controller.log()[-4000:]}"
                if controller
                else ""
            )
            raise TimeoutError(f"{len(missing)} keys never reached the tables: {missing[:3]}{seen}")
        time.sleep(0.5)
