"""The built-in sources: stdlib functions, the find-the-bug mutation, template rules, prose passages."""

from __future__ import annotations

import ast
import difflib
import json
import os
from pathlib import Path

import pytest

from loadgen.prompts import code_tasks, prose_tasks, stdlib_code
from loadgen.prompts.stdlib_code import stdlib_functions


def test_thousands_of_real_functions_of_10_to_80_lines():
    functions = stdlib_functions()
    assert len(functions) > 2000
    assert len({f.ref for f in functions}) == len(functions)          # refs are unique: ids are too
    for f in functions:
        assert 10 <= len(f.source.splitlines()) <= 80
        tree = ast.parse(f.source)                                    # dedented methods still parse
        assert isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef))
    modules = {f.module.split(".")[0] for f in functions}
    assert {"json", "argparse", "asyncio", "email"} <= modules and "test" not in modules


def test_file_order_does_not_depend_on_listing_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    for rel in ("b/z.py", "b/a.py", "a.py", "c/test/x.py", "site-packages/pkg/m.py", "b.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    walk = os.walk

    def reversed_walk(top):
        for folder, dirs, names in walk(top):
            dirs.reverse()
            yield folder, dirs, names[::-1]

    expected = ["a.py", "b/a.py", "b/z.py", "b.py"]        # by path parts; tests and site-packages skipped
    for listing in (walk, reversed_walk):
        monkeypatch.setattr(stdlib_code.os, "walk", listing)
        assert [p.relative_to(tmp_path).as_posix() for p in stdlib_code._source_files(tmp_path)] == expected


def test_a_scan_is_read_back_from_the_cache_as_it_was_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The first process reads the sources and writes the cache; a later one gets the same functions and docs from
    it, without parsing; a cache file it cannot read is read from the sources again and rewritten."""
    root = tmp_path / "lib"
    root.mkdir()
    body = "".join(f"        x{i} = {i}\n" for i in range(10))
    (root / "mod.py").write_text('"""A module."""\n\n\nclass C:\n    def method(self, a: int):\n        """Doc."""\n'
                                 + body)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    made = stdlib_code._scan.__wrapped__(root)
    assert [f.ref for f in made[0]] == ["mod:C.method@5"] and made[1] == (("mod", "A module."),)
    assert stdlib_code._cache_file(root).is_file()

    def no_parsing(*_args: object) -> None:
        raise AssertionError("parsed the sources again")
    with monkeypatch.context() as m:
        m.setattr(stdlib_code, "_read", no_parsing)
        assert stdlib_code._scan.__wrapped__(root) == made
    stdlib_code._cache_file(root).write_text("[1, 2")
    assert stdlib_code._scan.__wrapped__(root) == made
    assert json.loads(stdlib_code._cache_file(root).read_text())[1] == [["mod", "A module."]]


def test_find_bug_swaps_exactly_one_operator_in_every_function():
    swapped = 0
    for f in stdlib_functions():
        buggy = code_tasks._mutated(f.source, f.ref)   # the prompts' cached copy (shared with the other tests)
        if buggy is None:
            continue
        swapped += 1
        changed = [(a, b) for a, b in zip(f.source.splitlines(), buggy.splitlines()) if a != b]
        assert len(changed) == 1, f.ref
        old, new = changed[0]
        edits = [op for op in difflib.SequenceMatcher(None, old, new).get_opcodes() if op[0] != "equal"]
        pieces = {(old[i1:i2], new[j1:j2]) for _, i1, i2, j1, j2 in edits}
        assert len(edits) <= 2, (f.ref, old, new)          # e.g. "<" -> "<=" or "and" -> "or"
        assert ast.dump(ast.parse(f.source)) != ast.dump(ast.parse(buggy)), pieces   # it parses, and differs
        if swapped % 10 == 0:   # the site is stable (and the cache holds mutate's)
            assert code_tasks.mutate(f.source, f.ref) == buggy
    assert swapped > 1000


def test_mutate_handles_each_operator():
    assert code_tasks.mutate("x = a < b\n", "s") == "x = a <= b\n"
    assert code_tasks.mutate("x = a >= b\n", "s") == "x = a > b\n"
    assert code_tasks.mutate("x = (a) == b\n", "s") == "x = (a) != b\n"
    assert code_tasks.mutate("x = a and b\n", "s") == "x = a or b\n"
    assert code_tasks.mutate("x = 'é' or b\n", "s") == "x = 'é' and b\n"          # byte offsets
    assert code_tasks.mutate("x = a in b\n", "s") is None
    assert code_tasks.mutate("x = (a <\n     b)\n", "s") is None                  # multi-line: skipped


def test_templates_only_where_they_apply():
    functions = stdlib_functions()
    pools = {p.template: p for p in code_tasks.code_pools(tuple(code_tasks.TEMPLATES))}
    for i in range(0, len(functions), 7):
        f = functions[i]
        hints, complete = pools["code/type_hints"].render(i), pools["code/complete"].render(i)
        assert (hints is None) == f.annotated
        assert (complete is None) == (f.stub is None)
        if complete is not None:                     # the body is what the model must write
            body = f.source[len(f.stub):].strip()
            assert f.stub.rstrip() in complete.text and body not in complete.text
        explain = pools["code/explain"].render(i)
        assert f.source.rstrip() in explain.text and explain.kind == "code"
        assert explain.task_id == f"code/explain/{f.ref}"


def test_prose_passages_come_from_python_itself_and_read_as_prose():
    passages = prose_tasks.passages()
    assert len(passages) > 100
    assert any(pid.startswith("pydoc:") for pid, _ in passages) and any(pid.startswith("doc:") for pid, _ in passages)
    for _, text in passages:
        assert prose_tasks.PASSAGE_MIN <= len(text) <= prose_tasks.PASSAGE_MAX
        assert all(not p[:1].isspace() for p in text.split("\n\n"))   # no indented code blocks


def test_prose_pools_cover_every_template():
    pools = prose_tasks.prose_pools(prose_tasks.TEMPLATES)
    assert [p.template for p in pools] == [f"prose/{t}" for t in prose_tasks.TEMPLATES]
    for pool in pools:
        tasks = [pool.render(i) for i in range(pool.size)]
        assert len({t.task_id for t in tasks}) == pool.size
        assert len({t.text for t in tasks}) == pool.size             # every combination is a distinct prompt
        assert all(t.kind == "prose" and t.messages[0]["content"] == t.text for t in tasks)
