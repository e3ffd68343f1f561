"""Real functions from the installed Python standard library: the raw material of the `code` prompts.

Read with `ast` from the source files (never imported: importing `this` or `antigravity` has side
effects). Files are visited in sorted relative-path order, so the list is the same on every machine
with the same Python version whatever order the filesystem lists directories in. A scan is kept in the
user's cache folder, keyed by the interpreter, the library's path and these rules: every later process (a Ray
worker, a job) reads it instead of parsing the library again.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import json
import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

MIN_LINES, MAX_LINES = 10, 80
# Tests (some deliberately invalid), vendored wheels, third-party installs, codec tables and the
# generated documentation dict: not ordinary library functions, or not stdlib at all.
_SKIP_DIRS = frozenset({
    "site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__", "lib2to3",
    "ensurepip", "encodings", "pydoc_data", "turtledemo",
})


@dataclass(frozen=True, slots=True)
class StdlibFunction:
    """One function or method, its source dedented so it reads as top-level code."""

    module: str            # dotted module name, e.g. "json.decoder"
    qualname: str          # "JSONDecoder.decode" for methods
    lineno: int            # first line (decorators included) in the module file
    source: str            # decorators + def + body
    stub: str | None       # def + docstring only, when there is a docstring: for "complete the body"
    annotated: bool        # any parameter or return annotation already present

    @property
    def ref(self) -> str:
        """Stable, unique name for prompt ids: module, qualified name and line."""
        return f"{self.module}:{self.qualname}@{self.lineno}"


def stdlib_root() -> Path:
    """Where this interpreter's pure-Python standard library lives."""
    return Path(sysconfig.get_path("stdlib"))


def stdlib_functions() -> tuple[StdlibFunction, ...]:
    """All 10-80 line functions of the installed stdlib, in (path, line) order."""
    return _scan(stdlib_root())[0]


def stdlib_module_docs() -> tuple[tuple[str, str], ...]:
    """(module, docstring) for every stdlib module with a docstring, in path order: prose passages."""
    return _scan(stdlib_root())[1]


Scan = tuple[tuple[StdlibFunction, ...], tuple[tuple[str, str], ...]]


@functools.cache
def _scan(root: Path) -> Scan:
    """The functions and module docstrings under `root`: from the cache file, else read and cached."""
    cache = _cache_file(root)
    try:
        functions, docs = json.loads(cache.read_text(encoding="utf-8"))
        return tuple(StdlibFunction(*f) for f in functions), tuple((m, d) for m, d in docs)
    except (OSError, ValueError, TypeError):
        pass   # none yet, or not one this version wrote: read the sources
    scan = _read(root)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        part = cache.with_name(f"{cache.name}.{os.getpid()}.part")   # whole or absent: processes race to write it
        part.write_text(json.dumps([[dataclasses.astuple(f) for f in scan[0]], scan[1]]), encoding="utf-8")
        os.replace(part, cache)
    except OSError:
        pass   # an unwritable cache folder: the next process reads the sources again
    return scan


def _cache_file(root: Path) -> Path:
    rules = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    key = hashlib.sha256(f"{sys.version}\0{root}\0{rules}".encode()).hexdigest()[:16]
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "loadgen" / "stdlib" / f"{key}.json"


def _read(root: Path) -> Scan:
    """One pass over the source files (about 1.5 s), shared by the code and prose sources."""
    found: list[StdlibFunction] = []
    docs: list[tuple[str, str]] = []
    for path in _source_files(root):
        module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        try:
            text = path.read_text(encoding="utf-8")
            tree = ast.parse(text, filename=str(path))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue  # the same file fails the same way everywhere: order stays deterministic
        lines = text.splitlines(keepends=True)
        found.extend(_functions(tree.body, "", module, lines))
        doc = ast.get_docstring(tree)
        if doc:
            docs.append((module, doc))
    return tuple(found), tuple(docs)


def _source_files(root: Path) -> list[Path]:
    files: list[Path] = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS and not d.startswith("config-")]
        files.extend(Path(folder, n) for n in names if n.endswith(".py"))
    return sorted(files, key=lambda p: p.relative_to(root).parts)


def _functions(body: list[ast.stmt], prefix: str, module: str, lines: list[str]) -> list[StdlibFunction]:
    """Module- and class-level functions (not nested ones: they are part of their parent's text)."""
    out: list[StdlibFunction] = []
    for node in body:
        if isinstance(node, ast.ClassDef):
            out.extend(_functions(node.body, f"{prefix}{node.name}.", module, lines))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            fn = _function(node, prefix, module, lines)
            if fn is not None:
                out.append(fn)
    return out


def _function(node: ast.FunctionDef | ast.AsyncFunctionDef, prefix: str, module: str,
              lines: list[str]) -> StdlibFunction | None:
    start = min([node.lineno] + [d.lineno for d in node.decorator_list])
    end = node.end_lineno or node.lineno
    if not MIN_LINES <= end - start + 1 <= MAX_LINES:
        return None
    source = _dedent(lines[start - 1:end], node.col_offset)
    stub = None
    if ast.get_docstring(node) is not None and len(node.body) > 1:
        doc_end = node.body[0].end_lineno or node.body[0].lineno
        stub = _dedent(lines[start - 1:doc_end], node.col_offset)
    args = node.args
    every_arg = args.posonlyargs + args.args + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a]
    annotated = node.returns is not None or any(a.annotation is not None for a in every_arg)
    return StdlibFunction(module, prefix + node.name, start, source, stub, annotated)


def _dedent(lines: list[str], width: int) -> str:
    """Shift a method to column 0. Unlike `textwrap.dedent`, lines indented less than the def (string
    literals or continuation lines at column 0) are left alone, so the result still parses."""
    pad = " " * width
    return "".join(line[width:] if line.startswith(pad) else line for line in lines)
