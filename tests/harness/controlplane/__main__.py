"""``python -m tests.harness.controlplane up|down|env|status|build|webhook``: a real control
plane for a person, in one command.

``up`` builds the pinned binaries if the cache lacks them (minutes, once), starts etcd,
kube-apiserver, kube-controller-manager and kube-scheduler on 127.0.0.1, installs the KServe,
GPU Operator and PolicyReport CRDs and 60 GPU nodes from real GFD label sets, and leaves it all
running in the background, printing how to use it with the interpreter the person ran
(``.venv/bin/python``); ``env`` prints the two exports that point kubectl (the pinned one) at
it; ``webhook`` runs cudasched's webhook on the host, registered with it, until Ctrl-C (with
``--config FILE``, the webhook's settings file, and ``--log-level debug``, one line per
decision); ``status`` says whether it runs and whether the webhook does; ``down`` stops it
all, the webhook first.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from tests.harness.binaries import BuildError, cache_root, ensure_built
from tests.harness.controlplane.options import Options
from tests.harness.controlplane.plane import ControlPlane
from tests.harness.controlplane.processes import StartError, pid_alive
from tests.harness.controlplane.state import read_state, record_helper, stop_directory
from tests.harness.kube import ApiError


def _default_dir() -> Path:
    return cache_root() / "run"


def _python() -> str:
    """How a person runs this interpreter from where they are: ``.venv/bin/python`` from the
    checkout (the `python` on ``PATH`` may not have the harness's packages), else its path."""
    exe = Path(sys.executable)
    try:
        return str(exe.relative_to(Path.cwd()))
    except ValueError:
        return str(exe)


def _webhook_pid(state: dict[str, Any]) -> int | None:
    """The webhook helper's pid when it runs (``webhook`` records it; ``down`` ends it)."""
    pid = (state.get("helpers") or {}).get("webhook")
    return int(pid) if pid is not None and pid_alive(int(pid)) else None


def _exports(state: dict[str, object]) -> str:
    return f"export KUBECONFIG={state['kubeconfig']}\nexport PATH={state['bin']}:$PATH"


def _alive(directory: Path) -> dict[str, Any] | None:
    try:
        state = read_state(directory)
    except FileNotFoundError:
        return None
    processes = state.get("processes") or {}
    assert isinstance(processes, dict)
    if processes and all(pid_alive(int(pid)) for pid in processes.values()):
        return state
    return None


def _webhook(
    directory: Path, *, fail_closed: bool, config: Path | None = None, log_level: str = "warning"
) -> int:
    """Run the webhook in the foreground, registered as ``cudasched manifests`` prints it,
    with the settings file ``config`` (deny modes, overrides) when given."""
    import signal
    import time

    from tests.harness.webhook import registered, webhook_process

    state = _alive(directory)
    if state is None:
        raise FileNotFoundError(f"no running control plane in {directory}: run `up` first")
    settings = _settings(config) if config is not None else None
    plane = ControlPlane(directory)
    plane.ports = dict(state["ports"])
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    record_helper(directory, "webhook", os.getpid())  # `down` ends it first
    try:
        with (
            webhook_process(
                directory / "webhook",
                Path(str(state["kubeconfig"])),
                config=settings,
                log_level=log_level,
            ) as hook,
            registered(plane.api(), hook.registration(fail_closed=fail_closed)),
        ):
            print(
                f"cudasched webhook at {hook.url}, registered as MutatingWebhookConfiguration "
                f"cudasched-webhook-e2e; log {hook.log_file}; Ctrl-C (or `down`) stops and "
                "unregisters it",
                file=sys.stderr,
                flush=True,
            )
            try:
                while not stop[0] and hook.process.poll() is None:
                    time.sleep(0.5)
            except KeyboardInterrupt:
                pass
    finally:
        record_helper(directory, "webhook", None)
    return 0


def _settings(path: Path) -> dict[str, Any]:
    """The webhook settings file ``path`` (YAML), read here so a bad one fails before start."""
    import yaml

    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise FileNotFoundError(f"{path}: not YAML: {exc}") from None
    if not isinstance(loaded, dict):
        raise FileNotFoundError(f"{path}: expected a mapping of webhook settings")
    return loaded


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.harness.controlplane",
        description="A real Kubernetes control plane on loopback for cudasched's end-to-end tests.",
    )
    parser.add_argument(
        "--dir", type=Path, default=None, help="state directory (default: %(default)s)"
    )
    parser.add_argument(
        "--kubernetes",
        metavar="MINOR",
        default=None,
        help="the Kubernetes minor to build or start, e.g. 1.37 (default: "
        "$CUDASCHED_KUBERNETES, else the minor of tests/e2e/go.mod)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="build if needed, start, print how to use it")
    up.add_argument("--nodes", type=int, default=60, help="fake GPU nodes (default 60)")
    up.add_argument(
        "--no-crds", action="store_true", help="do not install the KServe/GPU Operator CRDs"
    )
    down = sub.add_parser("down", help="stop it")
    down.add_argument("--purge", action="store_true", help="also delete the state directory")
    sub.add_parser("env", help='print the exports for kubectl (eval "$(... env)")')
    hook = sub.add_parser(
        "webhook",
        help="run cudasched's webhook on the host, registered with the running control plane "
        "as `cudasched manifests` prints it, until Ctrl-C, SIGTERM or `down`",
    )
    hook.add_argument(
        "--fail-closed",
        action="store_true",
        help="register it with failurePolicy: Fail (the manifests' --fail-closed)",
    )
    hook.add_argument(
        "--config",
        type=Path,
        default=None,
        help="the webhook's settings file (cudasched webhook --config: onNoFit, overrides...)",
    )
    hook.add_argument(
        "--log-level",
        default="warning",
        choices=["debug", "info", "warning", "error"],
        help="the webhook's log level (debug: one line per decision; default %(default)s)",
    )
    sub.add_parser("status", help="say whether it runs, and whether the webhook does")
    build = sub.add_parser("build", help="only build the binaries (cached)")
    build.add_argument("--force", action="store_true", help="rebuild even when cached")
    args = parser.parse_args(argv)
    directory: Path = args.dir or _default_dir()

    try:
        if args.command == "build":
            binaries = ensure_built(force=args.force, minor=args.kubernetes)
            print(f"{binaries.directory} (kubernetes {binaries.kubernetes}, etcd {binaries.etcd})")
            return 0
        if args.command == "up":
            running = _alive(directory)
            if running:
                print(f"already running at {running['server']} ({directory}):", file=sys.stderr)
                print(_exports(running))
                return 0
            if directory.exists():
                if (directory / "state.json").exists():
                    stop_directory(directory)
                shutil.rmtree(directory)
            options = Options(nodes=args.nodes, crds=not args.no_crds, kubernetes=args.kubernetes)
            plane = ControlPlane(directory, options)
            plane.start()
            state = read_state(directory)
            python = _python()
            print(
                f"control plane up: kubernetes {state['kubernetes']}, etcd {state['etcd']}, "
                f"{args.nodes} nodes; logs in {directory / 'logs'}\n"
                f'use it:\n  eval "$({python} -m tests.harness.controlplane env)"\n'
                f"  kubectl get nodes -L nvidia.com/gpu.product,cudasched.io/cuda.version\n"
                f"stop it: {python} -m tests.harness.controlplane down",
                file=sys.stderr,
            )
            print(_exports(state))
            return 0
        if args.command == "down":
            if (directory / "state.json").exists():
                stopped = stop_directory(directory)
                print(f"stopped: {', '.join(stopped) or 'nothing was running'}", file=sys.stderr)
            else:
                print(f"no control plane in {directory}", file=sys.stderr)
            if args.purge and directory.exists():
                shutil.rmtree(directory)
            return 0
        if args.command == "webhook":
            return _webhook(
                directory,
                fail_closed=args.fail_closed,
                config=args.config,
                log_level=args.log_level,
            )
        if args.command == "env":
            state = read_state(directory)
            print(_exports(state))
            return 0
        if args.command == "status":
            running = _alive(directory)
            if running:
                print(f"running at {running['server']}: {', '.join(running['processes'])}")
                pid = _webhook_pid(running)
                print(
                    f"webhook: running (pid {pid})"
                    if pid is not None
                    else f"webhook: not running ({_python()} -m tests.harness.controlplane webhook)"
                )
                return 0
            print(f"not running ({directory})")
            return 1
    except (BuildError, StartError, ApiError, TimeoutError, FileNotFoundError) as exc:
        print(f"tests.harness.controlplane: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
