"""Used memory of a unified-memory node (GB10: CPU and GPU share LPDDR5X, and NVML answers Not Supported for the
GPU's memory): MemTotal - MemAvailable of /proc/meminfo, the memory no process can have without evicting."""

from __future__ import annotations

from pathlib import Path

MEMINFO = Path("/proc/meminfo")


def used_gb(text: str | None = None) -> float | None:
    """MemTotal - MemAvailable in GB (10^9 bytes); None where /proc/meminfo is missing or lacks them."""
    if text is None:
        try:
            text = MEMINFO.read_text()
        except OSError:
            return None
    kib = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemTotal", "MemAvailable") and rest.split():
            kib[key] = int(rest.split()[0])
    if len(kib) < 2:
        return None
    return (kib["MemTotal"] - kib["MemAvailable"]) * 1024 / 1e9
