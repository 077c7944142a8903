"""``operations.drivers.demand``: what a cluster asks of its drivers is what admission would
enforce on the pods its workloads create: the same skip switch, the same requirement."""

from __future__ import annotations

from typing import Any

import pytest

from cudasched.cluster.fleet import Fleet
from cudasched.cluster.snapshot import ClusterSnapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.images import ImageTable
from cudasched.operations.drivers.demand import cluster_demand
from cudasched.vocab.requirements import Policy
from tests.support import builders


def deployment(template_annotations: dict[str, str], own: dict[str, str]) -> dict[str, Any]:
    pod = builders.pod(annotations={"cudasched.io/cuda-version": "12.4", **template_annotations})
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "team", "annotations": own},
        "spec": {"template": {"metadata": pod["metadata"], "spec": pod["spec"]}},
    }


def demand_of(kb: KnowledgeBase, *workloads: dict[str, Any]) -> list[str]:
    snap = ClusterSnapshot(nodes=(builders.node("n1"),), workloads=workloads)
    fleet = Fleet.from_snapshot(snap, kb)
    found = cluster_demand(snap, fleet, ImageTable.builtin(kb), Policy.STRICT)
    return [w for group in found.groups for w in group.workloads]


@pytest.mark.parametrize(
    ("template", "own", "asks"),
    [
        ({}, {}, True),
        ({"cudasched.io/skip": "true"}, {}, False),  # its pods carry it: admission skips them
        ({}, {"cudasched.io/skip": "true"}, False),  # under its pods' own, as explain reads it
    ],
)
def test_a_controller_is_skipped_where_its_pods_are(
    kb: KnowledgeBase, template: dict[str, str], own: dict[str, str], asks: bool
) -> None:
    """The skip switch is read from the pod the controller creates (its template's
    annotations over its own), as admission reads it from the pod and ``explain`` from the
    same pod: planning used to read only the controller's own annotations, and planned a
    driver for pods admission leaves alone."""
    assert bool(demand_of(kb, deployment(template, own))) is asks
