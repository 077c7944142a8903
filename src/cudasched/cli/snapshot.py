"""``cudasched snapshot``: the cluster as one kubectl ``List`` on stdout, the file every other
command reads with ``--cluster`` (``cudasched snapshot --live > cluster.yaml``).

What is written can be attached to a bug report: Secrets are never included, pods are reduced to
the fields cudasched reads and ``managedFields`` are dropped
(:meth:`cudasched.cluster.snapshot.ClusterSnapshot.shareable`); answers from the file are the
answers from the cluster.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from cudasched.cli.app import EXIT_OK, app, fail
from cudasched.cli.inputs import (
    ClusterSource,
    cluster_source,
    load_cluster,
    load_gpu_operator,
    load_knowledge,
    stored_image_facts,
)
from cudasched.cluster.snapshot import ClusterSnapshot, DumpFormat, dump_snapshot
from cudasched.vocab.errors import InputError

__all__ = ["snapshot_cmd"]


@app.command("snapshot")
@cluster_source
def snapshot_cmd(
    source: ClusterSource = ClusterSource(),
    output: Annotated[
        DumpFormat, typer.Option("-o", "--output", help="yaml or json (both read back).")
    ] = DumpFormat.YAML,
) -> None:
    """Write the cluster (a file, the live cluster with --live, or the bundled sample) as one
    kubectl List on stdout: nodes, pods, InferenceServices, (Cluster)ServingRuntimes,
    LLMInferenceServices, NVIDIADrivers. With --live also the GPU Operator's ClusterPolicies
    and NVIDIADriver CRD, cut to what plan-drivers reads, and the ImageFacts the cluster keeps
    (what was read of each image), which the commands use from the file as from the cluster.
    No Secrets; pods reduced to the
    fields cudasched reads. -n and -l keep only the objects in scope (nodes stay under -n), as
    kubectl get would.
    Example: cudasched snapshot --live > cluster.yaml"""
    try:
        scope = source.scope
        snapshot = load_cluster(source, admission=True).shareable()
        if source.is_live:  # the GPU Operator's release, the images' stored facts
            snapshot = _with_cluster_extras(source, snapshot)
        if not scope.is_everything:
            snapshot = ClusterSnapshot.from_objects(
                [o for o in snapshot.objects() if scope.admits(o)], source=snapshot.source
            )
    except InputError as exc:
        fail(str(exc))
    sys.stdout.write(dump_snapshot(snapshot, output))
    raise typer.Exit(EXIT_OK)


def _with_cluster_extras(source: ClusterSource, snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """The snapshot with the cluster's ClusterPolicies and NVIDIADriver CRD (reduced to what
    ``plan-drivers`` reads), so a dump plans for the release the cluster runs, and with its
    ImageFacts, so a dump judges each image by what the cluster read of it (as ``--live``
    does: :func:`cudasched.cli.inputs.with_image_sources`)."""
    kb = load_knowledge()
    crd = kb.operator.cluster_release.crd if kb.operator.cluster_release else ""
    extra = [*load_gpu_operator(source, snapshot, crd), *stored_image_facts(source, snapshot)]
    if not extra:
        return snapshot
    objects = [*snapshot.objects(), *extra]
    return ClusterSnapshot.from_objects(objects, source=snapshot.source).shareable()
