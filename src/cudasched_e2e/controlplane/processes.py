"""The processes of a control plane and the state file that records them: stopping each
component's process group, the helpers a person starts beside it (``controlplane webhook``), and a
detached control plane (``down``) from its ``state.json``."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

__all__ = [
    "STATE_FILE",
    "cmdline",
    "exited",
    "pid_alive",
    "read_state",
    "record_helper",
    "stop_directory",
    "stop_group",
]

STATE_FILE = "state.json"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def stop_group(pid: int, *, expect: str | None = None, grace: float = 10.0) -> None:
    """SIGTERM the process group led by ``pid`` (its own session), SIGKILL after ``grace``.

    ``expect`` guards against a reused pid: the command line must contain it.
    """
    if not pid_alive(pid):
        return
    if expect and expect not in cmdline(pid):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    limit = time.monotonic() + grace
    while time.monotonic() < limit:
        with contextlib.suppress(ChildProcessError):
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                break
        if not pid_alive(pid):
            break
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def read_state(directory: Path) -> dict[str, Any]:
    path = directory / STATE_FILE
    if not path.exists():
        raise FileNotFoundError(f"no control plane in {directory} ({STATE_FILE} missing)")
    return dict(json.loads(path.read_text()))


def exited(pid: int) -> bool:
    """Gone, or a zombie waiting for a parent that is not us to reap it."""
    if not pid_alive(pid):
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


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


def _stop_helper(pid: int, *, grace: float = 60.0) -> bool:
    """SIGTERM one helper (a person's foreground or ``&`` command, not a group of ours) and wait
    while it cleans up (unregisters, stops what it started); SIGKILL after ``grace``."""
    if exited(pid) or "cudasched_e2e.controlplane" not in cmdline(pid):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    limit = time.monotonic() + grace
    while not exited(pid):
        if time.monotonic() > limit:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            break
        time.sleep(0.1)
    return True


def stop_directory(directory: Path) -> list[str]:
    """Stop the processes a (possibly detached) control plane in ``directory`` recorded: its
    helpers first (while the API server still answers them), then its components."""
    state = read_state(directory)
    stopped = [name for name, pid in (state.get("helpers") or {}).items() if _stop_helper(int(pid))]
    state = read_state(directory)
    state["helpers"] = {}
    expect = {"nodekeeper": "cudasched_e2e.nodekeeper"}
    for name, pid in reversed(list(state.get("processes", {}).items())):
        if pid_alive(int(pid)):
            stop_group(int(pid), expect=expect.get(name, name))
            stopped.append(name)
    state["processes"] = {}
    (directory / STATE_FILE).write_text(json.dumps(state, indent=2))
    return stopped
