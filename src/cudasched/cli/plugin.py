"""``kubectl-cudasched``: the ``cudasched`` commands as a kubectl plugin, so that ``kubectl
cudasched explain isvc/llama3-8b -n team-nlp`` works the way krew plugins do.

kubectl runs an executable named ``kubectl-cudasched`` found on ``PATH`` with the words after
``cudasched``. The plugin runs the very same commands, with two differences that make it feel
like kubectl:

* the live cluster is the default, never the sample: a command that reads a cluster gets
  ``--live`` unless ``--cluster FILE``, ``--sample`` (or ``--live``) is given, so where no
  cluster is configured it fails as kubectl does instead of judging the bundled sample;
* kubectl's global flags (``-n/--namespace``, ``--context``, ``--kubeconfig``) may come before
  the command name too (``kubectl cudasched --context prod explain isvc/x``) and are moved
  after it; cudasched's own ``--knowledge``, ``--knowledge-key`` and ``--knowledge-overlay``
  stay before it. ``-o json|yaml|wide`` are each command's own output formats.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import typer

from cudasched.cli.app import app, fail
from cudasched.vocab.errors import InputError

__all__ = ["PROG_NAME", "main", "plugin_args"]

PROG_NAME = "kubectl cudasched"

#: kubectl flags that take a value and may precede the command name.
_GLOBAL_FLAGS = frozenset({"-n", "--namespace", "-l", "--selector", "--context", "--kubeconfig"})
_SOURCE_FLAGS = ("--cluster", "--live", "--sample")
#: cudasched's own options, which come before the command and stay there.
_ROOT_FLAGS = frozenset({"--knowledge", "--knowledge-key", "--knowledge-overlay"})


def _reads_cluster(command: str) -> bool:
    """Whether ``command`` takes the cluster-source options (``--live`` among them)."""
    group = typer.main.get_command(app)
    found = group.get_command(None, command) if hasattr(group, "get_command") else None
    return found is not None and any(p.name == "live" for p in found.params)


def plugin_args(args: Sequence[str]) -> list[str]:
    """The ``cudasched`` arguments for the plugin's: global flags moved after the command name,
    ``--live`` added to a command that reads a cluster when no source is given."""
    leading: list[str] = []
    root: list[str] = []
    rest = list(args)
    while rest and rest[0].startswith("-"):
        flag = rest.pop(0)
        kept = root if flag.split("=", 1)[0] in _ROOT_FLAGS else leading
        kept.append(flag)
        if (flag in _GLOBAL_FLAGS or flag in _ROOT_FLAGS) and rest:
            kept.append(rest.pop(0))
    if not rest:  # no command: help, or the flags alone
        return [*root, *leading]
    command, tail = rest[0], rest[1:]
    words = [*leading, *tail]
    given = any(w in _SOURCE_FLAGS or w.startswith("--cluster=") for w in words)
    if not given and _reads_cluster(command):
        words.append("--live")
    return [*root, command, *words]


#: What ``kubectl cudasched --help`` adds to the command list: where the plugin's answers come
#: from.
PLUGIN_HELP = (
    "As a kubectl plugin, every command that reads a cluster reads the LIVE cluster of your "
    "kubeconfig's current context (as kubectl does; --context, --kubeconfig, -n, -A and -l "
    "work as in kubectl), unless --cluster FILE|DIR names a dump or --sample the bundled "
    "sample. It only reads: no write, "
    "never a Secret."
)


def main() -> None:
    """Entry point of the ``kubectl-cudasched`` console script."""
    args = plugin_args(sys.argv[1:])
    try:
        if not args or args[0] in ("--help", "-h"):
            group = typer.main.get_command(app)
            group.help = f"{group.help}\n\n{PLUGIN_HELP}"
            group.main(args=args or ["--help"], prog_name=PROG_NAME)
        app(args=args, prog_name=PROG_NAME)
    except InputError as exc:  # pragma: no cover - commands normally handle this themselves
        fail(str(exc))
    sys.exit(0)
