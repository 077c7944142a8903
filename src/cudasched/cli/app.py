"""The shared Typer application and the one way commands report bad input."""

from __future__ import annotations

import sys
from typing import NoReturn

import typer

app = typer.Typer(
    name="cudasched",
    help="CUDA-aware scheduling of GPU inference services on Kubernetes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

EXIT_OK = 0
EXIT_INCOMPATIBLE = 1
EXIT_BAD_INPUT = 2


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print a one-line error to stderr and exit (2 = bad input, as every command documents)."""
    sys.stderr.write(f"cudasched: error: {message}\n")
    raise typer.Exit(code)
