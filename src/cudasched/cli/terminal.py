"""What fits the reader's terminal: its width, text wrapped at spaces only, and tables whose
columns are never narrower than their longest word (one record per row where no such table
fits). The one place a command learns how wide it may print, so no command cuts a code, a name
or a version mid-word, at 80 columns or at 200.
"""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

__all__ = ["Column", "console", "print_table", "table_widths", "width", "wrapped"]

#: Below this a piped ``$COLUMNS`` is taken for a mistake and the command's default is used.
MIN_COLUMNS = 40


def width(default: int) -> int:
    """The terminal's columns; when the output is piped, ``$COLUMNS`` if it is a number of at
    least :data:`MIN_COLUMNS`, else ``default`` (what the command reads best at)."""
    if sys.stdout.isatty():  # rich's Console would say the same, at a fifth of start-up
        return shutil.get_terminal_size((default, 24)).columns
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) >= MIN_COLUMNS else default


def _console_class() -> type:
    from rich.console import Console

    class PipeConsole(Console):
        """rich's console, except that a closed stdout (``| head``) is left to the command
        line to handle (rich exits 1 on it; it is no error: ``cli/app`` exits 0 quietly)."""

        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError

    return PipeConsole


def console(default: int) -> Console:
    """A console as wide as :func:`width` says, which never wraps what it is given itself."""

    return _console_class()(width=width(default), soft_wrap=False)  # type: ignore[no-any-return]


def wrapped(text: str, columns: int, indent: str = "", more: str | None = None) -> list[str]:
    """``text`` wrapped at spaces only: a code, a name or a version is never cut (a word longer
    than the line stands alone on its own). Continuation lines take ``more``, by default the
    indent and two spaces."""
    return textwrap.wrap(
        text,
        width=max(columns, 20),
        initial_indent=indent,
        subsequent_indent=more if more is not None else indent + "  ",
        break_long_words=False,
        break_on_hyphens=False,
    ) or [indent]


@dataclass(frozen=True, slots=True)
class Column:
    """A column of :func:`print_table`: its header, how its cells align, and how a cell of
    several lines reads as one when the table becomes records."""

    header: str
    justify: Literal["left", "right", "center"] = "left"
    joiner: str = "; "


def _plain(cell: str | Text) -> str:
    return cell if isinstance(cell, str) else cell.plain


def table_widths(
    headers: Sequence[str], rows: Sequence[Sequence[str]], columns: int
) -> list[int] | None:
    """Each column's width in a table of ``columns`` characters (rich's default box: one
    space of padding either side, a rule between columns and at both edges) where no word of
    any cell or header is cut: at least its longest word, at most its longest line. The room
    left is shared out narrowest need first, each column taking at most an even share of what
    remains, so short columns show whole lines and long ones split the rest. None when the
    longest words alone do not fit."""
    cells = [[h, *(row[i] for row in rows)] for i, h in enumerate(headers)]
    least = [max(len(word) for text in col for word in [*text.split(), ""]) for col in cells]
    most = [max(len(line) for text in col for line in text.split("\n")) for col in cells]
    frame = 3 * len(headers) + 1
    if sum(least) + frame > columns:
        return None
    out = list(least)
    spare = columns - frame - sum(least)
    order = sorted(range(len(out)), key=lambda i: most[i] - least[i])
    for taken, i in enumerate(order):
        give = min(most[i] - least[i], spare // (len(order) - taken))
        out[i] += give
        spare -= give
    return out


def print_table(
    out: Console,
    columns: Sequence[Column],
    rows: Sequence[Sequence[str | Text]],
    *,
    title: str | Text | None = None,
    caption: str | None = None,
    show_lines: bool = False,
) -> None:
    """A table as wide as ``out``, every column at least as wide as its longest word; where
    that cannot fit, one record per row instead: the first cell, then ``header: cell`` for
    each other cell that says something, wrapped at spaces. Either way nothing is cut."""
    from rich.table import Table
    from rich.text import Text

    plain = [[_plain(cell) for cell in row] for row in rows]
    widths = table_widths([c.header for c in columns], plain, out.width)
    if widths is not None:
        table = Table(title=title, caption=caption, caption_justify="left", show_lines=show_lines)
        for column, size in zip(columns, widths, strict=True):
            table.add_column(column.header, justify=column.justify, width=size, overflow="fold")
        for row in rows:
            table.add_row(*(Text(cell) if isinstance(cell, str) else cell for cell in row))
        out.print(table)
        return
    lines = [_plain(title)] if title is not None else []
    for row in plain:
        first, *others = row
        lines += wrapped("  ".join(first.split("\n")), out.width)
        for column, cell in zip(columns[1:], others, strict=True):
            text = column.joiner.join(part.strip() for part in cell.split("\n") if part.strip())
            if text and text != "-":
                lines += wrapped(f"{column.header}: {text}", out.width, "  ", "    ")
    if caption:
        lines += wrapped(caption, out.width)
    for line in lines:
        out.print(Text(line), soft_wrap=True)
