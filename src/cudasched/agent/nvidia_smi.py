"""Parsers for ``nvidia-smi`` output: the XML report (``-q -x``), the text report (``-q``) and
the plain summary table, plus the runner that asks the binary when NVML is unavailable.

``nvidia-smi`` output is not a stable interface (NVIDIA says so in its man page), so each parser
keys on the few fields we need and tolerates everything else: both table generations (79
columns before R530, 89/91 after), the R610 header that prints ``KMD Version`` and
``CUDA UMD Version`` instead of ``Driver Version`` and ``CUDA Version``, ``N/A`` and
``Not Found`` CUDA versions, MIG tables (MIG slices are never counted as GPUs) and the
well-known error texts, which become a :class:`DiscoveryError` with a machine reason.
"""

from __future__ import annotations

import re
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cudasched.nodes.hostfacts import DiscoveryError, DriverFacts, GpuFacts, Reason
from cudasched.vocab.errors import VersionError
from cudasched.vocab.versions import (
    ComputeCapability,
    CudaVersion,
    DriverVersion,
    parse_compute_capability,
    parse_cuda,
    parse_driver,
)

__all__ = [
    "NvidiaSmiSource",
    "brand_is_datacenter",
    "check_error_output",
    "parse_nvidia_smi",
    "parse_query_text",
    "parse_query_xml",
    "parse_table",
]

# Known failure texts, matched anywhere in the output (nvidia-smi prints them on stdout).
_ERRORS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"couldn't communicate with the NVIDIA driver", re.I),
        Reason.NO_DRIVER,
    ),
    (re.compile(r"Driver/library version mismatch", re.I), Reason.VERSION_MISMATCH),
    (re.compile(r"Failed to initialize NVML", re.I), Reason.NVML_ERROR),
    (re.compile(r"^\s*No devices were found\s*$", re.I | re.M), Reason.NO_DEVICES),
)

# Brands whose GPUs NVIDIA calls data-center GPUs (forward compatibility is allowed only
# there). "NVIDIA" is the brand NVML reports for data-center parts since Ampere (A100, H100).
_DATACENTER_BRANDS = frozenset({"tesla", "nvidia"})
# Consumer and workstation brands: forward compatibility fails with error 804.
_NON_DATACENTER_PREFIXES = ("geforce", "titan", "quadro", "nvidia rtx", "nvs")

_NA = frozenset({"n/a", "not found", "[n/a]", "unknown", ""})


def brand_is_datacenter(brand: str | None) -> bool | None:
    """``True``/``False`` for brands that decide it, ``None`` for unknown and vGPU brands."""
    if brand is None:
        return None
    text = brand.strip().lower()
    if text in _DATACENTER_BRANDS:
        return True
    if text.startswith(_NON_DATACENTER_PREFIXES):
        return False
    return None


def check_error_output(text: str) -> None:
    """Raise :class:`DiscoveryError` when ``text`` is one of nvidia-smi's failure messages."""
    for pattern, reason in _ERRORS:
        if pattern.search(text):
            first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
            raise DiscoveryError(reason, f"nvidia-smi failed: {first}")


# R610's "-q" keeps the old "Driver Version" / "CUDA Version" lines with a bracketed note
# ("610.47 [Deprecated; will be removed in CUDA 14.0. Use KMD Version instead]").
_NOTE_RE = re.compile(r"\s*\[[^\]]*\]\s*$")


def _without_note(value: str) -> str:
    return _NOTE_RE.sub("", value.strip())


def _driver(value: str, where: str) -> DriverVersion:
    try:
        return parse_driver(_without_note(value))
    except VersionError as exc:
        raise DiscoveryError(Reason.BAD_VALUE, f"{where}: {exc}") from None


def _cuda(value: str | None, where: str) -> CudaVersion | None:
    """``None`` for absent, ``N/A`` or ``Not Found`` (the driver cannot say)."""
    if value is None:
        return None
    text = _without_note(value)
    if text.lower() in _NA:
        return None
    try:
        return parse_cuda(text)
    except VersionError as exc:
        raise DiscoveryError(Reason.BAD_VALUE, f"{where}: {exc}") from None


def _compute(value: str | None, where: str) -> ComputeCapability | None:
    if value is None or value.strip().lower() in _NA:
        return None
    try:
        return parse_compute_capability(value.strip())
    except VersionError as exc:
        raise DiscoveryError(Reason.BAD_VALUE, f"{where}: {exc}") from None


