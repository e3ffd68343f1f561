"""The driver's side of GPU telemetry: which GPU serves each target, a sampler actor beside it, the step marks, and
the sampler's rows into `gpu_samples`. Sample the GPU that serves the target, never another:
  - a target that names its DCGM exporter (`telemetry = "http://node:9400/metrics"`, on the target or its fleet
    node): that exporter;
  - loadgen's emulator: its modelled GPU, on the emulator's own exporter route (GET /emulator/dcgm/metrics);
  - a fleet node: NVML on the node itself, the GPUs its server holds (the server actor's CUDA_VISIBLE_DEVICES);
  - a url target outside a fleet: the driver's own GPU through NVML only when the url is on loopback;
  - otherwise nothing, said in one line. A source that cannot be read is also one line; nothing else fails.
docs/telemetry.md has the whole story."""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import ray

from loadgen.config import TargetConfig
from loadgen.driver.placement import LocalPlacement
from loadgen.driver.progress import grouped
from loadgen.results import schema
from loadgen.servers.telemetry.sampler import GpuSampler
from loadgen.servers.telemetry.source import TelemetrySource, visible_devices

EMULATOR_ROUTE = "/emulator/dcgm/metrics"


@dataclass
class Sampler:
    """A target's sampler (None when nothing is read) and what steps.hardware records for it."""

    actor: Any
    hardware: str        # JSON text

    def close(self) -> None:
        """Its sampling task ended first: killed mid-task, the actor's asyncio would print `Task was destroyed but
        it is pending!` into the run's output."""
        if self.actor is None:
            return
        try:
            ray.get(self.actor.close.remote(), timeout=10)
        except (ray.exceptions.RayError, TimeoutError):
            pass  # an actor that died or hangs: killed below all the same
        ray.kill(self.actor)


def on_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def choose_source(target: TargetConfig, url: str, info: dict, on_fleet_node: bool, server_gpus: str | None
                  ) -> TelemetrySource | str:
    """The source of the GPU that serves `target`, or why there is none (a sentence)."""
    devices = target.telemetry_gpus
    if target.telemetry:
        return TelemetrySource("dcgm", target.telemetry, devices)
    if info.get("emulated"):
        return TelemetrySource("dcgm", f"{url}{EMULATOR_ROUTE}", devices)
    if on_fleet_node:
        return TelemetrySource("nvml", None, devices or visible_devices(server_gpus))
    if on_loopback(url):
        return TelemetrySource("nvml", None, devices or visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES")))
    return (f"its server {url} is not on this machine and no DCGM exporter is named "
            "(fix: telemetry = \"http://HOST:9400/metrics\" on the target or its fleet node)")


def start_samplers(targets: list[tuple[TargetConfig, str, dict, Any]], placement: LocalPlacement,
                   log: Callable[[str], None]) -> list[Sampler]:
    """One sampler per (target, url, server info, server actor or None), each placed where its server runs; a
    line saying what is read, or why nothing is, once for the targets it holds for (a fleet's: one line)."""
    chosen = []
    for target, url, info, server in targets:
        fleet = placement.on_fleet_node(target)
        gpus = ray.get(server.visible_gpus.remote()) if fleet and server is not None else None
        source = choose_source(target, url, info, fleet, gpus)
        actor = None
        if isinstance(source, TelemetrySource):
            actor = _actor(GpuSampler).options(**placement.sampler_options(target, server)).remote(source)
        chosen.append((target, url, source, actor, actor.start.remote() if actor is not None else None))
    samplers, said = [], []
    for target, url, source, actor, started in chosen:
        found: dict = ray.get(started, timeout=60) if started is not None else {"unavailable": source}
        if "unavailable" in found:
            if actor is not None:
                ray.kill(actor)
                actor = None
            said.append((target.name, f"no GPU telemetry: {found['unavailable']}"))
        else:
            names = ", ".join(sorted({g["name"] or "?" for g in found["gpus"]}))
            # the emulator's route is said once for all emulated targets (their URLs are in the lines above)
            emulated = isinstance(source, TelemetrySource) and source.url == f"{url}{EMULATOR_ROUTE}"
            where = "each emulator's modelled DCGM exporter" if emulated else found["source"]
            said.append((f"{target.name} on {found['host']}", f"GPU telemetry from {where} ({names})"))
        samplers.append(Sampler(actor, json.dumps(found, sort_keys=True)))
    for line in grouped("target", said):
        log(line)
    return samplers


def mark(samplers: list[tuple[TargetConfig, Sampler | None]], sink: Any, run_id: str, step_id: int,
         moment: str) -> None:
    """A sample at a step boundary on every sampler (step_start | step_end), and every row they held written."""
    live = [(t, s) for t, s in samplers if s is not None and s.actor is not None]
    try:
        batches = ray.get([s.actor.mark.remote(step_id, moment) for _, s in live], timeout=5)
    except (ray.exceptions.RayError, TimeoutError):
        return   # a sampler that died or hangs costs its samples, never the step
    rows = [dict(r, run_id=run_id, target=t.name, node=t.node) for (t, _), got in zip(live, batches) for r in got]
    if rows:
        sink.write.remote({"gpu_samples": schema.batch_from_rows("gpu_samples", rows)})


def _actor(cls: type) -> Any:
    """An @ray.remote class as Ray made it (mypy sees the plain class)."""
    return cls
