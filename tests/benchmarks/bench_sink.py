"""Parquet writing speed of the sink: frames rows per second through ResultsWriter.

    python tests/benchmarks/bench_sink.py [ROWS]

Batches of 12,500 rows (a worker's 0.25 s flush at 50k frames/s) go through the same writer the sink actor
uses (schema check, buffering, zstd Parquet, tmp + rename); the baseline is one pyarrow write_table of the
same rows in the same process.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time

import pyarrow as pa
import pyarrow.parquet as pq

from loadgen.results import schema
from loadgen.results.sink import ResultsWriter

BATCH = 12_500


def frames_batch(start: int) -> pa.RecordBatch:
    n = BATCH
    return schema.batch_from_columns("frames", {
        "run_id": ["bench-run"] * n, "step_id": [3] * n,
        "request_id": [f"abc123-s3-t.w0-{(start + i) // 200}" for i in range(n)],
        "seq": [(start + i) % 200 for i in range(n)], "t_ns": [1_790_000_000_000_000_000 + (start + i) * 19_531
                                                                for i in range(n)],
        "tokens": [1 + (i % 5 == 0) for i in range(n)], "cum_tokens": [(start + i) % 200 for i in range(n)],
        "bytes": [900 + i % 400 for i in range(n)]})


def main(rows: int) -> None:
    batches = [frames_batch(i * BATCH) for i in range(rows // BATCH)]
    total = sum(b.num_rows for b in batches)
    out = tempfile.mkdtemp(prefix="sinkbench-")
    try:
        writer = ResultsWriter(out, "bench")
        t0 = time.perf_counter()
        for b in batches:
            writer.write("frames", b)
        writer.flush()
        t_writer = time.perf_counter() - t0
        table = pa.Table.from_batches(batches)
        t0 = time.perf_counter()
        pq.write_table(table, f"{out}/baseline.parquet", compression="zstd", row_group_size=1 << 20)
        t_base = time.perf_counter() - t0
    finally:
        shutil.rmtree(out)
    print(f"rows {total:,}")
    print(f"ResultsWriter        : {total / t_writer / 1e6:5.2f} M rows/s ({t_writer:.2f} s)")
    print(f"pyarrow write_table  : {total / t_base / 1e6:5.2f} M rows/s ({t_base:.2f} s)  baseline")
    print(f"ratio writer/baseline: {t_base / t_writer:.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5_000_000)
