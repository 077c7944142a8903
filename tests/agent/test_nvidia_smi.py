"""nvidia-smi parsers on recorded outputs (see tests/data/nvidia-smi/SOURCES.md)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.agent.nvidia_smi import (
    NvidiaSmiSource,
    brand_is_datacenter,
    parse_nvidia_smi,
    parse_query_text,
    parse_query_xml,
    parse_table,
)
from cudasched.nodes.hostfacts import DiscoveryError, Reason
from cudasched.vocab.errors import InputError

DATA = Path(__file__).parents[1] / "data" / "nvidia-smi"


def read(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


# name -> (source, driver, cuda, [(gpu name, compute capability, memory MiB, mig)])
EXPECTED = {
    "plain-470-tesla-t4x2.txt": (
        "nvidia-smi-table",
        "470.82.01",
        "11.4",
        [("Tesla T4", None, 15109, None)] * 2,
    ),
    "plain-515-a100-mig.txt": (
        "nvidia-smi-table",
        "515.65.01",
        "11.7",
        [("NVIDIA A100-SXM...", None, 40960, False), ("NVIDIA A100-SXM...", None, 40960, True)],
    ),
    "plain-535-a100x2.txt": (
        "nvidia-smi-table",
        "535.104.05",
        "12.2",
        [("NVIDIA A100-SXM4-80GB", None, 81920, False)] * 2,
    ),
    "plain-550-l40s.txt": (
        "nvidia-smi-table",
        "550.90.07",
        "12.4",
        [("NVIDIA L40S", None, 46068, None)],
    ),
    "plain-570-h100x2.txt": (
        "nvidia-smi-table",
        "570.124.06",
        "12.8",
        [("NVIDIA H100 80GB HBM3", None, 81559, False)] * 2,
    ),
    "plain-575-cuda-na.txt": (
        "nvidia-smi-table",
        "575.64.03",
        None,
        [("NVIDIA GeForce RTX 5070", None, 12227, None)],
    ),
    "plain-580-mixed-a100-dgx-display.txt": (
        "nvidia-smi-table",
        "580.95.05",
        "13.0",
        [
            ("NVIDIA A100-SXM4-80GB", None, 81920, False),
            ("NVIDIA A100-SXM4-80GB", None, 81920, False),
            ("NVIDIA DGX Display", None, 4096, None),
            ("NVIDIA A100-SXM4-80GB", None, 81920, False),
        ],
    ),
    "plain-610-umd-b200x2.txt": (
        "nvidia-smi-table",
        "610.43.02",
        "13.3",
        [("NVIDIA B200", None, 183359, False)] * 2,
    ),
    "query-535-a10g.txt": (
        "nvidia-smi-query",
        "535.183.01",
        "12.2",
        [("NVIDIA A10G", None, 23028, None)],
    ),
    "query-610-b200-deprecated-lines.txt": (
        "nvidia-smi-query",
        "610.47",
        "13.3",
        [("NVIDIA B200", None, 183359, None)],
    ),
    "query-610-partial-no-gpu-section.txt": ("nvidia-smi-query", "610.47", "13.3", []),
    "query-550-h100-mig.txt": (
        "nvidia-smi-query",
        "550.127.05",
        "12.4",
        [("NVIDIA H100 80GB HBM3", None, 81559, True)],
    ),
    "xml-535-a100-mig.xml": (
        "nvidia-smi-xml",
        "535.129.03",
        "12.2",
        [
            ("NVIDIA A100-SXM4-40GB", None, 40960, True),
            ("NVIDIA A100-SXM4-40GB", None, 40960, False),
        ],
    ),
    "xml-580-h100x2.xml": (
        "nvidia-smi-xml",
        "580.95.05",
        "13.0",
        [("NVIDIA H100 80GB HBM3", "9.0", 81559, False)] * 2,
    ),
    "xml-580-rtxpro6000-cuda-not-found.xml": (
        "nvidia-smi-xml",
        "580.105.06",
        None,
        [("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0", 97887, False)],
    ),
}

ERRORS = {
    "error-no-driver.txt": Reason.NO_DRIVER,
    "error-version-mismatch.txt": Reason.VERSION_MISMATCH,
    "error-no-devices.txt": Reason.NO_DEVICES,
}


def test_every_recording_is_covered() -> None:
    files = {p.name for p in DATA.iterdir() if p.suffix in (".txt", ".xml")}
    assert files == set(EXPECTED) | set(ERRORS)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recording_parses_to_expected_facts(name: str) -> None:
    source, driver, cuda, gpus = EXPECTED[name]
    facts = parse_nvidia_smi(read(name))
    assert facts.source == source
    assert str(facts.driver) == driver
    assert (str(facts.cuda) if facts.cuda else None) == cuda
    got = [
        (g.name, str(g.compute) if g.compute else None, g.memory_mib, g.mig_enabled)
        for g in facts.gpus
    ]
    assert got == gpus


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_error_outputs_raise_with_reason(name: str) -> None:
    with pytest.raises(DiscoveryError) as info:
        parse_nvidia_smi(read(name))
    assert info.value.reason == ERRORS[name]
    assert isinstance(info.value, InputError)


def test_new_header_reads_kmd_and_umd_versions() -> None:
    facts = parse_table(read("plain-610-umd-b200x2.txt"))
    assert (str(facts.driver), str(facts.cuda)) == ("610.43.02", "13.3")


def test_xml_with_renamed_version_fields() -> None:
    text = read("xml-580-h100x2.xml").replace(
        "<cuda_version>13.0</cuda_version>",
        "<cuda_version>13.0</cuda_version>\n\t<cuda_umd_version>13.1</cuda_umd_version>",
    )
    text = text.replace(
        "driver_version>580.95.05</driver_version", "kmd_version>610.43.02</kmd_version"
    )
    facts = parse_query_xml(text)
    assert (str(facts.driver), str(facts.cuda)) == ("610.43.02", "13.1")


def test_header_without_cuda_version_from_old_drivers() -> None:
    text = read("plain-470-tesla-t4x2.txt").replace("CUDA Version: 11.4", "               ")
    assert parse_table(text).cuda is None


def test_windows_driver_version_differs_from_nvidia_smi_version() -> None:
    # WSL prints the Linux nvidia-smi build next to the Windows driver; the driver wins.
    text = read("plain-550-l40s.txt").replace(
        "NVIDIA-SMI 550.90.07              Driver Version: 550.90.07 ",
        "NVIDIA-SMI 555.42.03              Driver Version: 555.85    ",
    )
    assert str(parse_table(text).driver) == "555.85"


def test_mig_devices_are_not_gpus() -> None:
    assert len(parse_table(read("plain-515-a100-mig.txt")).gpus) == 2
    assert len(parse_query_xml(read("xml-535-a100-mig.xml")).gpus) == 2
    h100 = parse_query_text(read("query-550-h100-mig.txt")).gpus
    assert [g.memory_mib for g in h100] == [81559]  # not a MIG slice's 40192


def test_brands_from_reports() -> None:
    assert [g.datacenter for g in parse_query_xml(read("xml-535-a100-mig.xml")).gpus] == [True] * 2
    assert parse_query_text(read("query-535-a10g.txt")).gpus[0].brand == "NVIDIA"
    assert parse_table(read("plain-550-l40s.txt")).gpus[0].brand is None


@pytest.mark.parametrize(
    ("brand", "datacenter"),
    [
        ("Tesla", True),
        ("NVIDIA", True),
        ("GeForce", False),
        ("GeForce RTX", False),
        ("Quadro RTX", False),
        ("NVIDIA RTX", False),
        ("Titan", False),
        ("NVIDIA Virtual Compute Server", None),
        ("GRID", None),
        (None, None),
    ],
)
def test_brand_is_datacenter(brand: str | None, datacenter: bool | None) -> None:
    assert brand_is_datacenter(brand) is datacenter


@pytest.mark.parametrize(
    "text",
    [
        "",
        "hello world\n",
        "apiVersion: v1\nkind: Node\n",
        "<?xml version='1.0'?><other/>",
        "<nvidia_smi_log><gpu>",
        "+---+\n| NVIDIA-SMI something |\n",
    ],
)
def test_not_nvidia_smi_output_is_unrecognised(text: str) -> None:
    with pytest.raises(DiscoveryError) as info:
        parse_nvidia_smi(text)
    assert info.value.reason == Reason.UNRECOGNISED_OUTPUT


def test_entity_declarations_are_refused() -> None:
    doc = '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "b">]><nvidia_smi_log/>'
    with pytest.raises(DiscoveryError):
        parse_nvidia_smi(doc)


def test_unparseable_driver_version_names_the_value() -> None:
    text = read("xml-580-h100x2.xml").replace("580.95.05", "unknown.unknown.unknown", 1)
    with pytest.raises(DiscoveryError, match=r"unknown\.unknown\.unknown") as info:
        parse_nvidia_smi(text)
    assert info.value.reason == Reason.BAD_VALUE


def test_r610_deprecated_lines_alone_are_read_without_their_note() -> None:
    """Only the old lines, each with R610's bracketed deprecation note: the numbers count."""
    text = "\n".join(
        line
        for line in read("query-610-b200-deprecated-lines.txt").splitlines()
        if not line.startswith(("KMD Version", "CUDA UMD Version"))
    )
    facts = parse_nvidia_smi(text)
    assert (str(facts.driver), str(facts.cuda)) == ("610.47", "13.3")


