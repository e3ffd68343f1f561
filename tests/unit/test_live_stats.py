"""A worker's live figures (loadgen.client.livestats) from requests whose times are set by hand: the SLO attainment
counts as views.sql `step_slo` does (measured requests, failures against it, cut ones aside, every line), the TTFT
and ITL are each request's own, and only the last RECENT are kept."""

from __future__ import annotations

import pytest

from loadgen.client.livestats import RECENT, LiveStats
from loadgen.client.protocol.base import FrameBuffer, StreamState
from loadgen.driver.livemetrics import quantile
from loadgen.prompts import Prompt
from loadgen.results.slo import Slo

MS = 1_000_000


def _state(ttft_ms: float, tokens: int, itl_ms: float, status: str = "ok", phase: str = "measure") -> StreamState:
    s = StreamState("r", Prompt("p", "prose", "t", text="x"), phase, 0, FrameBuffer())
    s.t_sent_ns = 10 * MS
    s.t_first_token_ns = s.t_sent_ns + int(ttft_ms * MS)
    s.t_last_token_ns = s.t_first_token_ns + int(itl_ms * MS) * (tokens - 1)
    s.t_done_ns = s.t_last_token_ns + MS
    s.completion_tokens, s.status = tokens, status
    return s


def test_slo_attainment_counts_as_step_slo_does():
    live = LiveStats()
    live.begin(Slo(ttft_ms=200, tpot_ms=50))
    for s in (_state(100, 10, 40),                       # met
              _state(300, 10, 40),                       # TTFT over its line
              _state(100, 10, 60),                       # ITL over the TPOT line
              _state(100, 1, 500),                       # one token: no ITL, so the TPOT line is met
              _state(100, 10, 40, status="timeout"),     # a failure counts against
              _state(100, 10, 40, status="cancelled"),   # cut at the step's end: not judged
              _state(900, 10, 40, phase="warmup")):      # not measured: not judged
        live.add(s)
    assert (live.judged, live.met) == (0, 0)             # nothing is worked out until the driver polls
    live.fold()
    assert (live.judged, live.met) == (5, 2)
    assert list(live.ttft_ms) == [100, 300, 100, 100, 900]   # every ok request's, warm-up too (recent latency)
    assert list(live.itl_ms) == pytest.approx([40, 40, 60, 40])
    live.begin(None)
    live.add(_state(100, 10, 40))
    live.fold()
    assert (live.judged, live.met, list(live.ttft_ms)) == (0, 0, [100])   # no SLO: nothing judged


def test_only_the_last_requests_make_the_recent_quantiles():
    live = LiveStats()
    live.begin(None)
    for i in range(RECENT + 100):
        live.add(_state(float(i), 2, 1.0))
    live.fold()
    assert list(live.ttft_ms) == [float(i) for i in range(100, RECENT + 100)]
    values = sorted(live.ttft_ms)
    assert quantile(values, 0.5) == pytest.approx(100 + (RECENT - 1) / 2, abs=0.5)
    assert quantile(values, 0.99) == pytest.approx(100 + 0.99 * (RECENT - 1), abs=0.5)
    assert quantile([7.0], 0.9) == 7.0
