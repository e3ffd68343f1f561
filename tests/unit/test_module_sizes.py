"""The house's proportions (issue 28): no module in loadgen/ over 400 lines, no class over 250, so that each part
keeps one job, with no exemption."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).parents[2] / "loadgen"
MODULE_LINES, CLASS_LINES = 400, 250


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
    found = too_big({"a.py": 401, "driver/runner.py": 600, "b.py": 400}, MODULE_LINES)
    assert found == ["a.py: 401 lines", "driver/runner.py: 600 lines"]
