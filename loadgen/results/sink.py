"""The results writer: the one owner of the results folder.

Batches arrive per table; they are kept in memory and written as a Parquet part file when a table has
`ROLL_ROWS` rows waiting, when the oldest waiting batch is `ROLL_S` old, or on `flush()`. Each file is written
under a hidden temporary name (`.part-*.parquet.tmp`, which the views' `*.parquet` glob never matches) and
renamed when complete, so readers only ever see whole files and a crash loses at most the batches not yet
rolled. File names carry the sink's incarnation, so a restarted sink never overwrites what an earlier one wrote.

A folder that fills up or becomes unwritable: the failed file is removed (or, if even that fails, stays under
its hidden name), the batches stay in memory, `write` goes on accepting (a worker's fire-and-forget call never
fails), and the next `flush()` tries again and raises SinkError if it still cannot write. The driver flushes at
the end of every step, so the run stops there with that one line (docs/failures.md, "When the disk fills").
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import ray

from loadgen.errors import LoadgenError
from loadgen.results import schema

ROLL_ROWS = 1_000_000
ROLL_S = 10.0

MIN_FREE_BYTES = 64 << 20   # below this a run would fill the disk within minutes: refuse before any load

# A steps row says its step finished and a runs row how its run ended: written only by flush() and after every
# other table, so a row of theirs on disk means the rows it stands for are on disk too (resume keeps a step by
# its steps row). A disk that filled between the two used to leave a finished step with no requests.
RECORD_TABLES = ("steps", "runs")
FLUSH_ORDER = [t for t in schema.TABLES if t not in RECORD_TABLES] + list(RECORD_TABLES)


class SinkError(LoadgenError):
    """The results folder cannot be written (full, read-only, gone); batches not yet written are kept."""


def check_writable(results_dir: str | Path) -> None:
    """Refuse, before any load, a results folder that cannot be created, written, or is nearly full."""
    root = Path(results_dir)
    fix = "pass a writable folder with free space as --results (or run.results)"
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".write-check-{uuid.uuid4().hex[:8]}"
        probe.write_bytes(b"x")
        probe.unlink()
    except OSError as exc:
        raise SinkError(f"results folder {root} is not writable: {exc.strerror or exc} (fix: {fix})") from None
    free = shutil.disk_usage(root).free
    if free < MIN_FREE_BYTES:
        raise SinkError(f"results folder {root} has only {free >> 20} MiB free, below {MIN_FREE_BYTES >> 20} MiB "
                        f"(fix: {fix})")

class ResultsWriter:
    """Plain-Python core of the sink (also used directly by tests and benchmarks)."""

    def __init__(self, results_dir: str, run_id: str) -> None:
        self.root = Path(results_dir)
        self.run_id = run_id
        self.incarnation = uuid.uuid4().hex[:8]
        self.seq = 0
        self.pending: dict[str, list[pa.RecordBatch]] = {t: [] for t in schema.TABLES}
        self.pending_rows: dict[str, int] = dict.fromkeys(schema.TABLES, 0)
        self.oldest: dict[str, float] = {}
        self.rows_written: dict[str, int] = dict.fromkeys(schema.TABLES, 0)
        self.failed: SinkError | None = None   # the last write failure; cleared by a flush that succeeds
        for table in schema.TABLES:
            self._dir(table).mkdir(parents=True, exist_ok=True)
        for table, table_schema in schema.TABLES.items():  # every view has a file to read, even if empty
            self._write_file(table, table_schema.empty_table())

    def _dir(self, table: str) -> Path:
        return self.root / table / f"run_id={self.run_id}"

    def write(self, table: str, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        if batch.schema != schema.TABLES[table]:
            raise ValueError(f"batch for {table} does not match the schema: {batch.schema}")
        self.pending[table].append(batch)
        self.pending_rows[table] += batch.num_rows
        self.oldest.setdefault(table, time.monotonic())
        if self.failed is None and table not in RECORD_TABLES and (
                self.pending_rows[table] >= ROLL_ROWS or time.monotonic() - self.oldest[table] >= ROLL_S):
            try:
                self._roll(table)
            except SinkError as exc:   # kept in memory; flush() retries and reports it
                self.failed = exc

    def flush(self) -> dict[str, int]:
        """Write everything waiting; returns rows written so far per table. SinkError if the folder cannot
        take it (the batches stay waiting; a later flush tries again)."""
        for table in FLUSH_ORDER:
            self._roll(table)
        self.failed = None
        return dict(self.rows_written)

    def _roll(self, table: str) -> None:
        batches = self.pending[table]
        if not batches:
            return
        self._write_file(table, pa.Table.from_batches(batches, schema=schema.TABLES[table]))
        self.rows_written[table] += self.pending_rows[table]
        self.pending[table], self.pending_rows[table] = [], 0
        self.oldest.pop(table, None)

    def _write_file(self, table: str, data: pa.Table) -> None:
        name = f"part-{self.incarnation}-{self.seq:06d}.parquet"
        self.seq += 1
        final = self._dir(table) / name
        tmp = final.with_name(f".{name}.tmp")
        try:
            pq.write_table(data, tmp, compression="zstd", row_group_size=1 << 20,
                           use_dictionary=_dictionary_columns(data.schema))
            os.replace(tmp, final)
        except OSError as exc:  # disk full, folder removed or made read-only: keep the batches, say so
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass   # a read-only folder keeps it, under its hidden .tmp name no query reads
            waiting = sum(self.pending_rows.values())
            raise SinkError(f"results folder {self.root} cannot be written ({exc.strerror or exc}, writing "
                            f"{final.relative_to(self.root)}): {waiting} rows are not written, every file written "
                            "before is complete and readable (fix: free space in the results folder or make it "
                            "writable, or pass another --results)") from None

    def request_ids(self, step_id: int, worker: str) -> set[str]:
        """Request ids of one worker in one step already held (written or waiting): for `lost` rows."""
        tables = [pa.Table.from_batches(self.pending["requests"], schema=schema.REQUESTS)]
        tables += [pq.read_table(p, columns=["step_id", "worker", "request_id"])
                   for p in self._dir("requests").glob("part-*.parquet")]
        ids: set[str] = set()
        for t in tables:
            mask = pc.and_(pc.equal(t["step_id"], step_id), pc.equal(t["worker"], worker))
            ids.update(t.filter(mask)["request_id"].to_pylist())
        return ids


def _dictionary_columns(table_schema: pa.Schema) -> list[str]:
    """Dictionary-encode the string columns only: ids repeat on every row, while dictionary-encoding times and
    counts made a frames file 25% larger and its writing a third slower (500k rows: 2.6 vs 3.5 bytes a row)."""
    return [f.name for f in table_schema if pa.types.is_string(f.type)]


@ray.remote(num_cpus=0, max_restarts=3, max_task_retries=3)
class ResultsSink:
    """Ray actor around ResultsWriter: workers and the driver send batches, it writes files.

    If it dies, Ray restarts it (new incarnation, new part files) and re-sends the calls that were in flight,
    so writers carry on; what the dead incarnation held in memory is gone, which the driver learns from
    `incarnation()` changing and reports on the step."""

    def __init__(self, results_dir: str, run_id: str) -> None:
        os.nice(10)  # Parquet encoding must never delay a load worker's reads on a shared core
        self.writer = ResultsWriter(results_dir, run_id)

    @ray.method(enable_task_events=False)
    def write(self, batches: dict[str, pa.RecordBatch]) -> None:
        """Batches of several tables in one call: a Ray call costs ~2 ms of CPU across the processes
        whatever it carries, so a worker's flush is one call, not one per table. Without Ray's task events
        (its state API's record of each call): 10 calls a second per worker filled the caller's event ring,
        ~1.2 KB a call up to ~150 MiB (a soak's workers grew 30% in an hour); without them RSS stays flat."""
        for table, batch in batches.items():
            self.writer.write(table, batch)

    def flush(self) -> dict[str, int]:
        return self.writer.flush()

    def incarnation(self) -> str:
        return self.writer.incarnation

    def request_ids(self, step_id: int, worker: str) -> set[str]:
        return self.writer.request_ids(step_id, worker)


def flush(sink: Any) -> dict[str, int]:
    """`ray.get(sink.flush.remote())`, with the sink's SinkError raised as itself: one line for the user, not
    Ray's wrapper with the actor's traceback."""
    try:
        return ray.get(sink.flush.remote())
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, SinkError):
            raise SinkError(str(exc.cause)) from None
        raise
