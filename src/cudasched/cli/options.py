"""Command-line options shared by several commands, declared once, and the requirement they
describe (``--cuda``, ``--framework``, ``--min-compute-capability``, ``--ships-cuda-compat``).

``--config`` is the webhook's configuration file: every command that resolves workloads the
way admission does takes it, so its ``imageOverrides``, ``imageMirrors``, ``policy`` and
``labelScheme`` give the same answers offline (:func:`cudasched.cli.inputs.load_settings` reads
it, :func:`effective_policy` and :func:`effective_scheme` let an explicit option win).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cudasched.vocab.errors import InputError
from cudasched.vocab.labels import LabelScheme
from cudasched.vocab.requirements import CompatLibrary, Policy, Requirement, ToolkitMode
from cudasched.vocab.versions import parse_compute_capability, parse_cuda, parse_driver

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.knowledge.imageconfig import ConfigSource
    from cudasched.knowledge.mirrors import Mirror
    from cudasched.operations.audit.auditor import Progress
    from cudasched.settings.config import WebhookConfig

__all__ = [
    "AsOfOption",
    "CompatBranchesOption",
    "CompatCudaOption",
    "CompatDriverOption",
    "ConfigOption",
    "DefaultPolicyOption",
    "FrameworkOption",
    "MinComputeOption",
    "MinSupportMonthsOption",
    "PolicyOption",
    "SchemeOption",
    "ShipsCudaCompatOption",
    "TargetSchemeOption",
    "ToolkitModeOption",
    "check_support_months",
    "compat_from_options",
    "effective_policy",
    "effective_scheme",
    "generated_now",
    "parse_as_of",
    "progress_bar",
    "requirement_from_options",
]

POLICY_HELP = (
    "strict: the driver natively supports the CUDA version; minor-compat: also any driver at or "
    "above the CUDA major's floor (no PTX JIT); forward-compat: also listed older data-center "
    "driver branches when the image ships cuda-compat."
)

PolicyOption = Annotated[str, typer.Option("--policy", help=POLICY_HELP)]

#: ``--policy`` of a command that also takes ``--config``: ``None`` when not given.
DefaultPolicyOption = Annotated[
    str | None,
    typer.Option(
        "--policy",
        help="Default policy for workloads that do not name one (a workload's "
        "cudasched.io/policy annotation wins). " + POLICY_HELP + " Default: the --config "
        "file's policy, else strict.",
        show_default=False,
    ),
]

#: The webhook's configuration file, read by every command that answers as admission does.
ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="The webhook's configuration YAML (cudasched webhook --config), so the answers "
        "are the webhook's: its imageOverrides, imageMirrors and policy (and labelScheme "
        "where node affinity is compiled).",
    ),
]
MinComputeOption = Annotated[
    str | None,
    typer.Option("--min-compute-capability", help="Lowest acceptable compute capability."),
]
FrameworkOption = Annotated[
    str | None,
    typer.Option("--framework", help="Framework build, e.g. 'torch 2.5.1+cu124'."),
]
ShipsCudaCompatOption = Annotated[
    bool,
    typer.Option(
        "--ships-cuda-compat", help="The image carries cuda-compat (forward compatibility)."
    ),
]


#: ``--toolkit-mode``: ``None`` when not given (the command then reads the cluster's).
ToolkitModeOption = Annotated[
    ToolkitMode | None,
    typer.Option(
        "--toolkit-mode",
        help="How NVIDIA's container toolkit starts GPU containers on the nodes: legacy checks "
        "the image's NVIDIA_REQUIRE_CUDA and uses its compat libraries when their driver "
        "major is newer than the node's; cdi checks no NVIDIA_REQUIRE_CUDA and uses them when "
        "their note lists the node's branch. Default: the --config file's toolkitMode, else "
        "the GPU Operator's ClusterPolicy (with --live or a dump that holds it), else legacy.",
        show_default=False,
    ),
]
CompatDriverOption = Annotated[
    str | None,
    typer.Option(
        "--compat-driver",
        help="The image's compat libcuda.so version (its file name under "
        "/usr/local/cuda/compat, e.g. 575.57.08; cudasched image --all-layers shows it).",
    ),
]
CompatCudaOption = Annotated[
    str | None,
    typer.Option("--compat-cuda", help="The CUDA the compat library provides (its note's)."),
]
CompatBranchesOption = Annotated[
    str | None,
    typer.Option(
        "--compat-branches",
        help="The host driver branches the compat library's .note.cuda.fwd_compatibility "
        "lists, comma-separated (535,550,570); leave out for a library without a note.",
    ),
]


def compat_from_options(
    driver: str | None, cuda: str | None, branches: str | None
) -> CompatLibrary | None:
    """The compat library ``--compat-driver``, ``--compat-cuda`` and ``--compat-branches``
    describe (``None`` without ``--compat-driver``)."""
    if driver is None:
        if cuda is not None or branches is not None:
            raise InputError(
                "--compat-cuda and --compat-branches describe --compat-driver's library"
            )
        return None
    listed: tuple[int, ...] | None = None
    if branches is not None:
        try:
            listed = tuple(sorted({int(b) for b in branches.split(",") if b.strip()}))
        except ValueError:
            raise InputError(
                f"invalid --compat-branches {branches!r}: expected driver branches such as "
                "535,550,570"
            ) from None
    return CompatLibrary(
        parse_driver(driver),
        parse_cuda(cuda) if cuda is not None else None,
        listed,
        source="command line",
    )


#: A label scheme for a cluster (``auto``: what every GPU node carries); ``None`` when not
#: given (then the ``--config`` file's ``labelScheme``).
SchemeOption = Annotated[
    LabelScheme | None,
    typer.Option(
        "--scheme",
        help="Node labels the requirement is compiled to: auto (what every GPU node "
        "carries), cudasched or gfd. Default: the --config file's labelScheme, else auto.",
        show_default=False,
    ),
]


def effective_policy(given: str | None, settings: WebhookConfig) -> Policy:
    """``--policy`` when given, else the configuration's (``strict`` by default)."""
    return Policy.parse(given) if given is not None else settings.policy


