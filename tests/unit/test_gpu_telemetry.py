"""GPU telemetry: the emulator's modelled GPU read through the DCGM reader the sampler uses (healthy against
--fault degraded-power), the exporter parser on dcgm-exporter's own page shape, /proc/meminfo's unified memory,
which GPU each target's sampler reads, and the sampler inside a real run (real Ray, a real emulator). NVML needs
an NVIDIA driver: its test skips here with the reason (tests/gpu/nvml_check.py is the check on a real GPU)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from httpcalls import request
from loadgen.config import TargetConfig
from loadgen.driver.telemetry import choose_source
from loadgen.emulator.args import parse_args
from loadgen.emulator.launch import EmulatorThread
from loadgen.emulator.server import Emulator
from loadgen.servers.telemetry import dcgm, meminfo
from loadgen.servers.telemetry.nvml import NvmlReader
from loadgen.servers.telemetry.readings import GpuReading, TelemetryUnavailable, decode_reasons
from loadgen.servers.telemetry.source import TelemetrySource

SCALE = 10.0   # the emulator runs the modelled GB10 ten times faster
BODY = {"text": "def f(x):\n    return x\n", "sampling_params": {"max_new_tokens": 400, "ignore_eos": True}}


def read(url: str) -> GpuReading:
    async def once() -> GpuReading:
        reader = dcgm.DcgmReader(f"{url}/emulator/dcgm/metrics", None)
        try:
            await reader.open()
            return (await reader.read())[0]
        finally:
            await reader.close()
    return asyncio.run(once())


def loaded(emu: EmulatorThread, streams: int = 4) -> list[threading.Thread]:
    """`streams` requests of 400 tokens in flight (each its own thread); join them to wait."""
    threads = [threading.Thread(target=request, args=(emu.port, "POST", "/generate", BODY)) for _ in range(streams)]
    for t in threads:
        t.start()
    return threads


def under_load(*flags: str) -> tuple[GpuReading, GpuReading, float, int]:
    """Two readings 1 s apart while 4 streams decode; the wall seconds between them; tokens generated in them."""
    with EmulatorThread(["--speculative-algorithm", "NEXTN", "--time-scale", str(SCALE), *flags]) as emu:
        threads = loaded(emu)
        time.sleep(0.5)
        t0, tokens0, first = time.monotonic(), emu.call(lambda: emu.emu.engine.counters.generation_tokens_total), \
            read(emu.url)
        time.sleep(1.0)
        t1, tokens1, second = time.monotonic(), emu.call(lambda: emu.emu.engine.counters.generation_tokens_total), \
            read(emu.url)
        for t in threads:
            t.join()
        return first, second, t1 - t0, tokens1 - tokens0


def test_the_modelled_gpu_under_load_healthy_and_in_degraded_power():
    first, healthy, wall_s, tokens = under_load()
    _, degraded, _, slow_tokens = under_load("--fault", "degraded-power", "--degraded-power-factor", "3")
    # full clock and no reason while it works; the trap: a third of the clock, the software power cap
    assert (healthy.sm_clock_mhz, healthy.sm_clock_max_mhz, healthy.clock_reasons) == (2405, 2405, [])
    assert (degraded.sm_clock_mhz, degraded.clock_reasons) == (round(2405 / 3), ["sw_power_cap"])
    # capped at max / factor (a mean over the last second: lower when a loaded host delays the emulator's loop)
    assert 15 < degraded.power_w <= 140 / 3 + 0.01 < healthy.power_w <= 140
    # busy most of the second (not all of it on a loaded machine: the emulator's loop then lags between forwards)
    assert healthy.utilization_pct > 50 and healthy.gpu_uuid.startswith("GPU-")
    # a third of the speed: the same forward takes three times as long (the cost model's own time, which no load
    # on this machine changes; the tokens each produced in the same wall second say the same, loosely)
    healthy_emu, degraded_emu = (Emulator(parse_args(["--model-path", "m", "--speculative-algorithm", "NEXTN", *f]))
                                 for f in ([], ["--fault", "degraded-power"]))
    batch = [300] * 4
    assert degraded_emu.cost.decode(batch).seconds == pytest.approx(3 * healthy_emu.cost.decode(batch).seconds)
    assert slow_tokens < tokens
    # the energy counter counts modelled time: it grows power x wall x time scale (the power is steady)
    assert healthy.energy_j > first.energy_j
    assert (healthy.energy_j - first.energy_j) / (wall_s * SCALE) == pytest.approx(healthy.power_w, rel=0.25)
    assert degraded.power_violation_s > 0 and healthy.power_violation_s == 0


def test_an_idle_modelled_gpu_says_idle_and_its_counter_grows_at_idle_power():
    with EmulatorThread(["--time-scale", str(SCALE)]) as emu:
        t0 = time.monotonic()
        a = read(emu.url)
        t1 = time.monotonic()
        time.sleep(0.5)
        t2 = time.monotonic()
        b = read(emu.url)
        t3 = time.monotonic()
    assert (b.sm_clock_mhz, b.power_w, b.clock_reasons, b.utilization_pct) == (208, 15.0, ["idle"], 0)
    # 15 W of modelled time between the two reads, whenever exactly each was taken
    assert 15.0 * SCALE * (t2 - t1) * 0.99 <= b.energy_j - a.energy_j <= 15.0 * SCALE * (t3 - t0) * 1.01 + 0.01


def test_a_hardware_profile_without_a_gpu_serves_no_exporter():
    with EmulatorThread(["--hardware", "zero"]) as emu:
        assert request(emu.port, "GET", "/emulator/dcgm/metrics")[0] == 404
        with pytest.raises(TelemetryUnavailable, match="answered HTTP 404"):
            read(emu.url)


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
