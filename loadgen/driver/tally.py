"""One target's requests so far in a step, summed over its workers' polled progress: what the progress line
(loadgen.driver.progress) shows and the live metrics (loadgen.driver.livemetrics) export."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from loadgen.client.messages import NOT_FAILED, WorkerProgress


@dataclass
class Tally:
    """One target's requests so far in a step, summed over its workers."""

    target: str
    done: int = 0
    in_flight: int = 0
    failed: int = 0
    tokens: int = 0
    ttft_ms: list[float] = field(default_factory=list)   # the workers' recent ok requests (live metrics)
    itl_ms: list[float] = field(default_factory=list)
    slo_judged: int = 0
    slo_met: int = 0

    def text(self, seconds: float) -> str:
        failed = f", {self.failed} failed" if self.failed else ""
        return (f"{self.target} {self.done} done, {self.in_flight} in flight{failed}, "
                f"{self.tokens / max(seconds, 1e-9):.0f} tok/s")


def target_of(worker: str) -> str:
    """The target a worker serves: workers are named `<target>.w<i>`."""
    return worker.rsplit(".w", 1)[0]


def tallies(targets: list[str], seen: Iterable[WorkerProgress]) -> list[Tally]:
    by_target = {t: Tally(t) for t in targets}
    for p in seen:
        tally = by_target.get(target_of(p.worker))
        if tally is not None:
            tally.done += p.finished
            tally.in_flight += p.in_flight
            tally.failed += sum(v for k, v in p.outcomes.items() if k not in NOT_FAILED)
            tally.tokens += p.tokens
            tally.ttft_ms += p.recent_ttft_ms
            tally.itl_ms += p.recent_itl_ms
            tally.slo_judged += p.slo_judged
            tally.slo_met += p.slo_met
    return list(by_target.values())
