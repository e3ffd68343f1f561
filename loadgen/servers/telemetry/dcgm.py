"""GPUs behind a DCGM exporter's /metrics (NVIDIA dcgm-exporter, or the emulator's GET /emulator/dcgm/metrics),
parsed with prometheus_client's parser (probe.parse_prometheus) and mapped to the same columns as NVML's.

dcgm-exporter labels every sample with the GPU's `gpu` index, `UUID`, `modelName`, `Hostname` and
`DCGM_FI_DRIVER_VERSION`; it reports no CUDA version. Its default collect interval is 30 s: run it with
`-c 1000` so that a 1 Hz sampler sees fresh values (docs/telemetry.md).
"""

from __future__ import annotations

import aiohttp

from loadgen.servers.probe import parse_prometheus
from loadgen.servers.telemetry.readings import GpuIdentity, GpuReading, TelemetryUnavailable

_TIMEOUT = aiohttp.ClientTimeout(total=5)

# DCGM field -> (GpuReading field, factor to its unit). Counters may come with prometheus_client's `_total`.
FIELDS = {
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),                        # W
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_j", 1e-3),         # mJ
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),                      # MHz
    "DCGM_FI_DEV_MAX_SM_CLOCK": ("sm_clock_max_mhz", 1.0),              # MHz
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", 1.0),                     # C
    "DCGM_FI_DEV_GPU_UTIL": ("utilization_pct", 1.0),                   # %
    "DCGM_FI_DEV_FB_USED": ("memory_used_gb", 1048576 / 1e9),           # MiB
    "DCGM_FI_DEV_POWER_VIOLATION": ("power_violation_s", 1e-6),         # us
    "DCGM_FI_DEV_THERMAL_VIOLATION": ("thermal_violation_s", 1e-6),     # us
}
REASON_FIELDS = ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")   # new name, old name


def parse(text: str, devices: tuple[str, ...] | None = None) -> tuple[list[GpuIdentity], list[GpuReading]]:
    """An exporter's page -> each GPU's identity and reading, for the GPUs named by `devices` (gpu index or
    UUID; None: every GPU on the page)."""
    by_gpu: dict[str, dict] = {}
    labels_of: dict[str, dict] = {}
    for name, value, labels in parse_prometheus(text):
        gpu = labels.get("gpu")
        if gpu is None or devices is not None and gpu not in devices and labels.get("UUID") not in devices:
            continue
        base = name.removesuffix("_total")
        fields = by_gpu.setdefault(gpu, {})
        labels_of.setdefault(gpu, labels)
        if base in FIELDS:
            column, factor = FIELDS[base]
            fields[column] = value * factor
        elif base in REASON_FIELDS:
            fields["clock_reasons_mask"] = int(value)
    gpus = sorted(by_gpu, key=lambda g: (len(g), g))
    identities = [GpuIdentity(g, labels_of[g].get("UUID"), labels_of[g].get("modelName"),
                              labels_of[g].get("DCGM_FI_DRIVER_VERSION"), None,
                              "device" if "memory_used_gb" in by_gpu[g] else None) for g in gpus]
    readings = [GpuReading(gpu=g, gpu_uuid=labels_of[g].get("UUID"),
                           memory_source="device" if "memory_used_gb" in by_gpu[g] else None, **by_gpu[g])
                for g in gpus]
    return identities, readings


class DcgmReader:
    """One exporter's GPUs; `read` is a GET of its page."""

    source = "dcgm"

    def __init__(self, url: str, devices: tuple[str, ...] | None) -> None:
        self.url = url
        self.devices = devices
        self.session: aiohttp.ClientSession | None = None

    async def _page(self) -> str:
        if self.session is None:
            self.session = aiohttp.ClientSession(timeout=_TIMEOUT)
        async with self.session.get(self.url) as resp:
            if resp.status != 200:
                raise TelemetryUnavailable(f"DCGM exporter {self.url} answered HTTP {resp.status}")
            return await resp.text()

    async def open(self) -> list[GpuIdentity]:
        """The GPUs on the page; TelemetryUnavailable when the exporter does not answer or shows none of them."""
        try:
            identities, _ = parse(await self._page(), self.devices)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise TelemetryUnavailable(f"DCGM exporter {self.url} does not answer ({exc.__class__.__name__}: "
                                       f"{exc})") from None
        if not identities:
            which = f" among GPUs {', '.join(self.devices)}" if self.devices else ""
            raise TelemetryUnavailable(f"DCGM exporter {self.url} shows no GPU{which} (no DCGM_FI_DEV_* sample "
                                       "with a gpu label)")
        return identities

    async def read(self) -> list[GpuReading]:
        return parse(await self._page(), self.devices)[1]

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None
