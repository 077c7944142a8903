"""One control plane in a directory (:class:`ControlPlane`), started as
:class:`tests.harness.controlplane.options.Options` says: its paths and clients, its lifecycle
(start, stop, one component at a time), how each component is started and waited for, and what
it installs (CRDs, the fleet of nodes). Every process runs in its own process group
(:mod:`tests.harness.controlplane.processes`) so that :meth:`ControlPlane.stop` (or ``python -m
tests.harness.controlplane down``) ends it and anything it started. Every address is 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.harness.binaries import Binaries, ensure_built
from tests.harness.controlplane.kubeconfig import kubeconfig_yaml, token_kubeconfig_yaml
from tests.harness.controlplane.options import CONTROLLERS, Options
from tests.harness.controlplane.processes import (
    Process,
    StartError,
    free_port,
    harness_module,
    log_tail,
    stop_group,
)
from tests.harness.controlplane.state import STATE_FILE
from tests.harness.crds import all_crds
from tests.harness.fleet import FLEET_LABEL, fleet
from tests.harness.kube import Api, ApiError, Credentials
from tests.harness.pki import Pki, write_pki

__all__ = ["ControlPlane", "running"]

Progress = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _minor_args(version: str) -> list[str]:
    """Flags one minor needs and another refuses. From 1.37 the endpoint reconciler refuses a
    loopback advertise address ("may not be in the loopback range"), which is all the harness
    has: no reconciler then (the ``kubernetes`` Service gets no endpoints; nothing here runs
    in the cluster to use them)."""
    match = re.match(r"v?1\.(\d+)", version)
    minor = int(match.group(1)) if match else 0
    return ["--endpoint-reconciler-type=none"] if minor >= 37 else []


@dataclass
class ControlPlane:
    """One control plane in ``directory`` (certificates, etcd data, kubeconfigs, logs)."""

    directory: Path
    options: Options = field(default_factory=Options)
    binaries: Binaries | None = None
    progress: Progress = _stderr
    ports: dict[str, int] = field(default_factory=dict)
    processes: dict[str, Process] = field(default_factory=dict)
    _api: Api | None = field(default=None, init=False, repr=False)
    _first_node: str = field(default="", init=False, repr=False)

    # -- paths ----------------------------------------------------------------------------
    @property
    def pki(self) -> Pki:
        return Pki(self.directory / "pki")

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def logs(self) -> Path:
        return self.directory / "logs"

    def credentials(self) -> Credentials:
        pki = self.pki
        return Credentials(self.server, pki.ca_cert, pki.cert("admin"), pki.key("admin"))

    def service_account_kubeconfig(self, namespace: str, account: str, path: Path) -> Path:
        """A kubeconfig at ``path`` that acts as ServiceAccount ``namespace/account`` (a token
        from the TokenRequest API, valid an hour): what its Pod would be allowed, no more."""
        issued = self.api().call(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
            body={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 3600},
            },
        )
        token = issued["status"]["token"]
        path.write_text(token_kubeconfig_yaml(self.server, self.pki, account, token))
        return path

    def api(self) -> Api:
        """The admin's client (``system:masters``), shared."""
        if self._api is None:
            self._api = Api(self.credentials())
        return self._api

    def env(self) -> dict[str, str]:
        """Environment for commands that should talk to this control plane: KUBECONFIG, and
        kubectl of the pinned version first on PATH."""
        assert self.binaries is not None
        path = os.pathsep.join([str(self.binaries.directory), os.environ.get("PATH", "")])
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PATH": path}

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run the pinned kubectl against this control plane."""
        assert self.binaries is not None
        done = subprocess.run(
            [str(self.binaries.kubectl), *args],
            input=input,
            capture_output=True,
            text=True,
            env=self.env(),
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} exited {done.returncode}:\n{done.stderr}{done.stdout}"
            )
        return done

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        """Build if needed, then start every component, install the CRDs and the fleet."""
        began = time.monotonic()
        if self.binaries is None:
            self.binaries = ensure_built(progress=self.progress, minor=self.options.kubernetes)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        write_pki(self.pki.directory)
        for name in ("etcd", "etcd-peer", "apiserver", "scheduler", "controller-manager"):
            self.ports[name] = free_port()
        self.kubeconfig.write_text(kubeconfig_yaml(self.server, self.pki, "admin"))
        for user in ("scheduler", "controller-manager"):
            self.directory.joinpath(f"{user}.kubeconfig").write_text(
                kubeconfig_yaml(self.server, self.pki, user)
            )
        try:
            self._start_etcd()
            self._start_apiserver()
            self._write_state()
            if self.options.crds:
                self.install_crds()
            if self.options.controller_manager:
                self._start_controller_manager()
            if self.options.scheduler:
                self._start_scheduler()
            if self.options.nodes:
                self.add_nodes(self.options.nodes)
            if self.options.keep_nodes_ready and self.options.nodes:
                self._start_keeper()
            if self.options.controller_manager:
                self._wait_default_serviceaccount()
        except BaseException:
            self.stop()
            raise
        self._write_state()
        self.progress(
            f"controlplane: kubernetes {self.binaries.kubernetes} up at {self.server} in "
            f"{time.monotonic() - began:.1f}s ({self.options.nodes} nodes)"
        )

    def stop(self) -> None:
        """End every process group this control plane started; idempotent."""
        if self._api is not None:
            self._api.close()
            self._api = None
        for name in reversed(list(self.processes)):
            proc = self.processes.pop(name)
            stop_group(proc.pid, grace=10.0 if name != "etcd" else 15.0)
            if proc.popen is not None:
                with contextlib.suppress(Exception):
                    proc.popen.wait(timeout=1)
        state = self.directory / STATE_FILE
        if state.exists():
            data = json.loads(state.read_text())
            data["processes"] = {}
            state.write_text(json.dumps(data, indent=2))

    def stop_component(self, name: str) -> None:
        """Stop one process (``kube-scheduler``...), e.g. to start it again on a full queue."""
        proc = self.processes.pop(name, None)
        if proc is not None:
            stop_group(proc.pid)
            if proc.popen is not None:
                with contextlib.suppress(Exception):
                    proc.popen.wait(timeout=1)
        self._write_state()

    def start_scheduler(self) -> None:
        """Start kube-scheduler (again); ready when its /healthz answers."""
        if "kube-scheduler" not in self.processes:
            self._start_scheduler()
            self._write_state()

    def scheduler_metrics(self) -> str:
        """kube-scheduler's Prometheus metrics, read as the admin (``system:masters``)."""
        url = f"https://127.0.0.1:{self.ports['scheduler']}/metrics"
        response = httpx.get(url, verify=self.credentials().tls(), timeout=30)
        response.raise_for_status()
        return response.text

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    # -- components -----------------------------------------------------------------------
    def _spawn(self, name: str, args: Sequence[str], env: dict[str, str] | None = None) -> Process:
        log = self.logs / f"{name}.log"
        with log.open("ab") as out:
            popen = subprocess.Popen(
                list(args),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.directory,
                env=env,
                start_new_session=True,  # its own process group: stop_group ends it all
            )
        proc = Process(name, popen, popen.pid, log)
        self.processes[name] = proc
        return proc

    def _wait(self, proc: Process, what: str, check: Callable[[], bool]) -> None:
        limit = time.monotonic() + self.options.startup_timeout
        while True:
            if proc.popen is not None and proc.popen.poll() is not None:
                raise StartError(
                    f"{proc.name} exited {proc.popen.returncode} before {what}; "
                    f"its log ({proc.log}):\n{log_tail(proc.log)}"
                )
            with contextlib.suppress(httpx.HTTPError, OSError):
                if check():
                    return
            if time.monotonic() > limit:
                raise StartError(
                    f"{proc.name}: no {what} after {self.options.startup_timeout:.0f}s; "
                    f"its log ({proc.log}):\n{log_tail(proc.log)}"
                )
            time.sleep(0.2)

    def _get_ok(self, url: str, *, client_cert: str | None = "admin") -> bool:
        pki = self.pki
        key = (pki.cert(client_cert), pki.key(client_cert)) if client_cert else (None, None)
        tls = Credentials(url, pki.ca_cert, *key).tls()
        response = httpx.get(url, verify=tls, timeout=5)
        return response.status_code == 200

    def _start_etcd(self) -> None:
        assert self.binaries is not None
        pki = self.pki
        client = f"https://127.0.0.1:{self.ports['etcd']}"
        peer = f"http://127.0.0.1:{self.ports['etcd-peer']}"
        self.progress(f"controlplane: starting etcd {self.binaries.etcd} at {client}")
        proc = self._spawn(
            "etcd",
            [
                str(self.binaries.path("etcd")),
                "--name=e2e",
                f"--data-dir={self.directory / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=e2e={peer}",
                f"--cert-file={pki.cert('etcd-server')}",
                f"--key-file={pki.key('etcd-server')}",
                f"--trusted-ca-file={pki.ca_cert}",
                "--client-cert-auth=true",
                "--unsafe-no-fsync=true",  # throwaway data: no fsync on a slow CI disk
                "--quota-backend-bytes=4294967296",
                "--log-level=warn",
            ],
        )
        self._wait(
            proc,
            "healthy /health",
            lambda: self._get_ok(f"{client}/health", client_cert="apiserver-etcd-client"),
        )

    def _start_apiserver(self) -> None:
        assert self.binaries is not None
        pki = self.pki
        self.progress(
            f"controlplane: starting kube-apiserver {self.binaries.kubernetes} at {self.server}"
        )
        proc = self._spawn(
            "kube-apiserver",
            [
                str(self.binaries.path("kube-apiserver")),
                f"--etcd-servers=https://127.0.0.1:{self.ports['etcd']}",
                f"--etcd-cafile={pki.ca_cert}",
                f"--etcd-certfile={pki.cert('apiserver-etcd-client')}",
                f"--etcd-keyfile={pki.key('apiserver-etcd-client')}",
                f"--etcd-compaction-interval={self.options.compaction_interval}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.ports['apiserver']}",
                f"--tls-cert-file={pki.cert('apiserver')}",
                f"--tls-private-key-file={pki.key('apiserver')}",
                f"--client-ca-file={pki.ca_cert}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--authorization-mode=Node,RBAC",
                # kubeadm's choice: the default plugins (NamespaceLifecycle, LimitRanger,
                # ServiceAccount, ..., MutatingAdmissionWebhook, ValidatingAdmissionPolicy,
                # ValidatingAdmissionWebhook, ResourceQuota; from 1.36 on also
                # MutatingAdmissionPolicy, GA and on by default, ahead of the webhooks) plus
                # NodeRestriction. The same flags serve every minor the harness pins.
                "--enable-admission-plugins=NodeRestriction",
                "--allow-privileged=true",
                "--profiling=false",
                "--v=1",
                *_minor_args(self.binaries.kubernetes),
                *self.options.apiserver_args,
            ],
        )
        self._wait(proc, "ready /readyz", lambda: self._get_ok(f"{self.server}/readyz"))

    def _start_scheduler(self) -> None:
        assert self.binaries is not None
        kubeconfig = self.directory / "scheduler.kubeconfig"
        config = self.directory / "scheduler-config.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {
                        "kubeconfig": str(kubeconfig),
                        "qps": self.options.scheduler_qps,
                        "burst": self.options.scheduler_qps,
                    },
                    "leaderElection": {"leaderElect": False},
                }
            )
        )
        port = self.ports["scheduler"]
        self.progress("controlplane: starting kube-scheduler")
        proc = self._spawn(
            "kube-scheduler",
            [
                str(self.binaries.path("kube-scheduler")),
                f"--config={config}",
                *self._secure_serving(kubeconfig, port),
                "--v=1",
            ],
        )
        self._wait(
            proc, "healthy /healthz", lambda: self._get_ok(f"https://127.0.0.1:{port}/healthz")
        )

    def _secure_serving(self, kubeconfig: Path, port: int) -> list[str]:
        """The flags kube-scheduler and kube-controller-manager share: delegated authn/authz
        through ``kubeconfig`` and HTTPS on 127.0.0.1:``port`` with the API server's
        certificate."""
        pki = self.pki
        return [
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--tls-cert-file={pki.cert('apiserver')}",
            f"--tls-private-key-file={pki.key('apiserver')}",
            f"--client-ca-file={pki.ca_cert}",
        ]

    def _start_controller_manager(self) -> None:
        assert self.binaries is not None
        pki = self.pki
        kubeconfig = self.directory / "controller-manager.kubeconfig"
        port = self.ports["controller-manager"]
        controllers = list(CONTROLLERS)
        if self.options.keep_nodes_ready:
            controllers.append("node-lifecycle-controller")
        self.progress("controlplane: starting kube-controller-manager")
        proc = self._spawn(
            "kube-controller-manager",
            [
                str(self.binaries.path("kube-controller-manager")),
                f"--kubeconfig={kubeconfig}",
                *self._secure_serving(kubeconfig, port),
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki.sa_key}",
                f"--root-ca-file={pki.ca_cert}",
                f"--controllers={','.join(controllers)}",
                "--v=1",
            ],
        )
        self._wait(
            proc, "healthy /healthz", lambda: self._get_ok(f"https://127.0.0.1:{port}/healthz")
        )

    def _start_keeper(self) -> None:
        self.progress("controlplane: starting the node keeper (Leases, Ready heartbeats)")
        command, env = harness_module("tests.harness.nodekeeper", str(self.directory))
        proc = self._spawn("nodekeeper", command, env)
        api = self.api()
        self._wait(
            proc,
            "node Leases",
            lambda: api.exists(
                f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self._first_node}"
            ),
        )

    def _wait_default_serviceaccount(self) -> None:
        api = self.api()
        api.wait_for(
            "the default ServiceAccount (kube-controller-manager's serviceaccount controller)",
            lambda: api.exists("/api/v1/namespaces/default/serviceaccounts/default"),
            timeout=self.options.startup_timeout,
        )

    # -- content --------------------------------------------------------------------------
    def install_crds(self) -> None:
        """Create the KServe, GPU Operator and PolicyReport CRDs and wait until they are served."""
        api = self.api()
        for crd in all_crds():
            try:
                api.create(crd)
            except ApiError as exc:
                if exc.status_code != 409:
                    raise
        for crd in all_crds():
            name = crd["metadata"]["name"]
            path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"

            def established(path: str = path) -> bool:
                conditions = (api.get(path).get("status") or {}).get("conditions") or []
                return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

            api.wait_for(f"CRD {name} Established", established, timeout=60)

    def add_nodes(self, count: int, *, fleet_name: str = "e2e", workers: int = 8) -> list[str]:
        """Create ``count`` nodes from the sample cluster's label sets; their names."""
        from concurrent.futures import ThreadPoolExecutor

        nodes = fleet(count, fleet_name=fleet_name)
        api = self.api()

        def create(node: dict[str, Any]) -> None:
            created = api.create(node)
            if self.options.keep_nodes_ready:
                return
            # The TaintNodesByCondition admission plugin taints every new node
            # node.kubernetes.io/not-ready:NoSchedule; the node lifecycle controller lifts it
            # once the node reports Ready. Without that controller (and the keeper), lift it
            # here, as the controller would.
            taints = created.get("spec", {}).get("taints") or []
            kept = [t for t in taints if t.get("key") != "node.kubernetes.io/not-ready"]
            if kept != taints:
                api.patch(
                    f"/api/v1/nodes/{node['metadata']['name']}", {"spec": {"taints": kept or None}}
                )

        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(create, nodes))
        names = [n["metadata"]["name"] for n in nodes]
        if names and not self._first_node:
            self._first_node = names[0]
        self.progress(f"controlplane: {count} nodes created (label {FLEET_LABEL}={fleet_name})")
        return names

    def _write_state(self) -> None:
        assert self.binaries is not None
        state = {
            "directory": str(self.directory),
            "server": self.server if "apiserver" in self.ports else None,
            "kubeconfig": str(self.kubeconfig),
            "kubernetes": self.binaries.kubernetes,
            "etcd": self.binaries.etcd,
            "bin": str(self.binaries.directory),
            "ports": self.ports,
            "processes": {name: p.pid for name, p in self.processes.items()},
            "python": sys.executable,
        }
        (self.directory / STATE_FILE).write_text(json.dumps(state, indent=2))


@contextlib.contextmanager
def running(directory: Path, options: Options | None = None) -> Iterator[ControlPlane]:
    plane = ControlPlane(directory, options or Options())
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()