def test_new_fields_win_over_the_deprecated_ones() -> None:
    text = read("query-610-b200-deprecated-lines.txt").replace(
        "KMD Version                               : 610.47",
        "KMD Version                               : 610.48",
    )
    assert str(parse_nvidia_smi(text).driver) == "610.48"


def test_partial_query_report_keeps_driver_facts_and_says_what_is_missing() -> None:
    facts = parse_nvidia_smi(read("query-610-partial-no-gpu-section.txt"))
    assert facts.gpus == () and facts.missing == Reason.NO_GPU_SECTION
    assert (str(facts.driver), str(facts.cuda)) == ("610.47", "13.3")


def test_query_report_with_zero_attached_gpus_is_no_devices() -> None:
    text = read("query-610-partial-no-gpu-section.txt") + "\nAttached GPUs : 0\n"
    with pytest.raises(DiscoveryError) as info:
        parse_nvidia_smi(text)
    assert info.value.reason == Reason.NO_DEVICES


def test_table_without_gpu_rows_is_no_devices() -> None:
    head = "\n".join(read("plain-550-l40s.txt").splitlines()[:8])
    with pytest.raises(DiscoveryError) as info:
        parse_table(head + "\n+---+\n")
    assert info.value.reason == Reason.NO_DEVICES


@settings(max_examples=150)
@given(st.sampled_from(sorted(EXPECTED)), st.integers(min_value=0), st.integers(min_value=0))
def test_truncated_recordings_parse_or_fail_cleanly(name: str, a: int, b: int) -> None:
    """Any slice of a real output either parses or raises DiscoveryError, never a crash."""
    text = read(name)
    lo, hi = sorted((a % (len(text) + 1), b % (len(text) + 1)))
    with contextlib.suppress(DiscoveryError):
        parse_nvidia_smi(text[lo:hi])


