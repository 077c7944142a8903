"""The ``cudasched`` command line. Each command group lives in its own module and registers
itself on :data:`cudasched.cli.app.app`; this module only wires them together."""

from __future__ import annotations

import sys

from cudasched.cli.app import app, fail
from cudasched.errors import InputError

# Importing a command module registers its commands on `app`.
from cudasched.cli import check as _check  # noqa: F401, E402  isort: skip
from cudasched.cli import affinity as _affinity  # noqa: F401, E402  isort: skip
from cudasched.cli import explain as _explain  # noqa: F401, E402  isort: skip
from cudasched.cli import mutate as _mutate  # noqa: F401, E402  isort: skip
from cudasched.cli import agent as _agent  # noqa: F401, E402  isort: skip
from cudasched.cli import webhook as _webhook  # noqa: F401, E402  isort: skip
from cudasched.cli import manifests as _manifests  # noqa: F401, E402  isort: skip
from cudasched.cli import audit as _audit  # noqa: F401, E402  isort: skip
from cudasched.cli import report as _report  # noqa: F401, E402  isort: skip

__all__ = ["app", "main"]


def main() -> None:
    try:
        app()
    except InputError as exc:  # pragma: no cover - commands normally handle this themselves
        fail(str(exc))
    sys.exit(0)
