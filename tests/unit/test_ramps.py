"""Ramps: the profile's integral and its inverse, arrivals per window, users per level, and the config. Against an
emulator: tests/e2e/test_workloads_end_to_end.py."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest

from loadgen.client.arrivals import ArrivalSpec, arrival_times
from loadgen.client.ramps import UserRamp
from loadgen.config import parse_experiment
from loadgen.config.ramp_profile import build
from loadgen.driver import shapes
from loadgen.errors import ConfigError
from loadgen.plan.steps import GridPlan, grid_steps

TARGET = {"name": "t", "url": "http://127.0.0.1:9"}


def _numeric_area(profile, t0: float, t1: float, n: int = 20000) -> float:
    h = (t1 - t0) / n
    return sum(profile.level_at(t0 + (k + 0.5) * h) for k in range(n)) * h


@pytest.mark.parametrize("shape,levels", [("linear", [2, 10]), ("linear", [9, 1, 4]), ("exponential", [1, 32]),
                                          ("exponential", [16, 2])])
def test_the_mean_is_the_levels_integral_and_time_at_its_inverse(shape, levels):
    profile = build(levels, shape, 5.0, 1.5, 2.0)
    for start, end, _ in profile.windows():
        assert profile.mean(start, end) == pytest.approx(_numeric_area(profile, start, end) / (end - start), rel=1e-6)
    for t in (0.3, 2.0, 3.1, 7.7, 12.9, 40.0):   # the warm-up, windows of every kind, the drain
        assert profile.time_at(profile.mean(0.0, t) * t) == pytest.approx(t, abs=1e-9)


@pytest.mark.parametrize("shape,workers", [("linear", 1), ("linear", 3), ("exponential", 2)])
def test_constant_arrivals_in_each_window_are_the_rates_integral(shape, workers):
    """Constant gaps mapped through the profile: window [a, b) holds floor(U(b)) - floor(U(a)) arrivals (U the
    integral of the rate), split over the workers without loss. (No window edge falls on a whole U.)"""
    profile = build([2, 20, 5], shape, 4.0, 1.0, 1.1)
    times = sorted(t for i in range(workers) for _, t in itertools.takewhile(
        lambda a: a[1] < 30, arrival_times(ArrivalSpec("constant", 3.0, 1.0, 0, i, workers, profile=profile))))
    for start, end, _ in profile.windows():
        expected = math.floor(profile.mean(0, end) * end + 1e-9) - math.floor(profile.mean(0, start) * start + 1e-9)
        assert sum(start <= t < end for t in times) == expected


def test_poisson_arrivals_follow_a_ramp():
    """Poisson through a linear ramp 5 -> 50/s: the count per window is Poisson with the rate's integral as mean."""
    profile = build([5, 50], "linear", 200.0, 0.0, 0.0)
    times = [t for _, t in itertools.takewhile(lambda a: a[1] < 200, arrival_times(
        ArrivalSpec("poisson", 1.0, 1.0, 7, profile=profile)))]
    for a in range(0, 200, 40):
        mean = profile.mean(a, a + 40) * 40
        assert abs(sum(a <= t < a + 40 for t in times) - mean) <= 5 * math.sqrt(mean)


def test_users_run_while_the_level_reaches_them():
    profile = build([1, 4, 2], "linear", 3.0, 1.0, 1.0)   # warm-up 1, hold 1, ramp 3, hold 1, ramp 3, hold 1
    assert profile.active(1) == [(0.0, math.inf)]
    assert profile.active(2) == [(3.0, math.inf)]                # up a third into the first ramp, stays: 2 at the end
    assert profile.active(3) == [pytest.approx((4.0, 7.5))]     # down half-way through the second ramp
    assert profile.active(4) == [pytest.approx((5.0, 6.0))]     # the hold at 4
    ramp = UserRamp(profile, 1, 2)   # worker 1 of 2: users 1, 3 (0-based)
    assert [ramp.intervals(k) for k in range(2)] == [profile.active(2), profile.active(4)]
    assert [ramp.running(t) for t in (0.5, 3.5, 5.5, 9.0)] == [0, 1, 2, 1]
    # time-average users of the first ramp: 1 user a third, 2 a third, 3 a third
    start, end, _ = profile.windows()[1]
    assert profile.mean_users(start, end) == pytest.approx(2.0)


