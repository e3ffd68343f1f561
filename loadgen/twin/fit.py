"""Fit a twin to one target's measured levels (docs/twin.md).

1. Read, not fitted: the server's own limits (max running requests, KV pool, prefill budget, draft settings) from
   steps.server_info; acceptance per prompt kind and its decay along the draft from the requests' counts
   (acceptance.py).
2. Fitted by least squares: the hardware numbers (bandwidth efficiency, decode compute, prefill compute, step and
   per-request overheads, the draft's forward floor), in log space, so that the twin's virtual-time levels
   (vtime.py, the engine the emulator runs) reproduce each measured level's tok/s, TTFT p50 and p90 and TPOT p50.
   A weak prior (the base profiles, rescaled to the lowest level first) keeps what the levels cannot tell apart
   where it was; the fit reports, per number, whether the data or the prior set it.
3. Its error: in-sample (the fitted levels) and leave-one-level-out (each level predicted by a fit without it).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from loadgen import __version__
from loadgen.emulator import profiles
from loadgen.emulator.profiles import AlgorithmProfile, HardwareProfile, ModelProfile
from loadgen.emulator.simulate import SimPrompt
from loadgen.errors import ConfigError
from loadgen.twin import acceptance
from loadgen.twin.model import METRICS, FitError, ServerSide, Twin
from loadgen.twin.observe import Level, Source
from loadgen.twin.vtime import as_measured, expected_figures, expected_power, seeded_figures

SEEDS = (1, 2, 3)          # the same seeds at every evaluation: the figures are a smooth function of the numbers
NOISE_SEEDS = tuple(range(1, 9))   # the runs whose spread gives a measured window's own sampling noise
SIGMA = {"tok_s": 0.03, "ttft_p50_ms": 0.06, "ttft_p90_ms": 0.12, "tpot_p50_ms": 0.03}   # log-error scale
FITTED_METRICS = tuple(SIGMA)
TOL = 1e-3                 # the fit stops when a step changes the cost or the numbers by less than 0.1%


@dataclass(frozen=True)
class Param:
    """One fitted number: x = log(value + offset), prior x0 with sd (log units)."""

    name: str
    where: str            # hardware | algorithm
    offset: float
    prior_sd: float
    identified_by: str    # docs/twin.md's identifiability table, short

    def value(self, twin: Twin) -> float:
        return float(getattr(twin.hardware if self.where == "hardware" else twin.algorithm, self.name))


PARAMS = (
    Param("bandwidth_efficiency", "hardware", 0.0, 0.35, "TPOT's growth with C (bytes per request per step)"),
    Param("compute_tflops", "hardware", 0.0, 0.5, "TPOT where a step is compute-bound (high C x draft tokens)"),
    Param("prefill_tflops", "hardware", 0.0, 0.5, "TTFT at low C (one prefill of the prompt)"),
    Param("step_overhead_ms", "hardware", 0.1, 0.7, "TPOT at C = 1 minus the weights' read"),
    Param("request_overhead_ms", "hardware", 0.05, 1.5, "TPOT's growth with C beyond the KV and state bytes"),
    Param("draft_forward_ms", "algorithm", 0.1, 0.5, "TPOT at C = 1 with the draft's budget (with the overhead)"),
)


def base_profiles(source: Source, hardware: str | None, model: str | None, algorithm: str | None
                  ) -> tuple[HardwareProfile, ModelProfile, AlgorithmProfile]:
    """The priors: profiles given, else what an emulated source says it ran (when it is a shipped profile), else
    gb10 for the hardware and the algorithm's shipped profile. A real server's model must be given."""
    emu = source.info.get("emulator") or {}
    default = "cpu" if source.server == "llama.cpp" else "gb10"
    hw = profiles.load("hardware", hardware or _shipped("hardware", emu.get("hardware")) or default)
    model_name = model or _shipped("models", emu.get("model_profile"))
    if model_name is None:
        raise ConfigError("--model-profile", f"{source.server} at run {source.run_id} does not say what its model "
                          "reads and computes per token", "give a model profile .toml (fields as in "
                          "loadgen/emulator/profiles/models/qwen3.8-27b-nvfp4.toml)")
    mp = profiles.load("models", model_name)
    alg_name = algorithm or _shipped("algorithms", emu.get("algorithm_profile")) or _algorithm_profile(source)
    ap = profiles.load("algorithms", alg_name)
    if source.algorithm == "DRAFT" and algorithm is None:   # llama.cpp -md: a draft model; assume the target's size
        ap = dataclasses.replace(ap, draft_weight_gb=mp.weight_gb, draft_params_b=mp.params_b)
    return hw, mp, ap


def _shipped(kind: str, name: object) -> str | None:
    return name if isinstance(name, str) and name in profiles.available(kind) else None


def _algorithm_profile(source: Source) -> str:
    return {"NONE": "none", "NEXTN": "mtp", "EAGLE": "eagle", "EAGLE3": "eagle", "DFLASH": "dflash2",
            "DRAFT": "draft-model"}.get(source.algorithm, "none")


def server_side(source: Source, base: AlgorithmProfile, model: ModelProfile, draft_tokens: int | None) -> ServerSide:
    """The limits the server reported. A llama.cpp server does not report its draft budget: it is the number of
    draft positions its own counters show (llamacpp:spec_decode_num_accepted_tokens_per_pos_total), or given."""
    info = source.info
    tokens = draft_tokens or source.draft_tokens or _int(info.get("speculative_num_draft_tokens"))
    if source.algorithm not in ("NONE", "UNKNOWN") and tokens is None:
        raise ConfigError("--draft-tokens", f"{source.server} does not report its draft budget",
                          "give the tokens verified per step (llama.cpp: --spec-draft-n-max + 1)")
    drafting = source.algorithm not in ("NONE", "UNKNOWN") and base.draft != "none"
    max_running = _int(info.get("max_running_requests"))
    if max_running is None:
        raise ConfigError("--run", f"{source.server} does not report its max running requests",
                          "a twin needs the server's batch limit (SGLang: max_running_requests; llama.cpp: -np)")
    pool = _int(info.get("max_total_num_tokens")) or int(model.kv_pool_tokens * base.kv_pool_fraction)
    steps = source.num_steps if source.num_steps else ((tokens or 1) - 1 if base.draft == "chain" else 1)
    return ServerSide(source.algorithm if drafting else "NONE", base.draft if drafting else "none",
                      steps if drafting else None, (source.topk or 1) if drafting else None,
                      tokens if drafting else None, max_running, pool,
                      _int(info.get("max_prefill_tokens")) or 16384, _int(info.get("min_free_slots_delay")))


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


Priors = tuple[HardwareProfile, ModelProfile, AlgorithmProfile]


def fit_twin(source: Source, hardware: str | None = None, model: str | None = None, algorithm: str | None = None,
             draft_tokens: int | None = None, log: Callable[[str], None] = lambda _: None,
             priors: Priors | None = None) -> Twin:
    """The twin of `source`'s target, with its in-sample and leave-one-level-out error; `priors`: the profiles to
    start from instead of the base ones (a refit starts from the old twin's)."""
    hw, mp, ap = priors or base_profiles(source, hardware, model, algorithm)
    server = server_side(source, ap, mp, draft_tokens)
    if not source.ignore_eos:   # natural stops: the output length the server chose, as a mean
        mp = dataclasses.replace(mp, natural_output_mean=max(1.0, source.mean_completion))
    base = Twin({"run": source.run_id, "target": source.target, "results": source.results, "server": source.server,
                 "emulated": source.emulated, "fit_levels": [lv.concurrency for lv in source.levels],
                 "loadgen_version": __version__, "prompts": source.prompts_raw,
                 "fitted_on": time.strftime("%Y-%m-%d"), "model": source.model},
                float((source.info.get("emulator") or {}).get("time_scale") or 1.0), server, hw, mp, ap,
                source.lengths, source.max_new_tokens)
    base, accept_note = _with_acceptance(base, source, [lv.concurrency for lv in source.levels])
    params = [p for p in PARAMS if p.where == "hardware" or server.draft != "none"]
    problem = _Problem(source.workload, params)
    x0 = problem.rescale(base, source.levels)
    problem.noise = problem.window_noise(problem.apply(base, x0), source.levels)
    log(f"fitting {len(params)} numbers to {len(source.levels)} levels (C = "
        f"{', '.join(str(lv.concurrency) for lv in source.levels)}); {accept_note}")
    x, sd = problem.solve(base, x0, x0, source.levels)
    twin = problem.apply(base, x)
    in_sample = problem.errors(twin, source.levels)
    loo = _leave_one_out(problem, base, source, x, x0)
    twin, power_note = _with_power(twin, problem, source)
    twin = dataclasses.replace(twin, error=_fit_error(in_sample, loo),
                               fitted={**_fitted(problem.params, x, x0, sd, accept_note), "power": power_note})
    return twin


def _with_power(twin: Twin, problem: _Problem, source: Source) -> tuple[Twin, str]:
    """The power model's range above idle scaled to the GPU's measured power at the fitted levels (least squares
    over idle + scale x (modelled - idle)): the roofline's share of a prior's range is not what a GPU draws when
    its passes are bound by launches, not by bytes or FLOPs. Idle stays the hardware profile's."""
    hw = twin.hardware
    levels = [lv for lv in source.levels if lv.concurrency in source.power_w]
    if not levels or hw.max_power_w <= hw.idle_power_w:
        return twin, "power: the hardware profile's (no GPU telemetry in the run)"
    idle = hw.idle_power_w
    above = [problem.power(twin, lv) - idle for lv in levels]   # the profile's range, as the fit left the rest
    measured = [source.power_w[lv.concurrency] - idle for lv in levels]
    scale = max(0.0, sum(a * m for a, m in zip(above, measured)) / max(1e-9, sum(a * a for a in above)))
    fitted = dataclasses.replace(twin, hardware=dataclasses.replace(hw, max_power_w=round(
        idle + scale * (hw.max_power_w - idle), 1)))
    errors = [100 * ((idle + scale * a) / (m + idle) - 1) for a, m in zip(above, measured)]
    return fitted, (f"max_power_w {hw.max_power_w:g} -> {fitted.hardware.max_power_w:g} W to the measured "
                    f"{min(measured) + idle:.0f}-{max(measured) + idle:.0f} W at C = "
                    f"{', '.join(str(lv.concurrency) for lv in levels)} (idle {idle:g} W kept; in-sample MAPE "
                    f"{float(np.mean([abs(e) for e in errors])):.1f}%)")


def figures_at(twin: Twin, source: Source) -> dict[int, dict[str, float]]:
    """The twin's figures at each of `source`'s measured levels, under that step's own window (as the fit sees it)."""
    problem = _Problem(source.workload, [])
    return {lv.concurrency: problem.figures(twin, lv) for lv in source.levels}


def power_at(twin: Twin, source: Source) -> dict[int, float]:
    """The twin's modelled GPU's mean power (W) at each of `source`'s measured levels, under that step's window."""
    problem = _Problem(source.workload, [])
    return {lv.concurrency: problem.power(twin, lv) for lv in source.levels}


def _with_acceptance(twin: Twin, source: Source, levels: Sequence[int]) -> tuple[Twin, str]:
    """accept_p per kind (and pooled) and the decay, from the requests of `levels`."""
    server = twin.server
    if server.draft == "none" or server.draft_tokens is None:
        return twin, "no drafting: no acceptance to fit"
    k = server.draft_tokens
    decay, slope = twin.algorithm.accept_decay, twin.algorithm.accept_output_slope
    how = "decay along the draft and drift along the output from the prior profile (no one-step frames)"
    if source.streams_every_step:
        steps: dict[str, dict[tuple[int, int], int]] = {}
        for (level, kind), counts in source.step_tokens.items():
            if level in levels:
                mine = steps.setdefault(kind, {})
                for key, n in counts.items():
                    mine[key] = mine.get(key, 0) + n
        found = acceptance.from_steps(steps, k)
        decay = decay if found.decay is None else found.decay
        slope = slope if found.slope is None else found.slope
        how = (f"from {found.used} verify steps' token counts: decay along the draft {decay:.3f}"
               f"{'' if found.decay is not None else ' (the prior: one drafted token)'}, drift along the output "
               f"{slope:+.3f} per 1000 tokens{'' if found.slope is not None else ' (the prior: outputs too short)'}")
    sums = [(kind, *v) for (level, kind), v in source.accepted.items() if level in levels]
    p = acceptance.fit_acceptance(sums, decay, k, slope)
    if not p:
        return twin, "no request reported its verify steps: acceptance from the prior profile"
    alg = dataclasses.replace(twin.algorithm, accept_p=p, accept_decay=round(decay, 4),
                              accept_output_slope=round(slope, 4))
    kinds = ", ".join(f"{kind} p={v:.3f}" for kind, v in p.items() if kind != acceptance.POOLED)
    return dataclasses.replace(twin, algorithm=alg), f"acceptance {kinds}; {how}"


class _Problem:
    """The least-squares problem: residuals of the twin's levels against the measured ones, plus the prior."""

    def __init__(self, workload: dict[int, list[SimPrompt]], params: Sequence[Param]) -> None:
        self.workload, self.params = workload, list(params)
        self.noise: dict[int, dict[str, float]] = {}   # level -> metric -> a window's sampling sd (log units)

    def x_of(self, twin: Twin) -> np.ndarray:
        return np.array([math.log(p.value(twin) + p.offset) for p in self.params])

    def apply(self, twin: Twin, x: np.ndarray) -> Twin:
        hw: dict[str, Any] = {}
        alg: dict[str, Any] = {}
        for p, xi in zip(self.params, x):
            value = max(0.0, math.exp(xi) - p.offset)
            (hw if p.where == "hardware" else alg)[p.name] = round(value, 6)
        return dataclasses.replace(twin, hardware=dataclasses.replace(twin.hardware, **hw),
                                   algorithm=dataclasses.replace(twin.algorithm, **alg))

    def figures(self, twin: Twin, level: Level) -> dict[str, float]:
        """The twin's figures at a measured level, under that step's own window, averaged over SEEDS."""
        return expected_figures(twin, level.concurrency, self.workload[level.concurrency],
                                as_measured(level.warmup_s, level.window_s), SEEDS)

    def power(self, twin: Twin, level: Level) -> float:
        """The twin's modelled GPU's mean power at a measured level, under that step's own window."""
        return expected_power(twin, level.concurrency, self.workload[level.concurrency],
                              as_measured(level.warmup_s, level.window_s), SEEDS)

    def window_noise(self, twin: Twin, levels: Sequence[Level]) -> dict[int, dict[str, float]]:
        """How much each figure of one measured window moves by chance alone: its spread (sd of the log) over
        seeded runs of the same window. A short window's TTFT at high C is one draw of how arrivals bunched
        (+-15% between seeds); the fit must not bend the hardware to one draw's luck."""
        out = {}
        for lv in levels:
            runs = seeded_figures(twin, lv.concurrency, self.workload[lv.concurrency],
                                  as_measured(lv.warmup_s, lv.window_s), NOISE_SEEDS)
            out[lv.concurrency] = {m: float(np.std([math.log(r[m]) for r in runs if r[m] > 0], ddof=1))
                                   for m in FITTED_METRICS if sum(r[m] > 0 for r in runs) > 1}
        return out

    def rescale(self, twin: Twin, levels: Sequence[Level]) -> np.ndarray:
        """Start from the base profiles moved as a whole to the lowest level: decode speed (bandwidth, compute,
        overheads) to its TPOT, prefill speed to its TTFT. A prior off by 10x (a CPU) starts near instead."""
        x = self.x_of(twin)
        low = levels[0]
        for _ in range(3):
            sim = self.figures(self.apply(twin, x), low)
            decode = _ratio(sim["tpot_p50_ms"], low.figures["tpot_p50_ms"])
            prefill = _ratio(sim["ttft_p50_ms"], low.figures["ttft_p50_ms"])
            for i, p in enumerate(self.params):
                value = math.exp(x[i]) - p.offset
                if p.name in ("bandwidth_efficiency", "compute_tflops"):
                    value *= decode
                elif p.name == "prefill_tflops":
                    value *= prefill
                else:
                    value /= decode
                x[i] = math.log(max(value, 0.0) + p.offset)
        return x

    def residuals(self, twin: Twin, x: np.ndarray, x0: np.ndarray, levels: Sequence[Level]) -> np.ndarray:
        fitted = self.apply(twin, x)
        out = []
        for lv in levels:
            sim = self.figures(fitted, lv)
            for m in FITTED_METRICS:
                meas, got = lv.figures.get(m, math.nan), sim[m]
                if not (meas > 0):
                    out.append(0.0)
                elif not (got > 0):
                    out.append(3.0)
                else:
                    noise = self.noise.get(lv.concurrency, {}).get(m, 0.0)
                    out.append(math.log(got / meas) / math.hypot(SIGMA[m], noise))
        prior = (x - x0) / np.array([p.prior_sd for p in self.params])
        return np.concatenate([np.array(out), prior])

    def solve(self, twin: Twin, start: np.ndarray, x0: np.ndarray, levels: Sequence[Level], max_nfev: int = 40
              ) -> tuple[np.ndarray, np.ndarray]:
        """The fitted x and each number's posterior sd (log units) from the Jacobian at the optimum."""
        result = least_squares(lambda x: self.residuals(twin, x, x0, levels), start, method="trf",
                               diff_step=0.02, max_nfev=max_nfev, x_scale=1.0, ftol=TOL, xtol=TOL, gtol=TOL)
        try:
            cov = np.linalg.inv(result.jac.T @ result.jac)
            sd = np.sqrt(np.clip(np.diag(cov), 0.0, None))
        except np.linalg.LinAlgError:
            sd = np.array([p.prior_sd for p in self.params])
        return result.x, sd

    def errors(self, twin: Twin, levels: Sequence[Level]) -> dict[int, dict[str, float]]:
        """% error of the twin at each level, per metric (accept_len included)."""
        out = {}
        for lv in levels:
            sim = self.figures(twin, lv)
            out[lv.concurrency] = {m: 100.0 * (sim[m] / lv.figures[m] - 1.0) for m in METRICS
                                   if lv.figures.get(m, math.nan) > 0 and sim[m] == sim[m]}
        return out


def _leave_one_out(problem: _Problem, base: Twin, source: Source, x: np.ndarray, x0: np.ndarray
                   ) -> dict[int, dict[str, float]]:
    """Each level predicted by the twin fitted without it (acceptance refitted without its requests too)."""
    out = {}
    for lv in source.levels:
        rest = [other for other in source.levels if other is not lv]
        without, _ = _with_acceptance(base, source, [other.concurrency for other in rest])
        xi, _ = problem.solve(without, x, x0, rest, max_nfev=15)
        out.update(problem.errors(problem.apply(without, xi), [lv]))
    return out


def _fit_error(in_sample: dict[int, dict[str, float]], loo: dict[int, dict[str, float]]) -> FitError:
    def mape(errors: dict[int, dict[str, float]]) -> dict[str, float]:
        return {m: round(float(np.mean([abs(e[m]) for e in errors.values() if m in e])), 2) for m in METRICS
                if any(m in e for e in errors.values())}

    misses = [(abs(e[m]), lv, m) for lv, e in loo.items() for m in e]
    worst = "none"
    if misses:
        _, lv, m = max(misses)
        worst = f"{m} at C={lv}: {loo[lv][m]:+.1f}% (left out of the fit)"
    spread = {m: round(float(np.sqrt(np.mean([math.log1p(e[m] / 100) ** 2 for e in loo.values() if m in e]))), 4)
              for m in METRICS if any(m in e for e in loo.values())}
    return FitError(mape(in_sample), mape(loo), worst, spread)


def _fitted(params: Sequence[Param], x: np.ndarray, x0: np.ndarray, sd: np.ndarray, accept_note: str) -> dict:
    """Per fitted number: its value, the prior it started from, and whether the data moved it (its posterior sd
    well below the prior's) or the prior holds it (the levels cannot tell it apart from another number)."""
    out: dict = {"acceptance": accept_note}
    for p, xi, x0i, sdi in zip(params, x, x0, sd):
        out[p.name] = {"value": round(math.exp(xi) - p.offset, 6), "prior": round(math.exp(x0i) - p.offset, 6),
                       "sd_pct": round(100 * float(sdi), 1),
                       "set_by": "data" if sdi < 0.5 * p.prior_sd else "prior", "identified_by": p.identified_by}
    return out


def _ratio(sim: float, measured: float) -> float:
    """sim / measured, within [0.05, 20]; 1 when either is unknown."""
    if not (sim > 0 and measured > 0):
        return 1.0
    return min(20.0, max(0.05, sim / measured))
