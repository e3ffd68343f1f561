"""How steady this machine's CPU is: the floor under any client's timing error here.

    taskset -c 1 python tests/benchmarks/bench_cpu_jitter.py [seconds]     # default 5

Repeats one fixed chunk of pure-Python work (~10 us) and records each chunk's wall and thread-CPU time. On
bare metal the two stay close to the median. On a VM whose host is busy some chunks take several times
longer, and the guest counts that as CPU time, so no profiler inside sees it as preemption. A 256 x 5 ms
client reads ~250 sockets per poll (~1.5-2.5 ms of work); when the CPU slows 3-5x for a few ms, a poll runs
past the 5 ms frame gap and frames coalesce, whatever the client's code. `bench_client.sh` prints this next
to its results.
"""

from __future__ import annotations

import sys
import time


def chunk() -> int:
    total = 0
    for i in range(300):
        total += i * i
    return total


def main(seconds: float) -> None:
    walls, cpus = [], []
    end = time.perf_counter_ns() + int(seconds * 1e9)
    while True:
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        chunk()
        t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
        walls.append(t1 - t0)
        cpus.append(c1 - c0)
        if t1 > end:
            break
    n = len(walls)
    median_cpu = sorted(cpus)[n // 2]
    slow = sum(1 for c in cpus if c > 5 * median_cpu)

    def quantiles(values: list[int]) -> str:
        values = sorted(values)
        return (f"p50 {values[n // 2] / 1e3:.1f}  p99 {values[int(n * 0.99)] / 1e3:.1f}  "
                f"p99.9 {values[int(n * 0.999)] / 1e3:.1f}  max {values[-1] / 1e3:.0f} us")

    print(f"cpu jitter, {n} chunks over {seconds:g} s")
    print(f"  wall: {quantiles(walls)}")
    print(f"  cpu:  {quantiles(cpus)}")
    print(f"  chunks over 5x the median CPU time: {slow} ({slow / n * 100:.2f}%)")


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 5.0)