def effective_scheme(given: LabelScheme | None, settings: WebhookConfig) -> LabelScheme:
    """``--scheme`` when given, else the configuration's (``auto`` by default)."""
    return given if given is not None else settings.label_scheme


def _without_cluster(value: LabelScheme) -> LabelScheme:
    if value is LabelScheme.AUTO:
        raise typer.BadParameter(
            "'auto' picks the labels a cluster's GPU nodes carry and there is no cluster here: "
            "choose cudasched or gfd"
        )
    return value


#: A label scheme without a cluster to look at (no ``auto``).
TargetSchemeOption = Annotated[
    LabelScheme,
    typer.Option(
        "--scheme",
        metavar="[cudasched|gfd]",
        callback=_without_cluster,
        help="Node labels to target: cudasched (our integer codes, published by "
        "`cudasched agent`) or gfd (NVIDIA GPU Feature Discovery).",
    ),
]


def requirement_from_options(
    kb: KnowledgeBase,
    cuda: str | None,
    framework: str | None,
    min_cc: str | None,
    ships_cuda_compat: bool,
    *,
    purpose: str,
) -> Requirement:
    """The requirement the options describe; an ``InputError`` when they describe nothing
    (``purpose`` completes "nothing to ...": ``check``, ``constrain``)."""
    build = None
    if framework is not None:
        build = kb.framework(framework)
        if build is None:
            raise InputError(
                f"unknown framework build {framework!r}: the knowledge base does not know it "
                "(expected e.g. 'torch 2.5.1+cu124', 'tensorflow 2.15.0', 'vllm 0.9.0')"
            )
    requirement = Requirement(
        cuda=parse_cuda(cuda) if cuda is not None else None,
        min_compute=parse_compute_capability(min_cc) if min_cc is not None else None,
        ships_cuda_compat=ships_cuda_compat,
        framework=build,
        source="command line",
    )
    if requirement.is_empty:
        raise InputError(
            f"nothing to {purpose}: give --cuda, --framework or --min-compute-capability"
        )
    return requirement


