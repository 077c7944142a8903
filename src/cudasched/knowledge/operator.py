"""GPU Operator facts from ``data/gpu-operator.yaml``: the OS tags NVIDIA publishes driver
containers for (per branch), the precompiled-driver matrix, what each operator version's
NVIDIADriver CRD accepts and which OSes it supports, the boards the operator supports beyond the
data-center GPUs (with their lowest driver container), and the node labels that tell who installs
a node's driver.

Records keep their sources like every other fact of the knowledge base. The judgements built on
them (can this branch be installed on this OS, is this pool the operator's) live in
:mod:`cudasched.compat.containers`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cudasched.vocab.errors import KnowledgeError, one_line
from cudasched.vocab.versions import DriverVersion, parse_driver

if TYPE_CHECKING:
    from cudasched.knowledge.loading import DataFile

__all__ = [
    "CURRENT",
    "ClusterReleaseFacts",
    "DriverManagerFacts",
    "MinorTag",
    "NodeGroupLabel",
    "OperatorBoard",
    "OperatorFacts",
    "OperatorVersion",
    "OsContainers",
    "PrecompiledMatrix",
    "load_operator_facts",
]

#: A branch still built for an OS: its newest release (``drivers.yaml``) applies.
CURRENT = "current"
_OS_TAG = re.compile(r"^[a-z][a-z_-]*\d+(?:\.\d+)?$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
#: ``rhel`` (every version) or ``rhel10+`` (from major version 10) in ``os_tag_major``.
_MAJOR_RULE = re.compile(r"([a-z_]+?)(?:(\d+)\+)?")


@dataclass(frozen=True, slots=True)
class MinorTag:
    """An OS tag with the minor version (``rhel9.4``) under which NVIDIA pushes the images of
    its major-version row again: from ``since``, until ``until`` (``None``: still pushed), for
    the branches the row's CI matrix built in that window."""

    tag: str
    since: str
    until: str | None
    branches: tuple[int, ...]
    source: str


@dataclass(frozen=True, slots=True)
class OsContainers:
    """The driver containers NVIDIA publishes for one OS tag: per branch, the last release
    built for it (``None``: still built, the branch's newest release applies), and the
    minor-version tags it pushes the same images under."""

    os: str
    branches: Mapping[int, DriverVersion | None]
    ended: str | None
    source: str
    note: str = ""
    minor_tags: tuple[MinorTag, ...] = ()


@dataclass(frozen=True, slots=True)
class PrecompiledMatrix:
    """Where NVIDIA builds precompiled driver containers."""

    branches: tuple[int, ...]
    kernel_flavours: tuple[str, ...]
    dists: Mapping[str, tuple[str, ...]]  # OS tag -> LTS kernel series ("5.15")
    exclude: tuple[Mapping[str, str], ...]  # {os?, branch?, flavour?, kernel?}
    source: str
    naming_source: str

    def excluded(self, os: str, branch: int | None, flavour: str | None, series: str) -> bool:
        """Whether an exclusion rule of the matrix removes this combination."""
        facts = {"os": os, "branch": str(branch), "flavour": flavour or "", "kernel": series}
        return any(all(facts.get(k) == v for k, v in rule.items()) for rule in self.exclude)


@dataclass(frozen=True, slots=True)
class OperatorVersion:
    """One GPU Operator release line (``26.7``): its NVIDIADriver fields, supported OSes, the
    chart's default driver and which OS ids its image tags shorten to the major version."""

    version: str
    tag: str
    fields: frozenset[str]
    os: tuple[str, ...]
    default_driver: DriverVersion
    os_tag_major: tuple[str, ...]
    source: str
    os_source: str
    values_source: str
    os_tag_source: str
    crd_marks: frozenset[str] = frozenset()
    crd_marks_source: str = ""

    @property
    def key(self) -> tuple[int, ...]:
        return tuple(int(p) for p in self.version.split("."))

    def accepts(self, field: str) -> bool:
        return field in self.fields

    def image_os_tag(self, os_id: str, version_id: str) -> str:
        """The OS part of the driver image tag this release forms for a node whose os-release
        says ``os_id`` and ``version_id`` (NFD's ``system-os_release`` labels): only the major
        version for the ids in :attr:`os_tag_major` (``rhel10+``: RHEL from 10), else
        ``ID`` + ``VERSION_ID`` (``rhel9.4``)."""
        major = version_id.split(".", 1)[0]
        for rule in self.os_tag_major:
            m = _MAJOR_RULE.fullmatch(rule)
            if m is None or m.group(1) != os_id:
                continue
            floor = m.group(2)
            if floor is None or (major.isdigit() and int(major) >= int(floor)):
                return f"{os_id}{major}"
        return f"{os_id}{version_id}"


