"""The ``cudasched`` command line: one module per command, imported only when that command runs
(see :data:`cudasched.cli.app.COMMANDS`)."""

from __future__ import annotations

import sys

from typer.exceptions import Abort, TyperException

from cudasched.cli.app import EXIT_BAD_INPUT, app
from cudasched.vocab.errors import InputError, one_line

__all__ = ["app", "main"]


def main() -> None:
    """The console entry point: every error, a usage error included, is one line on stderr
    (``cudasched: error: ...``) with exit status 2."""
    try:
        code = app(standalone_mode=False)
    except TyperException as exc:  # click's usage errors (typer vendors click)
        formatter = getattr(exc, "format_message", None)
        message = str(formatter()) if formatter is not None else str(exc)
        ctx = getattr(exc, "ctx", None)
        if ctx is not None and message == ctx.get_help():  # no arguments at all: the help
            sys.stderr.write(message + "\n")
            sys.exit(EXIT_BAD_INPUT)
        message = one_line(message)
        if ctx is not None:
            message += f" (see '{ctx.command_path} --help')"
        sys.stderr.write(f"cudasched: error: {message}\n")
        sys.exit(EXIT_BAD_INPUT)
    except Abort:
        sys.stderr.write("cudasched: error: interrupted\n")
        sys.exit(130)
    except InputError as exc:  # pragma: no cover - commands normally handle this themselves
        sys.stderr.write(f"cudasched: error: {one_line(str(exc))}\n")
        sys.exit(EXIT_BAD_INPUT)
    sys.exit(code if isinstance(code, int) else 0)
