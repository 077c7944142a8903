"""Fake GPU nodes for a control plane without kubelets, from real GPU Feature Discovery label sets.

The templates are the nodes of cudasched's bundled sample cluster (21 nodes: Kepler on R470 to
B200 on R580, GFD's old and new key generations, one CPU node), read through the command line
(``cudasched snapshot -o json``). Node ``i`` of a fleet is template ``i mod 21`` with its labels,
capacity and allocatable (``nvidia.com/gpu`` included) unchanged and its identity varied: name,
hostname label, addresses, machine and boot IDs. They are created as API objects with a Ready
condition; :mod:`tests.harness.nodekeeper` keeps them Ready the way kwok does (Lease renewals,
status heartbeats), so kube-scheduler binds pods to them and nothing runs the pods.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = [
    "FLEET_LABEL",
    "TEMPLATE_LABEL",
    "cudasched_command",
    "fleet",
    "node_from_template",
    "now_rfc3339",
    "sample_objects",
    "template_nodes",
]

JSON = dict[str, Any]

#: Every node the harness creates carries this label (value: the fleet's name).
FLEET_LABEL = "e2e.cudasched.io/fleet"
#: ... and the name of the sample node it was made from.
TEMPLATE_LABEL = "e2e.cudasched.io/template"

_DROP_META = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")


def cudasched_command() -> list[str]:
    """``cudasched`` next to this interpreter (the venv's), else on PATH."""
    here = Path(sys.executable).parent / "cudasched"
    if here.exists():
        return [str(here)]
    found = shutil.which("cudasched")
    if found:
        return [found]
    return [sys.executable, "-m", "cudasched.cli"]


def sample_objects() -> list[JSON]:
    """Every object of cudasched's bundled sample cluster, as ``cudasched snapshot`` writes it."""
    done = subprocess.run(
        [*cudasched_command(), "snapshot", "-o", "json"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"cudasched snapshot failed ({done.returncode}): {done.stderr.strip()}")
    return list(json.loads(done.stdout)["items"])


def template_nodes(objects: list[JSON] | None = None) -> list[JSON]:
    """The sample cluster's nodes, in its order."""
    return [o for o in (objects or sample_objects()) if o.get("kind") == "Node"]


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _short(name: str) -> str:
    head = name.split(".")[0]
    return head[:40].rstrip("-")


def node_from_template(template: JSON, index: int, *, fleet_name: str = "e2e") -> JSON:
    """Node ``index`` of a fleet: ``template`` with a new identity and a fresh Ready status."""
    node = copy.deepcopy(template)
    meta = node.setdefault("metadata", {})
    old_name = meta["name"]
    name = f"{_short(old_name)}-{index:04d}"
    for key in _DROP_META:
        meta.pop(key, None)
    meta["name"] = name
    labels = meta.setdefault("labels", {})
    labels["kubernetes.io/hostname"] = name
    labels[FLEET_LABEL] = fleet_name
    labels[TEMPLATE_LABEL] = old_name[:63].rstrip(".-")
    address = f"10.{200 + index // 65536 % 50}.{index // 256 % 256}.{index % 256}"
    annotations = meta.setdefault("annotations", {})
    if "alpha.kubernetes.io/provided-node-ip" in annotations:
        annotations["alpha.kubernetes.io/provided-node-ip"] = address
    node["spec"] = {k: v for k, v in (node.get("spec") or {}).items() if k in ("taints",)}
    status = node.setdefault("status", {})
    status["addresses"] = [
        {"type": "InternalIP", "address": address},
        {"type": "Hostname", "address": name},
    ]
    digest = hashlib.sha256(name.encode()).hexdigest()
    info = status.setdefault("nodeInfo", {})
    info.update(
        machineID=digest[:32],
        bootID=f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}",
        systemUUID=digest[32:64].upper(),
    )
    status.pop("images", None)
    status.pop("volumesAttached", None)
    status.pop("volumesInUse", None)
    status["conditions"] = ready_conditions(now_rfc3339())
    return node


def ready_conditions(now: str) -> list[JSON]:
    """The conditions a healthy kubelet posts, heartbeats at ``now``."""
    rows = [
        ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID"),
        ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ]
    return [
        {
            "type": kind,
            "status": value,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        for kind, value, reason, message in rows
    ]


def fleet(
    count: int, *, templates: list[JSON] | None = None, fleet_name: str = "e2e"
) -> list[JSON]:
    """``count`` nodes cycling through the templates (all 21 sample nodes by default)."""
    bases = templates if templates is not None else template_nodes()
    if not bases:
        raise ValueError("no template nodes")
    return [
        node_from_template(bases[i % len(bases)], i, fleet_name=fleet_name) for i in range(count)
    ]
