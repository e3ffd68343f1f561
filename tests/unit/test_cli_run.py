"""`loadgen run`'s flags become the same experiment a file would give, and a wrong one is named in one line."""

from __future__ import annotations

from pathlib import Path

from loadgen.cli import adhoc_experiment, build_parser
from loadgen.config import parse_experiment

REPO = Path(__file__).parents[2]


def _exp(*flags: str):
    args = build_parser().parse_args(["run", "--url", "http://127.0.0.1:1", "--requests", "8", *flags])
    return parse_experiment(adhoc_experiment(args), REPO, "--flags")


def test_open_loop_model_key_and_prompts_from_flags(tmp_path):
    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "hello"}\n')
    exp = _exp("--rate", "0.5", "2", "--arrival", "gamma", "--flavor", "openai-chat", "--model", "m1",
               "--api-key-env", "MY_KEY", "--prompts", f"jsonl:{data}")
    assert exp.load.mode == "open" and exp.load.open_loop.rates == (0.5, 2.0)
    assert exp.load.open_loop.arrival == "gamma" and exp.load.requests == 8
    [target] = exp.targets
    assert (target.model, target.api_key_env, target.flavor) == ("m1", "MY_KEY", "openai-chat")
    [source] = exp.prompts.sources
    assert (source.format, source.path) == ("jsonl", data)
    closed = _exp("--concurrency", "1", "4", "--prompts", "code")
    assert closed.load.concurrency == (1, 4) and [s.builtin for s in closed.prompts.sources] == ["code"]
    assert {s.builtin for s in _exp("--concurrency", "1").prompts.sources} == {"code", "prose"}   # mix
