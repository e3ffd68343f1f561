"""The modelled GPU's telemetry: power, SM clock, temperature, utilisation, an energy counter and the clock-event
reasons, from the cost model's own roofline utilisation, served as a DCGM exporter's /metrics text
(`GET /emulator/dcgm/metrics`), so loadgen's sampler reads an emulated node through the same code as a real one.

Each forward draws idle + (max - idle) x (memory share x power_memory_weight + compute share x
power_compute_weight) watts, where the shares are the fractions of the forward's modelled time its memory and
compute roofs take (costmodel.Forward); between forwards the GPU idles. The energy counter integrates that power
over modelled time (wall seconds x --time-scale), so tokens per joule is the modelled GPU's at any time scale.

`--fault degraded-power` is the DGX Spark trap (a box stuck in a low-power state after a degraded USB-PD
negotiation): the SM clock and the speed are divided by --degraded-power-factor, the power is capped at
max / factor, and the clock-event reasons say software power cap while it works.
"""

from __future__ import annotations

import math
import socket
import time
import uuid
from collections import deque
from collections.abc import Sequence

from loadgen.emulator.costmodel import Forward
from loadgen.emulator.profiles import HardwareProfile

# NVML's clocks-event reason bits (nvmlClocksEventReason*), as DCGM_FI_DEV_CLOCKS_EVENT_REASONS carries them
GPU_IDLE = 0x1
SW_POWER_CAP = 0x4

UTIL_WINDOW_S = 1.0   # power and utilisation are over the last second of reads, as NVML's


class GpuModel:
    """Power, clock and energy of one emulated GPU; `on_forward` from the engine, `render` for the exporter."""

    def __init__(self, hw: HardwareProfile, time_scale: float, degraded_factor: float = 1.0,
                 driver_version: str = "") -> None:
        self.hw = hw
        self.time_scale = time_scale
        self.factor = degraded_factor
        self.driver_version = driver_version
        self.uuid = f"GPU-{uuid.uuid4()}"
        self.hostname = socket.gethostname()
        now = time.perf_counter()
        self.t_last = now
        self.busy_until = now
        self.p_busy = hw.idle_power_w
        self.energy_j = 0.0            # modelled joules since start
        self.busy_s = 0.0              # wall seconds spent in forwards
        self.power_violation_s = 0.0   # seconds the power cap held the clock down
        self.temperature_c = hw.ambient_c + hw.degrees_per_w * hw.idle_power_w
        self._marks: deque[tuple[float, float, float]] = deque()   # (time, busy_s, energy_j) of recent reads

    @property
    def degraded(self) -> bool:
        return self.factor > 1.0

    def forward_power(self, f: Forward) -> float:
        """Watts drawn while this forward runs."""
        hw = self.hw
        if f.modelled_s <= 0:
            return hw.idle_power_w
        load = min(1.0, (f.memory_s * hw.power_memory_weight + f.compute_s * hw.power_compute_weight) / f.modelled_s)
        power = hw.idle_power_w + (hw.max_power_w - hw.idle_power_w) * load
        return min(power, hw.max_power_w / self.factor) if self.degraded else power

    def on_forward(self, f: Forward) -> None:
        """The engine starts a forward now that takes f.seconds of wall time."""
        now = time.perf_counter()
        self._advance(now)
        self.busy_until = now + f.seconds
        self.p_busy = self.forward_power(f)

    def _advance(self, now: float) -> None:
        """Account energy, busy time and temperature from the last event up to now."""
        busy = max(0.0, min(now, self.busy_until) - self.t_last)
        idle = max(0.0, now - self.t_last - busy)
        scale = self.time_scale
        joules = (busy * self.p_busy + idle * self.hw.idle_power_w) * scale
        self.energy_j += joules
        self.busy_s += busy
        if self.degraded:   # wall time, as the windows it is a share of (only energy counts modelled time)
            self.power_violation_s += busy
        dt = (now - self.t_last) * scale
        if dt > 0:
            mean_w = joules / dt
            steady = self.hw.ambient_c + self.hw.degrees_per_w * mean_w
            self.temperature_c += (steady - self.temperature_c) * (1 - math.exp(-dt / self.hw.thermal_tau_s))
        self.t_last = max(self.t_last, now)

    def reading(self) -> dict[str, float]:
        """The GPU's state now, in the exporter's units. Like NVML's, power and utilisation are over the last
        second, and the GPU counts as working (full clock, no idle reason) when it ran in that second, so that a
        reading between two forwards, or on a busy host that delays the engine, does not see an idle GPU."""
        now = time.perf_counter()
        self._advance(now)
        hw = self.hw
        marks = self._marks
        marks.append((now, self.busy_s, self.energy_j))
        while len(marks) > 2 and now - marks[1][0] >= UTIL_WINDOW_S:
            marks.popleft()
        t0, busy0, energy0 = marks[0]
        span = now - t0
        util = (self.busy_s - busy0) / span if span > 0 else 0.0
        busy = now < self.busy_until or util > 0
        power = (self.energy_j - energy0) / (span * self.time_scale) if span > 0 else (
            self.p_busy if busy else hw.idle_power_w)
        reasons = (SW_POWER_CAP if self.degraded else 0) if busy else GPU_IDLE
        return {
            "DCGM_FI_DEV_SM_CLOCK": round(hw.sm_clock_max_mhz / self.factor if busy else hw.sm_clock_idle_mhz),
            "DCGM_FI_DEV_MAX_SM_CLOCK": hw.sm_clock_max_mhz,
            "DCGM_FI_DEV_POWER_USAGE": round(power, 3),
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": round(self.energy_j * 1000),   # mJ, as DCGM counts it
            "DCGM_FI_DEV_GPU_TEMP": round(self.temperature_c),
            "DCGM_FI_DEV_GPU_UTIL": round(100 * min(1.0, util)),
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": reasons,
            "DCGM_FI_DEV_POWER_VIOLATION": round(self.power_violation_s * 1e6),    # us, as DCGM counts it
            "DCGM_FI_DEV_THERMAL_VIOLATION": 0,
        }

    def render(self) -> str:
        """The reading as dcgm-exporter's text: HELP/TYPE lines, one sample per field, its usual labels."""
        labels = (f'gpu="0",UUID="{self.uuid}",pci_bus_id="00000000:01:00.0",device="nvidia0",'
                  f'modelName="{self.hw.gpu_name}",Hostname="{self.hostname}",'
                  f'DCGM_FI_DRIVER_VERSION="{self.driver_version}"')
        lines = []
        for name, value in self.reading().items():
            kind, help_text = _FIELDS[name]
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name}{{{labels}}} {value}"]
        return "\n".join(lines) + "\n"


