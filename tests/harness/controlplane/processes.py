"""The control plane's processes: each runs in its own process group (its own session), so
that :func:`stop_group` ends it and anything it started and nothing outlives a test session;
a helper a person starts beside it (``controlplane webhook``) is ended by :func:`stop_helper`;
whether a pid is alive or has exited, its command line, the end of a log for an error message,
a free port on 127.0.0.1 (the one the whole suite takes its ports from), and how a child runs
one of the harness's own modules.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Process",
    "StartError",
    "cmdline",
    "exited",
    "free_port",
    "harness_module",
    "log_tail",
    "pid_alive",
    "stop_group",
    "stop_helper",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


#: The repository root: the harness is the package ``tests.harness`` of the source tree, not an
#: installed one, so a child process finds it only with this directory on its path.
REPOSITORY = Path(__file__).resolve().parents[3]


def harness_module(module: str, *args: str) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that run ``python -m module args`` (one of the
    harness's modules) from any working directory."""
    path = os.pathsep.join(p for p in (str(REPOSITORY), os.environ.get("PYTHONPATH")) if p)
    return [sys.executable, "-m", module, *args], {**os.environ, "PYTHONPATH": path}


class StartError(RuntimeError):
    """A component did not start; the message carries the end of its log."""


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes] | None
    pid: int
    log: Path


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


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


def exited(pid: int) -> bool:
    """Gone, or a zombie waiting for a parent that is not us to reap it."""
    if not pid_alive(pid):
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


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


def stop_helper(pid: int, *, grace: float = 60.0) -> bool:
    """SIGTERM one helper (a person's foreground or ``&`` command, not a group of ours) and wait
    while it cleans up (unregisters, stops what it started); SIGKILL after ``grace``. False when
    ``pid`` is no longer a harness command (gone, or a reused pid)."""
    if exited(pid) or "tests.harness.controlplane" not in cmdline(pid):
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
