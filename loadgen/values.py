"""Numbers in and out: read from the JSON servers send (server info, usage, timings), and counted in words."""

from __future__ import annotations

import textwrap

WIDTH = 120   # every line the driver prints fits a 120-column terminal or log viewer


def as_int(value: object) -> int | None:
    """`value` when it is a whole number, else None: a missing, textual or boolean field is not a count."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def counted(n: int, noun: str) -> str:
    """`1 step`, `2 steps`: counts in the lines a person reads."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def fitted(text: str, width: int = WIDTH) -> str:
    """A line a person reads, wrapped at spaces to `width` columns; its continuations indented 4 past its own
    indent (a word longer than the line, a URL or a path, is kept whole)."""
    if len(text) <= width:
        return text
    indent = " " * (len(text) - len(text.lstrip()))
    return textwrap.fill(text.strip(), width, initial_indent=indent, subsequent_indent=indent + "    ",
                         break_long_words=False, break_on_hyphens=False)
