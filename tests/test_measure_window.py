"""A closed-loop window stays open until C requests were sent in it, and phases follow the window exactly."""

from __future__ import annotations

from pathlib import Path

from loadgen import analysis
from loadgen.config import parse_experiment
from loadgen.runner import run_experiment


def test_window_extends_until_c_requests_were_sent_in_it(ray_local, emulator_factory, tmp_path):
    with emulator_factory("--model-path", "m", "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
                          "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4") as url:
        exp = parse_experiment({
            # requests take ~2-3 s; a 0.5 s window would hold none of them without the extension
            "load": {"concurrency": [3], "warmup_s": 0.3, "measure_s": 0.5, "max_measure_s": 20.0, "drain_timeout_s": 30.0},
            "prompts": {"max_new_tokens": 48, "ignore_eos": True},
            "targets": [{"name": "mtp", "url": url}]}, Path("."))
        outcome = run_experiment(exp, str(tmp_path), log=lambda *a: None)
    assert outcome.status == "complete", outcome.reason
    con = analysis.open_results(outcome.results_dir, [outcome.run_id])
    (ms, me), = con.execute("SELECT t_measure_start_ns, t_measure_end_ns FROM steps").fetchall()
    assert me - ms > 0.5e9
    rows = con.execute("SELECT phase, t_scheduled_ns, status FROM requests").fetchall()
    measured = [r for r in rows if r[0] == "measure"]
    assert len(measured) >= 3 and all(r[2] == "ok" for r in measured)
    for phase, t, _ in rows:
        expected = "warmup" if t < ms else "measure" if t < me else "drain"
        assert phase == expected, (phase, t, ms, me)
    accept = analysis.run_query(con, "acceptance_by_concurrency").to_pylist()
    assert accept[0]["accept_len"] is not None and accept[0]["ok_requests"] >= 3


def test_window_end_is_stamped_after_the_counts_it_was_decided_on(ray_local):
    """A worker that sends a request while the driver reads its count: that request was counted toward C,
    so it must stay measured. (The end used to be stamped before the read: CI once saw 2 of 3 measured.)"""
    import ray

    from loadgen.clock import now_ns
    from loadgen.runner import _close_windows

    @ray.remote
    class SendsWhileCounted:
        """Sends one request each time it is asked for its count, as a busy closed-loop worker may."""
        def __init__(self) -> None:
            self.sent_at: list[int] = []

        def measure_sent_count(self) -> int:
            self.sent_at.append(now_ns())
            return len(self.sent_at)

        def close_window(self, t_end_ns: int) -> None:  # like LoadWorker: later sends belong to the drain
            self.sent_at = [t for t in self.sent_at if t < t_end_ns]

        def measured(self) -> int:
            return len(self.sent_at)

    worker = SendsWhileCounted.remote()
    load = parse_experiment({"load": {"concurrency": [3], "measure_s": 0.1, "max_measure_s": 60.0},
                             "targets": [{"name": "t", "url": "http://127.0.0.1:1"}]}, Path(".")).load
    _close_windows([[worker]], ["t"], now_ns(), load, 3, log=lambda *a: None)
    assert ray.get(worker.measured.remote()) == 3
    assert ray.get(worker.measure_sent_count.remote()) == 4  # the window was closed at its 3rd send, not later
