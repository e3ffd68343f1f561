"""Hand-built results folders for the query tests: a few rows whose right answers a test works out by hand.

Times are given in milliseconds relative to a step's start and stored as ns, so the arithmetic in the tests
stays readable. Files follow the data contract: <root>/<table>/run_id=<id>/part-*.parquet, every table with a
(possibly schema-only) file per run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from loadgen.results.schema import SCHEMA_VERSION, TABLES, batch_from_rows

MS = 1_000_000
T0 = 1_700_000_000_000 * MS  # a wall-clock origin in ns


def ns(ms: float) -> int:
    """Milliseconds after T0, in ns."""
    return T0 + int(round(ms * MS))


@dataclass
class Results:
    """Rows per table; `write` lays them out as the job would."""

    rows: dict[str, list[dict]] = field(default_factory=lambda: {t: [] for t in TABLES})

    def run(self, run_id: str, started_ms: float = 0, **extra) -> None:
        self.rows["runs"].append({"run_id": run_id, "name": run_id, "status": "complete",
                                  "started_at_ns": ns(started_ms), "finished_at_ns": ns(started_ms + 60_000),
                                  "schema_version": SCHEMA_VERSION, "loadgen_version": "0.1.0", **extra})

    def step(self, run_id: str, step_id: int, target: str, *, target_index: int = 0, algorithm: str = "NEXTN",
             concurrency: int | None = 1, repeat: int = 0, window_ms: tuple[float, float] = (1000, 2000),
             emulated: bool = True, draft_tokens: int | None = 8, **extra) -> None:
        self.rows["steps"].append({
            "run_id": run_id, "step_id": step_id, "target": target, "target_index": target_index,
            "algorithm": algorithm, "draft_tokens": draft_tokens, "concurrency": concurrency,
            "repeat": repeat, "emulated": emulated, "mode": "closed", "status": "complete",
            "t_start_ns": ns(0), "t_measure_start_ns": ns(window_ms[0]), "t_measure_end_ns": ns(window_ms[1]),
            "t_end_ns": ns(window_ms[1] + 1000), **extra})

    def request(self, run_id: str, step_id: int, target: str, request_id: str, *, sent_ms: float,
                frames: list[tuple[float, int | None]], phase: str = "measure", status: str = "ok",
                spec_verify_ct: int | None = None, completion_tokens: int | None | str = "sum",
                done_ms: float | None = None, prompt_kind: str = "code", **extra) -> None:
        """One request and its output frames, given as (arrival ms, tokens). completion_tokens defaults to
        the frames' token sum; pass None for a server that never said."""
        cum, frame_rows = 0, []
        for seq, (t_ms, tokens) in enumerate(frames):
            cum = None if tokens is None or cum is None else cum + tokens
            frame_rows.append({"run_id": run_id, "step_id": step_id, "request_id": request_id, "seq": seq,
                               "t_ns": ns(t_ms), "tokens": tokens, "cum_tokens": cum, "bytes": 10})
        self.rows["frames"].extend(frame_rows)
        if completion_tokens == "sum":
            completion_tokens = cum if frames else 0
        self.rows["requests"].append({
            "run_id": run_id, "step_id": step_id, "target": target, "request_id": request_id,
            "phase": phase, "status": status, "prompt_kind": prompt_kind, "worker": "w0",
            "completion_tokens": completion_tokens, "spec_verify_ct": spec_verify_ct,
            "t_scheduled_ns": ns(sent_ms), "t_sent_ns": ns(sent_ms),
            "t_first_token_ns": ns(frames[0][0]) if frames else None,
            "t_last_token_ns": ns(frames[-1][0]) if frames else None,
            "t_done_ns": ns(done_ms if done_ms is not None else (frames[-1][0] if frames else sent_ms)),
            "num_frames": len(frames), **extra})

    def server_sample(self, run_id: str, step_id: int, target: str, name: str, value: float, *, t_ms: float,
                      labels: str = "{}") -> None:
        self.rows["server_samples"].append({"run_id": run_id, "step_id": step_id, "target": target,
                                            "t_ns": ns(t_ms), "name": name, "value": value, "labels": labels})

    def client_sample(self, run_id: str, step_id: int, *, t_ms: float, loop_lag_ms: float = 1.0,
                      read_delay_max_ms: float | None = 0.5, cpu_percent: float = 20.0, in_flight: int = 1,
                      target_in_flight: int = 1, worker: str = "w0") -> None:
        self.rows["client_samples"].append({
            "run_id": run_id, "step_id": step_id, "worker": worker, "t_ns": ns(t_ms),
            "loop_lag_ms": loop_lag_ms, "read_delay_max_ms": read_delay_max_ms, "cpu_percent": cpu_percent,
            "in_flight": in_flight, "target_in_flight": target_in_flight})

    def gpu_sample(self, run_id: str, step_id: int | None, target: str, *, t_ms: float, node: str = "n1",
                   gpu: str = "0", moment: str = "during", **fields) -> None:
        """One GPU's reading (power_w, energy_j, sm_clock_mhz, clock_reasons_mask, ...; the rest NULL)."""
        self.rows["gpu_samples"].append({"run_id": run_id, "step_id": step_id, "target": target, "node": node,
                                         "t_ns": ns(t_ms), "moment": moment, "source": "dcgm", "gpu": gpu,
                                         **fields})

    def write(self, root: Path) -> Path:
        """Write one file per (table, run) plus schema-only files where a run has no rows."""
        run_ids = sorted({r["run_id"] for r in self.rows["runs"]})
        for table, schema in TABLES.items():
            for run_id in run_ids:
                part = root / table / f"run_id={run_id}"
                part.mkdir(parents=True, exist_ok=True)
                rows = [r for r in self.rows[table] if r["run_id"] == run_id]
                batch = batch_from_rows(table, rows) if rows else schema.empty_table()
                pq.write_table(pa.Table.from_batches([batch]) if rows else batch, part / "part-0-0.parquet")
        return root


