"""Hardware, model and algorithm profiles: the timing model's numbers live in TOML files, not code.

A profile name resolves to `profiles/<kind>/<name>.toml` inside the package; a path to a `.toml` file
is accepted too, so what-if studies can use their own numbers without editing the package.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any

from loadgen.errors import ConfigError


@dataclass(frozen=True, slots=True)
class HardwareProfile:
    """What one accelerator achieves: bandwidth and compute a decode step actually sees."""

    name: str
    description: str
    mem_bandwidth_gbs: float
    bandwidth_efficiency: float
    compute_tflops: float
    prefill_tflops: float
    step_overhead_ms: float
    request_overhead_ms: float
    zero_cost: bool = False
    # The GPU's telemetry (loadgen.emulator.gpu): served as a DCGM exporter's /metrics; zero: no GPU modelled
    gpu_name: str = ""
    idle_power_w: float = 0.0
    max_power_w: float = 0.0
    power_memory_weight: float = 0.0   # share of the idle-to-max power range a memory-bound forward draws
    power_compute_weight: float = 0.0  # ... and a compute-bound one
    sm_clock_max_mhz: float = 0.0
    sm_clock_idle_mhz: float = 0.0
    ambient_c: float = 0.0
    degrees_per_w: float = 0.0         # steady temperature above ambient per watt drawn
    thermal_tau_s: float = 60.0        # how fast the temperature follows the power (modelled seconds)

    @property
    def bytes_per_s(self) -> float:
        return self.mem_bandwidth_gbs * 1e9 * self.bandwidth_efficiency


@dataclass(frozen=True, slots=True)
class ModelProfile:
    """The target model: what one forward reads and computes."""

    name: str
    architectures: list[str]
    params_b: float
    weight_gb: float
    kv_kb_per_token: float
    state_mb_per_request: float
    kv_pool_tokens: int
    context_len: int
    vocab_size: int
    eos_token_id: int
    natural_output_mean: float


@dataclass(frozen=True, slots=True)
class AlgorithmProfile:
    """A speculative algorithm on that model: draft cost and acceptance by prompt kind."""

    name: str
    draft: str                                   # none | chain | block
    default_num_steps: int = 0
    default_eagle_topk: int = 0
    default_num_draft_tokens: int = 0
    draft_weight_gb: float = 0.0
    draft_params_b: float = 0.0
    draft_forward_ms: float = 0.0                # latency floor of one small-batch draft forward
    kv_pool_fraction: float = 1.0
    state_snapshot_mb: float = 0.0
    accept_decay: float = 1.0
    accept_sigma: float = 0.0
    accept_output_slope: float = 0.0             # relative change of p per 1000 output tokens (0: none; a twin's fit)
    accept_p: dict[str, float] | None = None

    def p_for(self, kind: str) -> float:
        """Acceptance probability of one drafted token for a prompt kind; an unknown kind gets the table's "*"
        (a twin's pooled figure), else prose's; a tool call's JSON (`tool_call`) without its own figure, code's."""
        table = self.accept_p or {}
        if kind == "tool_call" and kind not in table:
            kind = "code"
        return table.get(kind, table.get("*", table.get("prose", 0.0)))


_KINDS = {"hardware": HardwareProfile, "models": ModelProfile, "algorithms": AlgorithmProfile}


def available(kind: str) -> list[str]:
    """Names of the profiles shipped for `kind` (hardware | models | algorithms)."""
    folder = resources.files("loadgen.emulator") / "profiles" / kind
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def _read(kind: str, name: str) -> dict[str, Any]:
    flag = {"hardware": "--hardware", "models": "--model-profile", "algorithms": "algorithm"}[kind]
    if name.endswith(".toml"):
        path = Path(name)
        if not path.is_file():
            raise ConfigError(flag, f"profile file {name!r} does not exist", "give an existing .toml path")
        text = path.read_text()
    else:
        res = resources.files("loadgen.emulator") / "profiles" / kind / f"{name}.toml"
        if not res.is_file():
            raise ConfigError(flag, f"unknown profile {name!r}", f"use one of {available(kind)} or a .toml path")
        text = res.read_text()
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(flag, f"profile {name!r} is not valid TOML: {exc}", "fix the file") from exc


def load(kind: str, name: str) -> Any:
    """Load one profile; every key must be known and every required key present."""
    cls = _KINDS[kind]
    data = _read(kind, name)
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{kind}/{name}.{unknown[0]}", "unknown profile key", f"use one of {sorted(known)}")
    try:
        return cls(**data)
    except TypeError as exc:
        raise ConfigError(f"{kind}/{name}", f"incomplete profile: {exc}", "add the missing keys") from exc
