"""Everything a command reads before it can answer: the knowledge base, the image table and the
cluster (a file, the bundled sample cluster, or the live cluster), loaded one way for every
command so the same objects always give the same answers.

A command that reads a cluster declares where it comes from in one line: decorate it with
:func:`cluster_source` and give it a parameter ``source: ClusterSource``; it then takes
``--cluster FILE|DIR``, ``--live``, ``--sample``, ``--kubeconfig FILE`` and ``--context NAME``,
and, unless ``scoped=False``, kubectl's ``-n/--namespace``, ``-A/--all-namespaces`` and
``-l/--selector`` (``source.scope``); it calls :func:`load_cluster` with ``source``.

Without any of them a command reads the cluster kubectl would talk to (``$KUBECONFIG``,
``~/.kube/config``, the in-cluster service account): the live cluster is the default, as it is
for kubectl. The bundled sample cluster is judged when ``--sample`` asks for it, or when no
cluster is configured at all; then the first line on stderr says so (:func:`load_cluster`), and
the JSON output says so too (:func:`judged`), so nobody mistakes the sample's nodes for their
own.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, overload

import typer

from cudasched.cli.app import note, note_first
from cudasched.vocab.errors import InputError, one_line

if TYPE_CHECKING:
    from rich.console import Console

    from cudasched.cli.knowledgesource import FollowPlan
    from cudasched.cluster.fleet import Fleet
    from cudasched.cluster.scope import Scope
    from cudasched.cluster.snapshot import ClusterSnapshot
    from cudasched.compat.toolkitmode import ToolkitRead
    from cudasched.knowledge import KnowledgeBase
    from cudasched.knowledge.bundlecheck import BundleKnowledge
    from cudasched.knowledge.images import ImageTable
    from cudasched.kube.live import ObjectRef
    from cudasched.operations.audit.nodegroups import NodeGroup
    from cudasched.settings.config import WebhookConfig
    from cudasched.vocab.kinds import Kind
    from cudasched.vocab.requirements import ToolkitMode
    from cudasched.webhook.state.clusterstate import ClusterState

__all__ = [
    "SAMPLE_NOTE",
    "ClusterFileOption",
    "ClusterSource",
    "ContextOption",
    "KubeconfigOption",
    "LiveOption",
    "cluster_source",
    "cluster_state",
    "follow_knowledge",
    "judged",
    "load_cluster",
    "load_cluster_inputs",
    "load_gpu_operator",
    "load_images",
    "load_knowledge",
    "load_node_labels",
    "load_node_templates",
    "load_settings",
    "load_toolkit_mode",
    "require_nodes",
    "with_image_sources",
]

Command = TypeVar("Command", bound=Callable[..., Any])

ClusterFileOption = Annotated[
    Path | None,
    typer.Option(
        "--cluster",
        help="Cluster dump: `cudasched snapshot` output, or what kubectl get -A -o yaml prints "
        "for nodes, pods, inferenceservices, servingruntimes and clusterservingruntimes; or a "
        "directory "
        "of such YAML/JSON manifests (read recursively, as CI checks a repository). Default: "
        "the live cluster kubectl would use; the bundled sample cluster when none is "
        "configured (said first on stderr).",
    ),
]
LiveOption = Annotated[
    bool,
    typer.Option(
        "--live",
        help="Read the live cluster (read-only): the in-cluster service account, else "
        "$KUBECONFIG, else ~/.kube/config, as kubectl does. The default when one is "
        "configured; with --live, none configured is an error instead of the sample.",
    ),
]
SampleOption = Annotated[
    bool,
    typer.Option(
        "--sample",
        help="Judge the bundled sample cluster (21 nodes, KServe runtimes, services and "
        "pods), not yours: to try cudasched, or to run the documentation's examples.",
    ),
]
KubeconfigOption = Annotated[
    Path | None,
    typer.Option("--kubeconfig", help="kubeconfig file of the live cluster (implies --live)."),
]
ContextOption = Annotated[
    str | None,
    typer.Option("--context", help="kubeconfig context of the live cluster (implies --live)."),
]

NamespaceOption = Annotated[
    str | None,
    typer.Option(
        "-n",
        "--namespace",
        help="Namespace: only objects of this namespace (nodes and other cluster-scoped "
        "objects stay, as with kubectl); for explain TYPE/NAME, where NAME is. Default: every "
        "namespace (explain TYPE/NAME: the context's, else default).",
    ),
]
AllNamespacesOption = Annotated[
    bool,
    typer.Option("-A", "--all-namespaces", help="Workloads of every namespace (the default)."),
]
SelectorOption = Annotated[
    str | None,
    typer.Option(
        "-l",
        "--selector",
        help="Only objects whose labels match this selector, as kubectl -l: key=value, "
        "key!=value, 'key in (a,b)', 'key notin (a)', key, !key; commas AND them.",
    ),
]

_SOURCE_OPTIONS = (
    ("cluster", ClusterFileOption, None),
    ("live", LiveOption, False),
    ("sample", SampleOption, False),
    ("kubeconfig", KubeconfigOption, None),
    ("context", ContextOption, None),
)
_SCOPE_OPTIONS = (
    ("namespace", NamespaceOption, None),
    ("all_namespaces", AllNamespacesOption, False),
    ("selector", SelectorOption, None),
)


#: The one line said first on stderr when a command judges the bundled sample cluster because
#: no cluster is configured (not when ``--sample`` asked for it).
SAMPLE_NOTE = (
    "no cluster configured (no $KUBECONFIG file, no ~/.kube/config, not in a pod): judging "
    "the bundled sample cluster, not yours (--sample to ask for it; --kubeconfig FILE or "
    "--cluster FILE|DIR for yours)"
)


@dataclass(frozen=True, slots=True)
class ClusterSource:
    """Where a command's cluster comes from: a file, the live cluster (``live``, implied by
    ``kubeconfig``/``context``, and the default when a cluster is configured), or the bundled
    sample cluster (``sample``, and the fallback when none is)."""

    cluster: Path | None = None
    live: bool = False
    sample: bool = False
    kubeconfig: Path | None = None
    context: str | None = None
    namespace: str | None = None
    all_namespaces: bool = False
    selector: str | None = None

    @property
    def is_sample(self) -> bool:
        """Whether the bundled sample cluster is judged (asked for, or no file and not live)."""
        return self.cluster is None and not self.is_live

    @property
    def is_fallback(self) -> bool:
        """Whether the sample is judged only because no cluster is configured: nothing named
        a cluster and ``--sample`` was not given."""
        return self.is_sample and not self.sample

    @property
    def named(self) -> bool:
        """Whether the command line named a cluster (a file, ``--live`` and its implied forms,
        or ``--sample``)."""
        return self.cluster is not None or self.sample or self._live_asked

    @property
    def scope(self) -> Scope:
        """``-n``/``-A``/``-l`` as a :class:`~cudasched.cluster.scope.Scope`; an
        ``InputError`` for ``-n`` with ``-A`` or a selector that does not parse."""
        from cudasched.cluster.scope import Scope
        from cudasched.vocab.labelsyntax import dns_label_ok
        from cudasched.vocab.selectors import parse_selector

        if self.namespace is not None and self.all_namespaces:
            raise InputError(
                f"-n {self.namespace!r} and -A/--all-namespaces ask for one namespace and for "
                "all: give one"
            )
        if self.namespace is not None and not dns_label_ok(self.namespace):
            raise InputError(
                f"-n/--namespace {self.namespace!r} is not a namespace name (at most 63 "
                "lower-case letters, digits and '-', starting and ending with a letter or digit)"
            )
        return Scope(self.namespace, parse_selector(self.selector))

    @property
    def is_live(self) -> bool:
        """Whether the live cluster is read: asked for (``--kubeconfig``/``--context`` imply
        ``--live``), or nothing named and a cluster is configured, as kubectl finds one."""
        if self._live_asked:
            return True
        if self.named:
            return False
        from cudasched.kube.client import configured

        return configured()

    @property
    def _live_asked(self) -> bool:
        return self.live or self.kubeconfig is not None or self.context is not None

    def checked(self) -> ClusterSource:
        """``self``, or an ``InputError`` when two clusters are asked for (a file, the live
        one, the sample)."""
        live = "--live" if self.live else "--kubeconfig/--context"
        if self.cluster is not None and self._live_asked:
            raise InputError(
                f"--cluster {str(self.cluster)!r} and {live} name two clusters: give a file or "
                "the live cluster, not both"
            )
        if self.sample and (self.cluster is not None or self._live_asked):
            other = f"--cluster {str(self.cluster)!r}" if self.cluster is not None else live
            raise InputError(f"--sample and {other} name two clusters: give one")
        return self


@overload
def cluster_source(command: Command, *, scoped: bool = True) -> Command: ...
@overload
def cluster_source(
    command: None = None, *, scoped: bool = True
) -> Callable[[Command], Command]: ...
def cluster_source(command: Command | None = None, *, scoped: bool = True) -> Any:
    """Give a Typer command the cluster-source options: its parameter ``source:
    ClusterSource`` becomes ``--cluster``, ``--live``, ``--kubeconfig`` and ``--context``
    (and, when ``scoped``, ``-n``, ``-A`` and ``-l``) and is passed in as one
    :class:`ClusterSource`. Put it below ``@app.command(...)``; ``@cluster_source`` or
    ``@cluster_source(scoped=False)``."""
    if command is None:
        return functools.partial(cluster_source, scoped=scoped)
    options = _SOURCE_OPTIONS + (_SCOPE_OPTIONS if scoped else ())
    signature = inspect.signature(command, eval_str=True)
    taken = {name for name, _, _ in options} & set(signature.parameters)
    if "source" not in signature.parameters or taken:
        raise TypeError(
            f"{command.__name__}: @cluster_source needs a 'source' parameter and none named "
            f"{', '.join(sorted(taken))}"
        )
    params: list[inspect.Parameter] = []
    for param in signature.parameters.values():
        if param.name == "source":
            params.extend(
                inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=d, annotation=a)
                for name, a, d in options
            )
        else:
            params.append(param.replace(kind=inspect.Parameter.KEYWORD_ONLY))

    @functools.wraps(command)
    def with_source(**kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name, _, _ in options}
        return command(source=ClusterSource(**values), **kwargs)

    new = signature.replace(parameters=params)
    # Typer reads the options from __signature__, which inspect honours on any function but
    # typeshed does not declare on one (attr-defined).
    with_source.__signature__ = new  # type: ignore[attr-defined]
    with_source.__annotations__ = {p.name: p.annotation for p in params}
    return with_source


def load_knowledge() -> KnowledgeBase:
    """The knowledge base (NVIDIA's tables, GPUs, frameworks, containers): the built-in one,
    its parsed data kept between commands in this user's cache, or the bundle ``cudasched
    --knowledge`` names (:mod:`cudasched.cli.knowledgesource`)."""
    from cudasched.cli.knowledgecache import user_cache
    from cudasched.cli.knowledgesource import chosen_knowledge
    from cudasched.knowledge import KnowledgeBase

    chosen = chosen_knowledge()
    return chosen.kb if chosen is not None else KnowledgeBase.load(user_cache())


def follow_knowledge() -> tuple[BundleKnowledge, FollowPlan | None]:
    """For a command that runs until stopped (the webhook, the agent): the knowledge to start
    with, read now as :func:`load_knowledge` reads it, and how to follow its registry reference
    from now on (``None``: nothing to follow; :mod:`cudasched.cli.knowledgesource`)."""
    from cudasched.cli.knowledgesource import followed_knowledge

    return followed_knowledge()


def load_settings(path: Path | None) -> WebhookConfig:
    """The webhook's configuration (``--config``), read as the webhook reads it; ``None``
    gives the defaults. Bad files are an ``InputError`` naming the setting."""
    from cudasched.cli.knowledgesource import configure
    from cudasched.settings.config import load_config

    settings = load_config(path)
    configure(settings.knowledge)
    return settings


def load_images(kb: KnowledgeBase, settings: WebhookConfig | None = None) -> ImageTable:
    """The image table admission uses: the built-in one (well-known inference images and the
    CUDA they were built for) or the followed bundle's, with ``settings``' ``imageOverrides``
    in front and its ``imageMirrors`` before the table's own mirrors."""
    from cudasched.cli.knowledgesource import chosen_images
    from cudasched.knowledge.images import ImageTable

    base = chosen_images(kb)  # the followed bundle's table, when kb is its knowledge
    if settings is None:
        return base if base is not None else ImageTable.builtin(kb)
    return ImageTable.from_config(settings, kb=kb, base=base)


def load_cluster(
    source: ClusterSource | Path | None = None,
    nodes: Path | None = None,
    *,
    fetch: Sequence[ObjectRef] = (),
    admission: bool = False,
) -> ClusterSnapshot:
    """The cluster a command works on, as one snapshot whatever its source.

    ``source``: a :class:`ClusterSource` (what :func:`cluster_source` passes a command), or
    a dump's path (``None``: no file). ``nodes`` (``kubectl get nodes -o yaml``) replaces the
    cluster's nodes; given alone (no cluster named), no cluster is read at all. The live
    cluster when ``source.is_live``: Nodes, Pods, InferenceServices, (Cluster)ServingRuntimes,
    LLMInferenceServices and NVIDIADrivers listed read-only (progress on stderr when it is a
    terminal; a note on stderr per product whose CRDs are not installed), plus the ``fetch``
    objects fetched by name, and with ``admission`` the webhook registrations (the audit's
    likeliest cause of misplaced pods). Else the dump ``source.cluster``; else the bundled
    sample cluster,
    with :data:`SAMPLE_NOTE` said on stderr before the answer when no cluster is configured
    (:func:`~cudasched.cli.app.note_first`). Raises ``InputError`` (one line) for every
    problem: a bad file, an unreachable cluster, rejected credentials, a missing permission.
    """
    from cudasched.cluster.snapshot import (
        ClusterSnapshot,
        bundled_snapshot,
        load_nodes,
    )

    if not isinstance(source, ClusterSource):
        source = ClusterSource(cluster=source)
    source = source.checked()
    if nodes is not None and not source.named:
        return ClusterSnapshot(source="").with_nodes(load_nodes(nodes))
    exists: bool | None = None
    if source.is_live:
        snapshot, exists = _read_live(source, fetch, admission)
    elif source.cluster is not None:
        snapshot = _load_dump(source.cluster)
    else:
        if source.is_fallback:
            note_first(SAMPLE_NOTE)
        snapshot = bundled_snapshot()
    if source.namespace is not None:
        _namespace_checked(source.namespace, snapshot, exists)
    if nodes is not None:
        snapshot = snapshot.with_nodes(load_nodes(nodes))
    return snapshot


def _namespace_checked(name: str, snapshot: ClusterSnapshot, exists: bool | None) -> None:
    """An ``InputError`` when the ``-n`` namespace does not exist: the live cluster says so
    (``exists``), or, where it does not tell (a dump; an identity that may not get
    namespaces), neither a Namespace object of that name nor any object in it is in the
    cluster read. A typo in a cron job's ``-n`` must not read as a clean namespace."""
    where = snapshot.source or "the cluster"
    if exists is False:
        raise InputError(f"namespace {name!r} does not exist in {where}")
    if exists is True:
        return
    from cudasched.vocab.objects import name_of, namespace_of

    cluster_scoped = {"Node", "ClusterServingRuntime", "NVIDIADriver", "Namespace"}
    known = set()
    for obj in snapshot.objects():
        if obj.get("kind") == "Namespace":
            known.add(name_of(obj))
        elif obj.get("kind") not in cluster_scoped:
            known.add(namespace_of(obj))
    if name not in known:
        raise InputError(
            f"namespace {name!r} does not exist in {where}: none of its objects is in it"
        )


def _load_dump(path: Path) -> ClusterSnapshot:
    """A dump file, or every ``*.yaml``/``*.yml``/``*.json`` file under a directory (sorted,
    hidden ones skipped) as one cluster: a repository of manifests checked in CI."""
    from cudasched.cluster.snapshot import ClusterSnapshot, load_snapshot, parse_objects
    from cudasched.vocab import inputfiles

    if not path.is_dir():
        return load_snapshot(path)
    files = sorted(
        f
        for f in path.rglob("*")
        if f.suffix in (".yaml", ".yml", ".json")
        and f.is_file()
        and not any(part.startswith(".") for part in f.relative_to(path).parts)
    )
    if not files:
        raise InputError(
            f"--cluster {str(path)!r}: the directory holds no .yaml, .yml or .json file"
        )
    objects = []
    for file in files:
        label = str(file)
        objects.extend(parse_objects(inputfiles.read_text(file, label, inputfiles.CLUSTER), label))
    return ClusterSnapshot.from_objects(objects, source=str(path))


def judged(source: ClusterSource, snapshot: ClusterSnapshot) -> dict[str, Any]:
    """What a JSON answer says it judged: ``{"source": ..., "sample": bool, "scope": ...}``."""
    doc: dict[str, Any] = {
        "source": snapshot.source or ("live cluster" if source.is_live else "cluster"),
        "sample": source.is_sample,
    }
    try:
        scope = source.scope.describe()
    except InputError:
        scope = ""
    if scope:
        doc["scope"] = scope
    return doc


def load_gpu_operator(
    source: ClusterSource, snapshot: ClusterSnapshot, crd: str
) -> list[Mapping[str, Any]]:
    """What tells the GPU Operator release: with ``--live`` the cluster's ClusterPolicies and
    its NVIDIADriver CRD ``crd``, read through :mod:`cudasched.kube.gpuoperator` (a note on
    stderr for what the identity may not read); from a dump, the ClusterPolicies and CRDs it
    holds. Raises ``InputError`` when the live cluster fails to answer."""
    from cudasched.vocab.kinds import GPU_OPERATOR_KINDS

    kinds = {k.kind for k in GPU_OPERATOR_KINDS}
    held: list[Mapping[str, Any]] = [o for o in snapshot.other if o.get("kind") in kinds]
    if not source.is_live:
        return held
    from cudasched.kube.gpuoperator import read_live_gpu_operator

    read = read_live_gpu_operator(crd=crd, kubeconfig=source.kubeconfig, context=source.context)
    for message in read.unread:
        note(f"{message}: the GPU Operator release is read from what remains")
    return [*read.objects, *held]


def load_toolkit_mode(
    given: ToolkitMode | None,
    settings: WebhookConfig,
    source: ClusterSource,
    snapshot: ClusterSnapshot,
    kb: KnowledgeBase,
) -> ToolkitRead:
    """The container toolkit's mode the nodes run (:mod:`cudasched.compat.toolkitmode`):
    ``--toolkit-mode``, else the ``--config`` file's ``toolkitMode`` when it sets one, else
    the GPU Operator's ClusterPolicy (read with ``--live``, or held by the dump), else
    legacy. A mode read from a ClusterPolicy is said on stderr."""
    from cudasched.compat.toolkitmode import ToolkitRead, toolkit_mode_of

    if given is not None:
        return ToolkitRead(given, "--toolkit-mode")
    if "toolkit_mode" in settings.model_fields_set:
        return ToolkitRead(settings.toolkit_mode, "the --config file's toolkitMode")
    crd = kb.operator.cluster_release.crd if kb.operator.cluster_release else ""
    objects = load_gpu_operator(source, snapshot, crd)
    read = toolkit_mode_of(kb, objects)
    if any(o.get("kind") == "ClusterPolicy" for o in objects):
        note(f"container toolkit mode {read.mode.value}: {read.source}")
    return read


def with_image_sources(
    images: ImageTable,
    source: ClusterSource,
    resolve: bool,
    registry_config: Path | None,
    plain_http: list[str] | None,
    snapshot: ClusterSnapshot | None = None,
) -> ImageTable:
    """``images`` asking the registries for images' configs with ``--resolve-images`` (with
    ``--registry-config`` and ``--plain-http``, through the table's mirrors), completed with
    the image facts the cluster keeps (ImageFacts: what the webhook read of each image, a
    person's override; :mod:`cudasched.knowledge.imagefacts`), which answer alone where the
    registries are not asked: listed from the live cluster, or those a dump (``snapshot``, as
    ``cudasched snapshot --live`` writes it) holds, so that a dump answers as its cluster."""
    from cudasched.cli.options import registry_source

    configs = registry_source(resolve, registry_config, plain_http, mirrors=images.mirrors)
    objects = stored_image_facts(source, snapshot)
    if not objects:
        return images.with_configs(configs)
    from cudasched.knowledge.imagefacts import FactIndex, StoredSource

    index = FactIndex.from_objects(objects)
    return images.with_configs(StoredSource(index, configs) if len(index) else configs)


def stored_image_facts(
    source: ClusterSource, snapshot: ClusterSnapshot | None
) -> list[Mapping[str, Any]]:
    """The ImageFacts objects of the cluster read: listed live (a note when the identity may
    not), else held by the dump."""
    if not source.is_live:
        from cudasched.vocab.kinds import IMAGE_FACTS

        held = snapshot.other if snapshot is not None else ()
        return [o for o in held if o.get("kind") == IMAGE_FACTS.kind]
    from cudasched.kube.imagefacts import read_live_image_facts

    objects, unread = read_live_image_facts(kubeconfig=source.kubeconfig, context=source.context)
    if unread:
        note(unread)
    return list(objects)


def _read_live(
    source: ClusterSource, fetch: Sequence[ObjectRef], admission: bool = False
) -> tuple[ClusterSnapshot, bool | None]:
    """The live cluster, and whether the ``-n`` namespace exists there (``None``: not asked,
    or not told)."""
    from cudasched.kube.live import absent_notes, read_live_cluster

    with _stderr_progress() as progress:
        result = read_live_cluster(
            kubeconfig=source.kubeconfig,
            context=source.context,
            fetch=fetch,
            progress=progress,
            namespace=source.namespace,
            admission=admission,
        )
    for message in absent_notes(result.absent, result.denied):
        sys.stderr.write(f"cudasched: note: {message}\n")
    return result.snapshot, result.namespace_exists


class TerminalProgress:
    """Live-read progress drawn with rich: one line per kind, counting objects as pages come
    in; the lines disappear when the read is done."""

    def __init__(self, console: Console) -> None:
        from rich.progress import Progress, SpinnerColumn, TextColumn

        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TextColumn("{task.fields[count]}"),
            console=console,
            transient=True,
        )
        self._tasks: dict[str, Any] = {}

    def __enter__(self) -> TerminalProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def start(self, kind: Kind) -> None:
        self._tasks[kind.plural] = self._progress.add_task(
            f"listing {kind.plural}", total=None, count=""
        )

    def advance(self, kind: Kind, count: int) -> None:
        self._progress.update(self._tasks[kind.plural], count=f"{count:,}")

    def finish(self, kind: Kind, count: int | None) -> None:
        shown = "not served" if count is None else f"{count:,}"
        self._progress.update(
            self._tasks[kind.plural], description=f"listed {kind.plural}", count=shown
        )


