"""What a twin is fitted to: one target's measured steps of one run, read back with the views that report them
(queries/views.sql level_metrics, measured, measured_frames) and the server's own info (steps.server_info)."""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from loadgen.config.experiment import LoadConfig, parse_load_table
from loadgen.emulator.simulate import SimPrompt
from loadgen.errors import ConfigError, LoadgenError
from loadgen.prompts.config import parse_prompts_config
from loadgen.prompts.length import LengthFit, LengthModel, fit_model, prompt_texts
from loadgen.prompts.mix import PromptMix
from loadgen.results import analysis
from loadgen.twin.acceptance import POSITION_BUCKET
from loadgen.twin.model import METRICS

_STEPS = """
SELECT step_id, algorithm, draft_tokens, num_steps, topk, mode, emulated, predicted, server_info, concurrency
FROM steps WHERE run_id = ? AND target = ? AND status = 'complete' ORDER BY step_id
"""
_LEVELS = """
SELECT l.concurrency, l.requests, w.warmup_s, w.window_s, l.tok_s, l.ttft_p50, l.ttft_p90, l.tpot_p50, l.accept_len
FROM level_metrics l
JOIN (SELECT concurrency, median((t_measure_start_ns - t_start_ns) / 1e9) AS warmup_s,
             median((t_measure_end_ns - t_measure_start_ns) / 1e9) AS window_s
      FROM steps WHERE run_id = ? AND target = ? GROUP BY concurrency) w USING (concurrency)
WHERE l.run_id = ? AND l.target = ? AND l.concurrency IS NOT NULL AND NOT l.predicted ORDER BY l.concurrency
"""
# The GPU's median power over each level's windows, pooled over its repeats (runs with GPU telemetry only)
_POWER = """
SELECT s.concurrency, avg(w.power_p50_w)
FROM gpu_window w JOIN step_info s USING (run_id, step_id, target)
WHERE run_id = ? AND target = ? AND w.power_p50_w IS NOT NULL AND s.concurrency IS NOT NULL
GROUP BY ALL ORDER BY ALL
"""
_KINDS = """
SELECT s.concurrency, m.prompt_kind, sum(m.completion_tokens)::BIGINT, sum(m.spec_verify_ct)::BIGINT, count(*)
FROM measured m JOIN step_info s USING (run_id, step_id, target)
WHERE run_id = ? AND target = ? AND m.status = 'ok' AND m.spec_verify_ct > 0 AND m.completion_tokens IS NOT NULL
GROUP BY ALL ORDER BY ALL
"""
# Tokens per frame of each request's frames but its first (the prefill's token) and its last (cut by the end of
# the output), by where in the output the step began: with a server that streams every verify step, the tokens one
# step accepted, at that position.
_STEP_TOKENS = f"""
SELECT s.concurrency, f.prompt_kind, (f.cum_tokens - f.tokens) // {POSITION_BUCKET} * {POSITION_BUCKET}, f.tokens,
       count(*)
FROM (SELECT step_id, target, prompt_kind, tokens, cum_tokens, seq, min(seq) OVER w AS first, max(seq) OVER w AS last
      FROM measured_frames WHERE run_id = ? AND target = ? AND tokens IS NOT NULL AND cum_tokens IS NOT NULL
      WINDOW w AS (PARTITION BY request_id)) f
JOIN step_info s ON s.run_id = ? AND s.step_id = f.step_id AND s.target = f.target
WHERE f.seq > f.first AND f.seq < f.last
GROUP BY ALL
"""
# llama.cpp says its draft budget only in its counters: one accepted-tokens series per draft position.
_DRAFT_POSITIONS = """
SELECT max(TRY_CAST(labels::JSON->>'position' AS INTEGER)) + 1 FROM server_samples
WHERE run_id = ? AND target = ? AND name LIKE 'llamacpp:spec_decode_num_accepted_tokens_per_pos%'
"""
# Every request of each level as it was sent (its prompt's kind and server-counted tokens), the drain's cut ones
# included: a level's simulation sends the same prompts in the same order.
_WORKLOAD = """
SELECT s.concurrency, r.prompt_kind, r.prompt_tokens, coalesce(r.cached_tokens, 0), r.prompt_id,
       r.completion_tokens, r.status
FROM requests r JOIN steps s USING (run_id, step_id, target)
WHERE r.run_id = ? AND r.target = ? AND r.prompt_tokens IS NOT NULL AND s.status = 'complete'
ORDER BY s.concurrency, r.step_id, r.t_sent_ns
"""


