"""The [load] table: how hard and how long each step drives the targets (a grid of levels, open-loop rates, a
capacity search, a ramp or a trace), its keys declared once (LOAD) and read through them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from loadgen.config.openloop import OPEN_KEYS, OpenLoopConfig, parse_open_loop
from loadgen.config.ramp import RAMP_KEYS, RampConfig, parse_ramp, ramp_given
from loadgen.config.search import SEARCH_KEYS, SearchConfig, parse_search
from loadgen.config.trace import TRACE_KEY, TraceConfig, check_warmup, parse_trace
from loadgen.errors import ConfigError
from loadgen.keys import REQUIRED, Bounds, Choice, Key, Keys, StrictTable

# [load]'s own keys; the open-loop, search, ramp and trace keys are declared beside their readers
CORE_KEYS = (
    Key("mode", str, "closed", "closed: exactly C requests in flight | open: arrivals at a rate | trace: a trace's "
        "arrivals", Choice(("closed", "open", "trace"), "mode"), "use \"closed\" (fixed concurrency), \"open\" "
        "(arrivals at a rate) or \"trace\" (a trace's arrivals, [load.trace])"),
    Key("concurrency", list, REQUIRED, "the levels to sweep: requests in flight per target, e.g. [1, 2, 4, 8]",
        shown="required in closed mode"),
    Key("repeats", int, 1, "runs of every level; repeats are the outer loop, comparisons report the spread",
        Bounds(1)),
    Key("warmup_s", float, 3.0, "slot starts are spread over the warm-up, so requests do not run in lockstep",
        Bounds(0), shown="3.0 (0.0 in trace mode)"),
    Key("measure_s", float, 20.0, "the shortest window; it stays open until min_measured_requests were sent in it",
        Bounds(0, above=True)),
    Key("drain_timeout_s", float, 120.0, "load stays on until every measured request is done, at most this long; "
        "then the rest is cut", Bounds(0)),
    Key("stall_timeout_s", float, 60.0, "a stream with no byte for this long is cut (status timeout)",
        Bounds(0, above=True)),
    Key("request_timeout_s", float, 900.0, "a request still running after this long is cut", Bounds(0, above=True)),
    Key("workers_per_target", int, 1, "load worker actors per target: more streams than one core holds need more "
        "(docs/instrument.md)", Bounds(1)),
    Key("schedule", str, "together", "together: every target in the same step | one_at_a_time: each alone "
        "(isolation)", Choice(("together", "one_at_a_time"), "schedule")),
    Key("flush_cache", bool, True, "flush the servers' caches before every step"),
    Key("requests", int, None, "instead of timed windows: exactly N requests per target per step, all measured",
        Bounds(1), "or leave it out for timed windows", shown="unset: timed windows"),
    Key("warmup_requests", int, None, "with requests or a trace: the first N requests per target are warm-up"),
    Key("min_measured_requests", int, None, "the window stays open until this many requests were sent in it",
        Bounds(1), "or leave it out: at least one request per unit of concurrency", shown="C (the level)"),
    Key("max_measure_s", float, 0.0, "... but no longer than this (0: 5 x measure_s)", Bounds(0),
        shown="0.0 (5 x measure_s)"),
    Key("error_budget", (int, float), None, "failed requests a step may have before the run stops: a count (10) or "
        "a share below 1 (0.05)", shown="unset: never stop"),
    Key("on_worker_death", str, "continue", "after a load worker died; its in-flight requests are recorded as `lost`",
        Choice(("continue", "stop"))),
    Key("on_server_death", str, "restart", "after a server died or hung (docs/failures.md)",
        Choice(("restart", "stop"))),
    Key("server_retry_s", float, 60.0, "how long a url target that stopped answering is retried before it is "
        "dropped", Bounds(0, above=True)),
    Key("realtime_priority", bool, True, "workers read at SCHED_FIFO; false when they share cores with the server"),
    Key("stop_after_slo_failures", int, None, "a grid with [slo]: drop a target after this many failed levels in "
        "a row"),
    Key("window", str, "fixed", "fixed: a level's window holds min_measured_requests | sequential: with an [slo], it "
        "ends once the level's SLO call is clear (docs/capacity-search.md)", Choice(("fixed", "sequential"))),
    Key("false_verdict", float, 0.05, "window = \"sequential\": the sequential test's error rate",
        Bounds(0, 0.5, above=True, below=True, what="a share")),
    Key("miss_correlation", float, None, "window = \"sequential\": the largest lag-1 correlation of misses the "
        "error rate holds for (0: independent, cheapest; 0.5: misses in runs of about two; 0.7: of about four)",
        Bounds(0, 0.9, what="a correlation"), shown="0.7 (views.sql sequential_rule())"),
)
LOAD = Keys("load", "How hard and how long each step drives the targets.",
            (*CORE_KEYS, *OPEN_KEYS, *SEARCH_KEYS, *RAMP_KEYS, TRACE_KEY))
# The docs' tables of [load], a mode's keys apart
LOAD_SECTIONS = (
    Keys("load", LOAD.about, CORE_KEYS),
    Keys("load", 'Open loop (mode = "open"): arrivals at a rate; max_in_flight also caps a trace.', OPEN_KEYS),
    Keys("load", 'A capacity search (search = "capacity", needs [slo]; docs/capacity-search.md).', SEARCH_KEYS),
    Keys("load", "A ramp: the level moves between the listed levels within one step (docs/workloads.md).",
         RAMP_KEYS),
    Keys("load", 'A trace replay (mode = "trace"): its table is [load.trace], below.', (TRACE_KEY,)),
)


@dataclass(frozen=True)
class LoadConfig:
    mode: str
    concurrency: tuple[int, ...]
    repeats: int
    warmup_s: float
    measure_s: float
    drain_timeout_s: float
    stall_timeout_s: float
    request_timeout_s: float
    workers_per_target: int
    schedule: str                    # together: every target in the same step; one_at_a_time: each alone
    flush_cache: bool
    open_loop: OpenLoopConfig | None = None  # mode "open": rates and arrival process (concurrency is empty)
    requests: int | None = None      # fixed-count steps: exactly this many requests per target, all measured
    min_measured: int | None = None  # closed loop: the window stays open until this many were sent in it
    max_measure_s: float = 0.0       # ... but no longer than this (0: measure_s x 5)
    error_budget: float | None = None  # failed requests a step may have: a count (>= 1) or a share (< 1)
    on_worker_death: str = "continue"  # continue | stop: what a run does after a load worker died
    on_server_death: str = "restart"   # restart | stop: after a server died or hung (docs/failures.md)
    server_retry_s: float = 60.0       # how long a url target that stopped answering is retried before it is dropped
    realtime_priority: bool = True   # workers read at SCHED_FIFO (see worker._raise_priority)
    search: SearchConfig | None = None  # search = "capacity": levels chosen from finished steps' SLO verdicts
    stop_after_slo_failures: int | None = None  # grids: drop a target after this many failed levels in a row
    trace: TraceConfig | None = None  # mode "trace": the rows replayed and the speedups (the steps' levels)
    ramp: RampConfig | None = None    # the level ramps between the listed levels within one step
    warmup_requests: int | None = None  # counted steps and traces: the first K requests per target are warm-up
    false_verdict: float | None = None  # window = "sequential": a window ends once its SLO call is clear at this rate
    miss_correlation: float | None = None  # window = "sequential": the misses' lag-1 correlation the rate holds to



def parse_load_table(data: dict, base_dir: Path = Path(".")) -> LoadConfig:
    """A [load] table on its own (a recorded run's, runs.config): its settings with every default filled in."""
    return parse_load(data, base_dir)


def parse_load(data: object, base_dir: Path) -> LoadConfig:
    """The [load] table, every key read through its declaration in LOAD; the checks below are between keys."""
    t = StrictTable(data, "load", LOAD)
    mode = t.read("mode")
    trace = parse_trace(t, mode, base_dir)
    search = parse_search(t, rates=mode == "open")
    open_loop = parse_open_loop(t, mode, searching=search is not None)
    levels = t.read("concurrency") if open_loop is None and search is None and trace is None else []
    if not levels and open_loop is None and search is None and trace is None:
        raise ConfigError("load.concurrency", "is empty", "list the levels to sweep, e.g. [1, 2, 4, 8]")
    for i, c in enumerate(levels):
        if not isinstance(c, int) or isinstance(c, bool) or c < 1:
            raise ConfigError(f"load.concurrency[{i}]", f"must be a whole number >= 1, got {c!r}")
    if len(set(levels)) != len(levels) and not ramp_given(t):
        raise ConfigError("load.concurrency", "has a level twice", "use `repeats` to run a level again")
    repeats, workers = t.read("repeats"), t.read("workers_per_target")
    if open_loop is not None and open_loop.max_in_flight < workers:
        raise ConfigError("load.max_in_flight", f"{open_loop.max_in_flight} is below workers_per_target = {workers}",
                          "every worker needs at least one slot: raise max_in_flight")
    schedule, requests = t.read("schedule"), t.read("requests")
    if requests is not None and ("measure_s" in t.data or "warmup_s" in t.data):
        raise ConfigError("load.requests", "fixed-count steps have no timed window",
                          "drop measure_s/warmup_s, or drop requests")
    warmup_requests = t.read("warmup_requests")
    if warmup_requests is not None and (warmup_requests < 0 or requests is None and trace is None):
        raise ConfigError("load.warmup_requests", f"must be a count >= 0 of requests sent before the measured ones, "
                          f"with requests = N or a trace (got {warmup_requests})",
                          "set load.requests, or warm up by time with warmup_s")
    warmup_s = t.read("warmup_s", 0.0 if trace else LOAD["warmup_s"].default)
    if trace is not None:
        check_warmup(trace, warmup_requests, warmup_s if "warmup_s" in t.data else None)
    measure_s = t.read("measure_s")
    ramp = parse_ramp(t, [float(c) for c in levels] or list(open_loop.rates if open_loop else []), measure_s)
    config = LoadConfig(
        requests=requests, mode=mode, concurrency=tuple(levels), repeats=repeats, open_loop=open_loop,
        warmup_s=warmup_s, measure_s=measure_s, drain_timeout_s=t.read("drain_timeout_s"),
        stall_timeout_s=t.read("stall_timeout_s"), request_timeout_s=t.read("request_timeout_s"),
        workers_per_target=workers, schedule=schedule, flush_cache=t.read("flush_cache"),
        error_budget=_error_budget(t), on_worker_death=t.read("on_worker_death"),
        on_server_death=t.read("on_server_death"), server_retry_s=t.read("server_retry_s"),
        min_measured=t.read("min_measured_requests"), max_measure_s=t.read("max_measure_s"),
        realtime_priority=t.read("realtime_priority"), search=search,
        stop_after_slo_failures=t.read("stop_after_slo_failures"), trace=trace, ramp=ramp,
        warmup_requests=warmup_requests, false_verdict=_sequential_key(t, "false_verdict"),
        miss_correlation=_sequential_key(t, "miss_correlation"))
    t.done()
    if config.stop_after_slo_failures is not None and (search or config.stop_after_slo_failures < 1):
        raise ConfigError("load.stop_after_slo_failures", "must be >= 1, and only applies to a grid of levels",
                          "e.g. 2: stop a target once it failed the SLO at two levels in a row")
    if config.max_measure_s and config.max_measure_s < config.measure_s:
        raise ConfigError("load.max_measure_s", f"{config.max_measure_s:g} is below measure_s = {config.measure_s:g}",
                          "the window can only be extended: raise it or leave it out")
    return config


def _sequential_key(t: StrictTable, name: str) -> float | None:
    """A key of the sequential test (window = "sequential"); None for fixed windows, where giving it is an error."""
    if t.read("window") == "fixed":
        if name in t.data:
            raise ConfigError(f"load.{name}", "only applies to sequential windows", 'add window = "sequential"')
        t.used.add(name)
        return None
    return t.read(name)


def _error_budget(t: StrictTable) -> float | None:
    """A whole number is a count of failed requests per step; a fraction below 1 is a share of them."""
    raw = t.data.get("error_budget")
    value = t.read("error_budget")
    if value is None:
        return None
    fix = "a whole number of failed requests per step (e.g. 10), or a share below 1 (e.g. 0.05)"
    if isinstance(raw, int) and value < 0 or isinstance(raw, float) and not 0 < value < 1:
        raise ConfigError("load.error_budget", f"must be {fix}, got {raw!r}", "or leave it out: never stop")
    return value
