"""The capacity search as a pure function of verdicts: against a known threshold it finds it exactly, and it
spends few levels doing so; unclear levels are run again within the budget; the config is checked."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.config import parse_experiment
from loadgen.config.search import SearchConfig, TwinStart
from loadgen.errors import ConfigError
from loadgen.plan.search import next_probe
from loadgen.plan.steps import SearchPlan, TargetLoad
from loadgen.results.slo import Slo, Verdict, parse_slo, parse_slo_flag


def _search(cfg: SearchConfig, passes, clear=lambda level, runs: True) -> tuple[dict[float, Verdict], list[float]]:
    """Run the search to its end against `passes(level)`; returns the verdicts and the levels in probe order."""
    verdicts: dict[float, Verdict] = {}
    probes: list[float] = []
    while (probe := next_probe(cfg, verdicts)) is not None:
        assert len(probes) < 200, probes
        probes.append(probe.level)
        runs = verdicts[probe.level].runs + 1 if probe.level in verdicts else 1
        verdicts[probe.level] = Verdict(passes(probe.level), clear(probe.level, runs), runs)
    return verdicts, probes


def _capacity(verdicts: dict[float, Verdict]) -> float | None:
    fails = [lvl for lvl, v in verdicts.items() if not v.passed]
    below = [lvl for lvl, v in verdicts.items() if v.passed and lvl < min(fails, default=math.inf)]
    return max(below, default=None)


@given(st.integers(1, 200), st.integers(1, 8), st.integers(2, 256), st.booleans())
def test_closed_loop_search_finds_the_threshold_exactly_in_few_levels(capacity, low, high, from_middle):
    high = max(high, low + 1)
    start = float(max(low, round(math.sqrt(low * high)))) if from_middle else None
    cfg = SearchConfig(float(low), float(high), start=start)
    verdicts, probes = _search(cfg, lambda level: level <= capacity)
    expected = None if capacity < low else min(capacity, high)
    assert _capacity(verdicts) == expected
    assert len(probes) == len(set(probes))          # every level once when every call is clear
    assert all(low <= p <= high and p == int(p) for p in probes)
    # up by doubling (log2(high / low) levels), then bisection of a bracket at most high / 2 wide
    assert len(probes) <= math.ceil(math.log2(high / low)) + math.ceil(math.log2(high)) + 2


@given(st.floats(0.05, 100.0), st.floats(0.02, 0.5))
def test_open_loop_search_brackets_the_threshold_within_the_tolerance(threshold, tolerance):
    cfg = SearchConfig(0.1, 50.0, tolerance=tolerance, rates=True)
    verdicts, _ = _search(cfg, lambda rate: rate <= threshold)
    found = _capacity(verdicts)
    fails = [lvl for lvl, v in verdicts.items() if not v.passed]
    if threshold < 0.1:
        assert found is None
    elif threshold >= 50.0:
        assert found == 50.0 and not fails
    else:
        first_fail = min(fails)
        assert found <= threshold < first_fail
        assert first_fail / found - 1 <= tolerance * 1.001 + 1e-3   # rates keep 4 significant digits


def test_an_unclear_level_is_run_again_up_to_the_budget_then_its_point_estimate_decides():
    cfg = SearchConfig(1.0, 16.0, max_runs=3)
    verdicts, probes = _search(cfg, lambda level: level <= 5, clear=lambda level, runs: level != 6)
    assert probes == [1, 2, 4, 8, 6, 6, 6, 5]        # 6 stayed unclear: three runs, then its fail counts
    assert _capacity(verdicts) == 5
    _, probes = _search(cfg, lambda level: level <= 5, clear=lambda level, runs: level != 6 or runs >= 2)
    assert probes == [1, 2, 4, 8, 6, 6, 5]           # clear on its second run: no third


def test_the_search_starts_in_the_middle_and_goes_down_from_a_fail():
    exp = _exp({"search": "capacity", "search_min": 1, "search_max": 64}, {"ttft_ms": 500}, targets=1)
    assert exp.load.search.start == 8.0
    verdicts, probes = _search(exp.load.search, lambda level: level <= 6)
    assert probes == [8, 4, 6, 7] and _capacity(verdicts) == 6     # the dear ends (1, 2, 32, 64) never run
    verdicts, probes = _search(exp.load.search, lambda level: False)
    assert probes == [8, 4, 2, 1] and _capacity(verdicts) is None
    rates = _exp({"mode": "open", "search": "capacity", "search_min": 0.5, "search_max": 8.0}, {"ttft_ms": 1},
                 targets=1).load.search
    assert rates.start == 2.0


def test_the_reasons_say_why_each_level_was_chosen():
    cfg = SearchConfig(1.0, 8.0)
    verdicts: dict[float, Verdict] = {}
    reasons = []
    while (probe := next_probe(cfg, verdicts)) is not None:
        reasons.append(probe.reason)
        verdicts[probe.level] = Verdict(probe.level <= 2, True, 1)
    assert reasons == ["start at search_min", "up from a pass at 1", "up from a pass at 2",
                       "bisect between a pass at 2 and a fail at 4"]


def _exp(load: dict, slo: dict | None = None, targets: int = 2):
    data = {"load": load, "targets": [{"name": f"t{i}", "url": f"http://127.0.0.1:{i + 1}"} for i in range(targets)]}
    if slo is not None:
        data["slo"] = slo
    return parse_experiment(data, Path("."))


def test_search_plan_drives_each_target_at_its_own_level_and_asks_for_a_clear_call():
    exp = _exp({"search": "capacity", "search_max": 32, "search_start": 1}, {"ttft_ms": 500})
    plan = SearchPlan(exp, exp.targets)
    verdicts = {"t0": {1.0: Verdict(True, True, 1), 2.0: Verdict(False, True, 1)},
                "t1": {1.0: Verdict(True, True, 1)}}
    step = plan.next_step(7, lambda: verdicts)
    assert step is not None and step.step_id == 7
    assert step.loads == (TargetLoad("t1", 2, None, "up from a pass at 1", 0),)   # t0 is done: capacity 1
    assert step.min_measured == 35 == Slo(ttft_ms=500).requests_for_clear_pass()
    done = {"t0": verdicts["t0"], "t1": {1.0: Verdict(False, True, 1)}}
    assert plan.next_step(8, lambda: done) is None


def test_open_loop_search_window_holds_enough_arrivals_for_a_clear_call():
    exp = _exp({"mode": "open", "search": "capacity", "search_min": 0.5, "search_max": 8.0, "search_start": 0.5,
                "measure_s": 10.0},
               {"ttft_ms": 500, "attainment": 0.8}, targets=1)
    step = SearchPlan(exp, exp.targets).next_step(0, lambda: {})
    assert step.loads[0].rate == 0.5 and step.loads[0].concurrency == exp.load.open_loop.max_in_flight
    assert step.measure_s == 16 / 0.5    # 16 requests for a clear call at 80%, at 0.5 requests/s


def test_grid_stops_a_target_after_failing_levels_in_a_row():
    from loadgen.plan.steps import GridPlan
    exp = _exp({"concurrency": [1, 2, 4, 8], "stop_after_slo_failures": 2}, {"ttft_ms": 500})
    plan = GridPlan(exp, exp.targets)
    verdicts = {"t0": {1.0: Verdict(True, True, 1), 2.0: Verdict(False, True, 1), 4.0: Verdict(False, True, 1)},
                "t1": {1.0: Verdict(True, True, 1), 2.0: Verdict(False, True, 1), 4.0: Verdict(True, True, 1)}}
    plan.position = 3
    step = plan.next_step(3, lambda: verdicts)
    assert step is not None and step.targets == ("t1",) and step.loads[0].concurrency == 8


@pytest.mark.parametrize("load,slo,key", [
    ({"search": "capacity", "search_max": 8}, None, "load.search"),
    ({"search": "capacity", "search_max": 8, "concurrency": [1]}, {"ttft_ms": 1}, "load.concurrency"),
    ({"search": "capacity", "search_max": 8, "repeats": 2}, {"ttft_ms": 1}, "load.repeats"),
    ({"search": "capacity", "search_min": 8, "search_max": 8}, {"ttft_ms": 1}, "load.search_max"),
    ({"search": "capacity", "search_max": 8.5}, {"ttft_ms": 1}, "load.search_max"),
    ({"search": "capacity", "search_max": 8, "search_start": 9}, {"ttft_ms": 1}, "load.search_start"),
    ({"search": "capacity", "search_max": 8, "search_tolerance": 0.1}, {"ttft_ms": 1}, "load.search_tolerance"),
    ({"search": "bayes", "search_max": 8}, {"ttft_ms": 1}, "load.search"),
    ({"concurrency": [1], "search_max": 8}, {"ttft_ms": 1}, "load.search_max"),
    ({"concurrency": [1], "stop_after_slo_failures": 2}, None, "load.stop_after_slo_failures"),
    ({"concurrency": [1]}, {"attainment": 0.9}, "slo"),
    ({"concurrency": [1]}, {"ttft_ms": -1}, "slo.ttft_ms"),
    ({"concurrency": [1]}, {"ttft_ms": 1, "attainment": 90}, "slo.attainment"),
    ({"concurrency": [1]}, {"tpot_ms": 1, "min_decode_tok_s": 10}, "slo.min_decode_tok_s"),
    ({"concurrency": [1]}, {"ttft": 1}, "slo.ttft"),
])
def test_bad_search_and_slo_keys_are_named(load, slo, key):
    with pytest.raises(ConfigError) as err:
        _exp(load, slo)
    assert err.value.key == key


def test_slo_from_a_flag_and_its_words():
    slo = parse_slo(parse_slo_flag("ttft_ms=2000, min_decode_tok_s=10,attainment=0.95"))
    assert slo == Slo(ttft_ms=2000.0, tpot_ms=100.0, attainment=0.95)
    assert slo.describe() == "TTFT <= 2 s and TPOT <= 100 ms for 95% of requests"
    assert slo.requests_for_clear_pass() == 73     # 1.96^2 * 0.95 / 0.05 = 72.99
    with pytest.raises(ConfigError, match="NAME=NUMBER"):
        parse_slo_flag("ttft_ms")


@given(st.integers(1, 200), st.integers(1, 200), st.integers(2, 256), st.integers(0, 2), st.integers(0, 2))
def test_twin_seeded_search_confirms_a_right_prediction_in_two_probes_and_survives_a_wrong_one(capacity, seed, high,
                                                                                              below, above):
    """Seeded at the twin's K: K and K + 1 (or K and K - 1) settle a right prediction, a capacity inside the
    interval costs two probes more at most, one just past an interval that ends at K one more (a twin of 17 (16-17)
    and a capacity of 18: 17, 18, 19); any other still ends at the exact threshold, the walk from a wrong seed
    bounded like any search's."""
    low, seed = 1, min(seed, high)
    plain = SearchConfig(float(low), float(high), start=float(round(math.sqrt(low * high))))
    interval = TwinStart("t", seed, max(low, seed - below), min(high, seed + above))   # the twin's interval
    seeded = dataclasses.replace(plain, start=float(seed), twin="run", seeds=(interval,))
    verdicts, probes = _search(seeded, lambda level: level <= capacity)
    want = min(capacity, high) if capacity >= low else None
    assert _capacity(verdicts) == want
    assert probes[0] == seed
    if seed == capacity < high or seed == capacity + 1:
        assert len(probes) == 2, probes
    if interval.low <= capacity <= interval.high and capacity < high:   # inside the interval: 2 probes more at most
        assert len(probes) <= 4, probes
    if capacity == seed + 1 == interval.high + 1 and capacity < high:   # one past an interval that ends at K
        assert len(probes) <= 3, probes
    assert len(probes) <= 2 * math.ceil(math.log2(high)) + 3, probes


def test_a_seeded_probe_says_why_it_was_chosen():
    cfg = SearchConfig(1.0, 64.0, start=12.0, twin="run", seeds=(TwinStart("t", 12, 11, 14),))
    assert next_probe(cfg, {}).reason == "start at the twin's prediction 12 (11-14)"
    assert next_probe(cfg, {12.0: Verdict(True, True, 1)}).reason == (
        "confirm the twin's prediction: 12 passed, the next level up")
    assert next_probe(cfg, {12.0: Verdict(True, True, 1), 13.0: Verdict(False, True, 1)}) is None
    assert next_probe(cfg, {12.0: Verdict(False, True, 1)}).level == 11.0