def two_runs_mtp_vs_dflash(root: Path) -> Path:
    """Runs r1 and r2, each one step of mtp (4 tokens in 1 s) and df (8 tokens): the queries' smallest comparison."""
    r = Results()
    r.run("r1")
    r.run("r2", started_ms=100_000)
    for run in ("r1", "r2"):
        r.step(run, 1, "mtp", target_index=0, algorithm="NEXTN")
        r.step(run, 1, "df", target_index=1, algorithm="DFLASH")
        r.request(run, 1, "mtp", f"{run}-a", sent_ms=1100, frames=[(1200, 1), (1300, 3)], spec_verify_ct=2)
        r.request(run, 1, "df", f"{run}-b", sent_ms=1100, frames=[(1200, 1), (1300, 7)], spec_verify_ct=2)
    return r.write(root)


# GPU telemetry fixtures (the gpu_by_step, energy and cost queries' tests)
GB10 = {"name": "NVIDIA GB10", "driver_version": "580.95.05", "cuda_version": "13.0", "index": "0"}


def hardware(**gpu) -> str:
    return json.dumps({"host": "h", "os": "Linux", "loadgen_version": "0.1.0", "source": "dcgm",
                       "gpus": [dict(GB10, **gpu)]})


def gpu_step(r: Results, run: str, step: int, target: str, node: str, clocks: list[float], *, window=(1000, 5000),
             power: float = 100.0, reasons: int = 0, joules_per_s: float = 100.0, **step_extra) -> None:
    """A step whose window [1 s, 5 s] holds one sample per second with these clocks, flat power, a constant
    reasons mask, and an energy counter growing joules_per_s from 0 at t = 0; samples at 0 and 6 s bracket it."""
    r.step(run, step, target, node=node, window_ms=window, hardware=step_extra.pop("hardware", hardware()),
           **step_extra)
    times = [0.0, *[window[0] + 1000 * i for i in range(len(clocks))], 6000.0]
    for i, t in enumerate(times):
        inside = 0 < i < len(times) - 1
        r.gpu_sample(run, step, target, node=node, t_ms=t, power_w=power, energy_j=joules_per_s * t / 1000,
                     sm_clock_mhz=clocks[i - 1] if inside else 208.0, sm_clock_max_mhz=2405.0,
                     clock_reasons_mask=reasons if inside else 1, temperature_c=50.0 + i)


def window_tokens(r: Results, run: str, step: int, target: str, tokens_per_frame: int, frames: int) -> None:
    """One measured ok request whose frames (one every 100 ms from 1.1 s) all land inside the window."""
    r.request(run, step, target, f"{target}-{step}", sent_ms=1000,
              frames=[(1100 + 100 * i, tokens_per_frame) for i in range(frames)])
