"""The shared Typer application, the table of commands and the one way commands report bad
input.

Commands are imported only when they run: the table below names each command's module and its
one-line help, so ``cudasched --help`` lists every command without importing any of them (and so
without the core, the knowledge base or the webhook stack), and ``cudasched check`` imports what
``check`` needs and nothing else. A test keeps the one-line helps equal to the commands' own.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, NamedTuple, NoReturn

import typer
from typer.core import TyperGroup
from typer.exceptions import Abort, Exit, TyperException

from cudasched import __version__
from cudasched.vocab.errors import one_line

__all__ = [
    "COMMANDS",
    "EXIT_BAD_INPUT",
    "EXIT_INCOMPATIBLE",
    "EXIT_OK",
    "GROUPS",
    "VERSION_KEY",
    "app",
    "as_run",
    "fail",
    "invoked_as",
    "knowledge_choice",
    "note",
    "note_first",
    "take_notes",
    "versioned",
]

EXIT_OK = 0
EXIT_INCOMPATIBLE = 1
EXIT_BAD_INPUT = 2


class CommandEntry(NamedTuple):
    module: str
    summary: str


#: How ``--help`` groups the commands: by what a person is doing.
GROUPS: dict[str, tuple[str, ...]] = {
    "A workload": ("explain", "check", "image", "affinity", "mutate"),
    "Cluster health": ("audit", "report", "snapshot"),
    "Drivers and capacity": (
        "recommend-driver",
        "plan-drivers",
        "node-template",
        "device-classes",
        "kueue",
    ),
    "Reference": ("knowledge", "demo", "version"),
    "Runs in the cluster": ("webhook", "policy-controller", "agent", "probe", "manifests"),
}

_pending_notes: list[str] = []
_first_notes: list[str] = []


def note(message: str) -> None:
    """A one-line note for stderr (``cudasched: note: ...``), said once the command has
    answered; a command that fails on bad input says only its error line."""
    if message not in _pending_notes:
        _pending_notes.append(message)


def note_first(message: str) -> None:
    """A one-line note for stderr said before the command's answer (on a terminal, above it:
    what the answer is about, such as the bundled sample cluster judged in place of one that is
    not configured), and not at all when the command fails on bad input before answering."""
    if message not in _first_notes:
        _first_notes.append(message)


def _say_first_notes() -> None:
    for message in _first_notes:
        sys.stderr.write(f"cudasched: note: {message}\n")
    if _first_notes:
        sys.stderr.flush()
    _first_notes.clear()


def _closed_pipe() -> int:
    """The reader of stdout went away (``cudasched ... | head``): no error, exit 0 without a
    word. stdout is pointed at /dev/null so the interpreter's last flush has nowhere to fail
    (Python's documented way: "Note on SIGPIPE")."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a file (a test's captured stream)
        pass
    return EXIT_OK


