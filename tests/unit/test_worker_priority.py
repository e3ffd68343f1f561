"""The worker's timing on its event loop: the loop thread reads at real-time priority and the threads Ray
demotes are raised, so neither Ray's processes nor a starved GIL holder delay reads on a shared core (see
worker._raise_priority); and a step never starts before its start time."""

from __future__ import annotations

import os
import sys
import threading

import pytest
import uvloop

from loadgen.client.worker import LOOP_RT_PRIORITY, WORKER_NICE, _raise_priority, _sleep_until
from loadgen.clock import now_ns


def _can_use_real_time() -> bool:
    result: list[bool] = []

    def probe() -> None:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(1))
            result.append(True)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    return result[0]


def _priorities_after_raise(realtime: bool) -> dict[str, int]:
    """What _raise_priority leaves: on the calling (loop) thread, a thread it then starts, and a thread
    demoted to nice 15 as Ray does."""
    seen: dict[str, int] = {}
    demoted, finish = threading.Event(), threading.Event()

    def ray_thread() -> None:  # Ray starts a worker's threads at nice 15
        os.setpriority(os.PRIO_PROCESS, 0, 15)
        seen["demoted"] = threading.get_native_id()
        demoted.set()
        finish.wait(10)

    def loop_thread() -> None:
        demoted.wait(10)
        _raise_priority(realtime)
        seen["policy"] = os.sched_getscheduler(0)
        seen["nice"] = os.getpriority(os.PRIO_PROCESS, 0)
        seen["priority"] = os.sched_getparam(0).sched_priority
        child = threading.Thread(target=lambda: seen.update(child=os.sched_getscheduler(0)))
        child.start()
        child.join()
        seen["demoted_nice"] = os.getpriority(os.PRIO_PROCESS, seen["demoted"])

    other = threading.Thread(target=ray_thread)
    other.start()
    loop = threading.Thread(target=loop_thread)
    loop.start()
    loop.join()
    finish.set()
    other.join()
    return seen


needs_real_time = pytest.mark.skipif(not sys.platform.startswith("linux") or not _can_use_real_time(),
                                     reason="needs Linux and CAP_SYS_NICE (root)")


@needs_real_time
def test_loop_thread_is_fifo_its_new_threads_are_normal_and_demoted_threads_are_raised():
    seen = _priorities_after_raise(realtime=True)
    assert seen["policy"] & ~os.SCHED_RESET_ON_FORK == os.SCHED_FIFO and seen["priority"] == LOOP_RT_PRIORITY
    assert seen["policy"] & os.SCHED_RESET_ON_FORK      # so a thread it starts is not real-time by accident
    assert seen["child"] == os.SCHED_OTHER
    assert seen["demoted_nice"] == WORKER_NICE


@needs_real_time
def test_without_realtime_priority_the_loop_thread_stays_normal_at_the_worker_nice():
    """load.realtime_priority = false: for a worker sharing cores with a CPU-bound server."""
    seen = _priorities_after_raise(realtime=False)
    assert seen["policy"] == os.SCHED_OTHER and seen["nice"] == WORKER_NICE
    assert seen["demoted_nice"] == WORKER_NICE


def test_a_step_never_starts_before_its_start_time_on_uvloop():
    """uvloop (Ray's loop for async actors) counts timers in whole milliseconds and wakes early; a step that
    started early sent its first requests as warm-up, and a fixed-count step was then cut at once."""
    async def main() -> int:
        early = 0
        for _ in range(50):
            t = now_ns() + 1_234_567
            await _sleep_until(t)
            early += now_ns() < t
        return early

    assert uvloop.run(main()) == 0