@dataclass(frozen=True)
class Level:
    """One measured load level: its measured ok requests, its window (slots start over the warm-up; the window as
    the step held it open), and the figures the fit matches."""

    concurrency: int
    requests: int
    warmup_s: float
    window_s: float
    figures: dict[str, float]


@dataclass(frozen=True)
class Source:
    """A target's measured steps in one run."""

    results: str
    run_id: str
    target: str
    info: dict[str, Any]           # steps.server_info of its first complete step
    algorithm: str
    draft_tokens: int | None
    num_steps: int | None
    topk: int | None
    emulated: bool
    load: LoadConfig
    max_new_tokens: int
    ignore_eos: bool
    levels: list[Level]
    accepted: dict[tuple[int, str], tuple[int, int, int]]   # (C, kind) -> (completion tokens, verify steps, requests)
    step_tokens: dict[tuple[int, str], dict[tuple[int, int], int]]   # (C, kind) -> (position, tokens) -> steps
    workload: dict[int, list[SimPrompt]]            # C -> the level's requests' kinds and prompt tokens, as sent
    lengths: LengthModel
    mean_completion: float
    prompts_raw: dict[str, Any] = field(default_factory=dict)   # the run's [prompts], for a prediction's default
    notes: list[str] = field(default_factory=list)
    power_w: dict[int, float] = field(default_factory=dict)   # C -> the GPU's measured power (none: no telemetry)

    @property
    def server(self) -> str:
        return str(self.info.get("server") or "sglang")

    @property
    def model(self) -> str:
        """The model the server says it serves (empty when it does not say)."""
        return str(self.info.get("served_model_name") or self.info.get("model_path") or "")

    @property
    def streams_every_step(self) -> bool:
        """SGLang streaming every step (stream_interval 1): a frame's tokens are one verify step's."""
        return self.server == "sglang" and int(self.info.get("stream_interval") or 1) == 1


def read_source(results: str | Path, run_id: str, target: str | None, min_levels: int = 2,
                levels: list[int] | None = None) -> Source:
    """The target's measurements in `run_id` (the run's only target when `target` is None), at `levels` only when
    given (the rest left for judging the twin); a fit needs at least two levels."""
    con = analysis.open_results(results, [run_id])
    try:
        source = _read(con, str(Path(results).resolve()), run_id, target, min_levels if levels is None else 0)
    finally:
        con.close()
    if levels is not None:
        kept = [lv for lv in source.levels if lv.concurrency in levels]
        missing = sorted(set(levels) - {lv.concurrency for lv in kept})
        if missing or len(kept) < min_levels:
            raise ConfigError("--levels", f"run {run_id} has no measured level C = {missing or levels} of "
                              f"{source.target}", f"use levels it measured: {[lv.concurrency for lv in source.levels]}")
        source = dataclasses.replace(source, levels=kept)
    return source


