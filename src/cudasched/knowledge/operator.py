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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cudasched.vocab.errors import KnowledgeError, one_line
from cudasched.vocab.versions import DriverVersion, parse_driver

if TYPE_CHECKING:
    from cudasched.knowledge.loading import DataFile

__all__ = [
    "CURRENT",
    "ClusterReleaseFacts",
    "DriverManagerFacts",
    "ManagedDriver",
    "MinorTag",
    "NodeGroupLabel",
    "NodeImage",
    "OpenShiftFacts",
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
    arches: tuple[str, ...] | None = None  # None: as the row's
    arch_source: str = ""


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
    arches: tuple[str, ...] | None = None  # None: not recorded
    arch_source: str = ""


@dataclass(frozen=True, slots=True)
class PrecompiledMatrix:
    """Where NVIDIA builds precompiled driver containers."""

    branches: tuple[int, ...]
    kernel_flavours: tuple[str, ...]
    dists: Mapping[str, tuple[str, ...]]  # OS tag -> LTS kernel series ("5.15")
    exclude: tuple[Mapping[str, str], ...]  # {os?, branch?, flavour?, arch?}
    source: str
    naming_source: str
    arches: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # OS tag -> arches
    arch_source: str = ""

    def excluded(
        self, os: str, branch: int | None, flavour: str | None, series: str, arch: str | None = None
    ) -> bool:
        """Whether an exclusion rule of the matrix removes this combination."""
        facts = {
            "os": os,
            "branch": str(branch),
            "flavour": flavour or "",
            "kernel": series,
            "arch": arch or "",
        }
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
    drivers: tuple[DriverVersion, ...] = ()  # the component matrix's drivers, where recorded
    drivers_source: str = ""
    restart_in_place: bool = False  # a driver pod restart keeps a same-version driver loaded
    restart_source: str = ""

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
class ManagedDriver:
    """A sign that a cloud installs a node's driver: a label with the values that say so
    (``values``) or the values that say it does not (``not_values``), or the node's OS id
    (``os_ids``)."""

    provider: str
    label: str
    values: tuple[str, ...]
    not_values: tuple[str, ...]
    os_ids: tuple[str, ...]
    source: str
    note: str = ""

    def says(self, labels: Mapping[str, str], os_id: str | None) -> str | None:
        """The label (``key=value``) or OS id that shows the cloud's driver, else ``None``."""
        if self.os_ids:
            return f"OS {os_id}" if os_id in self.os_ids else None
        value = labels.get(self.label)
        if value is None:
            return None
        if self.values and value not in self.values:
            return None
        if value in self.not_values:
            return None
        return f"{self.label}={value}"


@dataclass(frozen=True, slots=True)
class DriverManagerFacts:
    """How a node says who installs its driver."""

    deploy_label: str
    host_values: tuple[str, ...]
    node_groups: tuple[NodeGroupLabel, ...]
    source: str
    doc_source: str
    owner_label: str = ""
    owner_source: str = ""
    driver_pod_label: tuple[str, str] = ("", "")
    driver_pod_source: str = ""
    enabled_source: str = ""
    managed: tuple[ManagedDriver, ...] = ()


@dataclass(frozen=True, slots=True)
class OpenShiftFacts:
    """How an OpenShift cluster shows itself: the label every node carries (its os-release ID),
    the NFD label of RHCOS nodes without which the operator skips a node, and the ClusterPolicy
    name of an OLM install."""

    os_id_label: str
    os_id_source: str
    ostree_label: str
    ostree_source: str
    olm_policy_name: str
    olm_source: str
    tags_source: str


@dataclass(frozen=True, slots=True)
class NodeImage:
    """A cloud node-image family by the OS tag its nodes report: the newest driver a source
    names for it, and the date it ended (then a newer driver needs another family)."""

    provider: str
    os: str
    family: str
    driver: DriverVersion | None
    source: str
    ended: str | None = None
    release: str = ""
    successors: tuple[str, ...] = ()
    mix_source: str = ""


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
    openshift: OpenShiftFacts | None = None
    node_images: tuple[NodeImage, ...] = ()

    def node_image(self, os: str) -> NodeImage | None:
        """The cloud node-image family whose nodes report OS tag ``os`` (``amzn2``)."""
        return next((i for i in self.node_images if i.os == os), None)

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


_ARCHES = ("amd64", "arm64")


def _arches(doc: DataFile, value: object, where: str) -> tuple[str, ...] | None:
    """A list of ``kubernetes.io/arch`` values (``None`` when not given)."""
    if value is None:
        return None
    if not isinstance(value, list) or not value or set(map(str, value)) - set(_ARCHES):
        raise KnowledgeError(f"{doc.name}: {where}: arches lists {', '.join(_ARCHES)}")
    return tuple(str(a) for a in value)


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
        arches = _arches(doc, e.get("arches"), where)
        out[os] = OsContainers(
            os,
            branches,
            ended,
            doc.source(e, where),
            _field_text(e.get("note")),
            _minor_tags(doc, e, os, branches, where),
            arches,
            doc.source(e, where, "arch_source") if arches is not None else "",
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
        other = m.get("os_id") if isinstance(m, Mapping) else None
        prefix = f"{other}" if other else os + "."
        if not tag.startswith(prefix):
            raise KnowledgeError(f"{doc.name}: {where}: minor tag {tag!r} is not of {prefix}")
        since = _date(doc, m.get("from"), where)
        listed = m.get("branches")
        if since is None or not isinstance(listed, list) or set(listed) - set(branches):
            raise KnowledgeError(
                f"{doc.name}: {where}: minor tag {tag!r} needs `from` and branches of the row"
            )
        arches = _arches(doc, m.get("arches"), where)
        out.append(
            MinorTag(
                tag,
                since,
                _date(doc, m.get("until"), where),
                tuple(int(b) for b in listed),
                doc.source(m, where) if m.get("source") else doc.source(e, where, "minor_source"),
                arches,
                doc.source(e, where, "minor_arch_source") if arches is not None else "",
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
    rules = _exclude_rules(doc, exclude)
    arches = section.get("arches") or {}
    if not isinstance(arches, Mapping):
        raise KnowledgeError(f"{doc.name}: precompiled.arches maps OS tags to arches")
    return PrecompiledMatrix(
        branches=tuple(branches),
        kernel_flavours=tuple(str(f) for f in flavours),
        dists={
            _os(doc, k, "precompiled.dists"): tuple(str(s) for s in v) for k, v in dists.items()
        },
        exclude=tuple(rules),
        source=doc.source(section, "precompiled"),
        naming_source=doc.source(section, "precompiled", "naming_source"),
        arches={
            _os(doc, k, "precompiled.arches"): _arches(doc, v, "precompiled.arches") or ()
            for k, v in arches.items()
        },
        arch_source=doc.source(section, "precompiled", "arch_source") if arches else "",
    )


def _exclude_rules(doc: DataFile, exclude: list[Any]) -> list[Mapping[str, str]]:
    """The precompiled matrix's ``exclude`` rules: each a non-empty mapping of ``os``,
    ``branch``, ``flavour`` and ``arch`` (the combinations NVIDIA's CI does not build)."""
    rules: list[Mapping[str, str]] = []
    for rule in exclude:
        keys = {"os", "branch", "flavour", "arch"}
        if not isinstance(rule, Mapping) or not rule or set(rule) - keys:
            raise KnowledgeError(
                f"{doc.name}: precompiled.exclude: {{os, branch, flavour, arch}} rules"
            )
        rules.append({str(k): str(v) for k, v in rule.items()})
    return rules


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
                drivers=tuple(
                    doc.parse(parse_driver, str(d), where) for d in e.get("drivers") or ()
                ),
                drivers_source=doc.source(e, where, "drivers_source") if e.get("drivers") else "",
                restart_in_place=bool(e.get("restart_in_place", False)),
                restart_source=(
                    doc.source(e, where, "restart_source") if e.get("restart_in_place") else ""
                ),
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
    pod = section.get("driver_pod_label") or {}
    if not isinstance(pod, Mapping) or len(pod) != 1:
        raise KnowledgeError(f"{doc.name}: driver_manager.driver_pod_label is one key: value")
    ((pod_key, pod_value),) = pod.items()
    return DriverManagerFacts(
        deploy_label=_field_text(section.get("deploy_label")),
        host_values=tuple(str(v) for v in section.get("host_values") or ()),
        node_groups=tuple(groups),
        source=doc.source(section, "driver_manager"),
        doc_source=doc.source(section, "driver_manager", "doc_source"),
        owner_label=_field_text(section.get("owner_label")),
        owner_source=doc.source(section, "driver_manager", "owner_source"),
        driver_pod_label=(str(pod_key), str(pod_value)),
        driver_pod_source=doc.source(section, "driver_manager", "driver_pod_source"),
        enabled_source=doc.source(section, "driver_manager", "enabled_source"),
        managed=_managed(doc, section),
    )


def _managed(doc: DataFile, section: Mapping[str, Any]) -> tuple[ManagedDriver, ...]:
    out = []
    for i, e in enumerate(section.get("managed_drivers") or ()):
        where = f"driver_manager.managed_drivers #{i}"
        if not isinstance(e, Mapping) or bool(e.get("label")) == bool(e.get("os_ids")):
            raise KnowledgeError(f"{doc.name}: {where}: a label or os_ids")
        out.append(
            ManagedDriver(
                provider=_field_text(e.get("provider")),
                label=_field_text(e.get("label")),
                values=tuple(str(v) for v in e.get("values") or ()),
                not_values=tuple(str(v) for v in e.get("not_values") or ()),
                os_ids=tuple(str(v) for v in e.get("os_ids") or ()),
                source=doc.source(e, where),
                note=_field_text(e.get("note")),
            )
        )
    return tuple(out)


def _openshift(doc: DataFile) -> OpenShiftFacts | None:
    section: Any = doc.data.get("openshift")
    if section is None:
        return None
    if not isinstance(section, Mapping):
        raise KnowledgeError(f"{doc.name}: `openshift` must be a mapping")
    return OpenShiftFacts(
        os_id_label=_field_text(section.get("os_id_label")),
        os_id_source=doc.source(section, "openshift", "os_id_source"),
        ostree_label=_field_text(section.get("ostree_label")),
        ostree_source=doc.source(section, "openshift", "ostree_source"),
        olm_policy_name=_field_text(section.get("olm_policy_name")),
        olm_source=doc.source(section, "openshift", "olm_source"),
        tags_source=doc.source(section, "openshift", "tags_source"),
    )


def _node_images(doc: DataFile) -> tuple[NodeImage, ...]:
    out = []
    for i, e in enumerate(doc.entries("node_images") if "node_images" in doc.data else ()):
        where = f"node_images #{i}"
        driver = e.get("driver")
        out.append(
            NodeImage(
                provider=_field_text(e.get("provider")),
                os=_os(doc, e.get("os"), where),
                family=_field_text(e.get("family")),
                driver=doc.parse(parse_driver, str(driver), where) if driver else None,
                source=doc.source(e, where),
                ended=_date(doc, e.get("ended"), where),
                release=_field_text(e.get("release")),
                successors=tuple(_field_text(x) for x in e.get("successors") or ()),
                mix_source=doc.source(e, where, "mix_source") if e.get("mix_source") else "",
            )
        )
    return tuple(out)


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
        openshift=_openshift(doc),
        node_images=_node_images(doc),
    )
