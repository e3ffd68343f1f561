"""The data contract: one Arrow schema per results table.

Every writer (workers, the driver, probes) builds batches against these schemas and every query in
`queries/` reads these columns. Change a column here only together with SCHEMA_VERSION, the queries and
the README's table reference. Times are integers in nanoseconds on the per-process wall-aligned clock
(`loadgen.clock`), so rows from different processes and nodes line up.
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = 6  # 2: client_samples.read_delay_max_ms; 3: runs.slo, steps.probe;
                    # 4: runs.config_hash, runs.superseded_steps, runs.written_at_ns (resume);
                    # 5: requests.prompt_tokens_target
                    # 6: steps.predicted (a twin's prediction in virtual time, loadgen/twin/)

# Request outcome classes. Exactly one per `requests` row.
STATUSES = (
    "ok",               # finished with a finish_reason (stop/length), tokens accounted
    "http_error",       # non-200 answer before the stream started
    "timeout",          # stall timeout (no frame for too long) or total timeout
    "stream_broken",    # connection closed / reset before the stream finished
    "server_abort",     # finish_reason.type == "abort" or an in-band error frame
    "malformed_frame",  # a frame that is not valid for the protocol (stream otherwise read to its end)
    "client_error",     # a failure inside loadgen (connect refused, bug): never blamed on the server
    "cancelled",        # still running when its step ended (drain requests cut by design)
    "lost",             # the worker that held it died; its frames may be partly recorded
)

PHASES = ("warmup", "measure", "drain")

RUNS = pa.schema([
    ("run_id", pa.string()),
    ("name", pa.string()),
    ("started_at_ns", pa.int64()),
    ("finished_at_ns", pa.int64()),
    ("status", pa.string()),            # running | complete | incomplete | failed
    ("status_reason", pa.string()),
    ("config", pa.string()),            # the validated experiment, JSON text (no secrets)
    ("loadgen_version", pa.string()),
    ("schema_version", pa.int32()),
    ("git_commit", pa.string()),
    ("host", pa.string()),              # JSON text: hostname, python, ray, cpu count
    ("clock_anchor", pa.string()),      # JSON text: the driver's monotonic/wall anchor
    ("slo", pa.string()),               # JSON text of the run's [slo] (loadgen.results.slo.Slo), NULL without one
    ("config_hash", pa.string()),       # sha256 of the validated experiment: --resume refuses a changed file
    ("superseded_steps", pa.list_(pa.int32())),  # step ids a resume re-ran: the views leave their rows out
    ("written_at_ns", pa.int64()),      # when this row was written: the newest row of a run is its state
])

STEPS = pa.schema([
    ("run_id", pa.string()),
    ("step_id", pa.int32()),
    ("target", pa.string()),
    ("target_index", pa.int32()),       # position in the experiment file: the baseline is index 0
    ("node", pa.string()),
    ("flavor", pa.string()),
    ("emulated", pa.bool_()),           # True when the server is loadgen's emulator: a model, not a GPU
    ("algorithm", pa.string()),         # NONE | NEXTN | EAGLE | EAGLE3 | DFLASH | ...
    ("draft_tokens", pa.int32()),
    ("num_steps", pa.int32()),
    ("topk", pa.int32()),
    ("server_version", pa.string()),
    ("server_info", pa.string()),       # JSON text of /get_server_info taken before the step
    ("mode", pa.string()),              # closed | open
    ("concurrency", pa.int32()),
    ("rate", pa.float64()),
    ("repeat", pa.int32()),
    ("prompt_mix", pa.string()),
    ("t_start_ns", pa.int64()),
    ("t_measure_start_ns", pa.int64()),
    ("t_measure_end_ns", pa.int64()),
    ("t_end_ns", pa.int64()),
    ("status", pa.string()),            # complete | incomplete | failed (the target's server died: an SLO fail)
    ("status_reason", pa.string()),
    ("probe", pa.string()),             # capacity search: why it chose this level; NULL in a grid
    ("predicted", pa.bool_()),          # True when a twin predicted the step in virtual time (docs/twin.md)
])

REQUESTS = pa.schema([
    ("run_id", pa.string()),
    ("step_id", pa.int32()),
    ("request_id", pa.string()),        # loadgen's id, also sent as `rid`
    ("server_request_id", pa.string()), # meta_info.id / OpenAI id
    ("target", pa.string()),
    ("node", pa.string()),
    ("worker", pa.string()),
    ("phase", pa.string()),             # warmup | measure | drain (by send time)
    ("prompt_id", pa.string()),
    ("prompt_kind", pa.string()),
    ("template", pa.string()),
    ("prompt_tokens", pa.int64()),
    ("prompt_tokens_target", pa.int64()),  # prompts.input_tokens asked for this prompt; NULL without a target
    ("completion_tokens", pa.int64()),
    ("cached_tokens", pa.int64()),
    ("spec_verify_ct", pa.int64()),
    ("spec_accept_length", pa.float64()),  # the server's own figure, when it reports one
    ("finish_reason", pa.string()),
    ("t_scheduled_ns", pa.int64()),
    ("t_sent_ns", pa.int64()),
    ("t_headers_ns", pa.int64()),
    ("t_first_token_ns", pa.int64()),
    ("t_last_token_ns", pa.int64()),
    ("t_done_ns", pa.int64()),            # a complete response: the stamp of its last read; else when it was cut
    ("server_e2e_s", pa.float64()),
    ("num_frames", pa.int32()),
    ("status", pa.string()),
    ("http_status", pa.int32()),
    ("error", pa.string()),
])

FRAMES = pa.schema([
    ("run_id", pa.string()),
    ("step_id", pa.int32()),
    ("request_id", pa.string()),
    ("seq", pa.int32()),
    ("t_ns", pa.int64()),
    ("tokens", pa.int32()),             # delta of completion_tokens; null when the server does not say
    ("cum_tokens", pa.int32()),
    ("bytes", pa.int32()),
])

SERVER_SAMPLES = pa.schema([
    ("run_id", pa.string()),
    ("step_id", pa.int32()),
    ("target", pa.string()),
    ("node", pa.string()),
    ("t_ns", pa.int64()),
    ("name", pa.string()),
    ("value", pa.float64()),
    ("labels", pa.string()),            # JSON text
])

CLIENT_SAMPLES = pa.schema([
    ("run_id", pa.string()),
    ("step_id", pa.int32()),
    ("worker", pa.string()),
    ("node", pa.string()),
    ("t_ns", pa.int64()),
    ("loop_lag_ms", pa.float64()),
    ("read_delay_max_ms", pa.float64()),  # worst wait of received data in a socket before the worker read it
    ("cpu_percent", pa.float64()),
    ("in_flight", pa.int32()),
    ("target_in_flight", pa.int32()),
])

TABLES: dict[str, pa.Schema] = {
    "runs": RUNS,
    "steps": STEPS,
    "requests": REQUESTS,
    "frames": FRAMES,
    "server_samples": SERVER_SAMPLES,
    "client_samples": CLIENT_SAMPLES,
}


def batch_from_columns(table: str, columns: dict[str, list | pa.Array], constants: dict | None = None
                       ) -> pa.RecordBatch:
    """Build a record batch of `table` from python column lists or ready columns; `constants` fill whole
    columns with one value (cheap: no per-row Python objects); missing columns become nulls."""
    schema = TABLES[table]
    constants = constants or {}
    n = len(next(iter(columns.values()))) if columns else 0
    arrays = [column(table, f.name, columns[f.name]) if f.name in columns
              else pa.repeat(pa.scalar(constants.get(f.name), type=f.type), n) for f in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def column(table: str, name: str, values: list | pa.Array) -> pa.Array:
    """One column of `table` as Arrow, from a python list (or as it is when already built)."""
    return values if isinstance(values, pa.Array) else pa.array(values, type=TABLES[table].field(name).type)


def batch_from_rows(table: str, rows: list[dict]) -> pa.RecordBatch:
    """Build a record batch of `table` from row dicts; for the few-rows tables (runs, steps)."""
    schema = TABLES[table]
    return pa.RecordBatch.from_pylist(rows, schema=schema)
