"""Kernel release and OS identity of the node.

A driver build depends on both (the GPU Operator tags its images ``<version>-<os><version_id>``
and precompiled ones by kernel), so the agent reports them next to the driver facts.

Two sources: the files of the machine the command runs on (:func:`read_host`: ``cudasched
probe`` on a node), and the Node object (:func:`host_from_node`: the agent in its DaemonSet,
which mounts nothing from the host). The Node's ``status.nodeInfo`` is what kubelet reports
from the host's os-release and uname; NFD's ``system-os_release`` labels, when present, carry
the os-release ID and VERSION_ID verbatim and are preferred. Paths are parameters, so tests
point at temporary files.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cudasched.nodes.hostfacts import HostFacts

__all__ = [
    "DEFAULT_OSRELEASE_PATH",
    "DEFAULT_OS_RELEASE_PATHS",
    "NFD_OS_ID",
    "NFD_OS_VERSION_ID",
    "host_from_node",
    "parse_os_image",
    "parse_os_release",
    "read_host",
]

DEFAULT_OSRELEASE_PATH = "/proc/sys/kernel/osrelease"
DEFAULT_OS_RELEASE_PATHS = ("/etc/os-release", "/usr/lib/os-release")

NFD_OS_ID = "feature.node.kubernetes.io/system-os_release.ID"
NFD_OS_VERSION_ID = "feature.node.kubernetes.io/system-os_release.VERSION_ID"

# kubelet's osImage is os-release's PRETTY_NAME. Each known distribution: its os-release ID,
# and how to find VERSION_ID in the pretty name (the GPU Operator's image tags use both).
_OS_IMAGES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.ASCII), os_id)
    for pattern, os_id in (
        (r"^Ubuntu (\d+\.\d+)", "ubuntu"),
        (r"^Red Hat Enterprise Linux CoreOS (\d)(\d+)\.", "rhcos"),
        (r"^Red Hat Enterprise Linux CoreOS (\d+\.\d+)", "rhcos"),
        (r"^Red Hat Enterprise Linux(?: Server)? (\d+(?:\.\d+)?)", "rhel"),
        (r"^Rocky Linux (\d+(?:\.\d+)?)", "rocky"),
        (r"^CentOS(?: Linux| Stream)? (\d+)", "centos"),
        (r"^Debian GNU/Linux (\d+)", "debian"),
        (r"^Amazon Linux (\d+)", "amzn"),
        (r"^SUSE Linux Enterprise Server (\d+(?:\.\d+)?)", "sles"),
        (r"^Bottlerocket OS (\d+\.\d+(?:\.\d+)?)", "bottlerocket"),
        (r"^Flatcar Container Linux by Kinvolk (\d+\.\d+\.\d+)", "flatcar"),
        (r"^Container-Optimized OS", "cos"),
        (r"^Talos \(v?(\d+\.\d+\.\d+)", "talos"),
    )
)


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


def parse_os_image(os_image: str) -> tuple[str | None, str | None]:
    """``(ID, VERSION_ID)`` of os-release from kubelet's ``osImage`` (the PRETTY_NAME):
    ``Ubuntu 22.04.4 LTS`` -> ``("ubuntu", "22.04")``, ``Red Hat Enterprise Linux CoreOS
    415.92.2024...`` -> ``("rhcos", "4.15")``; ``(None, None)`` for an unknown distribution."""
    text = os_image.strip()
    for pattern, os_id in _OS_IMAGES:
        m = pattern.match(text)
        if m is None:
            continue
        groups = m.groups()
        if os_id == "rhcos" and len(groups) == 2:
            return os_id, f"{groups[0]}.{groups[1]}"
        return os_id, groups[0] if groups else None
    return None, None


def _stripped_or_none(value: Any) -> str | None:
    """A string field of the Node, stripped; ``None`` when blank or not a string."""
    return value.strip() or None if isinstance(value, str) else None


def host_from_node(node: Mapping[str, Any]) -> HostFacts:
    """Kernel and OS of a Node object (a plain dict as the API returns it): the kernel from
    ``status.nodeInfo.kernelVersion``, the OS from NFD's os-release labels, else from
    ``status.nodeInfo.osImage``. Malformed parts give ``None`` fields, never an error."""
    meta = node.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    labels = labels if isinstance(labels, Mapping) else {}
    status = node.get("status")
    info = status.get("nodeInfo") if isinstance(status, Mapping) else None
    info = info if isinstance(info, Mapping) else {}
    os_id = _stripped_or_none(labels.get(NFD_OS_ID))
    version = _stripped_or_none(labels.get(NFD_OS_VERSION_ID))
    if os_id is None:
        image = _stripped_or_none(info.get("osImage"))
        os_id, version = parse_os_image(image) if image is not None else (None, None)
    return HostFacts(
        kernel_release=_stripped_or_none(info.get("kernelVersion")),
        os_id=os_id,
        os_version_id=version,
    )
