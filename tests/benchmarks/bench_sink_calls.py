"""CPU a worker's flush costs Ray, carried inline vs through the object store, in one local cluster.

    python tests/benchmarks/bench_sink_calls.py [BYTES]

Two sender actors call one receiver every 0.1 s (a worker's flush period) with a BYTES-sized Arrow batch
(default 368,000: a 5,000-row frames flush, i.e. 50k frames/s). One sender has Ray's default
max_direct_call_object_size (100 KiB: the batch goes through the object store), the other
ray_setup.INLINE_ARGUMENT_BYTES (the batch travels inside the call). Each is measured 4 x 5 s, interleaved
with idle windows; CPU is summed over every process of the cluster. Prints cores and ms per call beyond idle.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import psutil
import pyarrow as pa
import ray

from loadgen.driver.ray_setup import INLINE_ARGUMENT_BYTES

WINDOW_S = 5.0
PERIOD_S = 0.1
ROUNDS = 4


@ray.remote(num_cpus=0)
class Receiver:
    def write(self, batch: pa.RecordBatch) -> int:
        return batch.num_rows


@ray.remote(num_cpus=0)
class Sender:
    def __init__(self, receiver) -> None:
        self.receiver = receiver

    def run(self, nbytes: int, seconds: float) -> int:
        """Send a batch every PERIOD_S for `seconds` (none when nbytes is 0); returns the calls made."""
        batch = pa.RecordBatch.from_arrays([pa.array(range(max(nbytes // 8, 1)), type=pa.int64())], names=["x"])
        refs, t_end = [], time.monotonic() + seconds
        while time.monotonic() < t_end:
            if nbytes:
                refs.append(self.receiver.write.remote(batch))
            time.sleep(PERIOD_S)
        ray.get(refs)
        return len(refs)


def cluster_cpu_s(processes: list[psutil.Process]) -> float:
    total = 0.0
    for p in processes:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def main(nbytes: int) -> None:
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    receiver = Receiver.remote()
    inline_env = {"env_vars": {"RAY_max_direct_call_object_size": str(INLINE_ARGUMENT_BYTES)}}
    senders = {"object store": Sender.remote(receiver),
               "inline": Sender.options(runtime_env=inline_env).remote(receiver)}
    for s in senders.values():
        ray.get(s.run.remote(nbytes, 0.5))  # warm: processes up, first calls done
    me = psutil.Process()
    processes = [p for p in psutil.process_iter(["name", "cmdline"]) if p.pid == me.pid
                 or p.info["name"].startswith(("ray", "raylet", "gcs_server"))
                 or "ray" in " ".join(p.info["cmdline"] or [])[:300]]
    cores: dict[str, list[float]] = {"idle": [], **{k: [] for k in senders}}
    calls: dict[str, int] = {}
    for _ in range(ROUNDS):
        for mode in cores:
            sender, size = (senders["inline"], 0) if mode == "idle" else (senders[mode], nbytes)
            c0 = cluster_cpu_s(processes)
            calls[mode] = ray.get(sender.run.remote(size, WINDOW_S))
            cores[mode].append((cluster_cpu_s(processes) - c0) / WINDOW_S)
    ray.shutdown()
    idle = statistics.median(cores["idle"])
    print(f"batch {nbytes:,} bytes every {PERIOD_S} s; whole cluster, {ROUNDS} x {WINDOW_S:g} s each")
    for mode, values in cores.items():
        extra = "" if mode == "idle" else \
            f"; {(statistics.median(values) - idle) / (calls[mode] / WINDOW_S) * 1e3:.2f} ms CPU per call beyond idle"
        listed = " ".join(f"{v:.3f}" for v in values)
        print(f"  {mode:13s} cores {listed}  median {statistics.median(values):.3f}{extra}")
    print(f"ratio inline / object store, CPU beyond idle: "
          f"{(statistics.median(cores['inline']) - idle) / (statistics.median(cores['object store']) - idle):.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 368_000)