@dataclass(frozen=True, slots=True)
class OperatorBoard:
    """A board the operator lists beyond the data-center GPUs, or one with a stated lowest
    driver container (``min_driver``)."""

    board: str
    min_driver: DriverVersion | None
    source: str
    note: str = ""


@dataclass(frozen=True, slots=True)
class NodeGroupLabel:
    """A label cloud-managed node groups carry (their node image usually brings the driver)."""

    label: str
    provider: str
    source: str


@dataclass(frozen=True, slots=True)
class DriverManagerFacts:
    """How a node says who installs its driver."""

    deploy_label: str
    host_values: tuple[str, ...]
    node_groups: tuple[NodeGroupLabel, ...]
    source: str
    doc_source: str


@dataclass(frozen=True, slots=True)
class ClusterReleaseFacts:
    """Where a cluster shows the GPU Operator release it runs: the NVIDIADriver CRD's name
    (its schema tells the release line, :attr:`OperatorVersion.crd_marks`) and the labels the
    Helm chart puts on the ClusterPolicy (``app.kubernetes.io/version``, ``helm.sh/chart``)."""

    crd: str
    version_labels: tuple[str, ...]
    chart: str
    source: str
    status_source: str


@dataclass(frozen=True, slots=True)
class OperatorFacts:
    """Everything ``gpu-operator.yaml`` says."""

    containers: Mapping[str, OsContainers]
    precompiled: PrecompiledMatrix
    versions: tuple[OperatorVersion, ...]  # newest first
    boards: tuple[OperatorBoard, ...]
    driver_manager: DriverManagerFacts
    cluster_release: ClusterReleaseFacts | None = None

    def os_row(self, tag: str) -> tuple[OsContainers, MinorTag | None] | None:
        """The containers row of an image OS tag: its own row, or the row whose images NVIDIA
        pushes again under this minor-version tag (with that tag's facts); ``None``: neither."""
        row = self.containers.get(tag)
        if row is not None:
            return row, None
        for candidate in self.containers.values():
            for minor in candidate.minor_tags:
                if minor.tag == tag:
                    return candidate, minor
        return None

    @property
    def newest(self) -> OperatorVersion:
        return self.versions[0]

    def version(self, text: str) -> OperatorVersion | None:
        """``26.7``, ``v26.7.0``, ``26.7.1`` -> the release line's facts (``None``: unknown)."""
        m = re.fullmatch(r"v?(\d{1,3})\.(\d{1,3})(?:\.\d{1,3})?", text.strip())
        if m is None:
            return None
        wanted = f"{int(m.group(1))}.{int(m.group(2))}"
        return next((v for v in self.versions if v.version == wanted), None)

    def board(self, name: str) -> OperatorBoard | None:
        """The board by the driver's name or GFD's (spaces as dashes), any case."""
        wanted = name.replace("-", " ").strip().lower()
        for b in self.boards:
            if b.board.lower() == wanted:
                return b
        return None


# --------------------------------------------------------------------------- loading


def _field_text(value: object) -> str:
    """A text field of the data file on one line (YAML folds keep newlines); absent is ``""``."""
    return one_line(value or "")


def _os(doc: DataFile, value: object, where: str) -> str:
    text = str(value)
    if not _OS_TAG.match(text):
        raise KnowledgeError(f"{doc.name}: {where}: {text!r} is not an OS tag (ubuntu22.04)")
    return text


def _date(doc: DataFile, value: object, where: str) -> str | None:
    if value is None:
        return None
    text = str(value)
    if not _DATE.match(text):
        raise KnowledgeError(f"{doc.name}: {where}: {text!r} is not a date YYYY-MM-DD")
    return text


