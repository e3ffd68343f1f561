"""The seeded sequence: determinism, prefix property, weights, bounds, labels, and the two forms."""

from __future__ import annotations

import collections
import math
from pathlib import Path

import pytest

from loadgen.errors import ConfigError
from loadgen.prompts.mix import PromptMix, parse_prompts_config


def mix(**table) -> PromptMix:
    return PromptMix(parse_prompts_config(table))


def test_same_seed_same_sequence_and_take_is_a_prefix():
    a, b = mix(seed=3), mix(seed=3)
    long = a.take(300)
    assert b.take(5) == long[:5]              # fresh mix, short take first
    assert b.take(300) == long
    assert a.take(50) == long[:50]            # shorter take after a longer one


def test_different_seeds_differ():
    ids = [tuple(p.prompt_id for p in mix(seed=s).take(50)) for s in (1, 2)]
    assert ids[0] != ids[1]
    assert len(set(ids[0]) & set(ids[1])) < 25


def test_weights_respected_over_a_long_take():
    n, p_code = 6000, 0.7
    prompts = mix(seed=5, sources=[{"kind": "code", "weight": 7}, {"kind": "prose", "weight": 3}]).take(n)
    count = sum(p.kind == "code" for p in prompts)
    sigma = math.sqrt(n * p_code * (1 - p_code))          # binomial spread: ~35
    assert abs(count - n * p_code) < 4 * sigma


def test_templates_uniform_within_a_source():
    prompts = mix(seed=2, sources=[{"kind": "prose"}]).take(3000)
    counts = collections.Counter(p.template for p in prompts)
    assert set(counts) == {f"prose/{t}" for t in ("essay", "story", "email", "explain", "summarise", "answer")}
    sigma = math.sqrt(3000 * (1 / 6) * (5 / 6))
    assert all(abs(c - 500) < 4 * sigma for c in counts.values())


def test_labels_and_unique_ids():
    prompts = mix(seed=1, min_prompt_chars=200, max_prompt_chars=6000).take(1000)
    for p in prompts:
        assert p.kind in ("code", "prose") and p.template.startswith(p.kind + "/")
        assert p.prompt_id.startswith(p.template + "/")
    by_id: dict[str, object] = {}
    for p in prompts:                                    # an id always means the same prompt
        assert by_id.setdefault(p.prompt_id, p.text) == p.text
    code_templates = {p.template for p in prompts if p.kind == "code"}
    templates = ("explain", "unit_tests", "type_hints", "find_bug", "complete", "refactor")
    assert code_templates == {f"code/{t}" for t in templates}
    assert len(by_id) > 0.9 * len(prompts)               # no repeats until a template pool is used up


@pytest.mark.parametrize("chat", [False, True])
def test_length_bounds(chat: bool):
    prompts = mix(seed=4, chat=chat, min_prompt_chars=1000, max_prompt_chars=2000,
                  system_prefix="x" * 5000).take(400)
    for p in prompts:                                    # the shared prefix is not counted
        size = sum(len(m["content"]) for m in p.messages if m["role"] != "system") if chat else len(p.text) - 5002
        assert 1000 <= size <= 2000


def test_bounds_leave_out_templates_with_nothing_in_range():
    templates = {p.template for p in mix(sources=[{"kind": "prose"}], min_prompt_chars=1000).take(200)}
    assert templates == {"prose/summarise", "prose/answer"}       # free-writing prompts are all shorter


def test_bounds_that_exclude_a_whole_source_are_a_config_error():
    with pytest.raises(ConfigError, match="prose/essay") as caught:
        mix(sources=[{"kind": "code"}, {"kind": "prose", "templates": ["essay"]}], min_prompt_chars=3000)
    assert caught.value.key == "prompts.sources[1]"


def test_text_form_with_prefix():
    plain, prefixed = mix(seed=8).take(20), mix(seed=8, system_prefix="You are terse.").take(20)
    for a, b in zip(plain, prefixed):
        assert a.messages is None and b.messages is None
        assert b.text == "You are terse.\n\n" + a.text
        assert (a.prompt_id, a.kind, a.template) == (b.prompt_id, b.kind, b.template)


def test_chat_form_with_prefix():
    text, chat = mix(seed=8).take(20), mix(seed=8, chat=True, system_prefix="You are terse.").take(20)
    for t, c in zip(text, chat):
        assert c.text is None
        assert c.messages == ({"role": "system", "content": "You are terse."}, {"role": "user", "content": t.text})
    assert mix(seed=8, chat=True).take(1)[0].messages[0]["role"] == "user"


def test_take_rejects_bad_counts():
    m = mix()
    assert m.take(0) == []
    for bad in (-1, 2.0, True):
        with pytest.raises(ValueError):
            m.take(bad)


def test_dataset_source_in_a_mix(tmp_path: Path):
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(f'{{"prompt": "question {i} {"?" * 300}", "kind": "qa"}}\n' for i in range(30)))
    cfg = parse_prompts_config({"seed": 1, "sources": [{"kind": "code", "weight": 0.8},
                                                       {"format": "jsonl", "path": "mine.jsonl", "weight": 0.2}]},
                               base_dir=tmp_path)
    prompts = PromptMix(cfg).take(2000)
    mine = [p for p in prompts if p.template == "jsonl/mine"]
    assert all(p.kind == "qa" for p in mine)
    assert abs(len(mine) - 400) < 4 * math.sqrt(2000 * 0.2 * 0.8)
    first_pass = [p.prompt_id for p in mine[:30]]
    assert sorted(first_pass) == sorted(f"jsonl/mine#{i}" for i in range(1, 31))   # each row once per pass
