"""The twin file: the profiles the emulator's engine runs on, with what the server reported about itself, where it
was fitted from, and the error of that fit (docs/twin.md). TOML, so a what-if can be edited by hand."""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from loadgen.emulator.costmodel import CostModel
from loadgen.emulator.engine import Engine, resolve_min_free_slots
from loadgen.emulator.profiles import AlgorithmProfile, HardwareProfile, ModelProfile
from loadgen.emulator.spec import SpecConfig
from loadgen.errors import ConfigError
from loadgen.prompts.length import LengthFit, LengthModel

LIMIT_PCT = 15.0     # a twin whose error is above this says so in one line (docs/twin.md: reading its error)
METRICS = ("tok_s", "ttft_p50_ms", "ttft_p90_ms", "tpot_p50_ms", "accept_len")
DRIFT_METRICS = ("tok_s", "tpot_p50_ms")   # a node is named off its twin on these (TTFT at low C is the noisiest)
DRIFT_FLOOR = 0.20   # a drift band is at least this wide: one level's figure is one draw of it (docs/twin.md)


@dataclass(frozen=True)
class ServerSide:
    """What the server reported about itself (steps.server_info), read instead of fitted."""

    algorithm: str                  # NONE | NEXTN | EAGLE | DFLASH | DRAFT (llama.cpp drafting) | ...
    draft: str                      # none | chain | block: how the draft costs (a chain: per draft step)
    num_steps: int | None
    topk: int | None
    draft_tokens: int | None        # tokens verified per request per step (SGLang's num_draft_tokens)
    max_running: int                # max_running_requests (llama.cpp: total_slots)
    kv_pool_tokens: int             # max_total_num_tokens (llama.cpp: the context of all slots)
    max_prefill_tokens: int = 16384
    min_free_slots: int | None = None   # the server's explicit min_free_slots_delay, else SGLang's default

    def spec(self, profile: AlgorithmProfile) -> SpecConfig:
        if self.algorithm == "NONE" or self.draft == "none":
            return SpecConfig(None, None, None, None, None, profile)
        return SpecConfig(self.algorithm, self.num_steps, self.topk, self.draft_tokens, None, profile)

    def with_draft_tokens(self, tokens: int, key: str = "draft_tokens") -> ServerSide:
        """Another draft budget: a chain drafts tokens - 1 steps (topk 1), a block drafts `tokens` at once."""
        if self.draft == "none":
            raise ConfigError(key, f"the twin's server does not draft ({self.algorithm})",
                              "leave draft_tokens out, or take the algorithm from a drafting twin (algorithm_from)")
        if tokens < 2:
            raise ConfigError(key, f"must be >= 2 (one drafted token and the bonus), got {tokens}")
        steps = tokens - 1 if self.draft == "chain" else 1
        return dataclasses.replace(self, num_steps=steps, draft_tokens=tokens)


@dataclass(frozen=True)
class FitError:
    """How far the twin was from the measurement it was fitted to: mean absolute % error per metric over the fit's
    levels (in-sample) and over each level predicted from a fit without it (leave-one-level-out)."""

    in_sample: dict[str, float]
    leave_one_out: dict[str, float]
    worst: str                      # `ttft_p90_ms at C=16: +12.3%`, the largest leave-one-out miss
    spread: dict[str, float]        # RMS of the leave-one-out log errors per metric: the prediction's interval

    @property
    def in_sample_mape_pct(self) -> float:
        return _mean(self.in_sample.values())

    @property
    def loo_mape_pct(self) -> float:
        return _mean(self.leave_one_out.values())

    @property
    def max_mape_pct(self) -> float:
        """The largest MAPE of any metric, in-sample or leave-one-level-out: what LIMIT_PCT is held against."""
        return max([*self.in_sample.values(), *self.leave_one_out.values()], default=0.0)

    def over_limit(self) -> str | None:
        """One line when a metric's error is above LIMIT_PCT, else None."""
        if self.max_mape_pct <= LIMIT_PCT:
            return None
        both = {**self.in_sample, **{m: max(e, self.in_sample.get(m, 0.0)) for m, e in self.leave_one_out.items()}}
        metric = max(both, key=lambda m: both[m])
        return (f"error over {LIMIT_PCT:g}%: {metric} MAPE {both[metric]:.0f}% (worst: {self.worst}); "
                "its predictions are rough, measure before you decide")

    def describe(self) -> str:
        return (f"fit error: in-sample MAPE {self.in_sample_mape_pct:.1f}%, leave-one-level-out "
                f"{self.loo_mape_pct:.1f}% (worst: {self.worst})")

    def to_json(self) -> dict:
        return {"in_sample": self.in_sample, "leave_one_out": self.leave_one_out, "worst": self.worst,
                "spread": self.spread, "in_sample_mape_pct": round(self.in_sample_mape_pct, 2),
                "loo_mape_pct": round(self.loo_mape_pct, 2), "max_mape_pct": round(self.max_mape_pct, 2)}


