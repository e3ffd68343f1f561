"""loadgen's NVML reader on a real NVIDIA GPU: idle, then under a bf16 matrix-multiply load (PyTorch), then idle.

    python3 tests/gpu/nvml_check.py [--gpu 0] [--idle-s 5] [--load-s 20]

Reads the GPU ten times a second with loadgen.servers.telemetry.nvml.NvmlReader (the sampler's own reader) and
checks that power and the SM clock rise under load, that the total-energy counter never goes back and matches
the power integrated over time within 5%, and that the clock-event reasons decode (idle when idle). Prints a
table per phase and each check; exit 1 when a check fails. Without an NVIDIA driver it says why and exits 0
(CI has no GPU: tests/unit/test_gpu_telemetry.py's NVML test skips with the same reason).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2]))

from loadgen.servers.telemetry.nvml import NvmlReader  # noqa: E402
from loadgen.servers.telemetry.readings import REASONS, GpuReading, TelemetryUnavailable  # noqa: E402

PERIOD_S = 0.1
ENERGY_TOLERANCE = 0.05


@dataclass
class Phase:
    name: str
    samples: list[tuple[float, GpuReading]] = field(default_factory=list)

    def values(self, attr: str) -> list[float]:
        return [getattr(r, attr) for _, r in self.samples if getattr(r, attr) is not None]


def sample(reader: NvmlReader, phase: Phase, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        phase.samples.append((time.monotonic(), reader.read()[0]))
        time.sleep(PERIOD_S)


def matmul_load(gpu: int, stop: threading.Event) -> None:
    """bf16 8192^3 products back to back on the GPU until stopped (a sync every 100 keeps the queue short)."""
    import torch
    device = torch.device(f"cuda:{gpu}")
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    while not stop.is_set():
        for _ in range(100):
            a @ b
        torch.cuda.synchronize(device)


def integrated_power_j(samples: list[tuple[float, GpuReading]]) -> float:
    """Trapezoids of power over the sample times."""
    pts = [(t, r.power_w) for t, r in samples if r.power_w is not None]
    return sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(pts, pts[1:]))


def row(phase: Phase) -> list[str]:
    def med(attr: str) -> str:
        v = phase.values(attr)
        return f"{statistics.median(v):.0f}" if v else "-"

    def top(attr: str) -> str:
        v = phase.values(attr)
        return f"{max(v):.0f}" if v else "-"
    energy = phase.values("energy_j")
    names = sorted({name for _, r in phase.samples for name in r.clock_reasons or []})
    reasons = [f"{name} {100 * share(phase, name):.0f}%" for name in names]
    return [phase.name, str(len(phase.samples)), med("power_w"), top("power_w"), med("sm_clock_mhz"),
            top("sm_clock_mhz"), top("temperature_c"), med("utilization_pct"),
            f"{energy[-1] - energy[0]:.0f}" if len(energy) > 1 else "-",
            f"{integrated_power_j(phase.samples):.0f}", ", ".join(reasons) or "none"]


def share(phase: Phase, reason: str) -> float:
    """The share of the phase's samples with this clock-event reason."""
    return sum(reason in (r.clock_reasons or []) for _, r in phase.samples) / len(phase.samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--idle-s", type=float, default=5.0)
    parser.add_argument("--load-s", type=float, default=20.0)
    args = parser.parse_args()
    reader = NvmlReader((str(args.gpu),))
    try:
        [gpu] = reader.open()
    except TelemetryUnavailable as exc:
        print(f"skipped: {exc}")
        return 0
    print(f"GPU {gpu.index}: {gpu.name}, UUID {gpu.uuid}, driver {gpu.driver_version}, CUDA {gpu.cuda_version}, "
          f"memory {gpu.memory}, max SM clock {reader.max_clock[gpu.index]:.0f} MHz")
    idle, load, after = Phase("idle"), Phase("load"), Phase("after")
    sample(reader, idle, args.idle_s)
    stop = threading.Event()
    worker = threading.Thread(target=matmul_load, args=(args.gpu, stop), daemon=True)
    worker.start()
    time.sleep(2.0)   # allocation and the first kernels: the load phase is the steady part
    sample(reader, load, args.load_s)
    stop.set()
    worker.join()
    sample(reader, after, args.idle_s)
    reader.close()

    head = ["phase", "samples", "power p50 W", "power max W", "SM p50 MHz", "SM max MHz", "temp max C",
            "util p50 %", "energy counter J", "power x time J", "clock-event reasons (share of samples)"]
    table = [head] + [row(p) for p in (idle, load, after)]
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    for r in table:
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))
    last = load.samples[-1][1]
    print(f"violation counters at the end of the load: power {last.power_violation_s}, "
          f"thermal {last.thermal_violation_s} s; reasons mask then {last.clock_reasons_mask} = {last.clock_reasons}")

    everything = idle.samples + load.samples + after.samples
    energy = [r.energy_j for _, r in everything]
    counted = energy[-1] - energy[0]
    integrated = integrated_power_j(everything)
    checks = [
        ("power rises under load", statistics.median(load.values("power_w")) > 1.5 * statistics.median(
            idle.values("power_w"))),
        ("SM clock rises under load", statistics.median(load.values("sm_clock_mhz")) > statistics.median(
            idle.values("sm_clock_mhz"))),
        ("energy counter never goes back", all(b >= a for a, b in zip(energy, energy[1:]))),
        (f"energy counter {counted:.0f} J = power x time {integrated:.0f} J within 5% "
         f"({100 * (counted / integrated - 1):+.1f}%)", abs(counted / integrated - 1) <= ENERGY_TOLERANCE),
        ("reasons decode: every bit set has its name", all(
            sum(bit for bit, name in REASONS.items() if name in (r.clock_reasons or [])) == r.clock_reasons_mask
            for _, r in everything)),
        ("reasons decode: idle in 90%+ of the idle samples", share(idle, "idle") >= 0.9),
        ("reasons decode: idle in under half as many loaded samples", share(load, "idle") < share(idle, "idle") / 2),
    ]
    for text, ok in checks:
        print(f"{'ok  ' if ok else 'FAIL'} {text}")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
