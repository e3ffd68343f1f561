"""GPUs of this node through NVML (`nvidia-ml-py`, imported as pynvml): the reader a fleet node's sampler uses.

Each field is read on its own: one the GPU or driver does not support (NVML's Not Supported, or a function the
driver lacks) stays None and the rest are read. GB10's unified memory is Not Supported for the device's memory,
so its used memory comes from /proc/meminfo (meminfo.py) and the reading says so (memory_source 'meminfo').
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pynvml

from loadgen.servers.telemetry import meminfo
from loadgen.servers.telemetry.readings import GpuIdentity, GpuReading, TelemetryUnavailable

T = TypeVar("T")


def _text(value: str | bytes) -> str:
    """pynvml returns str (bytes before 11.5)."""
    return value.decode() if isinstance(value, bytes) else value


def _optional(read: Callable[[], T]) -> T | None:
    """A field the GPU or its driver does not support is None, not an error."""
    try:
        return read()
    except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound, pynvml.NVMLError_NoPermission):
        return None


def _reasons(handle: Any) -> int:
    """The clocks-event reasons (NVML 12.535 renamed them from 'throttle' reasons; the old call remains)."""
    read = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    return int(read(handle))


def _cuda_version() -> str | None:
    """The CUDA version the driver supports, e.g. 12080 -> '12.8'."""
    version = _optional(pynvml.nvmlSystemGetCudaDriverVersion_v2)
    return None if version is None else f"{version // 1000}.{version % 1000 // 10}"


class NvmlReader:
    """The GPUs named by `devices` (NVML indices or UUIDs, as CUDA_VISIBLE_DEVICES gives them; None: every GPU
    of the node)."""

    source = "nvml"

    def __init__(self, devices: tuple[str, ...] | None) -> None:
        self.devices = devices
        self.handles: list[tuple[str, str | None, Any]] = []   # (index, uuid, handle)
        self.max_clock: dict[str, float | None] = {}
        self.unified: set[str] = set()
        self.started = False

    def open(self) -> list[GpuIdentity]:
        """Initialise NVML and find the GPUs; TelemetryUnavailable (one line) when NVML or a GPU is missing."""
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise TelemetryUnavailable(f"NVML cannot start here ({exc}): no NVIDIA driver or GPU on this node") \
                from None
        self.started = True
        try:
            count = pynvml.nvmlDeviceGetCount()
            wanted = self.devices if self.devices is not None else tuple(str(i) for i in range(count))
            identities = [self._find(device, count) for device in wanted]
        except pynvml.NVMLError as exc:
            raise TelemetryUnavailable(f"NVML: {exc}") from None
        if not identities:
            raise TelemetryUnavailable("NVML sees no GPU on this node")
        return identities

    def _find(self, device: str, count: int) -> GpuIdentity:
        if device.startswith(("GPU-", "MIG-")):
            handle = pynvml.nvmlDeviceGetHandleByUUID(device)
        elif device.isdigit() and int(device) < count:
            handle = pynvml.nvmlDeviceGetHandleByIndex(int(device))
        else:
            raise TelemetryUnavailable(f"NVML has no GPU {device!r} (this node has {count}: indices 0-{count - 1})")
        index = str(pynvml.nvmlDeviceGetIndex(handle))
        uuid = _optional(lambda: _text(pynvml.nvmlDeviceGetUUID(handle)))
        self.handles.append((index, uuid, handle))
        self.max_clock[index] = _optional(lambda: float(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)))
        if _optional(lambda: pynvml.nvmlDeviceGetMemoryInfo(handle)) is None:
            self.unified.add(index)
        return GpuIdentity(index, uuid, _optional(lambda: _text(pynvml.nvmlDeviceGetName(handle))),
                           _optional(lambda: _text(pynvml.nvmlSystemGetDriverVersion())), _cuda_version(),
                           "unified" if index in self.unified else "device")

    def read(self) -> list[GpuReading]:
        return [self._read(index, uuid, handle) for index, uuid, handle in self.handles]

    def _read(self, index: str, uuid: str | None, h: Any) -> GpuReading:
        power_mw = _optional(lambda: pynvml.nvmlDeviceGetPowerUsage(h))
        energy_mj = _optional(lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(h))
        memory_source: str | None
        if index in self.unified:
            memory, memory_source = meminfo.used_gb(), "meminfo"
        else:
            info = _optional(lambda: pynvml.nvmlDeviceGetMemoryInfo(h))
            memory, memory_source = (None, None) if info is None else (info.used / 1e9, "device")
        power_ns = _optional(lambda: pynvml.nvmlDeviceGetViolationStatus(h, pynvml.NVML_PERF_POLICY_POWER))
        thermal_ns = _optional(lambda: pynvml.nvmlDeviceGetViolationStatus(h, pynvml.NVML_PERF_POLICY_THERMAL))
        utilization = _optional(lambda: pynvml.nvmlDeviceGetUtilizationRates(h))
        return GpuReading(
            gpu=index, gpu_uuid=uuid,
            power_w=None if power_mw is None else power_mw / 1000,
            energy_j=None if energy_mj is None else energy_mj / 1000,
            sm_clock_mhz=_optional(lambda: float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM))),
            sm_clock_max_mhz=self.max_clock[index],
            temperature_c=_optional(lambda: float(pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU))),
            utilization_pct=None if utilization is None else float(utilization.gpu),
            memory_used_gb=memory, memory_source=None if memory is None else memory_source,
            clock_reasons_mask=_optional(lambda: _reasons(h)),
            power_violation_s=None if power_ns is None else power_ns.violationTime / 1e9,
            thermal_violation_s=None if thermal_ns is None else thermal_ns.violationTime / 1e9)

    def close(self) -> None:
        if self.started:
            self.started, self.handles = False, []
            pynvml.nvmlShutdown()
