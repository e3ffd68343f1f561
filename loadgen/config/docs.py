"""docs/experiments.md's key tables, generated from the keys' declarations: `python -m loadgen.config.docs`
rewrites them, `--check` says what differs (tests/unit/test_config_docs.py runs it), so a key is documented
exactly as it is read."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from loadgen.config.budget_job import BUDGET_JOB
from loadgen.config.cost import COST
from loadgen.config.experiment import RUN, TOP
from loadgen.config.fleet import FLEET, FLEET_CONFIGURATION, FLEET_NODE
from loadgen.config.load import LOAD, LOAD_SECTIONS
from loadgen.config.targets import TARGET, TWIN
from loadgen.config.trace import TRACE
from loadgen.keys import Key, Keys
from loadgen.prompts.config import PROMPTS, SOURCE
from loadgen.results.slo import SLO

# What each table of an experiment file reads, by its dotted name; [targets.cost] takes [cost]'s keys
READERS: dict[str, Keys] = {k.table: k for k in (TOP, RUN, LOAD, TRACE, PROMPTS, SOURCE, SLO, COST, TARGET, TWIN,
                                                   FLEET, FLEET_NODE, FLEET_CONFIGURATION, BUDGET_JOB)}
READERS["targets.cost"] = COST
# The docs' tables, in order: [load]'s split by mode
SECTIONS: tuple[Keys, ...] = (TOP, RUN, *LOAD_SECTIONS, TRACE, PROMPTS, SOURCE, SLO, COST, TARGET, TWIN, FLEET,
                              FLEET_NODE, FLEET_CONFIGURATION, BUDGET_JOB)
BEGIN = "<!-- keys: generated from the declarations by `python -m loadgen.config.docs`; edit those, not this -->"
END = "<!-- keys: end -->"
DOCS = Path("docs/experiments.md")
_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "list", dict: "table"}
_HEADING = re.compile(r"^### (?:`\[(?P<table>[\w.]+)\]`|The file's tables)$")
_ROW = re.compile(r"^\| `(?P<key>[\w-]+)` \|")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")


def _type(k: Key) -> str:
    kinds = k.kind if isinstance(k.kind, tuple) else (k.kind,)
    kinds = tuple(t for t in kinds if not (t is int and float in kinds))   # an integer is a number
    return " or ".join(_TYPES.get(t, t.__name__) for t in kinds)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    """The generated block, markers included."""
    lines = [BEGIN]
    shown: set[str] = set()
    for keys in SECTIONS:
        if keys.table not in shown:
            lines += ["", f"### `[{keys.table}]`" if keys.table else "### The file's tables"]
            shown.add(keys.table)
        lines += ["", keys.about, "", "| key | type | default | allowed | what it sets |", "|---|---|---|---|---|"]
        lines += [f"| `{k.name}` | {_type(k)} | {_cell(k.shown_default())} | "
                  f"{_cell(k.check.describe()) if k.check else ''} | {_cell(k.help)} |" for k in keys]
    return "\n".join(lines + ["", END])


def documented(text: str) -> dict[tuple[str, str], str] | None:
    """(table, key) -> the default the docs' generated tables give; None without the generated block."""
    if BEGIN not in text or END not in text:
        return None
    block = text[text.index(BEGIN):text.index(END)]
    found: dict[tuple[str, str], str] = {}
    table = None
    for line in block.splitlines():
        if heading := _HEADING.match(line):
            table = heading["table"] or ""
        elif (row := _ROW.match(line)) and table is not None:
            cells = [c.strip().replace("\\|", "|") for c in _CELL_SPLIT.split(line)[1:-1]]
            found[table, row["key"]] = cells[2]
    return found


def problems(text: str) -> list[str]:
    """Where the docs' key tables and the declarations disagree, a line each: a key missing from the docs, a
    documented key no table declares, a default that differs, or the block not as generated."""
    docs = documented(text)
    if docs is None:
        return [f"{DOCS}: has no generated key tables (fix: add the {BEGIN} and {END} lines, then run "
                "python -m loadgen.config.docs)"]
    declared = {(s.table, k.name): k.shown_default() for s in SECTIONS for k in s}
    out = [f"{t or 'top level'}.{n}: declared but missing from {DOCS}" for t, n in sorted(declared.keys() - docs)]
    out += [f"{t or 'top level'}.{n}: documented in {DOCS} but no table declares it"
            for t, n in sorted(docs.keys() - declared)]
    out += [f"{t or 'top level'}.{n}: {DOCS} gives the default {docs[t, n]!r}, the declaration {declared[t, n]!r}"
            for t, n in sorted(docs.keys() & declared.keys()) if docs[t, n] != declared[t, n]]
    if not out and text[text.index(BEGIN):text.index(END) + len(END)] != render():
        out.append(f"{DOCS}: the key tables differ from the declarations (a type, bound or help line)")
    return out


def rewrite(text: str) -> str:
    """`text` with its generated block replaced by the declarations' (appended when it has none)."""
    if BEGIN in text and END in text:
        return text[:text.index(BEGIN)] + render() + text[text.index(END) + len(END):]
    return text.rstrip("\n") + "\n\n" + render() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadgen.config.docs", description=__doc__)
    parser.add_argument("path", nargs="?", type=Path, default=DOCS, help="the docs page (default: %(default)s)")
    parser.add_argument("--check", action="store_true", help="only say what differs; exit 1 if anything does")
    args = parser.parse_args(argv)
    text = args.path.read_text()
    if args.check:
        found = problems(text)
        for line in found:
            print(f"{line} (fix: python -m loadgen.config.docs)", file=sys.stderr)
        return 1 if found else 0
    args.path.write_text(rewrite(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
