"""``cudasched image REF...``: what each image needs, read from its own registry.

Per image: the digest and platform of the manifest a node would pull, the CUDA requirement and
where it came from, answered exactly as admission answers a GPU pod that runs the image with
the webhook's image resolver on (the image's config first, then the image table). ``-o json``
is a list of ``{image, digest, platform, requirement, status, source, error}``. Exit 0 when
every image was answered (an unreadable registry is an answer: the row says why), 2 on bad
input (a reference that is not one, an unreadable ``--registry-config``).
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from typing import Annotated, Any

import typer

from cudasched.cli import terminal
from cudasched.cli.app import EXIT_OK, app, fail
from cudasched.cli.inputs import load_images, load_knowledge, load_settings
from cudasched.cli.options import (
    ConfigOption,
    PlainHttpOption,
    PlatformOption,
    RegistryConfigOption,
    registry_source,
)
from cudasched.knowledge.imageref import parse_image_ref
from cudasched.vocab.errors import InputError
from cudasched.workloads.resolution import pod_need
from cudasched.workloads.view import view_pod

__all__ = ["image_cmd", "image_rows"]


class ImageFormat(StrEnum):
    TABLE = "table"
    JSON = "json"


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
            }
        )
    return rows


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
) -> None:
    """Print what each image needs, read from its own registry: digest, platform, CUDA
    requirement and its source.

    The image's config (NVIDIA_REQUIRE_CUDA, CUDA_VERSION, the env CUDA base images set) is
    trusted before the image table, as the webhook's resolver trusts it. Example: cudasched
    image registry.corp/ml/llm:7 --registry-config ~/.docker/config.json
    """
    try:
        for ref in refs:
            parse_image_ref(ref)  # bad references are bad input, said before any request
        settings = load_settings(config)
        kb = load_knowledge()
        images = load_images(kb, settings)
        source = registry_source(
            True, registry_config, plain_http, platform, mirrors=images.mirrors
        )
        images = images.with_configs(source)
        rows = image_rows([r.strip() for r in refs], images, kb)
    except InputError as exc:
        fail(str(exc))
    if output is ImageFormat.JSON:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        raise typer.Exit(EXIT_OK)
    cells: list[list[str]] = []
    for row in rows:
        source = row["source"] or "-"
        if row["error"] and row["status"] != "unknown":  # an unknown says it already
            source += f" (registry: {row['error']})"
        digest = row["digest"] or "-"
        cells.append([row["image"], digest, row["platform"] or "-", row["requirement"], source])
    columns = [terminal.Column(c) for c in ("image", "digest", "platform", "requirement", "source")]
    terminal.print_table(terminal.console(160), columns, cells, show_lines=True)
    raise typer.Exit(EXIT_OK)