def _containers(doc: DataFile) -> dict[str, OsContainers]:
    out: dict[str, OsContainers] = {}
    for i, e in enumerate(doc.entries("driver_containers")):
        where = f"driver_containers #{i}"
        os = _os(doc, e.get("os"), where)
        raw = e.get("branches")
        if not isinstance(raw, Mapping) or os in out:
            raise KnowledgeError(f"{doc.name}: {where}: a new os with a branches mapping")
        branches: dict[int, DriverVersion | None] = {}
        for branch, last in raw.items():
            if not isinstance(branch, int):
                raise KnowledgeError(f"{doc.name}: {where}: branch {branch!r} is not an integer")
            if last == CURRENT:
                branches[branch] = None
                continue
            release = doc.parse(parse_driver, str(last), where)
            if release.branch != branch:
                raise KnowledgeError(
                    f"{doc.name}: {where}: {release} is not a release of R{branch}"
                )
            branches[branch] = release
        ended = _date(doc, e.get("ended"), where)
        if ended is not None and None in branches.values():
            raise KnowledgeError(f"{doc.name}: {where}: an ended OS has no current branch")
        out[os] = OsContainers(
            os,
            branches,
            ended,
            doc.source(e, where),
            _field_text(e.get("note")),
            _minor_tags(doc, e, os, branches, where),
        )
    return out


def _minor_tags(
    doc: DataFile,
    e: Mapping[str, Any],
    os: str,
    branches: Mapping[int, DriverVersion | None],
    where: str,
) -> tuple[MinorTag, ...]:
    raw = e.get("minor_tags") or []
    if not isinstance(raw, list):
        raise KnowledgeError(f"{doc.name}: {where}: minor_tags is a list")
    out = []
    for m in raw:
        tag = _os(doc, m.get("tag") if isinstance(m, Mapping) else m, where)
        if not tag.startswith(os + "."):
            raise KnowledgeError(f"{doc.name}: {where}: minor tag {tag!r} is not of {os}")
        since = _date(doc, m.get("from"), where)
        listed = m.get("branches")
        if since is None or not isinstance(listed, list) or set(listed) - set(branches):
            raise KnowledgeError(
                f"{doc.name}: {where}: minor tag {tag!r} needs `from` and branches of the row"
            )
        out.append(
            MinorTag(
                tag,
                since,
                _date(doc, m.get("until"), where),
                tuple(int(b) for b in listed),
                doc.source(e, where, "minor_source"),
            )
        )
    return tuple(out)


def _precompiled(doc: DataFile) -> PrecompiledMatrix:
    section = doc.data.get("precompiled")
    if not isinstance(section, Mapping):
        raise KnowledgeError(f"{doc.name}: `precompiled` must be a mapping")
    branches = section.get("branches")
    flavours = section.get("kernel_flavours")
    dists = section.get("dists")
    exclude = section.get("exclude") or []
    if (
        not isinstance(branches, list)
        or not all(isinstance(b, int) for b in branches)
        or not isinstance(flavours, list)
        or not isinstance(dists, Mapping)
        or not isinstance(exclude, list)
    ):
        raise KnowledgeError(
            f"{doc.name}: precompiled needs branches (integers), kernel_flavours, dists, exclude"
        )
    rules: list[Mapping[str, str]] = []
    for rule in exclude:
        if not isinstance(rule, Mapping) or not rule or set(rule) - {"os", "branch", "flavour"}:
            raise KnowledgeError(f"{doc.name}: precompiled.exclude: {{os, branch, flavour}} rules")
        rules.append({str(k): str(v) for k, v in rule.items()})
    return PrecompiledMatrix(
        branches=tuple(branches),
        kernel_flavours=tuple(str(f) for f in flavours),
        dists={
            _os(doc, k, "precompiled.dists"): tuple(str(s) for s in v) for k, v in dists.items()
        },
        exclude=tuple(rules),
        source=doc.source(section, "precompiled"),
        naming_source=doc.source(section, "precompiled", "naming_source"),
    )


