"""What a running control plane records in its directory (``state.json``: server, kubeconfig,
ports, process ids, and the helpers a person starts beside it such as ``controlplane
webhook``), read back, and used to stop a detached one
(``python -m tests.harness.controlplane down``): helpers first, then the components.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.harness.controlplane.processes import pid_alive, stop_group, stop_helper

__all__ = [
    "STATE_FILE",
    "read_state",
    "record_helper",
    "stop_directory",
]

STATE_FILE = "state.json"


def read_state(directory: Path) -> dict[str, Any]:
    path = directory / STATE_FILE
    if not path.exists():
        raise FileNotFoundError(f"no control plane in {directory} ({STATE_FILE} missing)")
    return dict(json.loads(path.read_text()))


def record_helper(directory: Path, name: str, pid: int | None) -> None:
    """Note a helper process that serves the control plane in ``directory`` (``webhook``), or
    forget it (``pid`` None), so that :func:`stop_directory` (``down``) ends it first."""
    state = read_state(directory)
    helpers = dict(state.get("helpers") or {})
    if pid is None:
        helpers.pop(name, None)
    else:
        helpers[name] = pid
    state["helpers"] = helpers
    (directory / STATE_FILE).write_text(json.dumps(state, indent=2))


def stop_directory(directory: Path) -> list[str]:
    """Stop the processes a (possibly detached) control plane in ``directory`` recorded: its
    helpers first (while the API server still answers them), then its components."""
    state = read_state(directory)
    stopped = [name for name, pid in (state.get("helpers") or {}).items() if stop_helper(int(pid))]
    state = read_state(directory)
    state["helpers"] = {}
    expect = {"nodekeeper": "tests.harness.nodekeeper"}
    for name, pid in reversed(list(state.get("processes", {}).items())):
        if pid_alive(int(pid)):
            stop_group(int(pid), expect=expect.get(name, name))
            stopped.append(name)
    state["processes"] = {}
    (directory / STATE_FILE).write_text(json.dumps(state, indent=2))
    return stopped
