"""Real text that ships with every CPython: the raw material of the task families (no download, no third-party text).

- function docstrings of the standard library (read with `ast` by stdlib_code's scan, never imported);
- the documentation topics of `pydoc_data.topics` and module docstrings, as prose (prose_tasks.passages);
- The Zen of Python, read from `this.py`'s source (importing it prints it) and decoded from its ROT13;
- the CPython licence text (`LICENSE.txt` next to the standard library; absent in some distributions' builds).
"""

from __future__ import annotations

import ast
import codecs
import functools
import re

from loadgen.prompts.prose_tasks import passages
from loadgen.prompts.stdlib_code import StdlibFunction, stdlib_functions, stdlib_root

DOC_MIN, DOC_MAX = 1800, 6000   # characters of a document to summarize: a few passages, not a whole chapter


@functools.cache
def documented_functions() -> tuple[tuple[StdlibFunction, str], ...]:
    """(function, the first paragraph of its docstring) for public stdlib functions whose docstring says something
    (40 characters or more), in the scan's stable order."""
    out = []
    for fn in stdlib_functions():
        if fn.stub is None or fn.qualname.rsplit(".", 1)[-1].startswith("_"):
            continue
        summary = first_paragraph(fn.stub)
        if summary is not None and len(summary) >= 40:
            out.append((fn, summary))
    return tuple(out)


def first_paragraph(stub: str) -> str | None:
    """The first paragraph of the docstring of a `def` + docstring stub, on one line."""
    try:
        node = ast.parse(stub).body[0]
    except (SyntaxError, IndexError):
        return None
    doc = ast.get_docstring(node) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
    if not doc:
        return None
    return " ".join(doc.split("\n\n", 1)[0].split())


@functools.cache
def documents() -> tuple[tuple[str, str], ...]:
    """(id, text): consecutive documentation passages of one source joined into documents of DOC_MIN-DOC_MAX
    characters (passage ids are `<source>#<n>`; a document never mixes sources)."""
    out: list[tuple[str, str]] = []
    current_source, current, first_id = "", "", ""
    for passage_id, text in passages():
        source = passage_id.split("#", 1)[0]
        if current and (source != current_source or len(current) + 2 + len(text) > DOC_MAX):
            if len(current) >= DOC_MIN:
                out.append((first_id, current))
            current = ""
        if not current:
            current_source, first_id = source, passage_id
        current = f"{current}\n\n{text}" if current else text
    if len(current) >= DOC_MIN:
        out.append((first_id, current))
    return tuple(out)


@functools.cache
def zen() -> tuple[str, ...]:
    """The 19 aphorisms of The Zen of Python (`import this`), read from the module's source without running it."""
    try:
        tree = ast.parse((stdlib_root() / "this.py").read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return ()
    encoded = next((n.value.value for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
                    and isinstance(n.value.value, str) and len(n.value.value) > 200), "")
    text = codecs.decode(encoded, "rot13")
    return tuple(line for line in text.splitlines()[2:] if line.strip())


@functools.cache
def license_sections() -> tuple[str, ...]:
    """The CPython licence's sections (history, then each licence agreement), empty when the file is not shipped."""
    try:
        text = (stdlib_root() / "LICENSE.txt").read_text(encoding="utf-8")
    except OSError:
        return ()
    parts = re.split(r"\n(?=[^\n]+\n[=-]{5,}\n)", text)   # at each underlined heading
    return tuple(p.strip() for p in parts if len(p.strip()) >= 600)
