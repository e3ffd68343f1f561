"""GPU telemetry without a server: the exporter parser on dcgm-exporter's own page shape, /proc/meminfo's unified
memory, which GPU each target's sampler reads (the emulator against a server: integration/test_gpu_telemetry_runs).
NVML needs an NVIDIA driver: its test skips here with the reason (tests/gpu/nvml_check.py is the check on a real
GPU)."""

from __future__ import annotations

import pytest

from loadgen.config import TargetConfig
from loadgen.driver.telemetry import choose_source
from loadgen.servers.telemetry import dcgm, meminfo
from loadgen.servers.telemetry.nvml import NvmlReader
from loadgen.servers.telemetry.readings import TelemetryUnavailable, decode_reasons
from loadgen.servers.telemetry.source import TelemetrySource

LABELS = 'pci_bus_id="00000000:0D:00.0",device="nvidia{0}",modelName="NVIDIA H200",Hostname="n1",' \
         'DCGM_FI_DRIVER_VERSION="580.126.09"'
EXPORTER_PAGE = """\
# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
""" + "".join(f'DCGM_FI_DEV_SM_CLOCK{{gpu="{g}",UUID="GPU-{u}",{LABELS.format(g)}}} {mhz}\n'
              for g, u, mhz in ((0, "aaa", 1980), (1, "bbb", 345))) + """\
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-aaa"} 612.5
DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-bbb"} 75.25
# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).
# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",UUID="GPU-aaa"} 123456789
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="1",UUID="GPU-bbb"} 5000
# HELP DCGM_FI_DEV_CLOCK_THROTTLE_REASONS Current clock throttle reasons.
# TYPE DCGM_FI_DEV_CLOCK_THROTTLE_REASONS gauge
DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu="0",UUID="GPU-aaa"} 36
DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu="1",UUID="GPU-bbb"} 1
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-aaa"} 81920
# HELP DCGM_FI_DEV_POWER_VIOLATION Throttling duration due to power constraints (in us).
# TYPE DCGM_FI_DEV_POWER_VIOLATION counter
DCGM_FI_DEV_POWER_VIOLATION{gpu="0",UUID="GPU-aaa"} 2500000
"""


def test_a_dcgm_exporter_page_maps_to_the_same_columns_as_nvml():
    identities, readings = dcgm.parse(EXPORTER_PAGE)
    assert [(g.index, g.uuid, g.name, g.driver_version, g.cuda_version) for g in identities] == [
        ("0", "GPU-aaa", "NVIDIA H200", "580.126.09", None), ("1", "GPU-bbb", "NVIDIA H200", "580.126.09", None)]
    g0 = readings[0]
    assert (g0.sm_clock_mhz, g0.power_w, g0.energy_j) == (1980, 612.5, pytest.approx(123456.789))
    assert (g0.clock_reasons_mask, g0.clock_reasons) == (36, ["sw_power_cap", "sw_thermal_slowdown"])
    assert (g0.memory_used_gb, g0.memory_source) == (pytest.approx(81920 * 2**20 / 1e9), "device")
    assert g0.power_violation_s == 2.5 and g0.thermal_violation_s is None
    assert (readings[1].clock_reasons, readings[1].memory_used_gb) == (["idle"], None)
    # only the GPUs that serve the target: by index or by UUID
    assert [r.gpu for r in dcgm.parse(EXPORTER_PAGE, ("GPU-bbb",))[1]] == ["1"]
    assert [r.gpu for r in dcgm.parse(EXPORTER_PAGE, ("0",))[1]] == ["0"]


def test_reasons_decode_bit_by_bit():
    assert decode_reasons(0) == []
    assert decode_reasons(0x1 | 0x8 | 0x40 | 0x80) == ["idle", "hw_slowdown", "hw_thermal_slowdown", "hw_power_brake"]
    assert decode_reasons(None) is None


def test_unified_memory_used_is_memtotal_minus_memavailable():
    text = "MemTotal:       125000000 kB\nMemFree:         1000000 kB\nMemAvailable:   25000000 kB\n"
    assert meminfo.used_gb(text) == pytest.approx(100_000_000 * 1024 / 1e9)
    assert meminfo.used_gb("MemTotal: 1 kB\n") is None


def target(**kw) -> TargetConfig:
    return TargetConfig(**{"name": "t", "flavor": "sglang", "url": None, "emulator_args": (), "node": "n",
                           "api_key_env": None, **kw})


def test_each_target_reads_the_gpu_that_serves_it_and_no_other():
    exporter = "http://10.0.0.11:9400/metrics"
    named = choose_source(target(telemetry=exporter, telemetry_gpus=("1",)), "http://10.0.0.11:30000", {}, False,
                          None)
    assert named == TelemetrySource("dcgm", exporter, ("1",))
    assert choose_source(target(), "http://127.0.0.1:5000", {"emulated": True}, True, "0") == TelemetrySource(
        "dcgm", "http://127.0.0.1:5000/emulator/dcgm/metrics", None)
    # a fleet node samples itself: the GPUs Ray gave its server actor
    assert choose_source(target(), "http://127.0.0.1:30000", {}, True, "2,3") == TelemetrySource("nvml", None,
                                                                                                ("2", "3"))
    assert choose_source(target(), "http://localhost:30000", {}, False, None).kind == "nvml"
    why = choose_source(target(), "http://10.0.0.11:30000", {}, False, None)
    assert isinstance(why, str) and "not on this machine" in why and "telemetry =" in why


def test_nvml_reads_this_nodes_gpu():
    reader = NvmlReader(None)
    try:
        gpus = reader.open()
    except TelemetryUnavailable as exc:
        pytest.skip(f"no NVIDIA GPU here ({exc}); tests/gpu/nvml_check.py checks NVML on a real GPU")
    try:
        reading = reader.read()[0]
        assert gpus[0].name and gpus[0].driver_version and reading.sm_clock_mhz > 0
        assert reading.power_w > 0 and reading.energy_j > 0 and reading.clock_reasons is not None
    finally:
        reader.close()