_MIB_RE = re.compile(r"^\s*(\d+)\s*MiB\s*$")


def _mib(value: str | None) -> int | None:
    if value is None:
        return None
    m = _MIB_RE.match(value)
    return int(m.group(1)) if m else None


def _mig(value: str | None) -> bool | None:
    if value is None:
        return None
    text = value.strip().lower()
    if text == "enabled":
        return True
    if text == "disabled":
        return False
    return None


def _gpu(
    name: str,
    *,
    compute: str | None = None,
    memory: int | None = None,
    brand: str | None = None,
    mig: bool | None = None,
    uuid: str | None = None,
    where: str,
) -> GpuFacts:
    clean_brand = brand.strip() if brand and brand.strip().lower() not in _NA else None
    return GpuFacts(
        name=name.strip(),
        compute=_compute(compute, where),
        memory_mib=memory,
        brand=clean_brand,
        datacenter=brand_is_datacenter(clean_brand),
        mig_enabled=mig,
        uuid=uuid.strip() if uuid and uuid.strip().lower() not in _NA else None,
    )


# --------------------------------------------------------------------------- XML (-q -x)


def parse_query_xml(text: str) -> DriverFacts:
    """Parse ``nvidia-smi -q -x``. Only ``<gpu>`` children of the root are GPUs; MIG devices
    live under ``<mig_devices>`` and are ignored."""
    if "<!ENTITY" in text:
        # nvidia-smi never declares entities; refusing them closes the entity-expansion door.
        raise DiscoveryError(Reason.UNRECOGNISED_OUTPUT, "XML with entity declarations refused")
    try:
        root = ET.fromstring(text.strip())
    except ET.ParseError as exc:
        raise DiscoveryError(
            Reason.UNRECOGNISED_OUTPUT, f"nvidia-smi XML does not parse: {exc}"
        ) from None
    if root.tag != "nvidia_smi_log":
        raise DiscoveryError(
            Reason.UNRECOGNISED_OUTPUT,
            f"XML root is <{root.tag}>, expected <nvidia_smi_log> from nvidia-smi -q -x",
        )
    # R610 renamed the text fields to "KMD Version" / "CUDA UMD Version"; should the XML follow,
    # the snake_case forms of the new names are read first.
    driver_text = root.findtext("kmd_version") or root.findtext("driver_version")
    if not driver_text:
        raise DiscoveryError(Reason.UNRECOGNISED_OUTPUT, "nvidia-smi XML has no <driver_version>")
    driver = _driver(driver_text, "<driver_version>")
    cuda_text = root.findtext("cuda_umd_version") or root.findtext("cuda_version")
    cuda = _cuda(cuda_text, "<cuda_version>")
    gpus: list[GpuFacts] = []
    for node in root.findall("gpu"):
        where = f"<gpu id={node.get('id', '?')!r}>"
        name = node.findtext("product_name")
        if not name:
            raise DiscoveryError(Reason.BAD_VALUE, f"{where} has no <product_name>")
        gpus.append(
            _gpu(
                name,
                compute=node.findtext("compute_cap"),
                memory=_mib(node.findtext("fb_memory_usage/total")),
                brand=node.findtext("product_brand"),
                mig=_mig(node.findtext("mig_mode/current_mig")),
                uuid=node.findtext("uuid"),
                where=where,
            )
        )
    return _facts(driver, cuda, gpus, "nvidia-smi-xml")


# --------------------------------------------------------------------------- text (-q)

_Q_LINE_RE = re.compile(r"^(?P<indent> *)(?P<key>[^:]+?)\s*(?::\s*(?P<value>.*?))?\s*$")
_Q_GPU_RE = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")


@dataclass(slots=True)
class _QSection:
    bus_id: str
    values: dict[tuple[str, ...], str]


