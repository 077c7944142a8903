"""``cudasched recommend-driver``: the driver branch to install for a GPU.

A thin shell over :func:`cudasched.operations.drivers.recommend.recommend`. ``-o json`` is a stable
contract (keys are only ever added): ``{"branch", "version", "kernelModuleType",
"usePrecompiled", "cuda", "lifecycle", "eol", "reasons", "warnings", "rejected": [{"branch",
"why"}]}`` plus ``gpu`` and ``cudaByPolicy``. Exit codes: 0 a branch was found, 1 no branch
satisfies everything (the answer says why), 2 bad input (one line on stderr).
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from cudasched.cli.app import EXIT_INCOMPATIBLE, EXIT_OK, app, fail
from cudasched.cli.inputs import load_knowledge
from cudasched.cli.options import AsOfOption, PolicyOption, parse_as_of
from cudasched.vocab.errors import InputError
from cudasched.vocab.requirements import Policy
from cudasched.vocab.versions import parse_cuda

__all__ = ["recommend_cmd"]

TABLE_WIDTH = 120


class RecommendFormat(StrEnum):
    TABLE = "table"
    JSON = "json"


def _console() -> Console:
    console = Console(soft_wrap=False)
    if not console.is_terminal:
        console = Console(width=TABLE_WIDTH, soft_wrap=False)
    return console


def _render(doc: dict[str, object], console: Console) -> None:
    branch = doc["branch"]
    if branch is None:
        console.print(Text(f"no driver branch for {doc['gpu']}", style="bold red"))
    else:
        version = doc["version"] or "(no release known)"
        console.print(
            Text(
                f"R{branch}: {version}, {doc['kernelModuleType']} kernel modules, "
                f"usePrecompiled {str(doc['usePrecompiled']).lower()}, CUDA {doc['cuda']} "
                f"natively, {doc['lifecycle'] or 'lifecycle unknown'}"
                + (f" until {doc['eol']}" if doc["eol"] else ""),
                style="bold",
            )
        )
    for reason in doc["reasons"]:  # type: ignore[attr-defined]
        console.print(Text(f"  - {reason}"))
    for warning in doc["warnings"]:  # type: ignore[attr-defined]
        console.print(Text(f"  ! {warning}", style="yellow"))
    rejected = doc["rejected"]
    if rejected:
        table = Table(title="not chosen", title_justify="left", show_lines=False, expand=False)
        table.add_column("branch", no_wrap=True)
        table.add_column("why", overflow="fold")
        for branches, why in _runs(rejected):  # type: ignore[arg-type]
            table.add_row(Text(branches), Text(why))
        console.print(table)


def _runs(rows: list[dict[str, str]]) -> list[tuple[str, str]]:
    """Consecutive branches rejected for the same reason, as one row (``R495..R620``)."""
    out: list[tuple[list[str], str]] = []
    for row in rows:
        if out and out[-1][1] == row["why"]:
            out[-1][0].append(row["branch"])
        else:
            out.append(([row["branch"]], row["why"]))
    return [(f"R{b[-1]}..R{b[0]}" if len(b) > 1 else f"R{b[0]}", why) for b, why in out]


@app.command("recommend-driver")
def recommend_cmd(
    gpu: Annotated[
        str,
        typer.Option(
            "--gpu",
            help="GPU product (A100, 'NVIDIA H100 80GB HBM3', Tesla-K80) or compute capability.",
        ),
    ],
    cuda: Annotated[
        list[str] | None,
        typer.Option("--cuda", help="A CUDA version the branch must run (repeatable): 12.4."),
    ] = None,
    os_name: Annotated[
        str | None,
        typer.Option("--os", help="The nodes' OS as the GPU Operator tags it: ubuntu22.04."),
    ] = None,
    kernel: Annotated[
        str | None,
        typer.Option("--kernel", help="The nodes' kernel release (uname -r): 5.15.0-113-generic."),
    ] = None,
    precompiled: Annotated[
        bool,
        typer.Option(
            "--precompiled", help="Use a precompiled driver container where NVIDIA builds one."
        ),
    ] = False,
    policy: PolicyOption = Policy.STRICT.value,
    as_of: AsOfOption = None,
    output: Annotated[
        RecommendFormat, typer.Option("-o", "--output", help="Output format.")
    ] = RecommendFormat.TABLE,
) -> None:
    """Recommend the driver branch for a GPU: the newest supported branch that drives it and
    runs every --cuda asked, preferring long-term support branches.

    Checks the architecture's driver ceiling, the kernel-module flavour, the branch lifecycle,
    the kernel's minimum and reported build failures, and where precompiled driver containers
    exist. Exit 0: a branch; 1: no branch satisfies everything (with the reason); 2: bad input.
    Example: cudasched recommend-driver --gpu V100 --cuda 12.4 --kernel 5.15.0-113-generic
    """
    from cudasched.compat.branches import parse_os_tag
    from cudasched.knowledge.drivers import parse_kernel
    from cudasched.operations.drivers.recommend import recommend

    try:
        pol = Policy.parse(policy)
        today = parse_as_of(as_of)
        cudas = [parse_cuda(c).release for c in cuda or ()]
        os_tag = parse_os_tag(os_name) if os_name is not None else None
        release = parse_kernel(kernel) if kernel is not None else None
        kb = load_knowledge()
        answer = recommend(
            kb,
            gpu,
            cudas,
            policy=pol,
            today=today,
            os=os_tag,
            kernel=release,
            precompiled=precompiled,
        )
    except InputError as exc:
        fail(str(exc))
    doc = answer.to_dict()
    if output is RecommendFormat.JSON:
        typer.echo(json.dumps(doc, indent=2))
    else:
        _render(doc, _console())
    raise typer.Exit(EXIT_OK if answer.found else EXIT_INCOMPATIBLE)