def _read(con: duckdb.DuckDBPyConnection, results: str, run_id: str, target: str | None, min_levels: int
          ) -> Source:
    targets = [t for (t,) in con.execute("SELECT DISTINCT target FROM steps WHERE run_id = ? AND NOT predicted "
                                         "ORDER BY target", [run_id]).fetchall()]
    if target is None:
        if len(targets) != 1:
            raise ConfigError("--target", f"run {run_id} has {len(targets)} targets ({', '.join(targets)})",
                              "name the one to fit with --target")
        target = targets[0]
    if target not in targets:
        raise ConfigError("--target", f"run {run_id} has no measured target {target!r}",
                          f"use one of {', '.join(targets) or '(none)'}")
    steps = con.execute(_STEPS, [run_id, target]).fetchall()
    if not steps:
        raise LoadgenError(f"run {run_id} has no complete step of {target}: nothing to fit")
    _, algorithm, draft_tokens, num_steps, topk, mode, emulated, _, info_text, _ = steps[0]
    if draft_tokens is None and (positions := con.execute(_DRAFT_POSITIONS, [run_id, target]).fetchall()[0][0]):
        draft_tokens = positions + 1   # drafted tokens and the bonus one
    if mode != "closed":
        raise ConfigError("--run", f"run {run_id} is open loop: a twin is fitted to closed-loop levels",
                          "fit from a run with concurrency levels (a grid or a closed-loop search)")
    levels = [Level(int(c), int(n), float(w), float(m), dict(zip(METRICS, (_num(v) for v in vals))))
              for c, n, w, m, *vals in con.execute(_LEVELS, [run_id, target, run_id, target]).fetchall() if n]
    if len(levels) < min_levels:
        raise LoadgenError(f"run {run_id} measured {target} at {len(levels)} load level(s): a twin needs at least "
                           "2 (fix: run a grid or search over two or more levels, e.g. C = 1, 4, 16)")
    [(config_text,)] = con.execute("SELECT config FROM runs WHERE run_id = ?", [run_id]).fetchall()
    raw = json.loads(config_text)
    info = json.loads(info_text or "{}")
    workload_rows = con.execute(_WORKLOAD, [run_id, target]).fetchall()
    workload: dict[int, list[SimPrompt]] = defaultdict(list)
    for level, kind, tokens, cached, *_ in workload_rows:
        workload[int(level)].append(SimPrompt(kind, int(tokens), int(cached)))
    ok_rows = [(kind, tokens, pid, done) for _, kind, tokens, _, pid, done, status in workload_rows if status == "ok"]
    accepted = {(int(level), kind): (int(c), int(v), int(n))
                for level, kind, c, v, n in con.execute(_KINDS, [run_id, target]).fetchall()}
    step_tokens: dict[tuple[int, str], dict[tuple[int, int], int]] = defaultdict(dict)
    for level, kind, position, tokens, n in con.execute(_STEP_TOKENS, [run_id, target, run_id]).fetchall():
        step_tokens[(int(level), kind)][(int(position), int(tokens))] = int(n)
    prompts = raw.get("prompts", {})
    notes: list[str] = []
    return Source(results, run_id, target, info, str(algorithm or "NONE"), draft_tokens, num_steps, topk,
                  bool(emulated), parse_load_table(raw.get("load", {})), int(prompts.get("max_new_tokens", 128)),
                  bool(prompts.get("ignore_eos", False)), levels, accepted, dict(step_tokens),
                  dict(workload), _lengths(raw, info, ok_rows, notes),
                  sum(c for *_, c in ok_rows) / max(1, len(ok_rows)), prompts, notes,
                  {int(c): float(w) for c, w in con.execute(_POWER, [run_id, target]).fetchall()})


def _lengths(raw: dict, info: dict, rows: list[tuple], notes: list[str]) -> LengthModel:
    """Prompt tokens per prompt kind as the server counted them: the run's own input-token fit when it had one,
    else a line fitted to the measured requests' counts against their prompts (rebuilt from the run's seeded
    [prompts]), else each kind's mean count (a dataset that cannot be read here)."""
    fit = info.get("input_tokens_fit")
    if isinstance(fit, dict) and fit.get("counted"):
        return LengthModel(tuple((kind, LengthFit(f["overhead_tokens"], f["tokens_per_unit"], f["measure"],
                                                  f["chars_per_token"])) for kind, f in fit["fits"].items()),
                           counted=True, note="the run's input-token fit")
    counts = {pid: (kind, tokens) for kind, tokens, pid, _ in rows}
    try:
        cfg = parse_prompts_config(raw.get("prompts", {}), "prompts")
        built = {p.prompt_id: p for p in PromptMix(cfg).take(4096)}
        samples = [(kind, prompt_texts(built[pid]), tokens) for pid, (kind, tokens) in counts.items() if pid in built]
        if samples:
            return fit_model(samples)
    except LoadgenError as exc:
        notes.append(f"prompt lengths: the run's prompts cannot be rebuilt here ({exc}); each kind's mean count")
    means: dict[str, list[int]] = defaultdict(list)
    for kind, tokens in counts.values():
        means[kind].append(tokens)
    return LengthModel(tuple((k, LengthFit(sum(v) / len(v), 0.0)) for k, v in sorted(means.items())), counted=True,
                       note="each kind's mean measured prompt tokens")


def _num(value: Any) -> float:
    return float("nan") if value is None else float(value)
