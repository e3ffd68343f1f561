"""The package's import graph has no loop, counting imports inside functions too (an import moved into a
function to dodge a loop is still a loop), nor counting imports for type annotations only (`if TYPE_CHECKING:`):
those are not imports at run time, but a loop through them still ties two modules into one (the emulator's
routes see the Emulator through a Protocol, emulator/state.py, for that reason)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).parents[2] / "loadgen"


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(typing_too: bool = False) -> dict[str, set[str]]:
    """loadgen module -> the loadgen modules it imports (a `from pkg import name` of a submodule counts);
    with typing_too, the imports under `if TYPE_CHECKING:` count as well."""
    modules = {_module(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                       and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
                       for n in ast.walk(block)}   # annotations only: not an import at run time
        for node in ast.walk(tree):
            if id(node) in typing_only and not typing_too:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
            else:
                continue
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state and (found := visit(n)):
                return found
        state[m] = 2
        stack.pop()
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_no_import_loop_in_the_package():
    graph = import_graph()
    assert "loadgen.config.experiment" in graph and "loadgen.driver.placement" in graph
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_no_import_loop_even_through_type_only_imports():
    graph = import_graph(typing_too=True)
    assert "loadgen.emulator.engine" in graph["loadgen.emulator.metrics"]     # a type-only import, counted
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])
    importers = {m for m, targets in graph.items() if "loadgen.emulator.server" in targets}
    assert importers == {"loadgen.emulator.main", "loadgen.emulator.launch"}     # what starts one; no route


def test_the_cycle_finder_finds_a_loop():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


# What each wing of loadgen/ may import (README "Layout"), bottom up: a wing reads only wings below it, so no two
# wings import each other. The root leaves (clock, errors, values, keys) import no wing; prompts, results and servers
# only the leaves; the emulator stands beside the client as a server would and shares only the server helpers;
# config holds the vocabulary every wing above reads (flavours, arrivals, ramps, the SLO); plan is the pure
# next-step function the driver runs on servers and the twin in virtual time; the client measures; the twin
# predicts and never measures; the driver runs steps on Ray; campaigns combine runs; cli is the entry point.
# Type-only imports count too (test_no_import_loop_even_through_type_only_imports's graph).
_BASE = {"root"}
ALLOWED: dict[str, set[str]] = {
    "root": set(),
    "prompts": _BASE,
    "results": _BASE,
    "servers": _BASE,
    "emulator": _BASE | {"servers"},
    "config": _BASE | {"prompts", "results", "servers", "emulator"},
    "plan": _BASE | {"config", "results"},
    "client": _BASE | {"prompts", "results", "servers", "config"},
    "twin": _BASE | {"prompts", "results", "servers", "emulator", "config", "plan"},
    "driver": _BASE | {"prompts", "results", "servers", "emulator", "config", "plan", "client", "twin"},
    "campaigns": _BASE | {"prompts", "results", "servers", "emulator", "config", "plan", "client", "twin",
                          "driver"},
}
WINGS = tuple(w for w in ALLOWED if w != "root")
ALLOWED["cli"] = set(ALLOWED)


def _wing(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in WINGS:
        return parts[1]
    return "cli" if module == "loadgen.cli" else "root"


def wrong_way_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                  if _wing(b) != _wing(a) and _wing(b) not in ALLOWED[_wing(a)] and b != "loadgen")


def test_imports_run_one_way_between_wings_type_only_imports_included():
    graph = import_graph(typing_too=True)
    assert {_wing(m) for m in graph} == set(WINGS) | {"root", "cli"}
    assert wrong_way_imports(graph) == []


def test_the_rules_are_a_one_way_order():
    """Each wing may import only wings that may not import it back."""
    assert not [(a, b) for a in ALLOWED for b in ALLOWED[a] if a in ALLOWED[b]]


def test_every_folder_of_the_package_is_a_wing():
    folders = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert folders == set(WINGS)


def test_the_readme_layout_lists_every_wing():
    readme = (PACKAGE.parent / "README.md").read_text()
    layout = readme[readme.index("## Layout"):readme.index("## Documentation")]
    listed = set(re.findall(r"^\| `loadgen/(\w+)/` \|", layout, re.M))
    assert listed == set(WINGS)
    for wing in WINGS:    # and says what it may import
        assert re.search(rf"^- .*`{wing}`.* (imports|may import) ", layout, re.M), wing


def test_the_direction_check_sees_a_wrong_way_import():
    graph = {"loadgen.client.worker": {"loadgen.driver.runner"}, "loadgen.results.analysis": {"loadgen.errors"},
             "loadgen.clock": {"loadgen.results.schema"}, "loadgen.twin.predict": {"loadgen.driver.plan"}}
    assert wrong_way_imports(graph) == ["loadgen.client.worker -> loadgen.driver.runner",
                                        "loadgen.clock -> loadgen.results.schema",
                                        "loadgen.twin.predict -> loadgen.driver.plan"]
