"""Open-loop arrival schedules: statistics over a long schedule, worker slicing, determinism, config errors."""

from __future__ import annotations

import itertools
import math
import statistics
from pathlib import Path

import pytest

from loadgen.client.arrivals import ArrivalSpec, arrival_times
from loadgen.config import parse_experiment
from loadgen.errors import ConfigError
from loadgen.plan.steps import grid_steps

N = 100_000   # gaps per schedule
Z = 5.0       # tolerance in standard errors: a correct generator fails about once in 3.5 million runs


def _times(spec: ArrivalSpec, n: int = N) -> list[float]:
    return [t for _, t in itertools.islice(arrival_times(spec), n)]


def _gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip([0.0] + times, times)]


@pytest.mark.parametrize("arrival,shape,cv", [
    ("constant", 1.0, 0.0), ("poisson", 1.0, 1.0), ("gamma", 0.25, 2.0), ("gamma", 1.0, 1.0), ("gamma", 4.0, 0.5)])
def test_mean_rate_and_dispersion_of_a_long_schedule(arrival, shape, cv):
    rate = 7.5
    gaps = _gaps(_times(ArrivalSpec(arrival, rate, shape, seed=11)))
    mean, sd = statistics.fmean(gaps), statistics.pstdev(gaps)
    # The standard error of the mean gap is cv / rate / sqrt(N). For gamma(k) gaps the delta method gives the
    # sample CV's variance as (k + 1) / (2 k^2 N) (Poisson: 1 / N); constant gaps have no spread at all.
    se_mean = cv / rate / math.sqrt(N)
    se_cv = math.sqrt((shape + 1) / (2 * shape ** 2 * N)) if cv else 0.0
    assert abs(mean - 1 / rate) <= Z * se_mean + 1e-12
    assert abs(sd / mean - cv) <= Z * se_cv + 1e-9
    assert len(gaps) / sum(gaps) == pytest.approx(rate, abs=Z * se_mean * rate ** 2 + 1e-9)


@pytest.mark.parametrize("arrival,shape,dispersion", [("constant", 1.0, 0.0), ("poisson", 1.0, 1.0),
                                                      ("gamma", 0.25, 4.0)])
def test_counts_per_window_have_the_process_dispersion(arrival, shape, dispersion):
    """Index of dispersion (variance / mean of arrivals per window): 1 for Poisson, ~0 for constant, and for a
    gamma renewal process CV^2 = 1 / shape once the window spans many gaps."""
    rate, window = 10.0, 20.0        # 200 arrivals per window on average
    times = _times(ArrivalSpec(arrival, rate, shape, seed=5))
    n_windows = int(times[-1] // window)
    counts = [0] * n_windows
    for t in times:
        if t < n_windows * window:
            counts[int(t // window)] += 1
    mean, var = statistics.fmean(counts), statistics.variance(counts)
    assert mean == pytest.approx(rate * window, rel=0.03)
    # Sample variance of ~500 near-normal counts: relative standard error sqrt(2 / (M - 1)) ~ 6.3 %.
    tolerance = Z * dispersion * math.sqrt(2 / (n_windows - 1)) + 0.02
    assert abs(var / mean - dispersion) <= tolerance


def test_workers_split_one_schedule_exactly():
    whole = list(itertools.islice(arrival_times(ArrivalSpec("gamma", 3.0, 0.5, seed=2)), 3000))
    parts = [list(itertools.islice(arrival_times(ArrivalSpec("gamma", 3.0, 0.5, seed=2, index=i, stride=3)), 1000))
             for i in range(3)]
    assert sorted(itertools.chain(*parts)) == whole
    assert all(n % 3 == i for i, part in enumerate(parts) for n, _ in part)


def test_seeded_and_rate_scaled():
    a = _times(ArrivalSpec("poisson", 2.0, 1.0, seed=1), 500)
    assert a == _times(ArrivalSpec("poisson", 2.0, 1.0, seed=1), 500)
    assert a != _times(ArrivalSpec("poisson", 2.0, 1.0, seed=2), 500)
    # every rate of a sweep replays the same pattern, only faster
    assert _times(ArrivalSpec("poisson", 4.0, 1.0, seed=1), 500) == pytest.approx([t / 2 for t in a])
    assert _times(ArrivalSpec("constant", 4.0, 1.0, seed=9), 4) == pytest.approx([0.25, 0.5, 0.75, 1.0])


def _exp(load: dict) -> dict:
    return {"load": load, "targets": [{"name": "t", "url": "http://127.0.0.1:1"}]}


def test_open_loop_config_and_plan():
    exp = parse_experiment(_exp({"mode": "open", "rates": [0.5, 2], "arrival": "gamma", "burstiness": 0.5,
                                 "max_in_flight": 64, "repeats": 2}), Path("."))
    o = exp.load.open_loop
    assert (o.rates, o.arrival, o.burstiness, o.max_in_flight) == ((0.5, 2.0), "gamma", 0.5, 64)
    steps = grid_steps(exp, exp.targets)
    assert [(s.loads[0].rate, s.loads[0].concurrency, s.repeat) for s in steps] == [
        (0.5, 64, 0), (2.0, 64, 0), (0.5, 64, 1), (2.0, 64, 1)]
    assert parse_experiment(_exp({"concurrency": [1]}), Path(".")).load.open_loop is None


@pytest.mark.parametrize("load,key", [
    ({"mode": "open"}, "load.rates"),
    ({"mode": "open", "rates": []}, "load.rates"),
    ({"mode": "open", "rates": [1, -2]}, "load.rates[1]"),
    ({"mode": "open", "rates": [1, True]}, "load.rates[1]"),
    ({"mode": "open", "rates": [1, 1]}, "load.rates"),
    ({"mode": "open", "rates": [1], "concurrency": [4]}, "load.concurrency"),
    ({"mode": "open", "rates": [1], "arrival": "bursty"}, "load.arrival"),
    ({"mode": "open", "rates": [1], "burstiness": 2}, "load.burstiness"),
    ({"mode": "open", "rates": [1], "arrival": "gamma", "burstiness": 0}, "load.burstiness"),
    ({"mode": "open", "rates": [1], "max_in_flight": 2, "workers_per_target": 3}, "load.max_in_flight"),
    ({"mode": "closed", "concurrency": [1], "rates": [1]}, "load.rates"),
    ({"concurrency": [1], "max_in_flight": 4}, "load.max_in_flight"),
    ({"mode": "poisson", "rates": [1]}, "load.mode"),
])
def test_bad_open_loop_config(load, key):
    with pytest.raises(ConfigError) as err:
        parse_experiment(_exp(load), Path("."))
    assert err.value.key == key and err.value.fix
