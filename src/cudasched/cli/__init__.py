"""The ``cudasched`` command line: one module per command, imported only when that command runs
(see :data:`cudasched.cli.app.COMMANDS`)."""

from __future__ import annotations

import sys

from cudasched.cli.app import app, fail
from cudasched.errors import InputError

__all__ = ["app", "main"]


def main() -> None:
    try:
        app()
    except InputError as exc:  # pragma: no cover - commands normally handle this themselves
        fail(str(exc))
    sys.exit(0)
