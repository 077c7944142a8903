"""What a running control plane records in its directory (``state.json``: server, kubeconfig,
ports, process ids), read back, and used to stop a detached one
(``python -m cudasched_e2e.controlplane down``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cudasched_e2e.controlplane.processes import pid_alive, stop_group

__all__ = [
    "STATE_FILE",
    "read_state",
    "stop_directory",
]

STATE_FILE = "state.json"


def read_state(directory: Path) -> dict[str, Any]:
    path = directory / STATE_FILE
    if not path.exists():
        raise FileNotFoundError(f"no control plane in {directory} ({STATE_FILE} missing)")
    return dict(json.loads(path.read_text()))


def stop_directory(directory: Path) -> list[str]:
    """Stop the processes a (possibly detached) control plane in ``directory`` recorded."""
    state = read_state(directory)
    stopped = []
    expect = {"nodekeeper": "cudasched_e2e.nodekeeper"}
    for name, pid in reversed(list(state.get("processes", {}).items())):
        if pid_alive(int(pid)):
            stop_group(int(pid), expect=expect.get(name, name))
            stopped.append(name)
    state["processes"] = {}
    (directory / STATE_FILE).write_text(json.dumps(state, indent=2))
    return stopped