@settings(max_examples=150)
@given(st.text(max_size=400))
def test_arbitrary_text_never_crashes(text: str) -> None:
    with contextlib.suppress(DiscoveryError):
        parse_nvidia_smi(text)


# ----------------------------------------------------------------- the nvidia-smi runner


class FakeRunner:
    """Answers nvidia-smi invocations from recordings; records the argv it saw."""

    def __init__(self, answers: dict[tuple[str, ...], tuple[int, str]]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        key = tuple(argv[1:])
        self.calls.append(key)
        if key not in self.answers:
            raise FileNotFoundError(argv[0])
        code, out = self.answers[key]
        return subprocess.CompletedProcess(list(argv), code, out, "")


def test_runner_prefers_xml_report() -> None:
    runner = FakeRunner({("-q", "-x"): (0, read("xml-580-h100x2.xml"))})
    facts = NvidiaSmiSource(runner=runner).probe()
    assert facts.source == "nvidia-smi-xml"
    assert runner.calls == [("-q", "-x")]


def test_runner_falls_back_to_plain_table() -> None:
    runner = FakeRunner(
        {("-q", "-x"): (6, "Unknown Error\n"), (): (0, read("plain-535-a100x2.txt"))}
    )
    facts = NvidiaSmiSource(runner=runner).probe()
    assert facts.source == "nvidia-smi-table"
    assert runner.calls == [("-q", "-x"), ()]


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_runner_reports_driver_errors_without_fallback(name: str) -> None:
    runner = FakeRunner({("-q", "-x"): (9, read(name)), (): (9, read(name))})
    with pytest.raises(DiscoveryError) as info:
        NvidiaSmiSource(runner=runner).probe()
    assert info.value.reason == ERRORS[name]
    assert runner.calls == [("-q", "-x")]


def test_runner_missing_binary() -> None:
    with pytest.raises(DiscoveryError) as info:
        NvidiaSmiSource(runner=FakeRunner({})).probe()
    assert info.value.reason == Reason.NVIDIA_SMI_NOT_FOUND
