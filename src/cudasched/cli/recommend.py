"""``cudasched recommend-driver``: the driver to install for a GPU.

A thin shell over :func:`cudasched.operations.drivers.recommend.recommend`. ``-o json`` is a stable
contract (keys are only ever added): ``{"branch", "version", "released", "installer", "os",
"arch", "image", "keep", "kernelModuleType", "usePrecompiled", "cuda", "lifecycle", "eol",
"reasons", "warnings", "rejected": [{"branch", "why"}]}`` plus ``gpu`` and ``cudaByPolicy``.
``--os`` must be an OS tag cudasched knows (the list is in the error). Exit codes: 0 a driver was
found, 1 none satisfies everything (the answer says why), 2 bad input (one line on stderr).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

from cudasched.cli import terminal
from cudasched.cli.app import EXIT_INCOMPATIBLE, EXIT_OK, app, fail
from cudasched.cli.inputs import load_knowledge
from cudasched.cli.options import AsOfOption, PolicyOption, parse_as_of
from cudasched.vocab.errors import InputError
from cudasched.vocab.requirements import Policy
from cudasched.vocab.versions import parse_cuda

if TYPE_CHECKING:
    from cudasched.compat.branches import OsTag

__all__ = ["recommend_cmd"]

TABLE_WIDTH = 120


class Installer(StrEnum):
    OPERATOR = "operator"
    HOST = "host"


class Arch(StrEnum):
    AMD64 = "amd64"
    ARM64 = "arm64"


InstallerOption = Annotated[
    Installer | None,
    typer.Option(
        "--installer",
        help="Who installs the driver: the GPU Operator's driver container (the default "
        "with --os) or the host or its node image (the default without).",
    ),
]
ArchOption = Annotated[
    Arch | None,
    typer.Option(
        "--arch",
        help="The nodes' CPU architecture (kubernetes.io/arch); default: the only one "
        "servers with the GPU have (GH200, GB200, T4G: arm64), else not checked.",
    ),
]


def _installer(asked: Installer | None, os_tag: OsTag | None) -> Installer:
    """Who installs the driver: as asked, else the GPU Operator with an OS (its driver
    containers are per OS) and the host without one."""
    how = asked or (Installer.OPERATOR if os_tag is not None else Installer.HOST)
    if how is Installer.OPERATOR and os_tag is None:
        raise InputError("--installer operator needs --os: driver containers are per OS")
    return how


class RecommendFormat(StrEnum):
    TABLE = "table"
    JSON = "json"


def _render(doc: Mapping[str, Any], console: Console) -> None:
    def say(text: str, style: str = "", indent: str = "", more: str = "  ") -> None:
        for line in terminal.wrapped(text, console.width, indent, more):
            console.print(Text(line, style=style), soft_wrap=True)

    branch = doc["branch"]
    if branch is None:
        say(f"no driver for {doc['gpu']}", "bold red")
    else:
        released = f" (out since {doc['released']})" if doc["released"] else ""
        say(
            f"R{branch}: {doc['version']}{released}, {doc['kernelModuleType']} kernel "
            f"modules, usePrecompiled {str(doc['usePrecompiled']).lower()}, CUDA "
            f"{doc['cuda']} natively, {doc['lifecycle'] or 'lifecycle unknown'}"
            + (f" until {doc['eol']}" if doc["eol"] else ""),
            "bold",
        )
        if doc["image"]:
            arch = f" ({doc['arch']})" if doc["arch"] else ""
            say(f"image {doc['image']}{arch}", indent="  ", more="    ")
    for reason in doc["reasons"]:
        say(f"- {reason}", indent="  ", more="    ")
    for warning in doc["warnings"]:
        say(f"! {warning}", "yellow", indent="  ", more="    ")
    rejected = doc["rejected"]
    if rejected:
        console.print(Text("not chosen"))
        terminal.print_table(
            console,
            (terminal.Column("branch"), terminal.Column("why")),
            _runs(rejected),
        )


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
    installer: InstallerOption = None,
    gpu_operator_version: Annotated[
        str | None,
        typer.Option("--gpu-operator-version", help="The GPU Operator release (default newest)."),
    ] = None,
    current: Annotated[
        str | None,
        typer.Option("--driver", help="The nodes' current driver: kept when it satisfies all."),
    ] = None,
    kernel: Annotated[
        str | None,
        typer.Option("--kernel", help="The nodes' kernel release (uname -r): 5.15.0-113-generic."),
    ] = None,
    arch: ArchOption = None,
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
    """Recommend the driver for a GPU: an installable release of the branch that drives it and
    runs every --cuda asked, preferring long-term support branches.

    Checks the architecture's driver range, the kernel-module flavour, the branch lifecycle and
    release dates (--as-of), the kernel's minimum and reported build failures, and with --os the
    driver containers NVIDIA publishes for that OS (and precompiled ones). Exit 0: a driver;
    1: none satisfies everything (with the reason); 2: bad input.
    Example: cudasched recommend-driver --gpu V100 --cuda 12.4 --os ubuntu22.04
    """
    from cudasched.compat.branches import parse_os_tag
    from cudasched.compat.containers import known_os, operator_version
    from cudasched.knowledge.drivers import parse_kernel
    from cudasched.operations.drivers.recommend import recommend
    from cudasched.vocab.versions import parse_driver

    try:
        pol = Policy.parse(policy)
        today = parse_as_of(as_of)
        cudas = [parse_cuda(c).release for c in cuda or ()]
        kb = load_knowledge()
        os_tag = known_os(kb, parse_os_tag(os_name)) if os_name is not None else None
        release = parse_kernel(kernel) if kernel is not None else None
        driver = parse_driver(current) if current is not None else None
        chosen = operator_version(kb, gpu_operator_version)
        op = chosen if _installer(installer, os_tag) is Installer.OPERATOR else None
        answer = recommend(
            kb,
            gpu,
            cudas,
            policy=pol,
            today=today,
            os=os_tag,
            kernel=release,
            precompiled=precompiled,
            operator=op,
            current=driver,
            arch=arch.value if arch is not None else None,
        )
    except InputError as exc:
        fail(str(exc))
    doc = answer.to_dict()
    if output is RecommendFormat.JSON:
        typer.echo(json.dumps(doc, indent=2))
    else:
        _render(doc, terminal.console(TABLE_WIDTH))
    raise typer.Exit(EXIT_OK if answer.found else EXIT_INCOMPATIBLE)
