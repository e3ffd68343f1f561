"""The built-in `code` source: stdlib functions wrapped in task templates.

Each template is one way developers ask a model about code; they differ in how much of the answer
is already in the prompt (refactor and type hints copy most of it, unit tests and explain do not),
which is what moves speculative-decoding acceptance.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable, Iterator

from loadgen.prompts.sizing import MIN_CONTEXT, fill
from loadgen.prompts.stdlib_code import StdlibFunction, stdlib_functions
from loadgen.prompts.task import Pool, Task, stable_hash, user_task


def _fence(code: str) -> str:
    return f"```python\n{code.rstrip()}\n```"


def _explain(fn: StdlibFunction) -> str | None:
    return (f"Explain what the following Python function from the standard library module `{fn.module}` "
            "does. Describe its parameters, what it returns, any side effects, and one edge case a "
            f"caller should know about.\n\n{_fence(fn.source)}")


def _unit_tests(fn: StdlibFunction) -> str | None:
    return (f"Write pytest unit tests for `{fn.qualname}` below (from `{fn.module}`). Cover the normal "
            "path, boundary values and error handling; keep each test small and name it after the "
            f"behaviour it checks.\n\n{_fence(fn.source)}")


def _type_hints(fn: StdlibFunction) -> str | None:
    if fn.annotated:
        return None
    return (f"Add precise type hints to every parameter and to the return value of this function from "
            f"`{fn.module}`. Do not change its behaviour. Reply with the complete annotated function "
            f"only.\n\n{_fence(fn.source)}")


def _find_bug(fn: StdlibFunction) -> str | None:
    buggy = _mutated(fn.source, fn.ref)
    if buggy is None:
        return None
    return (f"This function, adapted from `{fn.module}`, has a bug: exactly one comparison or boolean "
            "operator was changed. Find the line, explain what goes wrong and for which inputs, and "
            f"give the corrected function.\n\n{_fence(buggy)}")


def _complete(fn: StdlibFunction) -> str | None:
    if fn.stub is None:
        return None
    return ("Implement the body of this Python function so that it does what its signature and "
            "docstring say. Use only the standard library. Reply with the whole function.\n\n"
            f"{_fence(fn.stub)}")


def _refactor(fn: StdlibFunction) -> str | None:
    return (f"Refactor the following function from `{fn.module}` for readability: clearer names, "
            "smaller steps, no change in behaviour. Reply with the refactored function, then one short "
            f"line per change explaining it.\n\n{_fence(fn.source)}")


TEMPLATES: dict[str, Callable[[StdlibFunction], str | None]] = {
    "explain": _explain,
    "unit_tests": _unit_tests,
    "type_hints": _type_hints,
    "find_bug": _find_bug,
    "complete": _complete,
    "refactor": _refactor,
}

# Operator swaps for "find the bug": each keeps the code valid and changes what it does.
_COMPARE_SWAPS = {ast.Lt: ("<", "<="), ast.LtE: ("<=", "<"), ast.Gt: (">", ">="),
                  ast.GtE: (">=", ">"), ast.Eq: ("==", "!="), ast.NotEq: ("!=", "==")}
_BOOL_SWAPS = {ast.And: ("and", "or"), ast.Or: ("or", "and")}


def mutate(source: str, salt: str) -> str | None:
    """`source` with one comparison or and/or operator swapped, the site chosen by `salt` (stable).
    None when the code has no such operator on a single line."""
    lines = [line.encode() for line in source.splitlines(keepends=True)]
    sites: list[tuple[int, int, int, str]] = []  # (line index, byte start, byte end, replacement)
    swaps: list[tuple[tuple[str, str] | None, ast.expr, ast.expr]]   # (swap, left operand, right operand)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            pairs = zip(node.ops, [node.left, *node.comparators], node.comparators)
            swaps = [(_COMPARE_SWAPS.get(type(op)), a, b) for op, a, b in pairs]
        elif isinstance(node, ast.BoolOp):
            op_swap = _BOOL_SWAPS[type(node.op)]
            swaps = [(op_swap, a, b) for a, b in zip(node.values, node.values[1:])]
        else:
            continue
        for swap, left, right in swaps:
            if swap is None or left.end_col_offset is None or left.end_lineno != right.lineno:
                continue
            row = right.lineno - 1
            gap = lines[row][left.end_col_offset:right.col_offset].decode()
            found = re.search(rf"(?<![<>=!\w]){re.escape(swap[0])}(?![<>=\w])", gap)
            if found:
                start = left.end_col_offset + len(gap[:found.start()].encode())
                sites.append((row, start, start + len(swap[0]), swap[1]))
    if not sites:
        return None
    row, start, end, new = sites[stable_hash(salt) % len(sites)]
    lines[row] = lines[row][:start] + new.encode() + lines[row][end:]
    return b"".join(lines).decode()


@functools.cache
def _mutated(source: str, salt: str) -> str | None:
    """mutate, once per function in a process: every PromptMix checks each template's every function against its
    length bounds (mix.py _pools), and parsing the stdlib's functions again took 2-3 s a mix."""
    return mutate(source, salt)


def code_pools(templates: tuple[str, ...]) -> list[Pool]:
    """One pool per template, each over every stdlib function (in the scan's stable order)."""
    functions = stdlib_functions()

    def pool(name: str) -> Pool:
        build = TEMPLATES[name]

        def render(i: int) -> Task | None:
            fn = functions[i]
            text = build(fn)
            return None if text is None else user_task(f"code/{name}/{fn.ref}", "code", f"code/{name}", text)

        return Pool(f"code/{name}", len(functions), render, lambda i, chars: context(functions, i, chars))

    return [pool(name) for name in templates]


def context(functions: tuple[StdlibFunction, ...], i: int, chars: int) -> str:
    """The functions that follow function i in the scan (the rest of its module first, then the next modules),
    in one fenced block marked by module: what a developer pastes around the function they ask about."""
    head = f"For context, more code from the standard library next to `{functions[i].module}`:\n\n```python\n"
    tail = "\n```\n\n"
    room = chars - len(head) - len(tail)
    if room < MIN_CONTEXT:
        return ""

    def pieces() -> Iterator[str]:
        module = None
        for k in range(1, len(functions)):
            fn = functions[(i + k) % len(functions)]
            mark, module = (f"# {fn.module}\n" if fn.module != module else ""), fn.module
            yield mark + fn.source.rstrip()

    body = fill(pieces(), room, " \n")   # the last function ends mid-line: within a word of the length
    return f"{head}{body}{tail}" if body else ""
