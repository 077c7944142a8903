"""``cudasched knowledge``: the knowledge cudasched judges with (which bundle, how old), what it
knows (GPUs, images, CUDA toolkits, driver branches, framework builds), each fact with its
source, filterable; the first thing to check when a workload is not constrained. Its bundle
subcommands (``export``, ``diff``, ``verify``, ``push``, ``pull``) are in
:mod:`cudasched.cli.knowledgebundles`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from cudasched.cli import terminal
from cudasched.cli.app import EXIT_OK, app, fail, versioned
from cudasched.cli.inputs import load_images, load_knowledge, load_settings
from cudasched.cli.knowledgebundles import register
from cudasched.cli.options import parse_as_of
from cudasched.knowledge.catalog import COLUMNS, Row, Topic, rows
from cudasched.vocab.errors import InputError

__all__ = ["knowledge_app", "knowledge_cmd"]


class KnowledgeFormat(StrEnum):
    TABLE = "table"
    JSON = "json"


AgeAsOfOption = Annotated[
    str | None,
    typer.Option(
        "--as-of", help="Count the knowledge's age to this day, YYYY-MM-DD. Default: today."
    ),
]
OutputOption = Annotated[KnowledgeFormat, typer.Option("-o", "--output", help="Output format.")]

knowledge_app = typer.Typer(
    name="knowledge",
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app.add_typer(knowledge_app, name="knowledge")


@knowledge_app.callback(invoke_without_command=True)
def knowledge_cmd(
    ctx: typer.Context,
    as_of: AgeAsOfOption = None,
    output: OutputOption = KnowledgeFormat.TABLE,
) -> None:
    """Show the knowledge cudasched judges with and what it knows, with the source of every
    fact; export, diff, verify, push and pull knowledge bundles.

    Without a subcommand: the bundle in use (cudasched --knowledge REF|PATH, else the
    built-in one), its version, date, age (--as-of) and digest, and how many facts of each
    kind it holds. A topic (gpus, images, cuda, drivers, frameworks) lists those facts:
    cudasched knowledge images vllm; cudasched knowledge gpus H100 -o json. Exit 0, 2 on bad
    input.
    """
    if ctx.invoked_subcommand is not None:
        return
    try:
        today = parse_as_of(as_of)
        kb = load_knowledge()
        images = load_images(kb)
    except InputError as exc:
        fail(str(exc))
    provenance = kb.provenance
    counts = _counts(kb, images)
    if output is KnowledgeFormat.JSON:
        doc = {"knowledge": provenance.to_dict(today), "facts": counts}
        sys.stdout.write(json.dumps(versioned(doc), indent=2) + "\n")
        raise typer.Exit(EXIT_OK)
    width = terminal.console(80).width
    lines = terminal.wrapped(provenance.describe(today), width, "", "  ")
    if provenance.digest:
        lines.append(f"  digest {provenance.digest}")
    facts = ", ".join(f"{n} {what}" for what, n in counts.items())
    lines += terminal.wrapped(facts, width, "  ", "  ")
    lines.append("  list them: cudasched knowledge gpus|images|cuda|drivers|frameworks [MATCH]")
    sys.stdout.write("\n".join(lines) + "\n")
    raise typer.Exit(EXIT_OK)


def _counts(kb: Any, images: Any) -> dict[str, int]:
    """How many facts of each kind the knowledge holds."""
    releases = sum(len(r) for r in kb.drivers.releases.values())
    return {
        "CUDA releases": sum(1 for _ in kb.toolkits()),
        "driver branches": sum(1 for _ in kb.driver_branches()),
        "driver releases": releases,
        "architectures": sum(1 for _ in kb.architectures()),
        "GPUs": sum(1 for _ in kb.gpus()),
        "NGC releases": sum(1 for _ in kb.ngc_releases()),
        "framework releases": sum(1 for _ in kb.framework_releases()),
        "image rows": len(images.rules),
    }


def _list_topic(
    topic: Topic, match: str | None, config: Path | None, output: KnowledgeFormat
) -> None:
    try:
        settings = load_settings(config) if config is not None else None
        kb = load_knowledge()
        found = rows(topic, kb, load_images(kb, settings), match)
    except InputError as exc:
        fail(str(exc))
    if output is KnowledgeFormat.JSON:
        doc = {"topic": topic.value, "match": match, "rows": [r.to_dict() for r in found]}
        sys.stdout.write(json.dumps(versioned(doc), indent=2) + "\n")
        raise typer.Exit(EXIT_OK)
    _print_rows(topic, match, found)
    raise typer.Exit(EXIT_OK)


def _print_rows(topic: Topic, match: str | None, found: Sequence[Row]) -> None:
    # Sources are footnotes: a number in the table, the links under it, each once.
    notes: dict[str, int] = {}
    for row in found:
        notes.setdefault(row.source, len(notes) + 1)
    title = f"{topic.value}: {len(found)} known" + (f" matching {match!r}" if match else "")
    out = terminal.console(80)
    headers = [*COLUMNS[topic], "src"]
    cells = [[*(row.fields[c] for c in COLUMNS[topic]), f"[{notes[row.source]}]"] for row in found]
    lines: list[str] = []
    if terminal.table_widths(headers, cells, out.width) is not None:
        columns = [terminal.Column(c) for c in COLUMNS[topic]]
        columns.append(terminal.Column("src", justify="right"))
        terminal.print_table(out, columns, cells, title=title)
    else:  # too narrow for a table that cuts nothing: one record per row
        lines.append(title)
        first, *others = COLUMNS[topic]
        for row in found:
            lines.append(f"{row.fields[first]}  [{notes[row.source]}]")
            facts = "; ".join(f"{c} {row.fields[c]}" for c in others if row.fields[c])
            lines += terminal.wrapped(facts, out.width, "  ", "    ")
    for source, number in notes.items():
        # a link longer than the line stays next to its number, whole
        marker, *rest = terminal.wrapped(f"[{number}] {source}", out.width, "", "    ")
        if marker == f"[{number}]" and rest:
            marker, rest = f"{marker} {rest[0].strip()}", rest[1:]
        lines += [marker, *rest]
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")
    if not found:
        sys.stdout.write(
            f"nothing matches {match!r}; every row: cudasched knowledge {topic.value}\n"
        )


_TOPIC_HELP = {
    Topic.GPUS: "List the GPUs cudasched knows: compute capability, architecture, first driver.",
    Topic.IMAGES: "List the image table's rows: which images, which tags, which CUDA.",
    Topic.CUDA: "List the CUDA toolkit releases and the minimum driver of each.",
    Topic.DRIVERS: "List the driver branches: lifecycle, end of life, newest known release.",
    Topic.FRAMEWORKS: "List the framework builds (PyTorch, TensorFlow, vLLM) and their CUDA.",
}


def _topic_command(topic: Topic) -> None:
    """Register ``knowledge <topic> [MATCH]``."""

    def listing(
        match: Annotated[
            str | None,
            typer.Argument(help="Only rows that mention this text (any column, case-insensitive)."),
        ] = None,
        config: Annotated[
            Path | None,
            typer.Option(
                "--config",
                help="Webhook configuration YAML: its imageOverrides and mirrors are listed too.",
            ),
        ] = None,
        output: OutputOption = KnowledgeFormat.TABLE,
    ) -> None:
        _list_topic(topic, match, config, output)

    listing.__doc__ = (
        f"{_TOPIC_HELP[topic]}\n\nEach row with its source (a numbered footnote). Exit 0 (also "
        "when nothing matches), 2 on bad input."
    )
    knowledge_app.command(topic.value)(listing)


for _topic in Topic:
    _topic_command(_topic)
register(knowledge_app)