@contextlib.contextmanager
def _stderr_progress() -> Iterator[TerminalProgress | None]:
    """Progress on stderr when it is a terminal, nothing otherwise (pipes and CI logs)."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console

    with TerminalProgress(Console(stderr=True)) as progress:
        yield progress


def _stringify(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def load_node_labels(path: Path) -> tuple[str, dict[str, str]]:
    """Read a label map, or one Node object, from a YAML or JSON file.

    Returns the node name (``metadata.name``, else the file's stem) and its labels as strings.
    """
    from cudasched.vocab import inputfiles

    label = f"node labels file {str(path)!r}"
    limits = inputfiles.SETTINGS
    docs = inputfiles.parse_documents(inputfiles.read_text(path, label, limits), label, limits)
    if len(docs) > 1:
        raise InputError(f"{label}: expected one YAML document, found {len(docs)}")
    doc = docs[0] if docs else None
    if doc is None:
        raise InputError(
            f"node labels file {str(path)!r} is empty: expected a map of labels or a Node object "
            "(kubectl get node NAME -o yaml)"
        )
    if not isinstance(doc, Mapping):
        raise InputError(
            f"node labels file {str(path)!r}: expected a map of labels or a Node object, "
            f"got {type(doc).__name__}"
        )
    name = f"the node of {path.name}"  # a bare label map names no node
    labels: object = doc
    if "metadata" in doc or doc.get("kind") == "Node":
        if doc.get("kind") not in (None, "Node"):
            raise InputError(
                f"node labels file {str(path)!r}: expected a Node object, got kind "
                f"{doc.get('kind')!r}"
            )
        meta = doc.get("metadata") or {}
        if not isinstance(meta, Mapping):
            raise InputError(f"node labels file {str(path)!r}: metadata is not a map")
        name = str(meta.get("name") or name)
        labels = meta.get("labels") or {}
    if not isinstance(labels, Mapping):
        raise InputError(f"node labels file {str(path)!r}: labels are not a map")
    out: dict[str, str] = {}
    for key, value in labels.items():
        if isinstance(value, Mapping | list) or value is None:
            raise InputError(
                f"node labels file {str(path)!r}: label {key!r} has value {value!r}; "
                "expected a string"
            )
        out[str(key)] = _stringify(value)
    return name, out


def load_node_templates(path: Path | None) -> list[NodeGroup]:
    """Declared node groups from a file of ``cudasched node-template`` documents (JSON, or YAML
    with one or more documents; a list counts as its items). ``None``: no file, no groups."""
    if path is None:
        return []
    import yaml

    from cudasched.operations.audit.nodegroups import groups_from_templates

    try:
        docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    except OSError as exc:
        raise InputError(f"cannot read node templates file {str(path)!r}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        why = one_line(str(exc))
        raise InputError(f"node templates file {str(path)!r} is not YAML or JSON: {why}") from None
    if not docs:
        raise InputError(
            f"node templates file {str(path)!r} is empty: expected `cudasched node-template` output"
        )
    return groups_from_templates(docs, path.name)


def cluster_state(snapshot: ClusterSnapshot, kb: KnowledgeBase) -> ClusterState:
    """What the webhook would know of ``snapshot``: its synced admission state (``mutate`` and
    ``demo`` decide against it exactly as the in-cluster webhook does)."""
    from cudasched.webhook.state.clusterstate import ClusterState

    return ClusterState.from_snapshot(snapshot, kb=kb)


def require_nodes(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """``snapshot``, if it has nodes: a dump of workload manifests alone (a CI folder without
    the cluster's nodes) gives every command that judges nodes nothing to judge against, said
    in one wording for all of them."""
    if not snapshot.nodes:
        raise InputError(
            f"{snapshot.source or 'cluster'}: no Node objects, so nothing to judge the "
            "workloads against: add the cluster's nodes (cudasched snapshot --live, or "
            "kubectl get nodes -o yaml) to it"
        )
    return snapshot


def load_cluster_inputs(
    source: ClusterSource | Path | None,
    settings: WebhookConfig | None = None,
    *,
    admission: bool = False,
) -> tuple[ClusterSnapshot, Fleet, ImageTable]:
    """The snapshot (a file, the live cluster or the bundled sample), its fleet and the image
    table that ``audit`` and ``report`` work on (with the ``--config``'s ``settings``), for
    the container toolkit's mode the cluster runs (:func:`load_toolkit_mode`)."""
    from cudasched.cluster.fleet import Fleet
    from cudasched.settings.config import WebhookConfig

    if not isinstance(source, ClusterSource):
        source = ClusterSource(cluster=source)
    snapshot = require_nodes(load_cluster(source, admission=admission))
    kb = load_knowledge()
    settings = settings if settings is not None else WebhookConfig()
    mode = load_toolkit_mode(None, settings, source, snapshot, kb).mode
    images = load_images(kb, settings).with_toolkit(mode)
    return snapshot, Fleet.from_snapshot(snapshot, kb), images