def _versions(doc: DataFile) -> tuple[OperatorVersion, ...]:
    out: list[OperatorVersion] = []
    for i, e in enumerate(doc.entries("operator_versions")):
        where = f"operator_versions #{i} ({e.get('version')})"
        version = str(e.get("version"))
        if not re.fullmatch(r"\d+\.\d+", version):
            raise KnowledgeError(f"{doc.name}: {where}: version is MAJOR.MINOR")
        fields, oses = e.get("fields"), e.get("os")
        if not isinstance(fields, list) or not isinstance(oses, list):
            raise KnowledgeError(f"{doc.name}: {where}: fields and os are lists")
        out.append(
            OperatorVersion(
                version=version,
                tag=str(e.get("tag")),
                fields=frozenset(str(f) for f in fields),
                os=tuple(_os(doc, o, where) for o in oses),
                default_driver=doc.parse(parse_driver, str(e.get("default_driver")), where),
                os_tag_major=tuple(str(o) for o in e.get("os_tag_major") or ()),
                source=doc.source(e, where),
                os_source=doc.source(e, where, "os_source"),
                values_source=doc.source(e, where, "values_source"),
                os_tag_source=doc.source(e, where, "os_tag_source"),
                crd_marks=frozenset(str(f) for f in e.get("crd_marks") or ()),
                crd_marks_source=doc.source(e, where, "crd_marks_source"),
            )
        )
    if not out:
        raise KnowledgeError(f"{doc.name}: operator_versions is empty")
    out.sort(key=lambda v: v.key, reverse=True)
    return tuple(out)


def _boards(doc: DataFile) -> tuple[OperatorBoard, ...]:
    out = []
    for i, e in enumerate(doc.entries("operator_boards")):
        where = f"operator_boards #{i}"
        minimum = e.get("min_driver")
        out.append(
            OperatorBoard(
                board=_field_text(e.get("board")),
                min_driver=doc.parse(parse_driver, str(minimum), where) if minimum else None,
                source=doc.source(e, where),
                note=_field_text(e.get("note")),
            )
        )
    return tuple(out)


def _driver_manager(doc: DataFile) -> DriverManagerFacts:
    section: Any = doc.data.get("driver_manager")
    if not isinstance(section, Mapping):
        raise KnowledgeError(f"{doc.name}: `driver_manager` must be a mapping")
    groups = []
    for i, e in enumerate(section.get("node_groups") or ()):
        where = f"driver_manager.node_groups #{i}"
        groups.append(
            NodeGroupLabel(
                _field_text(e.get("label")), _field_text(e.get("provider")), doc.source(e, where)
            )
        )
    return DriverManagerFacts(
        deploy_label=_field_text(section.get("deploy_label")),
        host_values=tuple(str(v) for v in section.get("host_values") or ()),
        node_groups=tuple(groups),
        source=doc.source(section, "driver_manager"),
        doc_source=doc.source(section, "driver_manager", "doc_source"),
    )


def _cluster_release(doc: DataFile) -> ClusterReleaseFacts:
    section: Any = doc.data.get("cluster_release")
    if not isinstance(section, Mapping):
        raise KnowledgeError(f"{doc.name}: `cluster_release` must be a mapping")
    labels = section.get("version_labels")
    if not isinstance(labels, list) or not labels:
        raise KnowledgeError(f"{doc.name}: cluster_release.version_labels is a non-empty list")
    return ClusterReleaseFacts(
        crd=_field_text(section.get("crd")),
        version_labels=tuple(str(v) for v in labels),
        chart=_field_text(section.get("chart")),
        source=doc.source(section, "cluster_release"),
        status_source=doc.source(section, "cluster_release", "status_source"),
    )


def load_operator_facts(doc: DataFile) -> OperatorFacts:
    """``gpu-operator.yaml`` into :class:`OperatorFacts` (a :class:`KnowledgeError` for a
    malformed file: a packaging bug)."""
    return OperatorFacts(
        containers=_containers(doc),
        precompiled=_precompiled(doc),
        versions=_versions(doc),
        boards=_boards(doc),
        driver_manager=_driver_manager(doc),
        cluster_release=_cluster_release(doc),
    )
