"""An alarm on the house's proportions (issue 38): a module in loadgen/ over 600 lines or a class over 400 has
most likely grown a second job; split it where the jobs part, never by size alone (a module is one job a reader
can name). No exemption."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).parents[2] / "loadgen"
MODULE_LINES, CLASS_LINES = 600, 400


def sizes() -> tuple[dict[str, int], dict[str, int]]:
    """Lines per module (path under loadgen/) and per class (`path:Class`)."""
    modules, classes = {}, {}
    for path in PACKAGE.rglob("*.py"):
        name = path.relative_to(PACKAGE).as_posix()
        text = path.read_text()
        modules[name] = len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                classes[f"{name}:{node.name}"] = (node.end_lineno or node.lineno) - node.lineno + 1
    return modules, classes


def too_big(found: dict[str, int], limit: int) -> list[str]:
    return sorted(f"{name}: {n} lines" for name, n in found.items() if n > limit)


def test_no_module_or_class_outgrows_its_house():
    modules, classes = sizes()
    assert "results/report/plots.py" in modules and "emulator/engine.py:Engine" in classes
    assert too_big(modules, MODULE_LINES) == []
    assert too_big(classes, CLASS_LINES) == []


def test_the_check_sees_a_module_too_big():
    found = too_big({"a.py": 601, "driver/runner.py": 900, "b.py": 600}, MODULE_LINES)
    assert found == ["a.py: 601 lines", "driver/runner.py: 900 lines"]
