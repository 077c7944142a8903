"""Build the control plane's binaries from source once, into a cache keyed by version.

Each Kubernetes minor the tests run is pinned in one place, a Go module beside the end-to-end
tests: ``tests/e2e/go.mod`` for the default minor (:data:`DEFAULT_MINOR`, the webhook's), and
``tests/e2e/k8s<major><minor>/go.mod`` for every other (``tests/e2e/k8s137`` for 1.37, where
MutatingAdmissionPolicy v1 is GA), written by :mod:`tests.harness.gomodule`. Which minor is a
parameter (``minor=`` here, ``--kubernetes`` on the harness's command line,
``$CUDASCHED_KUBERNETES``), never a copy of this code. A module pins ``k8s.io/kubernetes``
(kube-apiserver, kube-scheduler, kube-controller-manager, kubectl) with every staging module
replaced by its published ``v0.X.Y``, and ``go.etcd.io/etcd/server/v3`` (etcd) at the version
that Kubernetes release pins. The binaries go to
``~/.cache/cudasched/controlplane/<kubernetes version>/bin`` (``$CUDASCHED_CONTROLPLANE_CACHE``
moves the root) with a stamp of the module files' contents
and the Go version, never their place: a second run finds them and starts in seconds, moving
the module rebuilds nothing, a changed pin rebuilds. A cold build compiles about 2,550
packages (10-15 minutes on 2 cores), so it prints progress.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BINARIES",
    "DEFAULT_MINOR",
    "Binaries",
    "BuildError",
    "build_package",
    "cache_root",
    "ensure_built",
    "find_go",
    "minor_of",
    "module_dir",
    "pinned_versions",
    "selected_minor",
    "user_cache",
]

#: Binary name -> Go package built into it.
BINARIES: dict[str, str] = {
    "etcd": "go.etcd.io/etcd/server/v3",
    "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
    "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
    "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
    "kubectl": "k8s.io/kubernetes/cmd/kubectl",
}

Progress = Callable[[str], None]


class BuildError(RuntimeError):
    """The binaries could not be built (or found): the message says why and what to do."""


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


#: The minor whose module is ``tests/e2e/go.mod``: the webhook's end-to-end tests run on it.
DEFAULT_MINOR = "1.35"

_E2E = Path(__file__).resolve().parents[1] / "e2e"


def minor_of(version: str) -> str:
    """``"1.37"`` of ``"v1.37.2"``, ``"1.37.2"`` or ``"1.37"``; raises :class:`BuildError`."""
    match = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.\d+)?", version.strip())
    if not match:
        raise BuildError(
            f"invalid Kubernetes version {version!r}: expected 1.MINOR or v1.MINOR.PATCH"
        )
    return f"{match.group(1)}.{match.group(2)}"


def selected_minor(minor: str | None = None) -> str:
    """The minor asked for: ``minor``, else ``$CUDASCHED_KUBERNETES``, else the default."""
    return minor_of(minor or os.environ.get("CUDASCHED_KUBERNETES") or DEFAULT_MINOR)


def module_dir(minor: str | None = None) -> Path:
    """The Go module that pins ``minor`` (:func:`selected_minor`): ``tests/e2e`` for the default
    one, ``tests/e2e/k8s<major><minor>`` otherwise. ``$CUDASCHED_CONTROLPLANE_MODULE`` overrides
    both (a module anywhere, for tests of this code)."""
    given = os.environ.get("CUDASCHED_CONTROLPLANE_MODULE")
    if given:
        return Path(given)
    chosen = selected_minor(minor)
    if chosen == DEFAULT_MINOR:
        return _E2E
    return _E2E / ("k8s" + chosen.replace(".", ""))


def user_cache(variable: str, leaf: str) -> Path:
    """Where a built tool is kept: ``$variable`` when set, else ``cudasched/<leaf>`` in the
    user's cache folder (``$XDG_CACHE_HOME`` or ``~/.cache``)."""
    given = os.environ.get(variable)
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cudasched" / leaf


def cache_root() -> Path:
    return user_cache("CUDASCHED_CONTROLPLANE_CACHE", "controlplane")


def pinned_versions(module: Path | None = None) -> dict[str, str]:
    """``{"kubernetes": "v1.35.4", "etcd": "v3.6.5"}`` as go.mod pins them."""
    module = module or module_dir()
    text = module.joinpath("go.mod").read_text(encoding="utf-8")
    found = {}
    for name, path in (("kubernetes", "k8s.io/kubernetes"), ("etcd", "go.etcd.io/etcd/server/v3")):
        match = re.search(rf"^\s*{re.escape(path)} (v\S+)", text, re.MULTILINE)
        if not match:
            raise BuildError(f"{module}/go.mod does not require {path}")
        found[name] = match.group(1)
    return found


def find_go() -> str | None:
    """The ``go`` command: on PATH, or in Go's usual install directory."""
    found = shutil.which("go")
    if found:
        return found
    for candidate in ("/usr/local/go/bin/go", str(Path.home() / "go" / "bin" / "go")):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


@dataclass(frozen=True)
class Binaries:
    """The built binaries of one pinned version."""

    directory: Path
    kubernetes: str
    etcd: str

    def path(self, name: str) -> Path:
        return self.directory / name

    @property
    def kubectl(self) -> Path:
        return self.path("kubectl")


def _stamp(module: Path, go_version: str) -> str:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        digest.update(module.joinpath(name).read_bytes())
    digest.update(go_version.encode())
    return digest.hexdigest()


