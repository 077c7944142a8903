"""``cudasched image REF...``: what each image needs, read from its own registry.

Per image: the digest and platform of the manifest a node would pull, the CUDA requirement and
where it came from, answered as admission answers a GPU pod that runs the image with the
webhook's image resolver on (the image's config first, then the image table), and, when the
config names no CUDA (``--layers auto``), what the image's SBOM and layers carry: every fact
with the layer and path it was found at, the rule that picked the answer, the compat
library's forward-compatibility note. ``-o json`` is ``{"images": [...], "cudaschedVersion"}``,
one ``{image, digest, platform, requirement, status, source, error, gate, contents}`` per
reference (an object, not a bare list, so that the version goes with every JSON answer:
docs/design.md).

Exit 0 when every image's requirement was found, 1 when one is unknown or its registry could
not be read (a missing tag, an unreachable host, a refused pull: the row says why), 2 on bad
input (a reference that is not one, an unreadable ``--registry-config``).
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from typing import Annotated, Any

import typer

from cudasched.cli import terminal
from cudasched.cli.app import EXIT_INCOMPATIBLE, EXIT_OK, app, fail, versioned
from cudasched.cli.inputs import load_images, load_knowledge, load_settings
from cudasched.cli.options import (
    ConfigOption,
    PlainHttpOption,
    PlatformOption,
    RegistryConfigOption,
    registry_source,
)
from cudasched.knowledge.imagecontents import ImageContents
from cudasched.knowledge.imageref import parse_image_ref
from cudasched.vocab.errors import InputError
from cudasched.vocab.requirecuda import REQUIRE_ENV
from cudasched.workloads.resolution import pod_need
from cudasched.workloads.view import view_pod

__all__ = ["exit_code", "image_cmd", "image_rows"]


class ImageFormat(StrEnum):
    TABLE = "table"
    JSON = "json"


class LayerMode(StrEnum):
    AUTO = "auto"
    ALWAYS = "always"
    NEVER = "never"


def _gpu_pod(image: str) -> dict[str, Any]:
    """The pod admission would judge: one container running ``image`` with a GPU."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "image", "namespace": "default"},
        "spec": {
            "containers": [
                {"name": "main", "image": image, "resources": {"limits": {"nvidia.com/gpu": 1}}}
            ]
        },
    }


def image_rows(refs: list[str], images: Any, kb: Any) -> list[dict[str, Any]]:
    """One row per reference (``images`` carries the registry source)."""
    rows = []
    for ref in refs:
        need = pod_need(view_pod(_gpu_pod(ref)), None, images, kb)
        config = images.config_for(ref)
        req = need.requirement
        if need.unknown is not None:
            requirement, source = "unknown", need.unknown.describe()
        else:
            requirement, source = req.describe(), req.source
        rows.append(
            {
                "image": ref,
                "digest": (config.digest or None) if config is not None else None,
                "platform": (config.platform or None) if config is not None else None,
                "requirement": requirement,
                "status": need.status.value,
                "source": source,
                "error": (config.error or None) if config is not None else None,
                "gate": (config.env.get(REQUIRE_ENV) or None) if config is not None else None,
                "contents": (
                    config.contents.to_dict()
                    if config is not None and config.contents is not None
                    else None
                ),
            }
        )
    return rows


def exit_code(rows: list[dict[str, Any]]) -> int:
    """0 when every requirement was found, 1 when one is unknown or a registry failed."""
    failed = any(row["status"] == "unknown" or row["error"] for row in rows)
    return EXIT_INCOMPATIBLE if failed else EXIT_OK


def _fact_lines(contents: ImageContents) -> list[str]:
    """What ``cudasched image`` prints of an image's contents under its table."""
    lines = [f"{contents.image}: {contents.describe()}"]
    for fact in contents.facts:
        bound = " (at least)" if fact.floor else ""
        lines.append(
            f"  {fact.kind} {fact.what}: CUDA {fact.cuda}{bound} at /{fact.path.strip('/')} "
            f"in {fact.layer} ({fact.why})"
        )
    if contents.compat is not None:
        note = contents.compat
        branches = ", ".join(f"R{b}" for b in note.driver_branches) or "none listed"
        lines.append(
            f"  compat {note.path.rsplit('/', 1)[-1]}: forward compatibility to CUDA "
            f"{note.cuda or '?'} on driver branches {branches} at /{note.path} in {note.layer}"
        )
    lines.extend(f"  note: {text}" for text in contents.notes)
    read = f"{contents.layers_read} of {contents.layers_total} layers"
    lines.append(
        f"  read: {read}, {contents.bytes_read} bytes"
        + (", the SBOM" if contents.sbom else "")
        + (f"; stopped: {contents.stopped}" if contents.stopped else "")
    )
    return lines