def _exp(load: dict) -> dict:
    return {"load": load, "targets": [TARGET]}


def test_ramp_config_plans_one_step_with_a_window_per_ramp_and_hold():
    exp = parse_experiment(_exp({"mode": "open", "rates": [2, 12, 2], "ramp": "exponential", "ramp_s": 30,
                                 "hold_s": 10, "repeats": 2}), Path("."))
    ramp = exp.load.ramp
    assert ramp is not None and ramp.levels == (2.0, 12.0, 2.0) and ramp.windows == 5
    steps = grid_steps(exp, exp.targets)
    assert [(s.step_id, s.width, s.repeat) for s in steps] == [(0, 5, 0), (1, 5, 1)]
    assert steps[0].loads[0].level == 2.0      # the first window (a hold at 2/s): how a resume recognises it
    closed = parse_experiment(_exp({"concurrency": [1, 8], "ramp": "linear"}), Path("."))
    assert closed.load.ramp is not None and closed.load.ramp.ramp_s == closed.load.measure_s
    [step] = grid_steps(closed, closed.targets)
    assert step.loads[0].concurrency == 8 and step.loads[0].rate is None and step.width == 1


@pytest.mark.parametrize("load,problem", [
    ({"concurrency": [4], "ramp": "linear"}, "load.ramp: needs two levels or more"),
    ({"concurrency": [1, 4], "ramp": "cubic"}, "load.ramp: unknown ramp 'cubic'"),
    ({"concurrency": [1, 4, 4], "ramp": "linear"}, "the same level twice in a row"),
    ({"concurrency": [1, 4], "ramp_s": 5}, "load.ramp_s: only applies to a ramp"),
    ({"concurrency": [1, 4], "ramp": "linear", "requests": 10}, "load.requests: cannot be combined with a ramp"),
    ({"concurrency": [1, 4], "ramp": "linear", "ramp_s": 0}, "load.ramp_s: must be a finite number > 0"),
    ({"concurrency": [1, 4], "warmup_requests": 3}, "load.warmup_requests: must be a count"),
    ({"concurrency": [1, 4, 1]}, "load.concurrency: has a level twice"),
])
def test_bad_ramp_config_is_one_line(load, problem):
    with pytest.raises(ConfigError) as err:
        parse_experiment(_exp(load), Path("."))
    assert problem in str(err.value)


@pytest.mark.parametrize("load", [
    {"mode": "open", "rates": [2, 12], "ramp": "linear", "ramp_s": 3, "hold_s": 1.5},
    {"concurrency": [1, 5, 2], "ramp": "exponential", "ramp_s": 3}])
def test_a_resume_knows_a_finished_ramp_by_its_first_windows_row(load):
    """The steps rows a ramp writes (one per window, its mean level as rate or concurrency) and the key a resume
    reads back from them (loadgen.driver.resume: repeat, and per target coalesce(rate, concurrency)) make the plan
    skip the ramp, and only that ramp."""
    exp = parse_experiment(_exp(dict(load, repeats=2)), Path("."))
    first, second = grid_steps(exp, exp.targets)
    level = first.loads[0]
    row = {"target": "t", "rate": level.rate, "concurrency": None if level.rate else level.concurrency,
           "t_start_ns": 0, "t_end_ns": 10**10}
    rows = shapes.step_rows(exp.load, first, [row])
    assert [r["step_id"] for r in rows] == list(range(first.width))
    done = {(0, frozenset({(r["target"], float(r["rate"] if r["rate"] is not None else r["concurrency"]))}))
            for r in rows}
    plan = GridPlan(exp, exp.targets, frozenset(done))
    step = plan.next_step(7, lambda: {})
    assert step is not None and step.repeat == 1 and step.step_id == 7   # repeat 0 was kept, repeat 1 runs
