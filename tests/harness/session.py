"""The end-to-end tests' control plane for one Kubernetes minor: built or skipped, started,
stopped. Each test package that runs against a minor (``tests/e2e`` on the default one,
``tests/e2e/k8s137`` on 1.37) asks these with its minor, so a package for another minor is a
``conftest.py`` of a few lines, never a copy of the fixtures.

Without a Go toolchain (and no binaries cached from an earlier build) the tests skip with one
line, except under CI (``$CI`` set), where they fail: CI must run them.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.binaries import Binaries, BuildError, ensure_built, find_go, selected_minor
from tests.harness.controlplane.options import Options
from tests.harness.controlplane.plane import ControlPlane

__all__ = ["FLEET_SIZE", "built_or_skip", "progress", "running_plane"]

#: 3 x the 21 sample nodes: every real label set three times.
FLEET_SIZE = 63


def progress(line: str) -> None:
    """pytest captures output; a cold build takes many minutes, so its progress goes to the
    terminal itself."""
    print(line, file=sys.__stderr__, flush=True)


def built_or_skip(minor: str | None = None) -> Binaries:
    """The binaries ``minor`` pins, built if needed; a skip (a failure under CI) when they
    cannot be."""
    try:
        return ensure_built(progress=progress, minor=minor)
    except BuildError as exc:
        if find_go() is None and not os.environ.get("CI"):
            pytest.skip(
                f"e2e: no Go toolchain to build kube-apiserver {selected_minor(minor)} "
                "(set CI to make this fail)"
            )
        pytest.fail(f"e2e: the control plane cannot be built: {exc}", pytrace=False)


@contextlib.contextmanager
def running_plane(
    binaries: Binaries, directory: Path, *, nodes: int = FLEET_SIZE
) -> Iterator[ControlPlane]:
    """A control plane of ``binaries`` with ``nodes`` fake GPU nodes, stopped at exit."""
    control = ControlPlane(directory, Options(nodes=nodes), binaries=binaries, progress=progress)
    control.start()
    try:
        yield control
    finally:
        control.stop()
