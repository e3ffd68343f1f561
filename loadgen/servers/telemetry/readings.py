"""One GPU at one instant, and what does not change while it runs (its identity), whatever the source: the columns
of `gpu_samples` (loadgen/results/schema.py) and of `steps.hardware`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

# NVML's clocks-event (formerly "throttle") reasons bitmask (nvmlClocksEventReason*), which DCGM exports as
# DCGM_FI_DEV_CLOCKS_EVENT_REASONS (DCGM_FI_DEV_CLOCK_THROTTLE_REASONS before DCGM 3.3)
REASONS = {
    0x1: "idle",
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
}


def decode_reasons(mask: int | None) -> list[str] | None:
    """The names of the bits set, in bit order; None when the source did not say."""
    if mask is None:
        return None
    return [name for bit, name in REASONS.items() if mask & bit]


class TelemetryUnavailable(Exception):
    """The chosen source cannot be read (no NVML library or GPU, an exporter that does not answer): said in one
    line at start-up; nothing else fails."""


@dataclass(frozen=True)
class GpuIdentity:
    """What a run records once per GPU: the model, its UUID, the driver and CUDA version, the kind of memory."""

    index: str                     # NVML's index (nvidia-smi's order) or the exporter's `gpu` label
    uuid: str | None
    name: str | None
    driver_version: str | None
    cuda_version: str | None       # NVML's CUDA driver version; a DCGM exporter does not report it (None)
    memory: str | None             # device | unified (NVML answers Not Supported for memory: GB10)


@dataclass
class GpuReading:
    """One GPU at one instant; a field the source does not support is None."""

    gpu: str
    gpu_uuid: str | None = None
    power_w: float | None = None
    energy_j: float | None = None           # total-energy counter (since driver load / boot): differences only
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    temperature_c: float | None = None
    utilization_pct: float | None = None
    memory_used_gb: float | None = None
    memory_source: str | None = None        # device | meminfo (unified memory: MemTotal - MemAvailable)
    clock_reasons_mask: int | None = None
    clock_reasons: list[str] | None = field(default=None)
    power_violation_s: float | None = None  # cumulative time the power limit held the clocks down
    thermal_violation_s: float | None = None

    def __post_init__(self) -> None:
        if self.clock_reasons is None:
            self.clock_reasons = decode_reasons(self.clock_reasons_mask)

    def row(self) -> dict:
        return asdict(self)