def parse_query_text(text: str) -> DriverFacts:
    """Parse ``nvidia-smi -q``: an indentation tree of ``Key : Value`` lines.

    Values are addressed by their path of section headers, so a MIG device's own
    ``FB Memory Usage / Total`` can never be taken for the GPU's.
    """
    top, sections = _query_tree(text)
    driver_text = top.get("KMD Version") or top.get("Driver Version")
    if not driver_text:
        raise DiscoveryError(
            Reason.UNRECOGNISED_OUTPUT, "nvidia-smi -q output has no 'Driver Version' line"
        )
    driver = _driver(driver_text, "Driver Version")
    cuda_text = top.get("CUDA UMD Version") or top.get("CUDA Version")
    cuda = _cuda(cuda_text, "CUDA Version")
    gpus = [
        _gpu(
            sec.values.get(("Product Name",), ""),
            compute=sec.values.get(("Compute Capability",)),
            memory=_mib(sec.values.get(("FB Memory Usage", "Total"))),
            brand=sec.values.get(("Product Brand",)),
            mig=_mig(sec.values.get(("MIG Mode", "Current"))),
            uuid=sec.values.get(("GPU UUID",)),
            where=f"GPU {sec.bus_id}",
        )
        for sec in sections
    ]
    for gpu, sec in zip(gpus, sections, strict=True):
        if not gpu.name:
            raise DiscoveryError(Reason.BAD_VALUE, f"GPU {sec.bus_id} has no 'Product Name'")
    attached = (top.get("Attached GPUs") or "").strip()
    if not sections and attached != "0":
        # A cut-off report (a log excerpt, a truncated capture): the driver and its CUDA are
        # known, the GPUs are not. Those facts are still worth publishing.
        return DriverFacts(
            driver=driver,
            cuda=cuda,
            gpus=(),
            source="nvidia-smi-query",
            missing=Reason.NO_GPU_SECTION,
        )
    return _facts(driver, cuda, gpus, "nvidia-smi-query")


def _query_tree(text: str) -> tuple[dict[str, str], list[_QSection]]:
    """``nvidia-smi -q`` read as a tree: the top-level ``Key : Value`` lines, and each GPU's
    section with its values by path of section headers."""
    top: dict[str, str] = {}
    sections: list[_QSection] = []
    stack: list[tuple[int, str]] = []
    for raw in text.splitlines():
        if not raw.strip() or raw.lstrip().startswith("="):
            continue
        if m := _Q_GPU_RE.match(raw):
            sections.append(_QSection(m.group(1), {}))
            stack = []
            continue
        m = _Q_LINE_RE.match(raw)
        if m is None:  # pragma: no cover - the pattern matches any non-blank line
            continue
        indent = len(m.group("indent"))
        key = m.group("key").strip()
        value = m.group("value")
        if indent == 0:
            if not sections and value is not None:
                top[key] = value
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if value is None or value == "":
            stack.append((indent, key))
            continue
        if sections:
            path = (*(name for _, name in stack), key)
            sections[-1].values.setdefault(path, value)
    return top, sections


# --------------------------------------------------------------------------- plain table

_HEADER_RE = re.compile(
    r"NVIDIA-SMI\s+\S+\s+(?:Driver|KMD)\s+Version:\s*(?P<driver>\S+)"
    r"(?:\s+CUDA(?:\s+UMD)?\s+Version:\s*(?P<cuda>N/A|Not Found|[0-9][0-9.]*))?"
)
# First row of a GPU block: index, name, persistence mode (WDDM/TCC on Windows).
_ROW1_RE = re.compile(r"^\|\s*(?P<index>\d+)\s+(?P<name>.+?)\s+(?:On|Off|N/A|WDDM|TCC)\s*\|")
_ROW2_MEM_RE = re.compile(r"\|\s*(?:\d+|N/A)MiB\s*/\s*(?P<total>\d+)MiB\s*\|")
_ROW3_MIG_RE = re.compile(r"\|\s*(?P<mig>Enabled|Disabled|N/A)\s*\|\s*$")