@app.command("image")
def image_cmd(
    refs: Annotated[
        list[str],
        typer.Argument(metavar="REF...", help="Image references, as a pod names them."),
    ],
    config: ConfigOption = None,
    registry_config: RegistryConfigOption = None,
    plain_http: PlainHttpOption = None,
    platform: PlatformOption = "linux/amd64",
    output: Annotated[
        ImageFormat, typer.Option("-o", "--output", help="Output format.")
    ] = ImageFormat.TABLE,
    layers: Annotated[
        LayerMode,
        typer.Option(
            "--layers",
            help="Read the image's SBOM and layers: auto (when its config names no CUDA), "
            "always, never.",
        ),
    ] = LayerMode.AUTO,
    all_layers: Annotated[
        bool,
        typer.Option(
            "--all-layers",
            help="Read every layer within the budget (the compat library's note, the base's "
            "runtimes) instead of stopping at the first layer that names a CUDA runtime.",
        ),
    ] = False,
    layer_budget_mb: Annotated[
        int, typer.Option("--layer-budget-mb", min=1, help="MiB of layer blobs to fetch per image.")
    ] = 2048,
    layer_deadline: Annotated[
        float,
        typer.Option("--layer-deadline", min=0.001, help="Seconds to read one image's layers."),
    ] = 180.0,
) -> None:
    """Print what each image needs, read from its own registry: digest, platform, CUDA
    requirement and its source.

    The image's config (NVIDIA_REQUIRE_CUDA, CUDA_VERSION, the env CUDA base images set) is
    trusted before the image table, as the webhook's resolver trusts it; when it names no
    CUDA, the image's SBOM and layers are read (top layer first, within the budget) and every
    fact found is shown with its layer and path. Exit 1 when a requirement is unknown or a
    registry could not be read. Example: cudasched image registry.corp/ml/llm:7
    --registry-config ~/.docker/config.json
    """
    try:
        for ref in refs:
            parse_image_ref(ref)  # bad references are bad input, said before any request
        settings = load_settings(config)
        kb = load_knowledge()
        images = load_images(kb, settings)
        budget = _layer_budget(layer_budget_mb, layer_deadline, all_layers)
        source = registry_source(
            True,
            registry_config,
            plain_http,
            platform,
            mirrors=images.mirrors,
            layers=layers.value,
            budget=budget,
        )
        images = images.with_configs(source)
        rows = image_rows([r.strip() for r in refs], images, kb)
    except InputError as exc:
        fail(str(exc))
    if output is ImageFormat.JSON:
        sys.stdout.write(json.dumps(versioned({"images": rows}), indent=2) + "\n")
        raise typer.Exit(exit_code(rows))
    _print_text(rows, images)
    raise typer.Exit(exit_code(rows))


def _layer_budget(megabytes: int, seconds: float, read_all: bool) -> Any:
    """The registry's layer budget from the command's options (imported when the command
    runs, as every registry module is)."""
    from cudasched.knowledge.layerscan import ScanLimits
    from cudasched.registry.layers import LayerBudget

    return LayerBudget(
        max_bytes=megabytes * 1024 * 1024,
        deadline_seconds=seconds,
        scan=ScanLimits(read_all=read_all),
    )


def _print_text(rows: list[dict[str, Any]], images: Any) -> None:
    """The table, then under it each image's contents: every fact with its layer and path."""
    cells: list[list[str]] = []
    for row in rows:
        said = row["source"] or "-"
        if row["error"] and row["status"] != "unknown":  # an unknown says it already
            said += f" (registry: {row['error']})"
        digest = row["digest"] or "-"
        cells.append([row["image"], digest, row["platform"] or "-", row["requirement"], said])
    columns = [terminal.Column(c) for c in ("image", "digest", "platform", "requirement", "source")]
    console = terminal.console(160)
    terminal.print_table(console, columns, cells, show_lines=True)
    for row in rows:
        found = images.config_for(row["image"])
        if found is not None and found.contents is not None:
            for line in _fact_lines(found.contents):
                console.print(line, markup=False, highlight=False, soft_wrap=True)
