"""The shipped profiles reproduce the field report (virtual-time run of the real engine: seconds, not minutes).

The HTTP benchmark tests/benchmarks/bench_emulator_calibration.py checks the same against the live server.
"""

from __future__ import annotations

import pytest

from loadgen.emulator.calibration import load_report, spec_for
from loadgen.emulator.simulate import build_engine, closed_loop

REPORT = load_report()
T = REPORT.targets


def sweep(setup: str) -> list:
    return [closed_loop(build_engine(spec_for(setup), seed=1), c, REPORT.prompts, REPORT.max_new_tokens,
                        warmup_s=60, measure_s=1200) for c in T["concurrency"]]


@pytest.fixture(scope="module")
def cells():
    return {"mtp": sweep("mtp"), "dflash2": sweep("dflash2")}


def test_throughput_within_10_percent_per_cell(cells):
    for name in ("mtp", "dflash2"):
        for cell, want in zip(cells[name], T[f"{name}_tok_s"]):
            assert cell.tok_s == pytest.approx(want, rel=0.10), (name, cell.concurrency)


def test_acceptance_within_10_percent(cells):
    # C=2 is left out on purpose: the report's 2.78 / 3.10 contradict its own C=2 throughput (emulator README).
    for name in ("mtp", "dflash2"):
        for cell, want in zip(cells[name], T[f"{name}_accept"]):
            if cell.concurrency != 2:
                assert cell.accept_length == pytest.approx(want, rel=0.10), (name, cell.concurrency)


def test_dflash2_ahead_up_to_8_and_behind_from_16(cells):
    for m, d in zip(cells["mtp"], cells["dflash2"]):
        assert (d.tok_s > m.tok_s) == (m.concurrency <= 8), m.concurrency


def test_dflash2_latency_at_8_in_the_reports_range(cells):
    c8 = cells["dflash2"][3]
    assert c8.concurrency == 8
    assert c8.ttft_ms == pytest.approx(T["dflash2_ttft_ms"]["8"], rel=0.25)
    assert c8.itl_ms == pytest.approx(T["dflash2_itl_ms"]["8"], rel=0.15)


def test_c16_ttft_needs_a_queue_that_the_c32_throughput_rules_out():
    """The known C=16 TTFT miss, pinned (emulator README): the report's 2 s appears once one request is always queued,
    e.g. SGLang's DFlash min-free-slots delay at --max-running-requests 17; that cap then costs C=32 > 10%."""
    capped = {c: closed_loop(build_engine(spec_for("dflash2"), seed=1, max_running=17), c, REPORT.prompts,
                             REPORT.max_new_tokens, warmup_s=60, measure_s=600) for c in (16, 32)}
    assert capped[16].ttft_ms == pytest.approx(T["dflash2_ttft_ms"]["16"], rel=0.25)
    assert capped[32].tok_s < 0.9 * T["dflash2_tok_s"][5]


def test_eagle_budget_8_slower_than_4_on_code_and_prose():
    for kind, prompt in (("code", REPORT.code_prompt), ("prose", REPORT.prose_prompt)):
        rates = {b: closed_loop(build_engine(spec_for(f"eagle-b{b}"), seed=1), 1, [prompt], REPORT.max_new_tokens,
                                warmup_s=30, measure_s=900).tok_s for b in (4, 8)}
        assert rates[8] < rates[4], kind
        assert rates[4] == pytest.approx(T[f"eagle_{kind}_tok_s"]["4"], rel=0.10)
        assert rates[8] == pytest.approx(T[f"eagle_{kind}_tok_s"]["8"], rel=0.10)