def parse_table(text: str) -> DriverFacts:
    """Parse the plain ``nvidia-smi`` summary.

    Only the first table after the header is the GPU table; the MIG and process tables that
    follow are skipped. Names may be truncated with ``...`` by nvidia-smi itself (older layout);
    they are kept as printed.
    """
    header = _HEADER_RE.search(text)
    if header is None:
        raise DiscoveryError(
            Reason.UNRECOGNISED_OUTPUT,
            "no 'NVIDIA-SMI ... Driver Version:' header: not nvidia-smi output",
        )
    driver = _driver(header.group("driver"), "Driver Version")
    cuda = _cuda(header.group("cuda"), "CUDA Version")
    lines = text[header.end() :].splitlines()
    # The GPU table body starts after the first "|====" separator and ends at the first line
    # that is not part of a box.
    try:
        start = next(i for i, ln in enumerate(lines) if ln.startswith("|="))
    except StopIteration:
        raise DiscoveryError(
            Reason.UNRECOGNISED_OUTPUT, "nvidia-smi table has no GPU section"
        ) from None
    body: list[str] = []
    for ln in lines[start + 1 :]:
        if not ln.startswith(("|", "+")):
            break
        body.append(ln.rstrip())
    blocks: list[list[str]] = []
    for ln in body:
        if ln.startswith("+"):
            continue
        if _ROW1_RE.match(ln):
            blocks.append([ln])
        elif blocks:
            blocks[-1].append(ln)
    gpus: list[GpuFacts] = []
    for block in blocks:
        m1 = _ROW1_RE.match(block[0])
        assert m1 is not None
        memory = None
        mig = None
        if len(block) > 1 and (m2 := _ROW2_MEM_RE.search(block[1])):
            memory = int(m2.group("total"))
        if len(block) > 2 and (m3 := _ROW3_MIG_RE.search(block[2])):
            mig = _mig(m3.group("mig"))
        gpus.append(_gpu(m1.group("name"), memory=memory, mig=mig, where=f"GPU {m1['index']}"))
    return _facts(driver, cuda, gpus, "nvidia-smi-table")


# --------------------------------------------------------------------------- detection


def parse_nvidia_smi(text: str) -> DriverFacts:
    """Parse any saved nvidia-smi output, detecting its kind from the content."""
    if not text.strip():
        raise DiscoveryError(Reason.UNRECOGNISED_OUTPUT, "empty input: not nvidia-smi output")
    check_error_output(text)
    stripped = text.lstrip()
    if stripped.startswith("<?xml") or "<nvidia_smi_log" in text:
        return parse_query_xml(text)
    if "NVSMI LOG" in text:
        return parse_query_text(text)
    if "NVIDIA-SMI" in text:
        return parse_table(text)
    raise DiscoveryError(
        Reason.UNRECOGNISED_OUTPUT,
        "input is not nvidia-smi output (expected the plain table, -q or -q -x)",
    )


def _facts(
    driver: DriverVersion, cuda: CudaVersion | None, gpus: Sequence[GpuFacts], source: str
) -> DriverFacts:
    if not gpus:
        raise DiscoveryError(Reason.NO_DEVICES, "nvidia-smi output lists no GPU")
    return DriverFacts(driver=driver, cuda=cuda, gpus=tuple(gpus), source=source)


# --------------------------------------------------------------------------- runner

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=False)


@dataclass(frozen=True, slots=True)
class NvidiaSmiSource:
    """Ask the ``nvidia-smi`` binary: the XML report first (it has brand and, on newer drivers,
    compute capability), the plain table when ``-q -x`` fails. ``runner`` is injectable so
    tests never spawn processes."""

    binary: str = "nvidia-smi"
    runner: Runner = _run

    def _call(self, *args: str) -> str:
        try:
            proc = self.runner([self.binary, *args])
        except FileNotFoundError:
            raise DiscoveryError(
                Reason.NVIDIA_SMI_NOT_FOUND, f"{self.binary} not found (no NVIDIA driver?)"
            ) from None
        except (OSError, subprocess.SubprocessError) as exc:
            raise DiscoveryError(
                Reason.NVIDIA_SMI_FAILED, f"{self.binary} could not run: {exc}"
            ) from None
        output = (proc.stdout or "") + (proc.stderr or "")
        check_error_output(output)
        if proc.returncode != 0:
            raise DiscoveryError(
                Reason.NVIDIA_SMI_FAILED,
                f"{self.binary} {' '.join(args)} exited {proc.returncode}: "
                f"{output.strip().splitlines()[0] if output.strip() else 'no output'}",
            )
        return proc.stdout or ""

    def probe(self) -> DriverFacts:
        try:
            return parse_query_xml(self._call("-q", "-x"))
        except DiscoveryError as exc:
            if exc.reason not in (Reason.NVIDIA_SMI_FAILED, Reason.UNRECOGNISED_OUTPUT):
                raise
        return parse_table(self._call())
