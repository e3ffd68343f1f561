"""Where a target's GPU is read: NVML on the node the sampler runs on, or a DCGM exporter's /metrics."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TelemetrySource:
    kind: str                                 # nvml | dcgm
    url: str | None = None                    # dcgm: the exporter's /metrics
    devices: tuple[str, ...] | None = None    # the GPUs (index or UUID); None: every GPU the source shows

    def describe(self) -> str:
        gpus = f"GPU {', '.join(self.devices)}" if self.devices else "every GPU"
        return f"{gpus} through NVML" if self.kind == "nvml" else f"{gpus} of the DCGM exporter {self.url}"


def visible_devices(value: str | None) -> tuple[str, ...] | None:
    """CUDA_VISIBLE_DEVICES as the GPUs a server uses; unset or empty: None (every GPU of the node)."""
    if not value:
        return None
    return tuple(d.strip() for d in value.split(",") if d.strip()) or None