def _go_version(go: str) -> str:
    return subprocess.run(
        [go, "env", "GOVERSION"], capture_output=True, text=True, check=True
    ).stdout.strip()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _ldflags(kubernetes: str) -> str:
    """Stamp the Kubernetes version into the binaries, as the release build does, so
    ``kubectl version`` and the API server's ``/version`` say v1.X.Y, not v0.0.0-master."""
    match = re.match(r"v(\d+)\.(\d+)", kubernetes)
    major, minor = (match.group(1), match.group(2)) if match else ("1", "0")
    flags = ["-s", "-w"]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {package}.gitVersion={kubernetes}",
            f"-X {package}.gitMajor={major}",
            f"-X {package}.gitMinor={minor}",
            f"-X {package}.gitTreeState=clean",
        ]
    return " ".join(flags)


def _run_go(args: list[str], *, cwd: Path, env: dict[str, str], progress: Progress) -> None:
    """Run one ``go build -v``, printing a progress line every 200 packages or 30 seconds."""
    start = time.monotonic()
    last = start
    compiled = downloaded = 0
    tail: list[str] = []
    process = subprocess.Popen(
        args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert process.stdout is not None
    for raw in process.stdout:
        line = raw.rstrip()
        tail = [*tail[-40:], line]
        if line.startswith("go: downloading"):
            downloaded += 1
        elif line and not line.startswith(("#", " ", "go:")):
            compiled += 1
        now = time.monotonic()
        if compiled and (compiled % 200 == 0 or now - last > 30):
            last = now
            progress(
                f"controlplane build: {compiled} packages compiled, {downloaded} modules "
                f"downloaded, {now - start:.0f}s"
            )
    if process.wait() != 0:
        raise BuildError(
            f"{' '.join(args[:2])} failed (exit {process.returncode}) in {cwd}:\n" + "\n".join(tail)
        )


def _go_env() -> dict[str, str]:
    env = {**os.environ, "GOFLAGS": "-mod=readonly -buildvcs=false"}
    env.setdefault("GOTOOLCHAIN", "local")
    return env


def build_package(
    package: str, output: Path, *, progress: Progress = _stderr, minor: str | None = None
) -> Path:
    """Build one more package of the module (``./affinitymatch``, a benchmark's helper) into
    ``output``, with the flags the binaries get, so Go's build cache serves what they share."""
    go = find_go()
    if go is None:
        raise BuildError(f"the Go toolchain is not installed (no `go` on PATH) to build {package}")
    output.parent.mkdir(parents=True, exist_ok=True)
    progress(f"controlplane build: {package} into {output}")
    _run_go(
        [go, "build", "-v", "-trimpath", "-ldflags", "-s -w", "-o", str(output), package],
        cwd=module_dir(minor),
        env=_go_env(),
        progress=progress,
    )
    return output


def ensure_built(
    *, progress: Progress = _stderr, force: bool = False, minor: str | None = None
) -> Binaries:
    """The binaries of the versions ``minor``'s module pins (:func:`module_dir`), built now if
    the cache lacks them.

    Raises :class:`BuildError` (with the exact error and what would unblock it) when they are
    not cached and cannot be built: no Go toolchain, no module proxy, a compile error.
    """
    module = module_dir(minor)
    if not module.joinpath("go.mod").is_file():
        raise BuildError(
            f"the control plane's Go module is missing: {module}/go.mod (write one for a new "
            "minor with `python -m tests.harness.gomodule v1.MINOR.PATCH`)"
        )
    versions = pinned_versions(module)
    target = cache_root() / versions["kubernetes"]
    bin_dir = target / "bin"
    stamp_file = target / "stamp.json"
    binaries = Binaries(bin_dir, versions["kubernetes"], versions["etcd"])

    def cached(stamp: str | None) -> bool:
        if not all(bin_dir.joinpath(name).is_file() for name in BINARIES):
            return False
        try:
            recorded = json.loads(stamp_file.read_text())
        except (OSError, ValueError):
            return False
        return stamp is None or recorded.get("stamp") == stamp

    go = find_go()
    if go is None:
        if cached(None) and not force:
            return binaries  # built earlier; no toolchain needed to run them
        raise BuildError(
            "the Go toolchain is not installed (no `go` on PATH): the control plane is built "
            f"from source ({', '.join(f'{k} {v}' for k, v in versions.items())}); install Go "
            ">= 1.25 (https://go.dev/dl/) with the module proxy reachable"
        )
    go_version = _go_version(go)
    stamp = _stamp(module, go_version)
    if cached(stamp) and not force:
        return binaries
    with _locked(target / ".lock"):
        if cached(stamp) and not force:  # another process built it while we waited
            return binaries
        bin_dir.mkdir(parents=True, exist_ok=True)
        env = _go_env()
        begun = time.monotonic()
        progress(
            f"controlplane build: kubernetes {versions['kubernetes']}, etcd {versions['etcd']} "
            f"with {go_version} into {bin_dir} (cold: many minutes on 2 cores; cached afterwards)"
        )
        k8s = [name for name in BINARIES if name != "etcd"]
        _run_go(
            [
                go,
                "build",
                "-v",
                "-trimpath",
                "-ldflags",
                _ldflags(versions["kubernetes"]),
                "-o",
                str(bin_dir) + os.sep,
                *(BINARIES[name] for name in k8s),
            ],
            cwd=module,
            env=env,
            progress=progress,
        )
        _run_go(
            [
                go,
                "build",
                "-v",
                "-trimpath",
                "-ldflags",
                "-s -w",
                "-o",
                str(bin_dir / "etcd"),
                BINARIES["etcd"],
            ],
            cwd=module,
            env=env,
            progress=progress,
        )
        seconds = time.monotonic() - begun
        stamp_file.write_text(
            json.dumps(
                {"stamp": stamp, "go": go_version, **versions, "buildSeconds": round(seconds)}
            )
        )
        progress(f"controlplane build: done in {seconds:.0f}s")
    return binaries
