"""The data contract: one Arrow schema per results table.

Every writer (workers, the driver, probes) builds batches against these schemas and every query in
`queries/` reads these columns. Change a column here only together with SCHEMA_VERSION, the queries and
the table reference in docs/results.md. Times are integers in nanoseconds on the per-process wall-aligned clock
(`loadgen.clock`), so rows from different processes and nodes line up.
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = 9  # 2: client_samples.read_delay_max_ms; 3: runs.slo, steps.probe;
                    # 4: runs.config_hash, runs.superseded_steps, runs.written_at_ns (resume);
                    # 5: requests.prompt_tokens_target
                    # 6: gpu_samples, steps.hardware (GPU telemetry, docs/telemetry.md); requests.resent;
                    #    requests.session_id, turn, shared_prefix (conversations, shared contexts, trace sessions);
                    #    requests.completion_tokens_target, steps.speedup (trace replay), steps.ramp,
                    #    steps.level_start, steps.level_end (ramps); steps.predicted (a twin's prediction)
                    # 7: requests.t_first_answer_ns, reasoning_tokens, reasoning_from (reasoning models);
                    #    requests.turn_kind (agent sessions)
                    # 8: twin_checks (a measured target's twin beside it: docs/twin.md, "A twin that watches")
                    # 9: requests.server_ttft_s (the server's own time to first token, where it reports one)

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
    ("hardware", pa.string()),          # JSON text: the node and GPU(s) serving the target (host, os, loadgen
                                        # version, GPU name, UUID, driver, CUDA) or why none was read
    ("speedup", pa.float64()),          # trace replay: the trace's times divided by this; NULL otherwise
    ("ramp", pa.string()),              # a ramp's window: linear | exponential | hold; NULL for a flat step
    ("level_start", pa.float64()),      # a ramp's window: the level (rate or users) at its start ...
    ("level_end", pa.float64()),        # ... and at its end; rate / concurrency hold its mean
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
    ("session_id", pa.string()),        # a conversation's session (loadgen/prompts/conversation.py) or a trace row's
    ("turn", pa.int32()),               # the request's turn in its session, from 1
    ("shared_prefix", pa.string()),     # the shared context it starts with ("<source>#<k>"); NULL without one
    ("prompt_tokens", pa.int64()),
    ("prompt_tokens_target", pa.int64()),  # prompts.input_tokens asked for this prompt; NULL without a target
    ("completion_tokens_target", pa.int64()),  # its own output length (a trace row's max_new_tokens); NULL:
    #                                            prompts.max_new_tokens, the run's
    ("completion_tokens", pa.int64()),
    ("cached_tokens", pa.int64()),
    ("spec_verify_ct", pa.int64()),
    ("spec_accept_length", pa.float64()),  # the server's own figure, when it reports one
    ("finish_reason", pa.string()),
    ("t_scheduled_ns", pa.int64()),
    ("t_sent_ns", pa.int64()),            # just before the send call that handed the kernel its last byte
    ("t_headers_ns", pa.int64()),
    ("t_first_token_ns", pa.int64()),   # the first output of any kind: a thought or the answer
    ("t_first_answer_ns", pa.int64()),  # the first answer output (after the thinking); = t_first_token_ns without
                                        # thinking; NULL: no answer came, or unknown (native route of a thinker)
    ("t_last_token_ns", pa.int64()),
    ("t_done_ns", pa.int64()),            # a complete response: the stamp of its last read; else when it was cut
    ("server_e2e_s", pa.float64()),       # the server's own time for the request, when it reports one
    ("server_ttft_s", pa.float64()),      # the server's own time to its first token, from where its clock starts
    ("num_frames", pa.int32()),
    ("status", pa.string()),
    ("http_status", pa.int32()),
    ("error", pa.string()),
    ("turn_kind", pa.string()),         # an agent session's turn: tool_call (the server called a tool) | answer
    ("reasoning_tokens", pa.int64()),   # thinking tokens (</think> included): 0 without thinking; NULL: unknown
    ("reasoning_from", pa.string()),    # server (its usage / meta_info reasoning_tokens) | stream (counted by loadgen)
    ("resent", pa.bool_()),             # sent again on a new connection: its kept-alive one was closed before any
                                        # response byte (the server never read it); t_sent_ns is the resend's
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

# The GPU serving a target, once a second and at each step's start and end (loadgen/servers/telemetry/). One row
# per GPU per sample; a field the GPU or its source does not report is NULL.
GPU_SAMPLES = pa.schema([
    ("run_id", pa.string()),
    ("step_id", pa.int32()),            # the step running when sampled (start to end); NULL between steps
    ("target", pa.string()),
    ("node", pa.string()),
    ("t_ns", pa.int64()),
    ("moment", pa.string()),            # step_start | during (once a second) | step_end
    ("source", pa.string()),            # nvml | dcgm (an exporter's /metrics; the emulator's modelled GPU too)
    ("gpu", pa.string()),               # the GPU's index on its node (NVML's order; the exporter's gpu label)
    ("gpu_uuid", pa.string()),
    ("power_w", pa.float64()),
    ("energy_j", pa.float64()),         # the GPU's total-energy counter (since driver load or boot): use differences
    ("sm_clock_mhz", pa.float64()),
    ("sm_clock_max_mhz", pa.float64()),
    ("temperature_c", pa.float64()),
    ("utilization_pct", pa.float64()),  # share of the last sample period a kernel ran
    ("memory_used_gb", pa.float64()),   # 10^9 bytes; device memory, or on unified memory (GB10, where NVML answers
                                        # Not Supported) the node's MemTotal - MemAvailable (/proc/meminfo)
    ("memory_source", pa.string()),     # device | meminfo
    ("clock_reasons_mask", pa.int64()), # NVML clocks-event reasons (DCGM_FI_DEV_CLOCKS_EVENT_REASONS)
    ("clock_reasons", pa.list_(pa.string())),  # the mask decoded: idle, sw_power_cap, hw_slowdown, ...
    ("power_violation_s", pa.float64()),    # cumulative time the power limit held the clocks down, where supported
    ("thermal_violation_s", pa.float64()),  # ... a thermal limit
])

# A measured target that watches its twin (`watch_twin`): the twin's prediction of each of its measured levels, one
# row per level and metric, written by the driver after the run's steps (views.sql twin_drift judges them).
TWIN_CHECKS = pa.schema([
    ("run_id", pa.string()),            # the measured run
    ("target", pa.string()),
    ("node", pa.string()),
    ("concurrency", pa.int32()),
    ("metric", pa.string()),            # tok_s | tpot_p50_ms (level_metrics' figures)
    ("predicted", pa.float64()),        # the twin's figure at the level, under the run's own window and prompts
    ("band_pct", pa.float64()),         # the twin's drift band: off by more than this names the node
    ("twin_file", pa.string()),         # the twin file the target watches
    ("twin_source", pa.string()),       # what it was fitted from, in words (Twin.describe_source)
    ("twin_date", pa.string()),         # when it was fitted (YYYY-MM-DD)
    ("predicted_run", pa.string()),     # the prediction as a run of its own (twin_error pairs it with this run)
    ("checked_at_ns", pa.int64()),      # when the rows were written: a resumed run's newest check counts
])

TABLES: dict[str, pa.Schema] = {
    "runs": RUNS,
    "steps": STEPS,
    "requests": REQUESTS,
    "frames": FRAMES,
    "server_samples": SERVER_SAMPLES,
    "client_samples": CLIENT_SAMPLES,
    "gpu_samples": GPU_SAMPLES,
    "twin_checks": TWIN_CHECKS,
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