@dataclass(frozen=True)
class Twin:
    """One measured target's twin."""

    source: dict[str, Any]          # run, target, results, server, emulated, fit_levels, loadgen_version
    time_scale: float               # the source's modelled hardware ran this many times faster (emulator)
    server: ServerSide
    hardware: HardwareProfile
    model: ModelProfile
    algorithm: AlgorithmProfile
    lengths: LengthModel            # prompt tokens the server counted, by prompt kind
    max_new_tokens: int             # the source's workload (a prediction takes its own from its experiment)
    error: FitError | None = None
    fitted: dict[str, Any] = field(default_factory=dict)   # parameter -> how it was found (docs/twin.md)
    what_if: str = ""               # what a prediction changed from the fitted twin (empty: nothing)

    @property
    def name(self) -> str:
        return f"{self.source.get('target')} of run {self.source.get('run')}"

    def spec(self) -> SpecConfig:
        return self.server.spec(self.algorithm)

    def engine(self, seed: int) -> Engine:
        """The emulator's engine on the twin's numbers; the KV pool is the server's own (already the algorithm's)."""
        model = dataclasses.replace(self.model, kv_pool_tokens=self.server.kv_pool_tokens)
        algorithm = dataclasses.replace(self.algorithm, kv_pool_fraction=1.0)
        spec = self.server.spec(algorithm)
        free = resolve_min_free_slots(self.server.min_free_slots, self.server.max_running, spec.algorithm == "DFLASH")
        return Engine(CostModel(self.hardware, model, spec, self.time_scale), spec, model,
                      max_running=self.server.max_running, max_queued=None, seed=seed, decode_log_interval=40,
                      max_prefill_tokens=self.server.max_prefill_tokens, min_free_slots=free)

    def prompt_tokens(self, kind: str, texts: tuple[str, ...]) -> int:
        return max(1, round(self.lengths.fit(kind).estimate(texts)))

    def band(self, metric: str) -> float:
        """The drift band of `metric` (a fraction): twice the fit's leave-one-level-out spread (the RMS of its log
        errors), at least DRIFT_FLOOR; a measured level off the twin by more than it names the node."""
        spread = self.error.spread.get(metric, 0.0) if self.error else 0.0
        return max(2 * spread, DRIFT_FLOOR)

    def fitted_on(self) -> str:
        """The date the twin was fitted (YYYY-MM-DD), else its source run's id (twins fitted before it was kept)."""
        return str(self.source.get("fitted_on") or f"run {self.source.get('run')}")

    def describe_source(self) -> str:
        s = self.source
        levels = ", ".join(f"{v:g}" for v in s.get("fit_levels", []))
        return f"twin of {s.get('target')} (run {s.get('run')}, fitted at C = {levels})"

    def provenance(self) -> dict:
        """What a predicted step records in steps.server_info["twin"] (views.sql twin_sources)."""
        return {"source_run": self.source.get("run"), "source_target": self.source.get("target"),
                "fit_levels": self.source.get("fit_levels", []), "server": self.source.get("server"),
                "error": self.error.to_json() if self.error else None, "what_if": self.what_if or None}

    # ---- the file
    def to_toml(self) -> str:
        data: dict[str, Any] = {
            "twin": {**self.source, "time_scale": self.time_scale, "max_new_tokens": self.max_new_tokens},
            "server": {k: v for k, v in dataclasses.asdict(self.server).items() if v is not None},
            "hardware": dataclasses.asdict(self.hardware),
            "model": dataclasses.asdict(self.model),
            "algorithm": {k: v for k, v in dataclasses.asdict(self.algorithm).items() if v is not None},
            "prompt_tokens": {kind: dataclasses.asdict(f) for kind, f in self.lengths.fits},
            "fitted": self.fitted,
        }
        if self.error:
            data["error"] = self.error.to_json()
        head = (f"# loadgen twin: {self.describe_source()}. Written by `loadgen twin fit`; docs/twin.md says what\n"
                "# each number is and which measurements fix it. Edit [server] for a what-if, or give overrides\n"
                "# in the experiment's [targets.twin] table.\n")
        return head + tomli_w.dumps(data)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_toml())


NO_DRAFT = {"num_steps": None, "topk": None, "draft_tokens": None}   # TOML has no None: a server that does not
                                                                     # draft leaves these out of its file


def load_twin(path: str | Path, key: str = "twin") -> Twin:
    """Read a twin file; every problem is a ConfigError on `key` naming the file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(key, f"twin file not found: {path}", "write one with `loadgen twin fit ... -o FILE`")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(key, f"{path} is not valid TOML: {exc}") from exc
    try:
        head = dict(data["twin"])
        time_scale = float(head.pop("time_scale", 1.0))
        max_new = int(head.pop("max_new_tokens"))
        server = ServerSide(**{**NO_DRAFT, **data["server"]})
        hardware = HardwareProfile(**data["hardware"])
        model = ModelProfile(**data["model"])
        algorithm = AlgorithmProfile(**data["algorithm"])
        fits = tuple((kind, LengthFit(**f)) for kind, f in data.get("prompt_tokens", {}).items())
        error = _error(data.get("error"))
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(key, f"{path} is not a twin file ({exc.__class__.__name__}: {exc})",
                          "write one with `loadgen twin fit`") from None
    return Twin(head, time_scale, server, hardware, model, algorithm, LengthModel(fits, counted=bool(fits)),
                max_new, error, data.get("fitted", {}))


def _error(table: dict | None) -> FitError | None:
    if not table:
        return None
    return FitError(dict(table["in_sample"]), dict(table["leave_one_out"]), str(table["worst"]),
                    dict(table.get("spread", {})))


def _mean(values: Any) -> float:
    v = list(values)
    return sum(v) / len(v) if v else 0.0