class _NotesFirst:
    """The command's stdout: before its first write, the notes :func:`note_first` keeps are
    said on stderr, so they come first however long the answer."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        if _first_notes:
            _say_first_notes()
        return int(self._stream.write(text))

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def take_notes() -> list[str]:
    """The notes left so far, taken: a command that runs until it is stopped (the webhook,
    the agent) logs them when it starts rather than on stderr when it ends."""
    taken = [*_first_notes, *_pending_notes]
    _first_notes.clear()
    _pending_notes.clear()
    return taken


#: Every command: its module (which registers it on :data:`app` when imported) and the opening
#: sentence of its help, in the order ``--help`` lists them.
COMMANDS: dict[str, CommandEntry] = {
    "check": CommandEntry(
        "cudasched.cli.check",
        "Say whether a node can run a workload built with a CUDA version, and why.",
    ),
    "affinity": CommandEntry(
        "cudasched.cli.affinity",
        "Print the node affinity that admits exactly the nodes able to run a CUDA workload.",
    ),
    "explain": CommandEntry(
        "cudasched.cli.explain",
        "Say, node by node, whether a workload can land there and why.",
    ),
    "audit": CommandEntry(
        "cudasched.cli.audit",
        "Find what is wrong in the cluster: pods on nodes that cannot run them, workloads and "
        "runtimes no node can run, GPU nodes with missing, old or conflicting labels, driver "
        "upgrades in flight, stale and unknown requirements, and pools on a driver branch that "
        "has ended, is legacy or ends within --min-support-months (judged --as-of, default "
        "today).",
    ),
    "report": CommandEntry(
        "cudasched.cli.report",
        "Write an HTML report of the cluster: which serving runtime can run on which node pool "
        "(hover a cell for its reason codes), each pool's CUDA ceiling, and the audit findings.",
    ),
    "node-template": CommandEntry(
        "cudasched.cli.nodetemplate",
        "Print the labels the agent will publish on a node with this GPU and driver, and how to "
        "declare them on a node group so an autoscaler can scale it up from zero.",
    ),
    "recommend-driver": CommandEntry(
        "cudasched.cli.recommend",
        "Recommend the driver for a GPU: an installable release of the branch that drives it and "
        "runs every --cuda asked, preferring long-term support branches.",
    ),
    "plan-drivers": CommandEntry(
        "cudasched.cli.plan",
        "Plan the driver branch of every GPU pool so each workload of the cluster has a home, "
        "and write the GPU Operator NVIDIADriver objects that install it.",
    ),
    "device-classes": CommandEntry(
        "cudasched.cli.deviceclasses",
        "Print CUDA-aware DRA DeviceClasses: one per CUDA requirement the cluster's workloads "
        "ask, each selecting exactly the NVIDIA GPUs that can run it.",
    ),
    "kueue": CommandEntry(
        "cudasched.cli.kueue",
        "Print Kueue ResourceFlavors by CUDA class, a ClusterQueue fragment ordering them, and "
        "which workloads each flavor can serve.",
    ),
    "knowledge": CommandEntry(
        "cudasched.cli.knowledge",
        "Show the knowledge cudasched judges with and what it knows, with the source of every "
        "fact; export, diff, verify, push and pull knowledge bundles.",
    ),
    "image": CommandEntry(
        "cudasched.cli.image",
        "Print what each image needs, read from its own registry: digest, platform, CUDA "
        "requirement and its source.",
    ),
    "mutate": CommandEntry(
        "cudasched.cli.mutate",
        "Answer one AdmissionReview offline exactly as the webhook would, and print the "
        "AdmissionReview response.",
    ),
    "demo": CommandEntry(
        "cudasched.cli.demo",
        "Start the real webhook over HTTPS on 127.0.0.1 with the sample cluster, admit every "
        "sample pod through it and show where each may now run.",
    ),
    "snapshot": CommandEntry(
        "cudasched.cli.snapshot",
        "Write the cluster (a file, the live cluster with --live, or the bundled sample) as one "
        "kubectl List on stdout: nodes, pods, InferenceServices, (Cluster)ServingRuntimes, "
        "LLMInferenceServices, NVIDIADrivers.",
    ),
    "probe": CommandEntry(
        "cudasched.cli.agent",
        "Print the driver, CUDA and GPU facts of this machine (or a saved nvidia-smi output) "
        "and the labels the agent would publish.",
    ),
    "agent": CommandEntry(
        "cudasched.cli.agent",
        "Discover driver/CUDA/GPU facts on this node and publish them as labels, every "
        "--interval seconds until SIGTERM (or once with --oneshot).",
    ),
    "webhook": CommandEntry(
        "cudasched.cli.webhook",
        "Run the CUDA-aware admission webhook until SIGTERM (in-flight requests finish).",
    ),
    "policy-controller": CommandEntry(
        "cudasched.cli.policycontroller",
        "Keep the policy mode's PlacementTables equal to the webhook's decisions, until "
        "SIGTERM (leader-elected; no request path).",
    ),
    "manifests": CommandEntry(
        "cudasched.cli.manifests",
        "Print the install manifests as multi-document YAML (pipe to 'kubectl apply -f -').",
    ),
    "version": CommandEntry(
        "cudasched.cli.app",
        "Print the version of cudasched (also cudasched --version).",
    ),
}

#: The key of the version in every JSON answer (every command's ``-o json`` but those that
#: print a Kubernetes object to apply: ``affinity``, ``snapshot``), put there by
#: :func:`versioned` alone: which cudasched answered.
VERSION_KEY = "cudaschedVersion"


class LazyCommands(TyperGroup):
    """A command group that imports a command's module only when that command is used."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        """An unknown command is a usage error that suggests the nearest one."""
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in COMMANDS:
            import difflib

            from typer._click.exceptions import UsageError  # typer vendors click

            close = difflib.get_close_matches(name, list(COMMANDS), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise UsageError(f"No such command {name!r}{hint}", ctx)
        return super().resolve_command(ctx, args)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        importlib.import_module(entry.module)
        for info in app.registered_commands:
            if info.name == cmd_name:
                return typer.main.get_command_from_info(
                    info, pretty_exceptions_short=True, rich_markup_mode=None
                )
        for group in app.registered_groups:  # a command with subcommands (knowledge)
            if group.name == cmd_name:
                return typer.main.get_group_from_info(
                    group,
                    pretty_exceptions_short=True,
                    suggest_commands=True,
                    rich_markup_mode=None,
                )
        raise RuntimeError(f"{entry.module} does not register the command {cmd_name!r}")

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        """Run the command; usage errors (an unknown option, a value not among the choices)
        are one line on stderr like every other error, exit 2, instead of click's block. The
        notes a command left (:func:`note`) follow its answer on stderr unless it failed on
        bad input."""
        _pending_notes.clear()
        _first_notes.clear()
        stdout, sys.stdout = sys.stdout, _NotesFirst(sys.stdout)
        try:
            result = super().main(
                args, prog_name, complete_var, False, windows_expand_args, **extra
            )
        except Exit as exc:
            result = exc.exit_code
        except Abort:
            sys.stderr.write("cudasched: aborted\n")
            result = 1
        except BrokenPipeError:
            result = _closed_pipe()
        except TyperException as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # bare `cudasched`: the help
                sys.stdout.write(exc.format_message() + "\n")
                result = 0
            else:
                ctx = getattr(exc, "ctx", None)
                where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
                message = one_line(exc.format_message())
                sys.stderr.write(f"cudasched: error: {message}{where}\n")
                result = exc.exit_code
        finally:
            sys.stdout = stdout
        try:  # what is still buffered, written now: a closed pipe is found here, not at exit
            sys.stdout.flush()
        except BrokenPipeError:
            result = _closed_pipe()
        if result in (None, EXIT_OK, EXIT_INCOMPATIBLE):
            _say_first_notes()
            for message in _pending_notes:
                sys.stderr.write(f"cudasched: note: {message}\n")
        _pending_notes.clear()
        _first_notes.clear()
        if not standalone_mode:
            return result
        sys.exit(result if isinstance(result, int) else 0)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The command list from the table, grouped (:data:`GROUPS`): no command module is
        imported for ``--help``."""
        for title, names in GROUPS.items():
            with formatter.section(title):
                formatter.write_dl([(name, COMMANDS[name].summary) for name in names])


app = typer.Typer(
    name="cudasched",
    cls=LazyCommands,
    help="CUDA-aware scheduling of GPU inference services on Kubernetes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    if value:
        sys.stdout.write(f"cudasched {__version__}\n")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            callback=_print_version,
            help="Print the version of cudasched and exit.",
        ),
    ] = False,
    knowledge: Annotated[
        str | None,
        typer.Option(
            "--knowledge",
            envvar="CUDASCHED_KNOWLEDGE",
            metavar="REF|PATH",
            help="Judge with this knowledge bundle instead of the built-in tables: a registry "
            "reference (a tag to follow, or @sha256:... to pin) or a bundle directory or "
            "archive. One that cannot be used is said on stderr and the last good one (else "
            "the built-in) is used.",
        ),
    ] = None,
    knowledge_key: Annotated[
        list[Path] | None,
        typer.Option(
            "--knowledge-key",
            envvar="CUDASCHED_KNOWLEDGE_KEY",
            metavar="PEM",
            help="A public key (Ed25519 or ECDSA P-256) one of whose signatures a bundle must "
            "carry (repeat for several).",
        ),
    ] = None,
    knowledge_overlay: Annotated[
        list[Path] | None,
        typer.Option(
            "--knowledge-overlay",
            envvar="CUDASCHED_KNOWLEDGE_OVERLAY",
            metavar="PATH",
            help="A bundle of local rows (driver releases, image rows) merged over the knowledge "
            "(repeat for several).",
        ),
    ] = None,
) -> None:
    """CUDA-aware scheduling of GPU inference services on Kubernetes."""
    global _knowledge
    reference = knowledge.strip() if knowledge else None
    _knowledge = KnowledgeChoice(
        reference or None, tuple(knowledge_key or ()), tuple(knowledge_overlay or ())
    )


class KnowledgeChoice(NamedTuple):
    """What ``--knowledge``, ``--knowledge-key`` and ``--knowledge-overlay`` asked for
    (:mod:`cudasched.cli.knowledgesource` reads it)."""

    reference: str | None = None
    keys: tuple[Path, ...] = ()
    overlays: tuple[Path, ...] = ()


_knowledge = KnowledgeChoice()


def knowledge_choice() -> KnowledgeChoice:
    """The knowledge this run of a command was asked to judge with."""
    return _knowledge


def versioned(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON answer with the version of cudasched that gave it (:data:`VERSION_KEY`), so a
    saved answer says which rules judged it."""
    return {**doc, VERSION_KEY: __version__}


@app.command("version")
def version_cmd(
    output: str = typer.Option(
        "text", "-o", "--output", help="text: cudasched VERSION; json: {cudaschedVersion}."
    ),
) -> None:
    """Print the version of cudasched (also cudasched --version)."""
    if output == "json":
        import json

        sys.stdout.write(json.dumps(versioned({})) + "\n")
    elif output == "text":
        sys.stdout.write(f"cudasched {__version__}\n")
    else:
        fail(f"-o/--output {output!r}: expected text or json")
    raise typer.Exit(EXIT_OK)


#: Commands a person runs from a workstation, which answers name in their fixes
#: (``cudasched plan-drivers``); the agent, probe and webhook run in the cluster, and "the
#: cudasched agent" is no command line.
_RUN_BY_PEOPLE = tuple(sorted(set(COMMANDS) - {"agent", "probe", "webhook"}, key=len, reverse=True))
_COMMAND_LINE = re.compile(
    r"(?<![\w./-])(?<!kubectl )cudasched (?=(?:" + "|".join(_RUN_BY_PEOPLE) + r")\b)"
)


def invoked_as() -> str:
    """How the person ran this command: ``cudasched``, or ``kubectl cudasched`` (the plugin)."""
    from typer._click.globals import get_current_context  # typer vendors click

    ctx = get_current_context(silent=True)
    name = ctx.find_root().info_name if ctx is not None else None
    return name or "cudasched"


def as_run(text: str) -> str:
    """``text`` with its cudasched command lines (``cudasched plan-drivers``) spelled the way
    the person ran this one, so a fix read from ``kubectl cudasched audit`` says ``kubectl
    cudasched plan-drivers``."""
    prog = invoked_as()
    return text if prog == "cudasched" else _COMMAND_LINE.sub(f"{prog} ", text)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print a one-line error to stderr and exit (2 = bad input, as every command documents)."""
    sys.stderr.write(f"cudasched: error: {message}\n")
    raise typer.Exit(code)
