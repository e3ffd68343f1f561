"""`load.mode = "trace"`: the [load.trace] table, parsed and its file read before any load (docs/workloads.md).

A trace step replays the selected rows at their own times divided by `speedup`, one step per speedup (a list is
swept like rates). Each row's prompt is built to its input length in the server's own tokens (the input-length
calibration, loadgen.client.calibrate) and asks for its output length with ignore_eos, so [prompts] may not set
`input_tokens` or `max_new_tokens` (the trace does) and `ignore_eos` defaults to true.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loadgen.errors import ConfigError
from loadgen.keys import REQUIRED, Bounds, Choice, Key, Keys, StrictTable
from loadgen.prompts.config import InputTokens, PromptsConfig
from loadgen.prompts.traces import FORMATS, Trace, read_trace

MAX_PROMPT_BYTES = 1 << 30   # prompt text built for one target, ~4 bytes a token: above it the driver runs short
WHOLE_TASK_TOKENS = 400      # below this a built-in task may not fit whole: a row that asks for less gets a cut one
TRACE_KEY = Key("trace", dict, None, "mode = \"trace\": the trace replayed, a [load.trace] table",
                shown="required in trace mode")
TRACE = Keys("load.trace", "mode = \"trace\": the trace replayed (docs/workloads.md); [prompts] may not set "
             "input_tokens or max_new_tokens, each row does.", (
    Key("path", str, REQUIRED, "the trace file, relative to the experiment file"),
    Key("format", str, None, "the trace's format", Choice(FORMATS, "format"), shown="from the file"),
    Key("speedup", (int, float, list), 1.0, "replay at the trace's times divided by this; a list is swept like rates"),
    Key("sample", float, 1.0, "the share of rows kept (a seeded draw per row)",
        Bounds(0, 1, above=True, what="a share"),
        "e.g. 0.1 keeps one row in ten (a seeded draw per row)"),
    Key("seed", int, 0, "seeds the sample"),
    Key("start_s", float, 0.0, "replay from this second of the trace", Bounds(0)),
    Key("duration_s", float, None, "replay this many seconds of it", Bounds(0, above=True, what="a number of seconds"),
        shown="to the end"),
))
_NOT_IN_TRACE_MODE = ("concurrency", "measure_s", "requests", "min_measured_requests", "max_measure_s", "search",
                      "ramp", "ramp_s", "hold_s")


@dataclass(frozen=True)
class TraceConfig:
    trace: Trace                     # the rows replayed (start_s, duration_s and sample applied)
    speedups: tuple[float, ...]
    max_in_flight: int               # per target: rows beyond it wait for a free slot and are sent late
    sample: float = 1.0
    seed: int = 0

    def rate(self, speedup: float) -> float:
        """The replay's mean rate in requests/s at `speedup` (the steps row's `rate`, the step's level), to 4
        significant digits (a level's label)."""
        rows = len(self.trace.rows)
        return float(f"{rows * speedup / self.trace.span_s if self.trace.span_s > 0 else rows:.4g}")

    def offsets(self, speedup: float) -> list[float]:
        """Each row's send time in seconds after the step's start, at `speedup`."""
        return [row.t_s / speedup for row in self.trace.rows]


def parse_trace(t: StrictTable, mode: str, base_dir: Path) -> TraceConfig | None:
    """[load.trace] and max_in_flight in trace mode (None otherwise; a [load.trace] table there is an error)."""
    table = t.read("trace")
    if mode != "trace":
        if table is not None:
            raise ConfigError("load.trace", "only applies to trace replay", 'set load.mode = "trace", or remove it')
        return None
    for name in _NOT_IN_TRACE_MODE:
        if name in t.data:
            raise ConfigError(f"load.{name}", "does not apply to a trace replay (the trace sets the arrivals and "
                              "the window)", "remove it; replay a part with load.trace.start_s / duration_s")
    if table is None:
        raise ConfigError("load.trace", "is required in trace mode",
                          'add [load.trace] with path = "my-trace.jsonl" (docs/workloads.md)')
    return _parse_table(StrictTable(table, "load.trace", TRACE), base_dir, t.read("max_in_flight"))


def _parse_table(t: StrictTable, base_dir: Path, cap: int) -> TraceConfig:
    raw = t.read("path")
    path = Path(raw).expanduser()
    path = path if path.is_absolute() else base_dir / path
    if not path.is_file():
        raise ConfigError("load.trace.path", f"no such file: {path}",
                          "check the path (relative paths start at the experiment file's folder)")
    fmt = t.read("format")
    speedups = _speedups(t.read("speedup"))
    sample, seed, start_s, duration_s = t.read("sample"), t.read("seed"), t.read("start_s"), t.read("duration_s")
    t.done()
    trace = read_trace(path, fmt, "load.trace.path").select(start_s, duration_s, sample, seed)
    if not trace.rows:
        raise ConfigError("load.trace", "selects no row (start_s, duration_s and sample leave none)",
                          "widen duration_s, move start_s, or raise sample")
    asked = sum(r.input_tokens or 0 for r in trace.rows if r.text is None)
    if asked * 4 > MAX_PROMPT_BYTES:
        raise ConfigError("load.trace", f"replays {len(trace.rows)} rows asking {asked / 1e6:.0f}M input tokens "
                          f"(~{asked * 4 / 2**30:.1f} GiB of prompt text per target), more than loadgen builds "
                          f"in memory ({MAX_PROMPT_BYTES / 2**30:g} GiB)",
                          "thin it with sample = 0.2, or replay a part with start_s / duration_s")
    return TraceConfig(trace, speedups, cap, sample, seed)


def _speedups(raw: Any) -> tuple[float, ...]:
    values = raw if isinstance(raw, list) else [raw]
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            key = f"load.trace.speedup[{i}]" if isinstance(raw, list) else "load.trace.speedup"
            raise ConfigError(key, f"must be a number > 0, got {v!r}",
                              "1 replays at the trace's pace, 10 ten times faster, 0.5 at half speed")
    if not values or len(set(values)) != len(values):
        raise ConfigError("load.trace.speedup", f"must list distinct speedups, got {raw!r}",
                          "use `repeats` to replay at a speedup again")
    return tuple(float(v) for v in values)


def check_warmup(trace: TraceConfig, warmup_requests: int | None, warmup_s: float | None) -> None:
    """A trace's warm-up is its first seconds (warmup_s, given) or its first rows (warmup_requests), not both, and
    leaves rows to measure at every speedup."""
    fastest = trace.trace.span_s / max(trace.speedups)
    if warmup_s is not None and warmup_s > 0 and warmup_s >= fastest:
        raise ConfigError("load.warmup_s", f"{warmup_s:g} s is as long as the whole replay at speedup "
                          f"{max(trace.speedups):g} ({fastest:.3g} s): no row would be measured",
                          "shorten it, or warm up by the first rows with warmup_requests")
    if warmup_requests is None:
        return
    if warmup_s is not None:
        raise ConfigError("load.warmup_requests", "cannot be combined with warmup_s",
                          "warm up by the first rows (warmup_requests) or the first seconds (warmup_s)")
    if warmup_requests >= len(trace.trace.rows):
        raise ConfigError("load.warmup_requests", f"{warmup_requests} leaves none of the trace's "
                          f"{len(trace.trace.rows)} rows to measure", "lower it")


def trace_prompts(prompts: PromptsConfig, table: dict, trace: TraceConfig) -> PromptsConfig:
    """[prompts] for a replay: each prompt's length comes from its row (input_tokens spans the rows', never
    below WHOLE_TASK_TOKENS, for the calibration and the built-in tasks), and ignore_eos defaults to true."""
    for name in ("input_tokens", "max_new_tokens", "min_prompt_chars", "max_prompt_chars"):
        if name in table:
            raise ConfigError(f"{prompts.key}.{name}", "is set by the trace in trace mode (each row's input and "
                              "output length)", f"remove {name}")
    lengths = [r.input_tokens for r in trace.trace.rows if r.text is None and r.input_tokens is not None]
    span = None
    if lengths:
        low = max(min(lengths), WHOLE_TASK_TOKENS)
        span = InputTokens(low, max(low, max(lengths)))
    return replace(prompts, input_tokens=span, ignore_eos=table.get("ignore_eos", True),
                   max_new_tokens=max(r.output_tokens for r in trace.trace.rows))
