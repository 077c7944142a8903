"""The configuration file: one YAML file, camelCase keys, validated up front. The webhook
serves by it; the commands that take ``--config`` read the same file through the same model,
so every section (the webhook's ``server`` and ``limits`` too) is validated wherever it is read.

The webhook runs unattended inside a cluster, so a typo in its configuration must stop it at
start-up with a message that names the field and the values it accepts, rather than silently
falling back to a default that schedules workloads differently from what the operator meant.
Hence ``extra="forbid"`` everywhere and every pydantic error re-raised as one
:class:`~cudasched.vocab.errors.InputError`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from cudasched.knowledge.mirrors import parse_mirrors
from cudasched.placement.merge import AffinityMode
from cudasched.vocab import inputfiles
from cudasched.vocab.errors import InputError, VersionError
from cudasched.vocab.labels import LabelScheme
from cudasched.vocab.requirements import Policy, ToolkitMode
from cudasched.vocab.versions import CudaVersion, parse_cuda

__all__ = [
    "ClusterAccess",
    "DraMode",
    "DraSettings",
    "EventSettings",
    "HttpParser",
    "ImageOverride",
    "ImageResolverSettings",
    "KnowledgeSettings",
    "LayerReadSettings",
    "NamespaceFilter",
    "ObjectLimits",
    "OnNoFit",
    "OnUnknownRequirement",
    "ServerConfig",
    "WebhookConfig",
    "load_config",
]


class OnNoFit(StrEnum):
    """What admission does when no node of the cluster can currently run the workload."""

    WARN = "warn"  # admit, constrain, and tell the user why it will stay Pending
    DENY = "deny"  # refuse the object with the reason
    ALLOW = "allow"  # admit silently


class OnUnknownRequirement(StrEnum):
    """What admission does with a GPU workload whose CUDA requirement cannot be found (no
    annotation, no runtime label, an image the table does not know): it is never constrained,
    so this only decides how loudly that is said. Every case is counted in
    ``cudasched_webhook_unknown_requirement_total``."""

    WARN = "warn"  # admit unchanged, with a warning naming the image and the fix
    DENY = "deny"  # refuse a pod or InferenceService on CREATE with the same words
    ALLOW = "allow"  # admit unchanged silently (still counted)


class HttpParser(StrEnum):
    """The HTTP/1.1 parser uvicorn serves with (``auto``: httptools when installed, else h11);
    both get the same header limits (:mod:`cudasched.webhook.server.protocol`)."""

    AUTO = "auto"
    HTTPTOOLS = "httptools"
    H11 = "h11"


class _Model(BaseModel):
    """Shared settings: camelCase in YAML, snake_case in Python, unknown keys rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        use_enum_values=False,
        validate_default=True,
    )


