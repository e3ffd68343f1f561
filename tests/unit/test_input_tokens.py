"""prompts.input_tokens without a server: the config and flag, the fit, and prompts built to a length."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from loadgen.cli import adhoc_experiment, build_parser
from loadgen.client.calibrate import calibration_prompts, length_model
from loadgen.config import parse_experiment
from loadgen.errors import ConfigError, TargetError
from loadgen.prompts.config import InputTokens
from loadgen.prompts.length import ASSUMED, POOLED, LengthFit, LengthModel, fit_line, fit_model, prompt_texts
from loadgen.prompts.mix import PromptMix, parse_prompts_config
from loadgen.prompts.prose_tasks import TEMPLATES, prose_pools
from loadgen.results import analysis
from loadgen.results.schema import SCHEMA_VERSION
from sqlfixtures import Results

REPO = Path(__file__).parents[2]
CODE_FIT = LengthFit(20.0, 0.3)      # chars-based: 20 tokens of template, 3.33 characters per token
PROSE_FIT = LengthFit(20.0, 0.22)
MODEL = LengthModel((("code", CODE_FIT), ("prose", PROSE_FIT)), counted=True)


def test_the_line_through_a_servers_counts():
    assert fit_line([(1000, 270), (4000, 1020), (2000, 520)]) == pytest.approx((20.0, 0.25))
    assert fit_line([(1000, 300), (1100, 330)]) == pytest.approx((0.0, 630 / 2100))   # too close: through 0
    assert fit_line([(1000, 300), (4000, 200)]) is None and fit_line([]) is None


def test_fit_model_chooses_the_measure_that_follows_the_counts():
    texts = ["word " * 100, "x = [a, b]; " * 40, "word " * 400, "x = [a, b]; " * 160]
    by_chars = fit_model(("prose", (t,), 7 + len(t) // 4) for t in texts)
    fit = by_chars.fit("prose")
    assert fit.measure == "chars" and fit.overhead == pytest.approx(7, abs=1) and by_chars.counted
    assert by_chars.fit("math") == by_chars.fit(POOLED)            # a kind without counts: the pooled fit
    pieces = fit_model(("code", (t,), 3 + t.count(" ") + t.count(",")) for t in texts)
    assert pieces.fit("code").measure == "pieces"
    assert LengthModel().fit("code") == ASSUMED and not LengthModel().counted


def test_a_failed_or_uncounted_calibration_is_said():
    cfg = parse_prompts_config({"input_tokens": 300, "sources": [{"kind": "prose"}]})
    prompts = calibration_prompts(cfg)
    assert sorted({p.target_tokens for p in prompts}) == [150, 300] and {p.kind for p in prompts} == {"prose"}
    assert len(prompts) == 8
    uncounted = length_model("t", prompts, [(None, None)] * len(prompts))
    assert not uncounted.counted and "reports no prompt token count" in uncounted.note
    with pytest.raises(TargetError, match="target t: a 300-token calibration prompt failed .http_error"):
        length_model("t", prompts, [(100, None)] * 7 + [(None, "http_error: context too long")])


@pytest.mark.parametrize("table,key,words", [
    ({"input_tokens": 0}, "prompts.input_tokens", "whole number of tokens from 1"),
    ({"input_tokens": "1024"}, "prompts.input_tokens", "whole number of tokens"),
    ({"input_tokens": {"min": 512}}, "prompts.input_tokens", "needs both min and max"),
    ({"input_tokens": {"min": 900, "max": 600}}, "prompts.input_tokens.max", "600 is below min = 900"),
    ({"input_tokens": {"min": 1, "maxx": 9}}, "prompts.input_tokens.maxx", "did you mean `max`?"),
    ({"input_token": 5}, "prompts.input_token", "did you mean `input_tokens`?"),
    ({"input_tokens": 512, "max_prompt_chars": 900}, "prompts.max_prompt_chars", "cannot be combined with input"),
])
def test_config_mistakes_are_one_line_with_the_key(table, key, words):
    with pytest.raises(ConfigError) as err:
        parse_prompts_config(table)
    assert err.value.key == key and words in str(err.value) and "\n" not in str(err.value)


def test_flag_fixed_and_range():
    def exp(*flags):
        args = build_parser().parse_args(["run", "--url", "http://127.0.0.1:1", "--requests", "8",
                                          "--concurrency", "1", *flags])
        return parse_experiment(adhoc_experiment(args), REPO, "--flags")
    assert exp("--input-tokens", "1024").prompts.input_tokens == InputTokens(1024, 1024)
    assert exp("--input-tokens", "512-2048").prompts.input_tokens == InputTokens(512, 2048)
    assert exp().prompts.input_tokens is None


def test_same_seed_same_prompts_and_the_same_tasks_for_every_fit():
    cfg = parse_prompts_config({"seed": 4, "input_tokens": {"min": 300, "max": 1500}})
    first = PromptMix(cfg, MODEL).take(60)
    assert PromptMix(cfg, MODEL).take(60) == first
    lengths = [p.target_tokens for p in first]
    assert all(300 <= n <= 1500 for n in lengths) and len(set(lengths)) > 30
    other = PromptMix(cfg).take(60)     # another server's fit: the same lengths asked, the same tasks
    assert [(p.prompt_id, p.target_tokens) for p in other] == [(p.prompt_id, p.target_tokens) for p in first]
    assert [p.text for p in other] != [p.text for p in first]
    reseeded = PromptMix(parse_prompts_config({"seed": 5, "input_tokens": {"min": 300, "max": 1500}})).take(60)
    assert [p.target_tokens for p in reseeded] != lengths


def _code_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)\n```", text, re.S)


@pytest.mark.parametrize("tokens", [400, 1024, 3000])
def test_a_code_prompt_built_to_n_tokens_is_a_whole_code_task(tokens):
    cfg = parse_prompts_config({"input_tokens": tokens, "sources": [{"kind": "code"}]})
    prompts = PromptMix(cfg, MODEL).take(30)
    for p in prompts:
        assert p.target_tokens == tokens
        # within a word, or half a context block's heading when the task alone nearly fills the length
        assert CODE_FIT.estimate(prompt_texts(p)) == pytest.approx(tokens, abs=max(0.01 * tokens, 12))
        blocks = _code_blocks(p.text)
        task = blocks[-1]
        if not p.template.endswith("find_bug"):
            ast.parse(task)   # the function asked about is whole (find_bug's is whole too, one operator changed)
        assert p.text.rstrip().endswith("```")                # the question, then its code, come last
        if len(blocks) == 2:   # context in front: more functions, marked by module, the first one whole
            assert p.text.startswith("For context, more code from the standard library next to `")
            assert blocks[0].startswith("# ")
    assert any(len(_code_blocks(p.text)) == 2 for p in prompts)


def test_a_prose_prompt_built_to_n_tokens_ends_with_its_task():
    cfg = parse_prompts_config({"input_tokens": 800, "chat": True, "system_prefix": "You are helpful.",
                                "sources": [{"kind": "prose"}]})
    tasks = {t.task_id: t for pool in prose_pools(TEMPLATES) for t in map(pool.render, range(pool.size))}
    for p in PromptMix(cfg, MODEL).take(20):
        assert p.messages[0] == {"role": "system", "content": "You are helpful."}
        question = p.messages[-1]["content"]
        assert PROSE_FIT.estimate(prompt_texts(p)) == pytest.approx(800, rel=0.01)
        assert question.startswith("Background reading from the Python documentation:\n\n")
        assert question.endswith("\n\n" + tasks[p.prompt_id].messages[-1]["content"])   # the task, whole, last


def test_dataset_rows_are_cut_or_get_the_following_rows_in_front(tmp_path):
    rows = [f"short question number {i} about soil and rain?" for i in range(5)] + ["long " * 400]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"prompt": r}) + "\n" for r in rows))
    table = {"sources": [{"format": "jsonl", "path": "d.jsonl"}]}
    plain = PromptMix(parse_prompts_config(table, base_dir=tmp_path)).take(12)
    sized = PromptMix(parse_prompts_config(dict(table, input_tokens=100), base_dir=tmp_path), MODEL).take(12)
    assert [p.prompt_id for p in sized] == [p.prompt_id for p in plain]     # no row skipped, same order
    for p, row in zip(sized, plain):
        assert PROSE_FIT.estimate([p.text]) == pytest.approx(100, rel=0.02)
        if len(row.text) > 1000:
            assert row.text.startswith(p.text)                  # cut at its end
        else:
            assert p.text.endswith("\n\n" + row.text)           # the rows after it, then the row itself


def _results_with_an_old_run(root: Path, runs: tuple[str, ...]) -> Path:
    """A folder with a schema-4 run `old` (its requests file has no prompt_tokens_target) and/or a new run `new`
    whose requests asked for 100 and 200 tokens."""
    r = Results()
    for run_id in runs:
        r.run(run_id, schema_version=4 if run_id == "old" else SCHEMA_VERSION)
        r.step(run_id, 0, "t")
        for k, (kind, asked, actual) in enumerate([("code", 100, 95), ("code", 200, 210), ("prose", 100, 101)]):
            extra = {"prompt_tokens_target": asked} if run_id == "new" else {}
            r.request(run_id, 0, "t", f"{run_id}-{k}", sent_ms=1100, frames=[(1200, 3)], prompt_kind=kind,
                      prompt_tokens=actual, **extra)
    r.write(root)
    if "old" in runs:
        path = root / "requests" / "run_id=old" / "part-0-0.parquet"
        pq.write_table(pq.read_table(path).drop_columns(["prompt_tokens_target"]), path)
    return root


@pytest.mark.parametrize("runs", [("old", "new"), ("new", "old"), ("old",)])
def test_workload_check_shows_asked_and_actual_and_old_folders_still_query(tmp_path, runs):
    con = analysis.open_results(_results_with_an_old_run(tmp_path, runs))
    rows = {(r["run_id"], r["prompt_kind"]): r for r in analysis.run_query(con, "workload_check", {}).to_pylist()}
    old = rows.pop(("old", "(all)"), None)
    assert set(rows) == ({("new", "(all)"), ("new", "code"), ("new", "prose")} if "new" in runs else set())
    if old is not None:
        assert old["ok_requests"] == 3 and old["input_tokens_asked"] is None and old["flags"] is None
    if "new" in runs:
        code = rows[("new", "code")]
        assert (code["input_tokens_asked"], code["input_tokens_actual"]) == (150.0, 152.5)
        assert code["input_ratio_p5"] == pytest.approx(0.95 + 0.05 * 0.1, abs=1e-3)   # 0.95 .. 1.05
        assert code["input_ratio_p95"] == pytest.approx(0.95 + 0.1 * 0.95, abs=1e-3) and code["flags"] is None
        assert rows[("new", "(all)")]["ok_requests"] == 3 and rows[("new", "prose")]["input_tokens_asked"] == 100
