"""What crosses Ray between the driver and a load worker: a step's orders and the worker's progress.

Typed, so that both sides name the same fields (the driver decides a step's drain, error budget and lost rows
from `WorkerProgress`); plain frozen dataclasses, because Ray pickles them.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from loadgen.client import arrivals, ramps
from loadgen.results.slo import Slo


@dataclass(frozen=True)
class StepSpec:
    """One worker's orders for one step."""

    run_id: str
    step_id: int
    concurrency: int | None          # this worker's share (closed loop; None in open loop)
    t_start_ns: int
    t_measure_start_ns: int
    t_measure_end_ns: int
    stall_timeout_s: float
    request_timeout_s: float
    sample_server: bool              # this worker also samples the server (one per target)
    max_requests: int | None = None  # fixed-count step: this worker's quota, all in phase 'measure'
    stagger: float = 0.0             # this worker's phase in [0, 1) of the slot start spacing (its index / W)
    arrivals: arrivals.ArrivalSpec | None = None  # open loop: this worker's arrivals and in-flight cap
    realtime_priority: bool = True   # the event-loop thread reads at SCHED_FIFO (see worker._raise_priority)
    t_measure_min_end_ns: int | None = None  # closed loop: the window lasts at least this long, then the
    #                                          driver ends it (close_window); None: t_measure_end_ns
    users: ramps.UserRamp | None = None   # closed-loop ramp: when each of this worker's users runs
    window_starts: tuple[int, ...] = ()   # a ramp's later windows: from each on, rows go under the next step id
    warmup_requests: int = 0         # fixed-count step: this worker's first requests are warm-up (in its quota)
    slo: Slo | None = None           # the run's SLO: the live attainment judges measured requests against it
    prompts: tuple = ()              # (ObjectRef,) of this worker's prompt shard, unresolved inside the tuple:
    #                                  a restarted worker fetches it again (the first fetch is before step 1)

    def step_of(self, t_ns: int) -> int:
        """The step id a request sent, or a frame or sample taken, at `t_ns` is filed under (a ramp's window)."""
        return self.step_id + bisect.bisect_right(self.window_starts, t_ns)


@dataclass(frozen=True)
class SloOutcomes:
    """A worker's answer to a sequential window's poll (LoadWorker.slo_outcomes)."""

    t_ns: int                        # when it answered: every request scheduled before is in one of the two below
    finished: list[tuple[int, str, bool]]   # (t_scheduled_ns, request_id, met the SLO) of finished measured ones
    t_open_ns: int | None            # the earliest t_scheduled_ns of a measured request still in flight


NOT_FAILED = ("ok", "cancelled")     # outcomes that are not failures: a drain's cut requests are by design


@dataclass(frozen=True)
class WorkerProgress:
    """A worker's answer to the driver's poll: enough to decide when the drain is over, whether the error
    budget is spent, and, should the worker die, which requests to record as `lost`; and what the driver shows
    of the step (loadgen.driver.progress: the workers print nothing themselves)."""

    worker: str
    in_flight: int = 0
    measure_open: int = 0            # measured requests still running: the drain waits for these
    sent: int = 0
    quota_done: bool = False         # fixed-count step: this worker sent its quota
    outcomes: dict[str, int] = field(default_factory=dict)   # status -> finished requests
    unsettled: list[dict] = field(default_factory=list)      # rows the sink has not acknowledged
    t_first_measured_ns: int | None = None   # when its first measured request was planned (warm-up's end)
    tokens: int = 0                  # output tokens received in the step so far (finished and in flight)
    early_stop: str | None = None    # the first request the server ended with 'stop' despite ignore_eos, in words
    recent_ttft_ms: tuple[float, ...] = ()   # the last finished ok requests' TTFT (livestats.RECENT at most)
    recent_itl_ms: tuple[float, ...] = ()    # ... and ITL (mean time per output token after the first)
    slo_judged: int = 0              # measured requests finished so far, cut ones aside (the run has an SLO)
    slo_met: int = 0                 # ... of them ok within every line of the SLO

    @property
    def finished(self) -> int:
        return sum(self.outcomes.values())

    @property
    def failed(self) -> int:
        return sum(v for k, v in self.outcomes.items() if k not in NOT_FAILED)
