"""The sequential verdicts (loadgen/results/sequential.py). The SLO call (views.sql level_sequential): its error rate
on simulated Bernoulli streams (independent and correlated), its early stops, its minimum, and SQL's replay of it.
The throughput lead: its error rate at the tie band's edges on constructed pairs, its early call and minimum, and
that it counts tokens."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from loadgen.config import parse_experiment
from loadgen.errors import ConfigError
from loadgen.results.analysis import level_verdicts, open_results
from loadgen.results.sequential import (
    LEAD_BATCH,
    MIN_BATCHES,
    MIN_PAIRS,
    TIE,
    Call,
    Pair,
    decide,
    decide_lead,
    fewest_requests,
    hypotheses,
)
from loadgen.results.slo import Slo
from sqlfixtures import Results

ALPHA = 0.05


def _stream(rnd: random.Random, p: float, cap: int, rho: float = 0.0) -> list[bool]:
    """Met or not with probability p each; rho: the chance a request repeats the one before (a queue's memory,
    the long-run mean stays p)."""
    out: list[bool] = []
    while len(out) < cap:
        out.append(out[-1] if out and rnd.random() < rho else rnd.random() < p)
    return out


def _false_calls(p: float, batch: int, runs: int, rho: float = 0.0, seed: int = 1) -> tuple[float, float]:
    """(share of runs called the wrong way, mean requests of a call) at true attainment p against a = 0.9."""
    rnd = random.Random(seed)
    wrong, used = 0, []
    for _ in range(runs):
        outcomes = _stream(rnd, p, 3000, rho)
        call = None
        for n in range(batch, len(outcomes) + 1, batch):    # looked at as the window grows, a batch at a time
            call = decide(outcomes[:n], batch, 0.9, ALPHA)
            if call:
                break
        assert call is not None, "a stream at a hypothesis is called within 3000 requests"
        used.append(call.n)
        wrong += call.verdict != ("pass" if p > 0.9 else "fail")
    return wrong / runs, sum(used) / runs


@pytest.mark.parametrize("p", hypotheses(0.9))
@pytest.mark.parametrize("batch", [1, 8])
def test_the_false_verdict_rate_holds_at_the_tie_bands_edges(p, batch):
    wrong, _ = _false_calls(p, batch, runs=300)
    assert wrong <= ALPHA + 0.02, f"p={p}, batch={batch}: {wrong:.3f} of calls wrong"


def test_batch_means_take_back_part_of_what_correlation_costs():
    """Misses in runs (rho 0.5: runs of two) fool a plain SPRT (batch 1: about a quarter of the calls wrong at the
    fail edge); batch means of 16 requests catch the part of it their variance shows, not all: a window whose
    outcomes are all equal shows none (docs/capacity-search.md says so, with the measured rates)."""
    plain, _ = _false_calls(hypotheses(0.9)[1], 1, runs=300, rho=0.5, seed=2)
    batched, _ = _false_calls(hypotheses(0.9)[1], 16, runs=300, rho=0.5, seed=2)
    assert plain > 3 * ALPHA and batched < plain - 0.05


def test_a_clear_case_stops_early():
    assert decide([True] * 100, 1, 0.9, ALPHA) == Call("pass", 27)    # vs 35 for a Wilson interval's clear pass
    assert decide([False] * 10, 1, 0.9, ALPHA) == Call("fail", MIN_BATCHES)
    _, mean_n = _false_calls(0.6, 1, runs=100)
    assert mean_n < 12


def test_it_never_calls_before_its_minimum():
    assert decide([False] * (3 * 8 - 1), 8, 0.9, ALPHA) is None        # under MIN_BATCHES batches of 8
    assert decide([True] * 26, 1, 0.9, ALPHA) is None
    assert fewest_requests(0.9, ALPHA, 1) == 27 and fewest_requests(0.9, ALPHA, 16) == 48
    rnd = random.Random(3)
    for _ in range(200):
        outcomes = _stream(rnd, 0.9, 200)
        call = decide(outcomes, 4, 0.9, ALPHA)
        assert call is None or call.n >= MIN_BATCHES * 4 and call.n % 4 == 0


def _level(r: Results, run: str, step_id: int, level: int, met: list[bool]) -> None:
    """A closed-loop step at C=level: one measured request per outcome (TTFT 50 ms met, 500 ms missed), scheduled
    1 ms apart but written in reverse (SQL orders them by schedule)."""
    r.step(run, step_id, "t", concurrency=level)
    for i in reversed(range(len(met))):
        sent = 1000 + i
        r.request(run, step_id, "t", f"t-{step_id}-{i:04d}", sent_ms=sent, frames=[(sent + (50 if met[i] else 500), 3)])


def test_sql_finds_the_same_call_at_the_same_request(tmp_path: Path):
    rnd = random.Random(4)
    r = Results()
    r.run("r", slo=Slo(ttft_ms=100, attainment=0.9, false_verdict=ALPHA).to_json())
    streams = {1: [True] * 40, 2: [False] * 12, 4: _stream(rnd, 0.93, 400, 0.5), 8: _stream(rnd, 0.8, 400, 0.5),
               16: ([True] * 9 + [False]) * 5}
    for step_id, (level, met) in enumerate(streams.items()):
        _level(r, "r", step_id, level, met)
    root = r.write(tmp_path)
    con = open_results(root)
    rows = {int(level): (verdict, n) for level, verdict, n in con.execute(
        "SELECT level, sequential_verdict, sequential_n FROM level_sequential").fetchall()}
    for level, met in streams.items():
        call = decide(met, level, 0.9, ALPHA)
        assert rows.get(level, (None, None)) == ((call.verdict, call.n) if call else (None, None)), level
    verdicts = level_verdicts(root, "r", ["t"])["t"]
    assert verdicts[1.0].passed and verdicts[1.0].clear          # 40 of 40: called on 27
    assert not verdicts[2.0].passed and verdicts[2.0].clear
    assert verdicts[16.0].passed and not verdicts[16.0].clear   # 45 of 50: the point estimate, no call yet


def test_without_false_verdict_the_fixed_call_stands(tmp_path: Path):
    r = Results()
    r.run("r", slo=Slo(ttft_ms=100, attainment=0.9).to_json())
    _level(r, "r", 0, 1, [True] * 30)
    root = r.write(tmp_path)
    verdict = level_verdicts(root, "r", ["t"])["t"][1.0]
    assert verdict.passed and not verdict.clear                  # 30 of 30: Wilson's lower end 0.886 < 0.9


def _experiment(load: dict, slo: dict | None = None):
    data = {"load": {"concurrency": [1, 2], **load}, "targets": [{"name": "t", "url": "http://127.0.0.1:1"}]}
    if slo is not None:
        data["slo"] = slo
    return parse_experiment(data, Path("."))


def test_the_window_key_sets_the_slos_error_rate():
    exp = _experiment({"window": "sequential"}, {"ttft_ms": 100})
    assert exp.slo is not None and exp.slo.false_verdict == 0.05
    assert _experiment({"window": "sequential", "false_verdict": 0.01}, {"ttft_ms": 100}).slo.false_verdict == 0.01
    assert _experiment({}, {"ttft_ms": 100}).slo.false_verdict is None


@pytest.mark.parametrize("load, slo, says", [
    ({"window": "sequential"}, None, "load.window: a sequential window ends on an SLO call"),
    ({"false_verdict": 0.05}, {"ttft_ms": 1}, 'load.false_verdict: only applies to sequential windows'),
    ({"window": "sequential", "false_verdict": 0.5}, {"ttft_ms": 1}, "load.false_verdict: must be a share"),
    ({"window": "sequentail"}, {"ttft_ms": 1}, "load.window: unknown value 'sequentail'"),
    ({"window": "sequential"}, {"ttft_ms": 1, "attainment": 1}, "slo.attainment: a sequential test needs"),
    ({"window": "sequential", "requests": 10}, {"ttft_ms": 1}, "load.window: sequential windows are closed-loop"),
])
def test_bad_window_keys_are_one_line_with_the_fix(load, slo, says):
    with pytest.raises(ConfigError) as err:
        _experiment(load, slo)
    assert str(err.value).startswith(says) and "fix:" in str(err.value) or "use " in str(err.value)


# ---- the throughput lead (sequential.decide_lead): per-prompt pairs of two series at one level ------------------

def _pairs(rnd: random.Random, ratio: float, n: int, noise: float = 0.15, tokens: tuple[int, int] = (128, 128)
           ) -> list[Pair]:
    """Prompts whose own length moves both series' times alike (log-normal, sd 0.3), each request with its own
    noise (sd `noise`): the other's aggregate tok/s is exactly `ratio` x the baseline's in expectation."""
    out = []
    for _ in range(n):
        prompt = rnd.lognormvariate(0, 0.3)
        base, other = prompt * rnd.lognormvariate(0, noise), prompt * rnd.lognormvariate(0, noise)
        out.append(Pair(base, tokens[0], other / ratio * tokens[1] / tokens[0], tokens[1]))
    return out


@pytest.mark.parametrize("ratio", [1 + TIE, 1 / (1 + TIE)])
def test_a_lead_is_called_the_wrong_way_at_most_alpha_of_the_time_at_the_tie_bands_edges(ratio):
    rnd = random.Random(7)
    calls = [decide_lead(_pairs(rnd, ratio, 1500), ALPHA) for _ in range(200)]
    right = "ahead" if ratio > 1 else "behind"
    assert all(c.verdict is not None for c in calls), "a ratio at the band's edge is called within 1500 pairs"
    wrong = sum(c.verdict != right for c in calls) / len(calls)
    assert wrong <= ALPHA + 0.02, f"ratio {ratio:.3f}: {wrong:.3f} of calls wrong"


def test_a_clear_lead_is_called_on_the_fewest_pairs_and_never_before():
    rnd = random.Random(3)
    call = decide_lead(_pairs(rnd, 1.25, 200), ALPHA)
    assert call.verdict == "ahead" and call.n == MIN_PAIRS and call.ratio == pytest.approx(1.25, rel=0.08)
    assert decide_lead(_pairs(rnd, 1.25, MIN_PAIRS - 1), ALPHA).verdict is None      # under the minimum: no call
    for _ in range(100):
        call = decide_lead(_pairs(rnd, 0.9, 120), ALPHA)
        assert call.verdict != "ahead" and (call.verdict is None or call.n % LEAD_BATCH == 0 and call.n >= MIN_PAIRS)


def test_a_lead_counts_tokens_not_requests():
    """The same request times with half the tokens (a server that stopped early) is half the throughput."""
    rnd = random.Random(5)
    pairs = [Pair(p.base_s, 128, p.base_s * 0.9, 64) for p in _pairs(rnd, 1.0, 64)]   # 10% quicker, half the tokens
    call = decide_lead(pairs, ALPHA)
    assert call.verdict == "behind" and call.ratio == pytest.approx(64 / 128 / 0.9)


def test_inside_the_tie_band_a_lead_may_go_uncalled_and_says_its_point_estimate():
    rnd = random.Random(11)
    calls = [decide_lead(_pairs(rnd, 1.0, 40), ALPHA) for _ in range(50)]
    assert any(c.verdict is None for c in calls)
    assert all(c.n == 40 and 0.85 < c.ratio < 1.15 for c in calls if c.verdict is None)
