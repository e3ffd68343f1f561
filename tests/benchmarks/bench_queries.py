"""Time every query over a generated results folder of 10M frames and 100k requests (issue 5: < 2 s each).

    python tests/benchmarks/bench_queries.py [--dir /tmp/loadgen-bench] [--frames 10000000] [--requests 100000]

The folder is generated once (reused when its marker file matches the sizes): one run, two series (MTP-like,
DFlash2-like) x concurrency 1..32 x 2 repeats, 4 workers writing one part file per step each, frames evenly
spread over each request's life. Not collected by pytest (no test_ prefix); needs numpy, which pyarrow pulls in.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from loadgen.results.analysis import list_queries, open_results, render, run_query
from loadgen.results.schema import SCHEMA_VERSION, TABLES, batch_from_rows

SERIES = [("mtp", "NEXTN", 2.2), ("dflash", "DFLASH", 4.2)]
CONCURRENCY = [1, 2, 4, 8, 16, 32]
REPEATS = 2
WORKERS = 4
S = 1_000_000_000


def generate(root: Path, n_frames: int, n_requests: int, seed: int = 1) -> None:
    """Write a synthetic but contract-shaped results folder."""
    rng = np.random.default_rng(seed)
    run = "bench"
    steps = [(i, t, ti, alg, acc, c, rep) for i, (c, rep) in enumerate(
        (c, rep) for c in CONCURRENCY for rep in range(REPEATS)) for ti, (t, alg, acc) in enumerate(SERIES)]
    per_step = n_requests // len(steps)
    frames_per_req = n_frames // (per_step * len(steps))
    step_rows, t0 = [], 1_700_000_000 * S
    for step_id, target, ti, alg, acc, c, rep in steps:
        start = t0 + step_id * 100 * S
        step_rows.append({"run_id": run, "step_id": step_id, "target": target, "target_index": ti,
                          "algorithm": alg, "draft_tokens": 8, "concurrency": c, "repeat": rep, "emulated": True,
                          "mode": "closed", "status": "complete", "t_start_ns": start,
                          "t_measure_start_ns": start + 10 * S, "t_measure_end_ns": start + 70 * S,
                          "t_end_ns": start + 90 * S})
        ids = np.array([f"{step_id}-{target}-{k}" for k in range(per_step)])
        sent = start + rng.integers(0, 80 * S, per_step)
        ttft = rng.integers(50_000_000, 500_000_000, per_step)
        gaps = rng.integers(20_000_000, 80_000_000, (per_step, frames_per_req))
        gaps[:, 0] = ttft
        t_frames = sent[:, None] + np.cumsum(gaps, axis=1)
        tokens = rng.integers(1, int(2 * acc), (per_step, frames_per_req)).astype(np.int32)
        cum = np.cumsum(tokens, axis=1).astype(np.int32)
        completion = cum[:, -1].astype(np.int64)
        verify = np.maximum(1, (completion / acc).astype(np.int64))
        phase = np.where(sent < start + 10 * S, "warmup", np.where(sent < start + 70 * S, "measure", "drain"))
        status = np.where(rng.random(per_step) < 0.01, "stream_broken", "ok")
        for w in range(WORKERS):
            sel = np.arange(per_step) % WORKERS == w
            n = int(sel.sum())
            req = {
                "run_id": [run] * n, "step_id": [step_id] * n, "request_id": ids[sel], "target": [target] * n,
                "worker": [f"w{w}"] * n, "phase": phase[sel],
                "prompt_kind": np.where(np.arange(n) % 2, "code", "prose"),
                "completion_tokens": completion[sel], "spec_verify_ct": verify[sel],
                "spec_accept_length": completion[sel] / verify[sel], "status": status[sel],
                "t_scheduled_ns": sent[sel], "t_sent_ns": sent[sel], "t_first_token_ns": t_frames[sel, 0],
                "t_last_token_ns": t_frames[sel, -1], "t_done_ns": t_frames[sel, -1] + 1_000_000,
                "num_frames": np.full(n, frames_per_req, dtype=np.int32),
            }
            _write(root, "requests", run, f"{step_id}-{target}-{w}", req)
            fr = {
                "run_id": [run] * (n * frames_per_req), "step_id": np.full(n * frames_per_req, step_id, np.int32),
                "request_id": np.repeat(ids[sel], frames_per_req),
                "seq": np.tile(np.arange(frames_per_req, dtype=np.int32), n),
                "t_ns": t_frames[sel].ravel(), "tokens": tokens[sel].ravel(), "cum_tokens": cum[sel].ravel(),
                "bytes": np.full(n * frames_per_req, 120, np.int32),
            }
            _write(root, "frames", run, f"{step_id}-{target}-{w}", fr)
            ts = np.arange(start, start + 90 * S, S // 2)
            _write(root, "client_samples", run, f"{step_id}-{target}-{w}", {
                "run_id": [run] * len(ts), "step_id": np.full(len(ts), step_id, np.int32),
                "worker": [f"{target}-w{w}"] * len(ts), "t_ns": ts, "loop_lag_ms": rng.random(len(ts)) * 3,
                "cpu_percent": rng.random(len(ts)) * 50, "in_flight": np.full(len(ts), c, np.int32),
                "target_in_flight": np.full(len(ts), c, np.int32)})
        _write(root, "server_samples", run, f"{step_id}-{target}", {
            "run_id": [run], "step_id": [step_id], "target": [target], "t_ns": [start + 90 * S],
            "name": ["avg_spec_accept_length"], "value": [acc], "labels": ['{"when":"after"}']})
    _write_rows(root, "steps", run, step_rows)
    _write_rows(root, "runs", run, [{"run_id": run, "name": "bench", "status": "complete", "started_at_ns": t0,
                                     "schema_version": SCHEMA_VERSION}])


def _write(root: Path, table: str, run: str, part: str, columns: dict) -> None:
    schema = TABLES[table]
    n = len(next(iter(columns.values())))
    arrays = [pa.array(columns[f.name], type=f.type) if f.name in columns else pa.nulls(n, f.type) for f in schema]
    _put(root, table, run, part, pa.Table.from_arrays(arrays, schema=schema))


def _write_rows(root: Path, table: str, run: str, rows: list[dict]) -> None:
    _put(root, table, run, "0", pa.Table.from_batches([batch_from_rows(table, rows)]))


def _put(root: Path, table: str, run: str, part: str, data: pa.Table) -> None:
    folder = root / table / f"run_id={run}"
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(data, folder / f"part-{part}.parquet", row_group_size=1_000_000)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/loadgen-bench"))
    ap.add_argument("--frames", type=int, default=10_000_000)
    ap.add_argument("--requests", type=int, default=100_000)
    args = ap.parse_args()
    marker = args.dir / "bench.json"
    sizes = {"frames": args.frames, "requests": args.requests}
    if not marker.exists() or json.loads(marker.read_text()) != sizes:
        shutil.rmtree(args.dir, ignore_errors=True)
        t = time.perf_counter()
        generate(args.dir, args.frames, args.requests)
        marker.write_text(json.dumps(sizes))
        print(f"generated {args.dir} in {time.perf_counter() - t:.1f} s")
    con = open_results(args.dir)
    [(frames, requests)] = con.execute(
        "SELECT (SELECT count(*) FROM frames), (SELECT count(*) FROM requests)").fetchall()
    print(f"{frames:,} frames, {requests:,} requests")
    rows = []
    for name in list_queries():
        t = time.perf_counter()
        table = run_query(con, name)
        rows.append({"query": name, "rows": table.num_rows, "seconds": round(time.perf_counter() - t, 3)})
    print(render(pa.Table.from_pylist(rows)))
    slow = [r["query"] for r in rows if r["seconds"] >= 2]
    print("all under 2 s" if not slow else f"OVER 2 s: {', '.join(slow)}")


if __name__ == "__main__":
    main()
