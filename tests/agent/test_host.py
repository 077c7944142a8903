"""Host facts (kernel release, os-release) and the discovery chain's choice of failure."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudasched.agent.discovery import Discovery
from cudasched.agent.host import (
    DEFAULT_OS_RELEASE_PATHS,
    NFD_OS_ID,
    host_from_node,
    parse_os_image,
    parse_os_release,
    read_host,
)
from cudasched.nodes.hostfacts import DiscoveryError, DriverFacts, GpuFacts, HostFacts, Reason
from cudasched.vocab.versions import CudaVersion, DriverVersion
from tests.support.discovery import Outcomes

UBUNTU = """PRETTY_NAME="Ubuntu 22.04.4 LTS"
NAME="Ubuntu"
VERSION_ID="22.04"
VERSION="22.04.4 LTS (Jammy Jellyfish)"
ID=ubuntu
ID_LIKE=debian
"""
RHEL = """NAME="Red Hat Enterprise Linux"
VERSION="9.4 (Plow)"
ID="rhel"
ID_LIKE="fedora"
VERSION_ID="9.4"
# comment
"""


def test_parse_os_release_quoted_and_bare() -> None:
    assert parse_os_release(UBUNTU)["ID"] == "ubuntu"
    assert parse_os_release(UBUNTU)["VERSION_ID"] == "22.04"
    assert parse_os_release(RHEL)["ID"] == "rhel"
    assert parse_os_release(RHEL)["VERSION"] == "9.4 (Plow)"


def test_read_host_from_injected_paths(tmp_path: Path) -> None:
    (tmp_path / "osrelease").write_text("5.15.0-105-generic\n")
    (tmp_path / "os-release").write_text(UBUNTU)
    host = read_host(tmp_path / "osrelease", [tmp_path / "missing", tmp_path / "os-release"])
    assert host == HostFacts("5.15.0-105-generic", "ubuntu", "22.04")


def test_read_host_missing_files_give_none(tmp_path: Path) -> None:
    assert read_host(tmp_path / "nope", [tmp_path / "nope"]) == HostFacts(None, None, None)


FACTS = DriverFacts(DriverVersion(550, 90, 7), CudaVersion(12, 4), (GpuFacts("Tesla T4"),), "x")


def test_chain_uses_first_source_that_answers_and_adds_host() -> None:
    nvml = Outcomes(DiscoveryError(Reason.NVML_NOT_FOUND, "no libnvidia-ml"))
    smi = Outcomes(FACTS)
    host = HostFacts("6.8.0", "ubuntu", "24.04")
    facts = Discovery([nvml, smi], host=lambda: host).probe()
    assert facts.host == host and facts.driver == FACTS.driver
    assert (nvml.calls, smi.calls) == (1, 1)


def test_chain_stops_at_first_answer() -> None:
    second = Outcomes(FACTS)
    Discovery([Outcomes(FACTS), second]).probe()
    assert second.calls == 0


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        (Reason.NVML_NOT_FOUND, Reason.NVIDIA_SMI_NOT_FOUND, Reason.NVML_NOT_FOUND),
        (Reason.VERSION_MISMATCH, Reason.VERSION_MISMATCH, Reason.VERSION_MISMATCH),
        (Reason.NVML_NOT_FOUND, Reason.NO_DRIVER, Reason.NO_DRIVER),
        (Reason.NO_DRIVER, Reason.NVIDIA_SMI_NOT_FOUND, Reason.NO_DRIVER),
    ],
)
def test_chain_reports_the_most_telling_failure(first: str, second: str, expected: str) -> None:
    chain = Discovery([Outcomes(DiscoveryError(first, "a")), Outcomes(DiscoveryError(second, "b"))])
    with pytest.raises(DiscoveryError) as info:
        chain.probe()
    assert info.value.reason == expected
    assert "a" in str(info.value) and "b" in str(info.value)


# --------------------------------------------------------------------------- from the Node

NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "gpu-1", "labels": {"kubernetes.io/hostname": "gpu-1"}},
    "status": {
        "nodeInfo": {
            "osImage": "Ubuntu 22.04.4 LTS",
            "kernelVersion": "5.15.0-105-generic",
            "operatingSystem": "linux",
        }
    },
}


@pytest.mark.parametrize(
    ("os_image", "expected"),
    [
        ("Ubuntu 22.04.4 LTS", ("ubuntu", "22.04")),
        ("Ubuntu 24.04 LTS", ("ubuntu", "24.04")),
        ("Red Hat Enterprise Linux CoreOS 415.92.202402201450-0 (Plow)", ("rhcos", "4.15")),
        ("Red Hat Enterprise Linux 9.4 (Plow)", ("rhel", "9.4")),
        ("Rocky Linux 9.3 (Blue Onyx)", ("rocky", "9.3")),
        ("Debian GNU/Linux 12 (bookworm)", ("debian", "12")),
        ("Amazon Linux 2", ("amzn", "2")),
        ("Amazon Linux 2023.4.20240401", ("amzn", "2023")),
        ("Bottlerocket OS 1.19.2 (aws-k8s-1.29)", ("bottlerocket", "1.19.2")),
        ("Container-Optimized OS from Google", ("cos", None)),
        ("Windows Server 2022 Datacenter", (None, None)),
        ("", (None, None)),
    ],
)
def test_os_from_kubelets_os_image(os_image: str, expected: tuple[str | None, str | None]) -> None:
    assert parse_os_image(os_image) == expected


def test_host_from_node_status() -> None:
    assert host_from_node(NODE) == HostFacts("5.15.0-105-generic", "ubuntu", "22.04")


def test_nfd_os_release_labels_win_over_os_image() -> None:
    node = {
        **NODE,
        "metadata": {
            "name": "gpu-1",
            "labels": {
                "feature.node.kubernetes.io/system-os_release.ID": "rhel",
                "feature.node.kubernetes.io/system-os_release.VERSION_ID": "9.4",
            },
        },
    }
    assert host_from_node(node) == HostFacts("5.15.0-105-generic", "rhel", "9.4")


@pytest.mark.parametrize(
    "node",
    [
        {},
        {"metadata": "x", "status": []},
        {"metadata": {"labels": {NFD_OS_ID: {"a": 1}}}, "status": {"nodeInfo": {"osImage": 5}}},
    ],
)
def test_malformed_nodes_give_empty_facts(node: dict[str, object]) -> None:
    assert host_from_node(node) == HostFacts(None, None, None)


def test_the_agent_never_reads_the_containers_os_release() -> None:
    """In the DaemonSet /etc/os-release is the image's, not the host's: the default paths are
    the host's own (for `cudasched probe` run on a node), with no /host mount expected."""
    assert DEFAULT_OS_RELEASE_PATHS == ("/etc/os-release", "/usr/lib/os-release")
    assert not any(p.startswith("/host") for p in DEFAULT_OS_RELEASE_PATHS)
