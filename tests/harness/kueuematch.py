"""Kueue's own flavor assigner as a program (``tests/e2e/kueuematch``, its own Go module at the
Kueue release it pins), built once into a cache keyed by its sources and the Go version, and
asked which ResourceFlavors it admits workloads to.

A separate module from the control plane's (``tests/e2e/go.mod``): Kueue requires its own
Kubernetes libraries, which must not move the pins the control plane is built at. The binary
goes to ``$CUDASCHED_KUEUEMATCH_CACHE`` (default ``~/.cache/cudasched/kueuematch``), beside
the control plane's cache and never inside it; a cold build downloads Kueue's modules through
the Go proxy and takes a few minutes on 2 cores.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.harness.binaries import BuildError, find_go, user_cache

__all__ = ["MODULE", "Verdict", "build_kueuematch", "flavors_admitting"]

#: The program's Go module (main.go, go.mod, go.sum).
MODULE = Path(__file__).resolve().parents[1] / "e2e" / "kueuematch"

#: Per workload: ``assigned`` (the flavor Kueue picks with the ClusterQueue as given, "" for
#: none), ``accepts`` (every flavor it would admit the workload to), ``refusals`` ({flavor:
#: Kueue's message}) and ``labelKeys`` (the keys Kueue keeps of the affinity).
Verdict = dict[str, Any]


def _cache() -> Path:
    return user_cache("CUDASCHED_KUEUEMATCH_CACHE", "kueuematch")


def _go_version(go: str) -> str:
    done = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=False)
    return done.stdout.strip()


def build_kueuematch(go: str | None = None) -> Path:
    """The program, built now unless the cache holds it for these sources and this Go.

    Raises :class:`BuildError` with Go's own error (and what would unblock it) when it cannot
    be built: no Go toolchain, no module proxy, a compile error against the pinned Kueue."""
    go = go or find_go()
    if go is None:
        raise BuildError("the Go toolchain is not installed (no `go` on PATH) to build kueuematch")
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update(MODULE.joinpath(name).read_bytes())
    digest.update(_go_version(go).encode())
    target = _cache() / digest.hexdigest()[:16] / "kueuematch"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"kueuematch.{os.getpid()}.partial")
    env = {**os.environ, "GOFLAGS": "-mod=readonly -buildvcs=false"}
    env.setdefault("GOTOOLCHAIN", "local")
    done = subprocess.run(
        [go, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(partial), "."],
        cwd=MODULE,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise BuildError(
            f"go build of {MODULE} failed (exit {done.returncode}); it needs the Go module "
            f"proxy for sigs.k8s.io/kueue's modules on a cold cache:\n{done.stderr[-4000:]}"
        )
    partial.replace(target)  # atomic: a concurrent build's result is as good as ours
    return target


def flavors_admitting(
    binary: Path,
    flavors: list[Mapping[str, Any]],
    cluster_queue: Mapping[str, Any],
    workloads: Mapping[str, Mapping[str, Any]],
) -> dict[str, Verdict]:
    """Kueue's answer for each workload (``{name: pod template}``, one pod set of one pod)
    over ``flavors`` (ResourceFlavor objects) and ``cluster_queue`` (a ClusterQueue)."""
    document = {"flavors": flavors, "clusterQueue": cluster_queue, "workloads": workloads}
    done = subprocess.run(
        [str(binary)],
        input=json.dumps(document),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"kueuematch exited {done.returncode}: {done.stderr.strip()}")
    found: dict[str, Verdict] = json.loads(done.stdout)
    return found


def main() -> int:
    """``python -m tests.harness.kueuematch``: build (or find) the program, print its path."""
    try:
        print(build_kueuematch(), flush=True)
    except BuildError as exc:
        print(f"kueuematch: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
