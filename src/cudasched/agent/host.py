"""Kernel release and OS identity of the node.

A driver build depends on both (the GPU Operator tags its images ``<version>-<os><version_id>``
and precompiled ones by kernel), so the agent reports them next to the driver facts. Paths are
parameters: in the DaemonSet the host's ``/etc/os-release`` is mounted under ``/host``, and
tests point at temporary files.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from cudasched.agent.facts import HostFacts

__all__ = ["DEFAULT_OSRELEASE_PATH", "DEFAULT_OS_RELEASE_PATHS", "parse_os_release", "read_host"]

DEFAULT_OSRELEASE_PATH = "/proc/sys/kernel/osrelease"
DEFAULT_OS_RELEASE_PATHS = ("/host/etc/os-release", "/etc/os-release", "/usr/lib/os-release")


def parse_os_release(text: str) -> dict[str, str]:
    """Parse os-release(5): ``KEY=value`` lines, values optionally shell-quoted."""
    result: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        try:
            parts = shlex.split(value)
        except ValueError:
            parts = [value.strip("\"'")]
        result[key.strip()] = parts[0] if parts else ""
    return result


def _read(path: str | Path) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def read_host(
    osrelease_path: str | Path = DEFAULT_OSRELEASE_PATH,
    os_release_paths: Sequence[str | Path] = DEFAULT_OS_RELEASE_PATHS,
) -> HostFacts:
    """Read what is readable; missing files give ``None`` fields, never an error (host facts
    are informational and must not fail a probe)."""
    kernel = _read(osrelease_path)
    os_info: dict[str, str] = {}
    for path in os_release_paths:
        text = _read(path)
        if text is not None:
            os_info = parse_os_release(text)
            break
    return HostFacts(
        kernel_release=kernel.strip() or None if kernel is not None else None,
        os_id=os_info.get("ID") or None,
        os_version_id=os_info.get("VERSION_ID") or None,
    )
