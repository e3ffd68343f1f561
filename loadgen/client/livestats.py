"""A load worker's live latency figures, for the driver's live metrics (loadgen.driver.livemetrics): the TTFT and
ITL of its last RECENT finished requests and its step's SLO attainment so far. A finished request is only queued
here (one append); the figures are worked out when the driver polls (`LoadWorker.progress`), off the request path.
"""

from __future__ import annotations

from collections import deque

from loadgen.client.protocol.base import StreamState
from loadgen.results.slo import Slo

RECENT = 256   # requests per worker behind the recent TTFT / ITL quantiles


class LiveStats:
    """One worker's figures for the running step."""

    def __init__(self) -> None:
        self.begin(None)

    def begin(self, slo: Slo | None) -> None:
        """A step starts: nothing seen yet; its requests are judged against `slo` (None: not judged)."""
        self.slo = slo
        self.queued: list[StreamState] = []
        self.ttft_ms: deque[float] = deque(maxlen=RECENT)
        self.itl_ms: deque[float] = deque(maxlen=RECENT)
        self.judged = 0     # measured requests finished (any status): attainment's denominator, as step_slo's
        self.met = 0        # ... of them ok and within every line of the SLO
        self.outcomes: list[tuple[int, str, bool]] = []   # (t_scheduled_ns, request_id, met) of measured requests

    def add(self, state: StreamState) -> None:
        self.queued.append(state)

    def fold(self) -> None:
        """Take in the requests finished since the last fold."""
        queued, self.queued = self.queued, []
        for s in queued:
            ttft_ms = itl_ms = None
            if s.status == "ok" and s.t_first_token_ns is not None and s.t_sent_ns is not None:
                ttft_ms = (s.t_first_token_ns - s.t_sent_ns) / 1e6
                self.ttft_ms.append(ttft_ms)
                if (s.completion_tokens or 0) >= 2 and s.t_last_token_ns is not None:
                    # a request's ITL: its mean time per output token after the first (views.sql tpot_ms)
                    itl_ms = (s.t_last_token_ns - s.t_first_token_ns) / 1e6 / ((s.completion_tokens or 2) - 1)
                    self.itl_ms.append(itl_ms)
            if self.slo is None or s.phase != "measure":
                continue
            e2e_s = None if s.t_done_ns is None or s.t_sent_ns is None else (s.t_done_ns - s.t_sent_ns) / 1e9
            met = s.status == "ok" and self.slo.met(ttft_ms, itl_ms, e2e_s)
            self.outcomes.append((s.t_scheduled_ns, s.request_id, met))   # a cut one missed, as step_slo says
            if s.status != "cancelled":
                self.judged += 1
                self.met += met