def generated_now() -> str:
    """When a report was made, for its header (UTC, minutes)."""
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


@contextmanager
def progress_bar(what: str) -> Iterator[Progress | None]:
    """A rich progress bar on stderr while ``what`` runs, only when stderr is a terminal;
    yields the callback to hand to the operation (``None``: stay silent)."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console  # rich's console and progress: a third of start-up
    from rich.progress import Progress as RichProgress

    with RichProgress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(what, total=None)

        def advance(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield advance


AsOfOption = Annotated[
    str | None,
    typer.Option(
        "--as-of",
        help="Judge branch lifecycles (end of life) and driver releases (what was out) on this "
        "date, YYYY-MM-DD. Default: today.",
    ),
]

MinSupportMonthsOption = Annotated[
    int,
    typer.Option(
        "--min-support-months",
        help="Warn when a pool's driver branch ends within this many months (0 to 120).",
    ),
]


def check_support_months(value: int) -> int:
    """``--min-support-months``: 0 to 120 months, else an :class:`InputError`."""
    if not 0 <= value <= 120:
        raise InputError(f"invalid --min-support-months {value}: expected 0 to 120 months")
    return value


def parse_as_of(value: str | None) -> date:
    """``--as-of``: a date, today when not given."""
    if value is None:
        return date.today()
    try:
        return date.fromisoformat(value.strip())
    except ValueError:
        raise InputError(f"invalid --as-of {value!r}: expected a date YYYY-MM-DD") from None


# --------------------------------------------------------------------------- registries

ResolveImagesOption = Annotated[
    bool,
    typer.Option(
        "--resolve-images",
        help="Read each judged image's own config from its registry (NVIDIA_REQUIRE_CUDA, "
        "CUDA_VERSION) and trust it before the image table, as the webhook's image resolver "
        "does.",
    ),
]
RegistryConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--registry-config",
        help="A Docker config.json with registry credentials (its auths; credential helpers "
        "are not run). Default: anonymous, which public images need.",
    ),
]
PlainHttpOption = Annotated[
    list[str] | None,
    typer.Option(
        "--plain-http",
        metavar="HOST[:PORT]",
        help="A registry reached over plain HTTP instead of HTTPS (repeat for several).",
    ),
]
PlatformOption = Annotated[
    str,
    typer.Option(
        "--platform",
        help="The nodes' platform, os/architecture[/variant]: the manifest of a multi-arch "
        "image that is read.",
    ),
]


def registry_source(
    resolve: bool,
    registry_config: Path | None,
    plain_http: list[str] | None,
    platform: str = "linux/amd64",
    *,
    mirrors: Iterable[Mirror] = (),
    layers: str = "never",
    budget: Any = None,
) -> ConfigSource | None:
    """The image-config source of ``--resolve-images`` (``None`` without it): each image's
    registry asked the first time resolution looks at it, with the given credentials, through
    the ``imageMirrors`` of ``--config`` that name a host (pass the image table's
    ``mirrors``); ``layers`` and ``budget`` say when the image's SBOM and layers are read too
    (:class:`~cudasched.registry.resolver.OnDemandSource`)."""
    if not resolve:
        return None
    from cudasched.registry.auth import Keychain, load_docker_config
    from cudasched.registry.client import Platform, RegistryClient
    from cudasched.registry.resolver import OnDemandSource

    keychain = load_docker_config(registry_config) if registry_config else Keychain()
    client = RegistryClient(keychain=keychain, plain_http=plain_http or (), mirrors=mirrors)
    return OnDemandSource(client, Platform.parse(platform), layers=layers, budget=budget)
