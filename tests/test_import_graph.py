"""The package's import graph has no loop, counting imports inside functions too (an import moved into a
function to dodge a loop is still a loop), nor counting imports for type annotations only (`if TYPE_CHECKING:`):
those are not imports at run time, but a loop through them still ties two modules into one (the emulator's
routes see the Emulator through a Protocol, emulator/state.py, for that reason)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).parents[1] / "loadgen"


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


# The wings of loadgen/ and what each may import (README "Layout"): measuring (client) and server knowledge
# (servers) never reach into planning (driver); reading results never reaches into measuring or planning; the
# emulator stands beside the client as a server would, sharing only the launch helpers; config reads every wing's
# vocabulary (flavours, arrivals, the SLO) but never the driver. Root modules other than the entry point (cli)
# are leaves (clock, errors, values).
# The twin (a measured target's model, run in virtual time) reads results, runs the emulator's engine under the
# driver's plan, and never measures (client); only the driver (a seeded search, a predicted run) reaches it.
# Campaigns (a fleet plan) sit above the driver and the twin: nothing below reaches them.
WINGS = ("client", "driver", "servers", "results", "config", "prompts", "emulator", "twin", "campaigns")
FORBIDDEN = {
    "driver": {"cli", "campaigns"},
    "client": {"driver", "cli", "emulator", "twin", "campaigns"},
    "servers": {"driver", "client", "results", "cli", "twin", "campaigns"},
    "results": {"client", "driver", "servers", "cli", "emulator", "twin", "campaigns"},
    "config": {"driver", "cli", "twin", "campaigns"},
    "prompts": {"client", "driver", "servers", "results", "config", "emulator", "cli", "twin", "campaigns"},
    "emulator": {"client", "driver", "results", "config", "prompts", "cli", "twin", "campaigns"},
    "twin": {"client", "cli", "campaigns"},
    "campaigns": {"client", "cli"},
    "root": set(WINGS) | {"cli"},
    "cli": set(),
}


def _wing(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in WINGS:
        return parts[1]
    return "cli" if module == "loadgen.cli" else "root"


def wrong_way_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                  if _wing(b) in FORBIDDEN[_wing(a)] and b != "loadgen")


def test_imports_run_one_way_between_wings():
    graph = import_graph()
    assert {_wing(m) for m in graph} == set(WINGS) | {"root", "cli"}
    assert wrong_way_imports(graph) == []


def test_the_direction_check_sees_a_wrong_way_import():
    graph = {"loadgen.client.worker": {"loadgen.driver.runner"}, "loadgen.results.analysis": {"loadgen.errors"},
             "loadgen.clock": {"loadgen.results.schema"}}
    assert wrong_way_imports(graph) == ["loadgen.client.worker -> loadgen.driver.runner",
                                        "loadgen.clock -> loadgen.results.schema"]
