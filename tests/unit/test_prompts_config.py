"""[prompts] validation: defaults, normalisation, and every bad input -> ConfigError naming the key."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from loadgen.errors import ConfigError
from loadgen.prompts.mix import parse_prompts_config


def test_only_max_new_tokens_gives_half_code_half_prose():
    cfg = parse_prompts_config({"max_new_tokens": 96})
    assert cfg.max_new_tokens == 96
    assert [(s.builtin, s.weight) for s in cfg.sources] == [("code", 0.5), ("prose", 0.5)]
    assert cfg.describe() == "code:0.5,prose:0.5"
    assert (cfg.seed, cfg.ignore_eos, cfg.temperature, cfg.chat, cfg.system_prefix) == (0, False, 0.0, False, None)


def test_full_table_and_weights_normalised(tmp_path: Path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "my.jsonl").write_text('{"prompt": "hi"}\n')
    cfg = parse_prompts_config({
        "seed": 7, "max_new_tokens": 64, "ignore_eos": True, "temperature": 0.7, "min_prompt_chars": 10,
        "max_prompt_chars": 100, "system_prefix": "Be brief.", "chat": True,
        "sources": [{"kind": "code", "weight": 3, "templates": ["refactor", "explain"]},
                    {"format": "jsonl", "path": "data/my.jsonl", "weight": 1},
                    {"kind": "prose", "weight": 0}],
    }, base_dir=tmp_path)
    assert [s.weight for s in cfg.sources] == [0.75, 0.25]          # zero-weight source dropped
    assert cfg.sources[0].templates == ("explain", "refactor")      # canonical order
    assert cfg.sources[1].path == tmp_path / "data" / "my.jsonl"
    assert cfg.describe() == "code[explain+refactor]:0.75,my:0.25"
    assert (cfg.seed, cfg.ignore_eos, cfg.temperature, cfg.chat, cfg.system_prefix) == (7, True, 0.7, True, "Be brief.")


def test_empty_system_prefix_is_none():
    assert parse_prompts_config({"system_prefix": ""}).system_prefix is None


def test_question_jsonl_named_after_its_folder(tmp_path: Path):
    (tmp_path / "mt_bench").mkdir()
    (tmp_path / "mt_bench" / "question.jsonl").write_text('{"turns": ["q"]}\n')
    source = {"format": "question-jsonl", "path": str(tmp_path / "mt_bench/question.jsonl")}
    cfg = parse_prompts_config({"sources": [source]})
    assert cfg.describe() == "mt_bench:1"


BAD = [
    ({"max_new_tokens": 0}, "prompts.max_new_tokens"),
    ({"max_new_tokens": True}, "prompts.max_new_tokens"),
    ({"max_new_tokens": 1.5}, "prompts.max_new_tokens"),
    ({"seed": "1"}, "prompts.seed"),
    ({"ignore_eos": 1}, "prompts.ignore_eos"),
    ({"chat": "yes"}, "prompts.chat"),
    ({"temperature": -0.1}, "prompts.temperature"),
    ({"temperature": math.nan}, "prompts.temperature"),
    ({"temperature": "hot"}, "prompts.temperature"),
    ({"min_prompt_chars": -1}, "prompts.min_prompt_chars"),
    ({"min_prompt_chars": 500, "max_prompt_chars": 100}, "prompts.max_prompt_chars"),
    ({"system_prefix": 3}, "prompts.system_prefix"),
    ({"max_tokens": 10}, "prompts.max_tokens"),
    ({"sources": []}, "prompts.sources"),
    ({"sources": {"kind": "code"}}, "prompts.sources"),
    ({"sources": ["code"]}, "prompts.sources[0]"),
    ({"sources": [{"kind": "code"}, {"kind": "poetry"}]}, "prompts.sources[1].kind"),
    ({"sources": [{"kind": "code"}, {"kind": "prose", "weight": -1}]}, "prompts.sources[1].weight"),
    ({"sources": [{"kind": "code"}, {"kind": "prose", "weight": math.nan}]}, "prompts.sources[1].weight"),
    ({"sources": [{"kind": "code"}, {"kind": "prose", "weight": math.inf}]}, "prompts.sources[1].weight"),
    ({"sources": [{"kind": "code", "weight": "1"}]}, "prompts.sources[0].weight"),
    ({"sources": [{"kind": "code", "weight": 0}, {"kind": "prose", "weight": 0}]}, "prompts.sources[*].weight"),
    ({"sources": [{"kind": "code", "templates": ["explain", "poem"]}]}, "prompts.sources[0].templates"),
    ({"sources": [{"kind": "code", "templates": []}]}, "prompts.sources[0].templates"),
    ({"sources": [{"kind": "code", "templates": ["explain", "explain"]}]}, "prompts.sources[0].templates"),
    ({"sources": [{"kind": "code", "path": "x"}]}, "prompts.sources[0].path"),
    ({"sources": [{"format": "csv", "path": "x.csv"}]}, "prompts.sources[0].format"),
    ({"sources": [{"format": "jsonl"}]}, "prompts.sources[0].path"),
    ({"sources": [{"format": "jsonl", "path": "does/not/exist.jsonl"}]}, "prompts.sources[0].path"),
    ({"sources": [{"format": "jsonl", "path": "."}]}, "prompts.sources[0].path"),
    ({"sources": [{"format": "jsonl", "path": "x", "templates": ["a"]}]}, "prompts.sources[0].templates"),
]


@pytest.mark.parametrize(("table", "key"), BAD, ids=[k + ":" + repr(t)[:40] for t, k in BAD])
def test_bad_input_names_the_key(table: dict, key: str):
    with pytest.raises(ConfigError) as caught:
        parse_prompts_config(table)
    assert caught.value.key == key
    assert str(caught.value).startswith(key + ":")
    assert caught.value.fix


def test_unknown_key_lists_the_known_ones():
    with pytest.raises(ConfigError, match="max_new_tokens") as caught:
        parse_prompts_config({"max_tokens": 10})
    assert "known keys" in caught.value.fix


def test_not_a_table():
    with pytest.raises(ConfigError, match="prompts"):
        parse_prompts_config([1, 2])  # type: ignore[arg-type]


def test_custom_key_prefix():
    with pytest.raises(ConfigError) as caught:
        parse_prompts_config({"seed": 1.0}, key="exp.prompts")
    assert caught.value.key == "exp.prompts.seed"
