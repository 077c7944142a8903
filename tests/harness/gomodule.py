"""``python -m tests.harness.gomodule v1.37.2``: the Go module that pins one more Kubernetes
minor for the end-to-end tests, written from that release's own ``go.mod``.

A minor is a parameter of the harness (:func:`tests.harness.binaries.module_dir`), and its pins
are data: this writes ``tests/e2e/k8s<major><minor>/go.mod`` (``tests/e2e/go.mod`` for the
default minor) the way the first one was made by hand: ``k8s.io/kubernetes`` at the release,
every staging module it replaces with ``./staging/src/...`` in its own repository replaced here
by the published ``v0.<minor>.<patch>`` (the list is read from the release, so a staging module
added in a new minor, such as ``k8s.io/streaming`` in 1.37, is not missed), etcd's server at
the version the release requires, the ``go`` line the release asks for, and the five binaries
as ``tool`` lines; then ``go mod tidy`` fills in ``go.sum`` through the module proxy.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.harness.binaries import BINARIES, BuildError, find_go, minor_of, module_dir

__all__ = ["module_text", "write_module"]

_STAGING = re.compile(r"^\s*(k8s\.io/[\w.-]+) => \./staging/src/", re.MULTILINE)
_ETCD = re.compile(r"^\s*go\.etcd\.io/etcd/server/v3 (v\S+)", re.MULTILINE)
_GO_LINE = re.compile(r"^go (\S+)$", re.MULTILINE)


def module_text(version: str, release_go_mod: str) -> str:
    """The ``go.mod`` (before ``go mod tidy``) that pins Kubernetes ``version`` (``v1.37.2``),
    given the text of that release's own ``go.mod``."""
    minor = minor_of(version)
    major_s, minor_s = minor.split(".")
    patch = version.lstrip("v").split(".")[2]
    staging = sorted(set(_STAGING.findall(release_go_mod)))
    etcd = _ETCD.search(release_go_mod)
    go_line = _GO_LINE.search(release_go_mod)
    if not staging or etcd is None or go_line is None:
        raise BuildError(
            f"k8s.io/kubernetes {version}'s go.mod names no staging modules, etcd server or go line"
        )
    published = f"v0.{minor_s}.{patch}"
    lines = [
        f"// Kubernetes {minor} for the end-to-end tests: written by",
        f"// `python -m tests.harness.gomodule {version}` from that release's go.mod (edit the",
        "// generator, not this file). Staging modules are replaced by their published versions.",
        f"module cudasched.local/controlplane{major_s}{minor_s}",
        "",
        f"go {go_line.group(1)}",
        "",
        "require (",
        f"\tgo.etcd.io/etcd/server/v3 {etcd.group(1)}",
        f"\tk8s.io/kubernetes {version}",
        ")",
        "",
        "replace (",
        *(f"\t{name} => {name} {published}" for name in staging),
        ")",
        "",
        "tool (",
        *(f"\t{package}" for package in sorted(BINARIES.values())),
        ")",
        "",
    ]
    return "\n".join(lines)


def _go(args: list[str], cwd: Path) -> str:
    go = find_go()
    if go is None:
        raise BuildError("the Go toolchain is not installed (no `go` on PATH)")
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
    done = subprocess.run([go, *args], cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise BuildError(f"go {' '.join(args)} failed in {cwd}:\n{done.stderr[-4000:]}")
    return done.stdout


def write_module(version: str, target: Path | None = None) -> Path:
    """Write and tidy the module for ``version``; returns its directory."""
    directory = target or module_dir(minor_of(version))
    directory.mkdir(parents=True, exist_ok=True)
    found = json.loads(_go(["mod", "download", "-json", f"k8s.io/kubernetes@{version}"], directory))
    release = Path(found["GoMod"]).read_text(encoding="utf-8")
    directory.joinpath("go.mod").write_text(module_text(version, release), encoding="utf-8")
    _go(["mod", "tidy"], directory)
    return directory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.harness.gomodule", description=__doc__)
    parser.add_argument("version", help="a Kubernetes release, e.g. v1.37.2")
    args = parser.parse_args(argv)
    try:
        written = write_module(args.version)
    except BuildError as exc:
        print(f"tests.harness.gomodule: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"{written}/go.mod pins kubernetes {args.version}; build: python -m "
        f"tests.harness.controlplane --kubernetes {minor_of(args.version)} build"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