def counters_at(gpu: GpuModel, forwards: Sequence[tuple[float, Forward]], times: Sequence[float]
                ) -> list[tuple[float, float]]:
    """(energy_j, busy_s) the GPU's counters reach at each of `times` (virtual seconds, ascending) of a simulated
    level that starts at 0: idle power throughout, and each forward's power above idle while it runs (forwards in
    order, one at a time); joules in the modelled hardware's time (virtual seconds x time_scale)."""
    idle_w = gpu.hw.idle_power_w
    out, extra_j, busy_s, i = [], 0.0, 0.0, 0
    for t in times:
        while i < len(forwards) and forwards[i][0] + forwards[i][1].seconds <= t:
            f = forwards[i][1]
            extra_j += (gpu.forward_power(f) - idle_w) * f.seconds
            busy_s += f.seconds
            i += 1
        running = max(0.0, t - forwards[i][0]) if i < len(forwards) else 0.0   # the forward under way at t
        part_j = (gpu.forward_power(forwards[i][1]) - idle_w) * running if running else 0.0
        out.append(((idle_w * t + extra_j + part_j) * gpu.time_scale, busy_s + running))
    return out


def window_joules(gpu: GpuModel, forwards: Sequence[tuple[float, Forward]], t0: float, t1: float) -> float:
    """The GPU's joules over [t0, t1) of a simulated level: its energy counter's rise (counters_at)."""
    (e0, _), (e1, _) = counters_at(gpu, forwards, [t0, t1])
    return e1 - e0


_FIELDS = {   # dcgm-exporter's metric type and help text (etc/default-counters.csv)
    "DCGM_FI_DEV_SM_CLOCK": ("gauge", "SM clock frequency (in MHz)."),
    "DCGM_FI_DEV_MAX_SM_CLOCK": ("gauge", "Maximum supported SM clock for the device (in MHz)."),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W)."),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("counter", "Total energy consumption since boot (in mJ)."),
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", "GPU temperature (in C)."),
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %)."),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("gauge", "Current clock event reasons (bitmask)."),
    "DCGM_FI_DEV_POWER_VIOLATION": ("counter", "Throttling duration due to power constraints (in us)."),
    "DCGM_FI_DEV_THERMAL_VIOLATION": ("counter", "Throttling duration due to thermal constraints (in us)."),
}
