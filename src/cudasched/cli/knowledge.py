"""``cudasched knowledge``: what cudasched knows (GPUs, images, CUDA toolkits, driver branches,
framework builds), each fact with its source, filterable; the first thing to check when a
workload is not constrained.
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from cudasched.cli import terminal
from cudasched.cli.app import EXIT_OK, app, fail
from cudasched.cli.inputs import load_knowledge
from cudasched.knowledge.catalog import COLUMNS, Topic, rows
from cudasched.vocab.errors import InputError

__all__ = ["knowledge_cmd"]


class KnowledgeFormat(StrEnum):
    TABLE = "table"
    JSON = "json"


@app.command("knowledge")
def knowledge_cmd(
    topic: Annotated[
        Topic, typer.Argument(help="What to list: gpus, images, cuda, drivers or frameworks.")
    ],
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
    output: Annotated[KnowledgeFormat, typer.Option("-o", "--output", help="Output format.")] = (
        KnowledgeFormat.TABLE
    ),
) -> None:
    """List what cudasched knows about one topic, with the source of every fact.

    Examples: cudasched knowledge images vllm; cudasched knowledge gpus H100 -o json;
    cudasched knowledge cuda 12.8. Exit 0 (also when nothing matches), 2 on bad input.
    """
    from cudasched.knowledge.images import ImageTable
    from cudasched.settings.config import load_config

    try:
        kb = load_knowledge()
        images = ImageTable.from_config(load_config(config), kb=kb)
        found = rows(topic, kb, images, match)
    except InputError as exc:
        fail(str(exc))
    if output is KnowledgeFormat.JSON:
        doc = {"topic": topic.value, "match": match, "rows": [r.to_dict() for r in found]}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        raise typer.Exit(EXIT_OK)
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
    raise typer.Exit(EXIT_OK)