class NamespaceFilter(_Model):
    """Which namespaces are admitted. An empty ``include`` means every namespace; ``exclude``
    always wins so system namespaces stay untouched even when listed in both."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ("kube-system",)

    @field_validator("include", "exclude")
    @classmethod
    def _names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not name or not name.strip():
                raise ValueError("namespace names must be non-empty strings")
        return value

    def admits(self, namespace: str) -> bool:
        """Whether objects in ``namespace`` are mutated. ``""`` (cluster-scoped or unknown)
        is admitted unless an include list is given."""
        if namespace in self.exclude:
            return False
        return not self.include or namespace in self.include


class ImageOverride(_Model):
    """Declares the CUDA version of images matching a shell-style glob, for in-house images the
    built-in table cannot know (``registry.local/llm/*:cu124`` -> ``12.4``)."""

    pattern: str = Field(min_length=1)
    cuda: str

    @field_validator("cuda", mode="before")
    @classmethod
    def _cuda(cls, value: object) -> str:
        if isinstance(value, float):
            # YAML reads an unquoted `cuda: 12.4` as a float. Accept it (it is what people
            # type); the docs ask for quotes because `12.10` would already have become 12.1.
            value = repr(value)
        if not isinstance(value, str | int):
            raise ValueError("expected a CUDA version string such as '12.4'")
        try:
            return str(parse_cuda(value))
        except VersionError as exc:
            raise ValueError(str(exc)) from None

    @property
    def cuda_version(self) -> CudaVersion:
        return parse_cuda(self.cuda)

    def matches(self, image: str) -> bool:
        return fnmatch.fnmatchcase(image, self.pattern)


class ServerConfig(_Model):
    """HTTPS listener settings. The API server gives up after ``timeoutSeconds`` of the webhook
    configuration (10 s by default), so our own request timeout stays well below it."""

    host: str = "0.0.0.0"
    port: int = Field(default=8443, ge=1, le=65535)
    cert_file: str | None = None
    key_file: str | None = None
    self_signed: bool = False
    max_body_bytes: int = Field(default=3_145_728, ge=1024)
    request_timeout_seconds: float = Field(default=2.5, gt=0, le=30)
    workers: int | None = Field(default=None, ge=1)
    # Limits against slow, oversized and numerous requests (docs/security.md says which threat
    # each one answers).
    http_parser: HttpParser = HttpParser.AUTO
    max_header_bytes: int = Field(default=16_384, ge=1024, le=1_048_576)
    max_headers: int = Field(default=100, ge=10, le=10_000)
    header_timeout_seconds: float = Field(default=5.0, gt=0, le=60)
    max_connections: int = Field(default=512, ge=1)
    review_threads: int = Field(default=4, ge=1, le=64)
    large_review_threads: int = Field(default=1, ge=1, le=16)
    large_bodies_in_flight_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)

    @model_validator(mode="after")
    def _tls_pair(self) -> ServerConfig:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("certFile and keyFile must be given together")
        if self.large_bodies_in_flight_bytes < self.max_body_bytes:
            raise ValueError("largeBodiesInFlightBytes must be at least maxBodyBytes")
        return self


class ObjectLimits(BaseModel):
    """The ``limits:`` section: how much work one admission request may ask for (why each
    limit and how it is counted: :mod:`cudasched.webhook.admission.limits`)."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    #: JSON values (objects, arrays, strings, numbers, booleans, nulls) in the object.
    max_values: int = Field(default=600_000, ge=1_000)
    #: Containers, init containers and ephemeral containers, over every pod spec in the object.
    max_containers: int = Field(default=10_000, ge=10)
    #: Node-selector terms, required and preferred, over the whole object.
    max_terms: int = Field(default=1_000, ge=10)
    #: ``matchExpressions`` and ``matchFields`` entries, over the whole object.
    max_expressions: int = Field(default=10_000, ge=10)
    #: ``values`` of node-selector and label-selector requirements, over the whole object.
    max_selector_values: int = Field(default=100_000, ge=100)


class ClusterAccess(_Model):
    """How the cache reaches the API server (the ``kube:`` section): in-cluster configuration
    unless ``kubeconfig`` is set (see :mod:`cudasched.kube.client`), how often each kind is
    re-listed, and how long a review may wait for runtimes the cache has not seen yet."""

    kubeconfig: str | None = None
    resync_seconds: int = Field(default=300, ge=1)
    # How long an InferenceService's review may wait for its namespace's runtimes read from
    # the API server when the cache has not seen the one it needs yet (0: never read; kept
    # under server.requestTimeoutSeconds).
    runtime_read_seconds: float = Field(default=1.0, ge=0, le=10)


class EventSettings(_Model):
    """The ``events:`` section: the Warning Event on objects admitted that no node can run
    (:mod:`cudasched.webhook.background.nofit`)."""

    no_compatible_node: bool = True
    per_object_interval_seconds: float = Field(default=600.0, ge=1, le=86_400)


class AuditSettings(_Model):
    """The audit the webhook can run in the background (``cudasched audit`` of the live
    cluster every ``intervalMinutes``; 0, the default, is off): its findings as the
    ``cudasched_audit_findings`` gauge and, with ``publishReports``, as PolicyReports."""

    interval_minutes: float = Field(default=0, ge=0, le=1440)
    publish_reports: bool = True


class LayerReadSettings(_Model):
    """The ``imageResolver.layers:`` section: what an image carries (its SBOM and layers)
    read when its config names no CUDA, in the background, once per digest
    (:mod:`cudasched.registry.layerreads`), within these budgets. On with the resolver;
    ``enabled: false`` reads configs only. What it costs: README, "Image resolver"."""

    enabled: bool = True
    # Compressed bytes fetched for one image (a pip torch layer is 2-3 GiB when it holds every
    # nvidia-* wheel: past the budget the answer is an honest unknown).
    max_bytes: int = Field(default=2 * 1024**3, ge=1024 * 1024)
    # Everything one image's read may take: manifest, SBOM, layers.
    deadline_seconds: float = Field(default=300.0, gt=0, le=3600)
    # Images read at once (each its own thread and its own streams' memory).
    concurrency: int = Field(default=1, ge=1, le=8)
    # Reads waiting or running; more are dropped (counted) and asked again later.
    max_queued: int = Field(default=64, ge=1, le=10_000)
    # How long an image read without an answer is not read again.
    retry_seconds: float = Field(default=3600.0, gt=0, le=7 * 86_400)


class ImageResolverSettings(_Model):
    """The ``imageResolver:`` section: read a GPU workload's image config from its registry
    in the background (:mod:`cudasched.webhook.background.imageresolver`), never on the request
    path. Off by default: it makes the webhook call registries (see docs/security.md)."""

    enabled: bool = False
    # How long a review may wait for a resolution already in flight; any other image is
    # queued and the review answered at once per onUnknownRequirement.
    budget_seconds: float = Field(default=0.05, ge=0, le=1.0)
    workers: int = Field(default=2, ge=1, le=16)
    max_queued: int = Field(default=1024, ge=1, le=100_000)
    cache_bytes: int = Field(default=8 * 1024 * 1024, ge=0)
    tag_ttl_seconds: float = Field(default=300.0, gt=0)
    error_ttl_seconds: float = Field(default=30.0, gt=0)
    deadline_seconds: float = Field(default=10.0, gt=0, le=120)
    max_manifest_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    max_config_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    platform: str = "linux/amd64"
    # Registries reached over plain HTTP (host[:port]); every other one over HTTPS.
    plain_http: tuple[str, ...] = ()
    # A Docker config.json (a mounted dockerconfigjson Secret) with registry credentials.
    registry_config: str | None = None
    # A CA bundle for private registries' certificates (default: the system's).
    ca_file: str | None = None
    # Use the pull secrets a workload (or its ServiceAccount) names, read from its own
    # namespace on demand; needs `get` on secrets and serviceaccounts (cudasched manifests
    # --pull-secrets). Off by default: see docs/security.md.
    pull_secrets: bool = False
    # How long a namespace's pull credentials are kept in memory before they are read again.
    pull_secret_ttl_seconds: float = Field(default=60.0, gt=0, le=3600)
    layers: LayerReadSettings = Field(default_factory=LayerReadSettings)
    # Keep what is read of each image in the cluster (one ImageFacts object per digest) and
    # use what other replicas kept, and people's overrides; needs the ImageFacts CRD and its
    # grant (cudasched manifests --image-resolver).
    shared_facts: bool = True

    @model_validator(mode="after")
    def _pull_secrets_need_the_resolver(self) -> ImageResolverSettings:
        if self.pull_secrets and not self.enabled:
            raise ValueError("pullSecrets needs enabled: true (the resolver is what uses them)")
        return self

    @field_validator("platform")
    @classmethod
    def _platform(cls, value: str) -> str:
        parts = value.split("/")
        if len(parts) not in (2, 3) or not all(parts):
            raise ValueError("expected os/architecture[/variant] such as linux/amd64")
        return value


class KnowledgeSettings(_Model):
    """The ``knowledge:`` section: the knowledge bundle to judge with instead of the tables
    built into cudasched (docs/guide/knowledge.md). ``reference`` is a registry reference (a
    tag to follow, ``repo@sha256:...`` to pin) or the path of a bundle directory or archive;
    ``publicKeys`` are PEM files of the keys one of whose signatures a bundle must carry (none:
    digests are checked, signatures are not); ``overlays`` are bundles of local rows merged on
    top. ``intervalSeconds`` is how often a follower asks the reference again, ``maxAgeDays``
    the age past which the audit reports the knowledge. ``registryConfig``, ``plainHttp`` and
    ``caFile`` say how the registry is reached (as for ``imageResolver``)."""

    reference: str | None = None
    public_keys: tuple[str, ...] = ()
    overlays: tuple[str, ...] = ()
    interval_seconds: float = Field(default=300.0, ge=10, le=86_400)
    max_age_days: int = Field(default=120, ge=1, le=3650)
    registry_config: str | None = None
    plain_http: tuple[str, ...] = ()
    ca_file: str | None = None

    @field_validator("reference")
    @classmethod
    def _reference(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("expected a registry reference or a path (or leave it out)")
        return value.strip() if value is not None else None


# --- dra: plain GPU pods served through DRA (issue 31 item 2) -------------------------------


class DraMode(StrEnum):
    """How admission serves a pod's ``nvidia.com/gpu: N`` on a cluster that runs NVIDIA's DRA
    driver (:mod:`cudasched.placement.drarequest`)."""

    OFF = "off"  # node affinity only; the pod's resources are never touched
    # nvidia.com/gpu: N becomes deviceclass.resource.kubernetes.io/<class>: N (KEP-5004)
    EXTENDED_RESOURCE = "extended-resource"
    # each GPU container gets a claim from the ResourceClaimTemplate for its class and count
    CLAIM = "claim"


class DraSettings(_Model):
    """The ``dra:`` section. ``mode`` is off by default: answers stay what they were. In the
    other modes a pod that asks ``nvidia.com/gpu`` and whose requirement is known gets its GPUs
    from the CUDA-aware class ``cudasched device-classes`` names for that requirement (the
    class must exist: the webhook refers to it by name), instead of node affinity."""

    mode: DraMode = DraMode.OFF

    @field_validator("mode", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value


# --- end dra ----------------------------------------------------------------------------------
# --------------------------------------------------------------------------- placement (Kueue)


class PlacementSettings(_Model):
    """The ``placement:`` section: how the injected affinity is written.
    ``boundCudaClass`` also bounds the agent's CUDA class label (``cudasched.io/cuda.code``) in
    every term that bounds the driver, by what that driver bound implies
    (:mod:`cudasched.placement.classbound`): the key ``cudasched kueue``'s ResourceFlavors
    declare, so Kueue, which matches only the keys a flavor declares, sees the CUDA part of a
    requirement. It moves no verdict on truthful labels; off by default because it changes
    every injected affinity. Applies to the ``cudasched`` label scheme (GFD has no class
    label)."""

    bound_cuda_class: bool = False


class WebhookConfig(_Model):
    """Everything the admission webhook can be told. Defaults are the safe production choice:
    required affinity, strict CUDA policy, warn (not deny) when nothing fits, fail open."""

    mode: AffinityMode = AffinityMode.REQUIRED
    policy: Policy = Policy.STRICT
    label_scheme: LabelScheme = LabelScheme.AUTO
    on_no_fit: OnNoFit = OnNoFit.WARN
    on_unknown_requirement: OnUnknownRequirement = OnUnknownRequirement.WARN
    namespaces: NamespaceFilter = Field(default_factory=NamespaceFilter)
    constrain_gpu_pods_by_image: bool = True
    isvc_affinity: bool = False
    # How NVIDIA's container toolkit starts containers on the nodes (vocab/requirements
    # ToolkitMode): legacy checks images' NVIDIA_REQUIRE_CUDA, cdi does not; each uses an
    # image's compat libraries by its own rule. The commands read it from the ClusterPolicy
    # with --live; the webhook is told here (cudasched manifests --toolkit-mode).
    toolkit_mode: ToolkitMode = ToolkitMode.LEGACY
    image_overrides: tuple[ImageOverride, ...] = ()
    # Mirrored repositories, {mirror: canonical} (knowledge/mirrors.py): a path without a host
    # renames for the image table ({alaudadockerhub/tritonserver: nvidia/tritonserver}); one
    # with a host also routes registry look-ups ({harbor.corp/ngc-proxy: nvcr.io/nvidia}).
    image_mirrors: dict[str, str] = Field(default_factory=dict)
    fail_closed: bool = False
    # Answers remembered for repeated requests (replicas of one template), per snapshot;
    # bounded in bytes, 0 turns it off. See cudasched.webhook.memo.decisions.
    decision_cache_bytes: int = Field(default=16 * 1024 * 1024, ge=0)
    # Merged affinities per (the object's own affinity, the requirement's terms), and compiled
    # terms per requirement; both bounded in bytes, 0 turns them off. With the decision memo
    # they stay well inside the Deployment's 256 MiB memory limit (see docs/security.md).
    affinity_cache_bytes: int = Field(default=8 * 1024 * 1024, ge=0)
    selector_cache_bytes: int = Field(default=2 * 1024 * 1024, ge=0)
    server: ServerConfig = Field(default_factory=ServerConfig)
    limits: ObjectLimits = Field(default_factory=ObjectLimits)
    events: EventSettings = Field(default_factory=EventSettings)
    kube: ClusterAccess = Field(default_factory=ClusterAccess)
    audit: AuditSettings = Field(default_factory=AuditSettings)
    image_resolver: ImageResolverSettings = Field(default_factory=ImageResolverSettings)
    knowledge: KnowledgeSettings = Field(default_factory=KnowledgeSettings)
    dra: DraSettings = Field(default_factory=DraSettings)
    placement: PlacementSettings = Field(default_factory=PlacementSettings)

    @field_validator(
        "mode",
        "policy",
        "label_scheme",
        "on_no_fit",
        "on_unknown_requirement",
        "toolkit_mode",
        mode="before",
    )
    @classmethod
    def _lower(cls, value: object) -> object:
        # Accept `Required` / `STRICT`: YAML authors copy casing from Kubernetes docs.
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("image_mirrors", mode="before")
    @classmethod
    def _mirrors(cls, value: object) -> object:
        # The one reading of a mirror map (knowledge/mirrors.py), so an entry it would refuse
        # stops the webhook at start-up instead of at the first pod.
        if value is None:
            return {}
        try:
            parse_mirrors(value, "image mirrors")
        except InputError as exc:
            raise ValueError(str(exc)) from None
        return value

    @classmethod
    def from_mapping(
        cls, data: Mapping[str, Any] | None, *, origin: str = "config"
    ) -> WebhookConfig:
        """Validate a parsed YAML/JSON mapping; ``origin`` names it in error messages."""
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise InputError(
                f"invalid {origin}: expected a mapping of settings, got {type(data).__name__}"
            )
        try:
            return cls.model_validate(dict(data), by_alias=True, by_name=False)
        except ValidationError as exc:
            raise InputError(_describe(exc, origin)) from None


def _describe(exc: ValidationError, origin: str) -> str:
    """One line per problem: ``server.port: Input should be less than or equal to 65535
    (got 70000)`` — the dotted camelCase path is what the user typed in the file."""
    lines = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(part) for part in err["loc"]) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown setting"
        elif msg.startswith("Value error, "):
            msg = msg.removeprefix("Value error, ")
        got = err.get("input")
        suffix = (
            "" if err["type"] in ("missing",) or isinstance(got, dict) else f" (got {_show(got)})"
        )
        lines.append(f"{_clip(loc)}: {_clip(' '.join(msg.split()), 200)}{suffix}")
    return f"invalid {origin}: " + "; ".join(lines)


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _show(value: object) -> str:
    """A short one-line ``repr`` of a user's value for an error message (inputs are bounded by
    :mod:`cudasched.vocab.inputfiles`, so the full ``repr`` is bounded too; only its start is
    shown)."""
    try:
        text = repr(value)
    except ValueError:  # an int too long to print
        return "an over-long number"
    return _clip(" ".join(text.split()))


def load_config(path: str | Path | None) -> WebhookConfig:
    """Read the YAML configuration at ``path``; ``None`` gives the defaults."""
    if path is None:
        return WebhookConfig()
    label = f"config file {str(path)!r}"
    limits = inputfiles.SETTINGS
    docs = inputfiles.parse_documents(inputfiles.read_text(path, label, limits), label, limits)
    if len(docs) > 1:
        raise InputError(f"{label}: expected one YAML document, found {len(docs)}")
    return WebhookConfig.from_mapping(docs[0] if docs else None, origin=label)
