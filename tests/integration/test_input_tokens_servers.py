"""prompts.input_tokens against real servers: the emulator (SGLang's native API; it counts ceil(chars / 4), so it
checks the plumbing: calibration, per-target prompts, the recorded target) and a real llama.cpp `llama-server`
(SmolLM2's tokenizer and chat template: the test that the calibration meets a length in the server's own tokens).
Every measured request's server-counted prompt_tokens must be within 10% of its prompt_tokens_target."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llamaserver import LlamaServer
from loadgen.config import parse_experiment
from loadgen.driver.runner import run_experiment
from loadgen.results import analysis

TOLERANCE = 0.10


def _run(url: str, results: Path, input_tokens, flavor: str = "auto", chat: bool = False, requests: int = 12,
         seed: int = 0):
    exp = parse_experiment({
        "run": {"name": "input-tokens"},
        "load": {"concurrency": [2], "requests": requests, "request_timeout_s": 300.0, "realtime_priority": False},
        "prompts": {"seed": seed, "max_new_tokens": 4, "ignore_eos": True, "input_tokens": input_tokens,
                    "chat": chat},
        "targets": [{"name": "t", "url": url, "flavor": flavor}],
    }, Path("."))
    outcome = run_experiment(exp, str(results), log=lambda *a: None)
    assert outcome.status == "complete", outcome
    return outcome, analysis.open_results(outcome.results_dir, [outcome.run_id])


def _requests(con) -> list[tuple]:
    return con.execute("SELECT prompt_kind, prompt_tokens_target, prompt_tokens FROM requests "
                       "WHERE phase = 'measure' AND status = 'ok' ORDER BY request_id").fetchall()


def _assert_on_target(rows: list[tuple], low: int, high: int, requests: int) -> None:
    assert len(rows) == requests
    assert {kind for kind, _, _ in rows} == {"code", "prose"}   # the default mix: both kinds met
    for kind, target, actual in rows:
        assert low <= target <= high, (kind, target)
        assert abs(actual - target) <= TOLERANCE * target, (kind, target, actual)
    if low < high:
        assert len({target for _, target, _ in rows}) > 1   # drawn, not one length


def _fit(con) -> dict:
    infos = [json.loads(i) for (i,) in con.execute("SELECT server_info FROM steps").fetchall()]
    return infos[0]["input_tokens_fit"]


@pytest.fixture(scope="module")
def emulator_url(emulator_factory):
    # 20x the modelled GB10: a 1,024-token prompt's prefill at real speed would make the calibration's 16
    # concurrent requests and the run's 12 take minutes on this machine, for no more evidence
    with emulator_factory("--model-path", "m", "--time-scale", "20") as url:
        yield url


@pytest.mark.parametrize("input_tokens,low,high", [(512, 512, 512), ({"min": 256, "max": 1024}, 256, 1024)])
def test_emulator_meets_the_target_on_every_request(ray_local, emulator_url, tmp_path, input_tokens, low, high):
    _, con = _run(emulator_url, tmp_path, input_tokens)
    _assert_on_target(_requests(con), low, high, 12)
    fit = _fit(con)
    assert fit["counted"] is True
    assert all(abs(f["chars_per_token"] - 4.0) < 0.1 for f in fit["fits"].values()), fit   # ceil(chars / 4)
    rows = analysis.run_query(con, "workload_check", {}).to_pylist()
    assert [r["prompt_kind"] for r in rows] == ["(all)", "code", "prose"]
    for r in rows:
        assert 0.9 <= r["input_ratio_p5"] <= r["input_ratio_p95"] <= 1.1 and r["flags"] is None, r
        assert low <= r["input_tokens_asked"] <= high


def test_a_run_without_a_target_records_none(ray_local, emulator_url, tmp_path):
    exp = parse_experiment({"load": {"concurrency": [1], "requests": 3},
                            "prompts": {"max_new_tokens": 2},
                            "targets": [{"name": "t", "url": emulator_url}]}, Path("."))
    outcome = run_experiment(exp, str(tmp_path), log=lambda *a: None)
    con = analysis.open_results(outcome.results_dir, [outcome.run_id])
    assert con.execute("SELECT count(*), count(prompt_tokens_target) FROM requests").fetchone() == (3, 0)
    assert "input_tokens_fit" not in json.loads(con.execute("SELECT server_info FROM steps").fetchone()[0])
    [row] = analysis.run_query(con, "workload_check", {}).to_pylist()
    assert row["prompt_kind"] == "(all)" and row["input_tokens_asked"] is None


@pytest.fixture(scope="module")
def llama(llama_server_bin, tmp_path_factory):
    binary, model = llama_server_bin
    # no draft model: it would prefill every prompt a second time, and only the prompt's tokens are checked here
    with LlamaServer(binary, model, tmp_path_factory.mktemp("llama") / "server.log", parallel=2,
                     draft=False) as server:
        yield server


@pytest.mark.parametrize("input_tokens,low,high,flavor,chat", [
    (256, 256, 256, "auto", False),
])
def test_llama_server_counts_meet_the_target(ray_local, llama, tmp_path, input_tokens, low, high, flavor, chat):
    _, con = _run(llama.url, tmp_path, input_tokens, flavor=flavor, chat=chat)
    _assert_on_target(_requests(con), low, high, 12)
    fits = _fit(con)["fits"]
    assert fits["code"]["chars_per_token"] < fits["prose"]["chars_per_token"]   # a real tokenizer: code is denser
    if chat:
        assert fits["prose"]["overhead_tokens"] > 5   # the template's role markers
