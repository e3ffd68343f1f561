"""Typed experiment config, loaded from TOML and validated completely before any request is sent.

Every error names the dotted key, what is wrong and the fix. Unknown keys are errors (a misspelt key that is
silently ignored is a wrong experiment that looks right).
"""

from __future__ import annotations

import difflib
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from loadgen.arrivals import OpenLoopConfig, parse_open_loop
from loadgen.errors import ConfigError
from loadgen.prompts.mix import PromptsConfig, parse_prompts_config
from loadgen.secrets import flag_ref, is_secret_name
from loadgen.protocol import ADAPTERS
from loadgen.search import SearchConfig, parse_search
from loadgen.slo import Slo, parse_slo

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
EMULATOR_ALGORITHMS = ("NONE", "EAGLE", "EAGLE3", "NEXTN", "DFLASH")
_TYPE_NAMES = {dict: "a table", list: "a list", str: "a string", int: "a whole number", float: "a number",
               bool: "true or false"}


@dataclass(frozen=True)
class TargetConfig:
    name: str
    flavor: str
    url: str | None                  # a running server, or None when loadgen launches an emulator
    emulator_args: tuple[str, ...]   # `python -m loadgen.emulator` flags (launch_server style), if launched
    node: str
    api_key_env: str | None
    api_key_file: str | None = None  # read on the worker; the key itself is never stored
    model: str | None = None         # openai-*: the `model` field; None = the first of GET /v1/models
    continuous_usage: bool = True    # openai-*: ask for usage on every frame (per-frame token counts)
    spec_details: bool | None = None  # openai-*: ask for SGLang's spec_tokens_details; None = if SGLang >= 0.5.23


@dataclass(frozen=True)
class LoadConfig:
    mode: str
    concurrency: tuple[int, ...]
    repeats: int
    warmup_s: float
    measure_s: float
    drain_timeout_s: float
    stall_timeout_s: float
    request_timeout_s: float
    workers_per_target: int
    schedule: str                    # together: every target in the same step; one_at_a_time: each alone
    flush_cache: bool
    open_loop: OpenLoopConfig | None = None  # mode "open": rates and arrival process (concurrency is empty)
    requests: int | None = None      # fixed-count steps: exactly this many requests per target, all measured
    min_measured: int | None = None  # closed loop: the window stays open until this many were sent in it
    max_measure_s: float = 0.0       # ... but no longer than this (0: measure_s x 5)
    error_budget: float | None = None  # failed requests a step may have: a count (>= 1) or a share (< 1)
    on_worker_death: str = "continue"  # continue | stop: what a run does after a load worker died
    realtime_priority: bool = True   # workers read at SCHED_FIFO (see worker._raise_priority)
    search: SearchConfig | None = None  # search = "capacity": levels chosen from finished steps' SLO verdicts
    stop_after_slo_failures: int | None = None  # grids: drop a target after this many failed levels in a row


@dataclass(frozen=True)
class Experiment:
    name: str
    results: str | None
    load: LoadConfig
    prompts: PromptsConfig
    targets: tuple[TargetConfig, ...]  # with a fleet: every stage's targets (loadgen.fleet)
    source: str = ""                 # the file it came from, for messages
    raw: dict[str, Any] = field(default_factory=dict, compare=False)
    fleet: Any = None                # loadgen.fleet.Fleet when the file has [fleet] instead of [[targets]]
    slo: Slo | None = None           # [slo]: what an acceptable experience is; steps pass or fail it


class StrictTable:
    """Reads one TOML table, remembering which keys were used so leftovers can be reported."""

    def __init__(self, data: Any, key: str) -> None:
        if not isinstance(data, dict):
            raise ConfigError(key, f"must be a table, got {type(data).__name__}", f"write it as [{key}]")
        self.data, self.key, self.used = data, key, set()

    def _key(self, name: str) -> str:
        return f"{self.key}.{name}" if self.key else name

    def get(self, name: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        key = self._key(name)
        self.used.add(name)
        if name not in self.data:
            if default is ...:
                where = f"[{self.key}]" if self.key else "the file"
                close = difflib.get_close_matches(name, set(self.data) - self.used, n=1)
                fix = f"did you mean `{name}` for `{close[0]}`?" if close else f"add `{name} = ...` to {where}"
                raise ConfigError(key, "is required", fix)
            return default
        value = self.data[name]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            names = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
            scalar = isinstance(value, (bool, int, float, str))
            fix = f"write `{name} = [{_toml(value)}]`" if list in kinds and scalar else ""
            raise ConfigError(key, f"must be {names}, got {type(value).__name__} {value!r}", fix)
        return value

    def positive(self, name: str, default: float, allow_zero: bool = False) -> float:
        value = self.get(name, float, default)
        if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
            bound = ">= 0" if allow_zero else "> 0"
            raise ConfigError(self._key(name), f"must be a finite number {bound}, got {value!r}")
        return value

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            close = difflib.get_close_matches(unknown[0], self.used, n=1)
            known = ", ".join(sorted(self.used))
            fix = f"did you mean `{close[0]}`? (known keys here: {known})" if close else f"known keys here: {known}"
            raise ConfigError(self._key(unknown[0]), "unknown key", fix)


def _toml(value: bool | int | float | str) -> str:
    """A scalar as TOML writes it (for a fix the user can paste)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else repr(value)


def load_experiment(path: str | Path, slo: dict[str, float] | None = None) -> Experiment:
    """Read and validate an experiment TOML file; `slo` (from --slo) sets or overrides lines of its [slo]."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("--config", f"file not found: {path}", "give the path of an experiment .toml file")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), f"not valid TOML: {exc}") from exc
    if slo:
        data["slo"] = {**data.get("slo", {}), **slo}
    return parse_experiment(data, path.parent.resolve(), str(path))


def parse_experiment(data: dict, base_dir: Path, source: str = "experiment") -> Experiment:
    top = StrictTable(data, "")
    run = StrictTable(top.get("run", dict, {}), "run")
    name = run.get("name", str, Path(source).stem)
    if not NAME_PATTERN.match(name):
        raise ConfigError("run.name", f"{name!r} is not a safe name",
                          "use letters, digits, '.', '_' or '-' (it becomes part of paths and SQL)")
    results = run.get("results", str, None)
    run.done()
    load = _parse_load(StrictTable(top.get("load", dict, {}), "load"))
    prompts = parse_prompts_config(top.get("prompts", dict, {}), "prompts", base_dir)
    slo_table = top.get("slo", dict, None)
    slo = None if slo_table is None else parse_slo(slo_table)
    if slo is None and (load.search or load.stop_after_slo_failures):
        key = "load.search" if load.search else "load.stop_after_slo_failures"
        raise ConfigError(key, "needs an SLO to judge steps by",
                          "add an [slo] table, e.g. ttft_ms = 2000 and tpot_ms = 100 (or --slo)")
    fleet_table = top.get("fleet", dict, None)
    raw_targets = top.get("targets", list, ... if fleet_table is None else [])
    top.done()
    fleet = None
    if fleet_table is not None:
        if raw_targets:
            raise ConfigError("targets", "cannot be combined with [fleet]", "the fleet's nodes are the targets")
        from loadgen.fleet import parse_fleet  # the fleet module builds on this one
        fleet = parse_fleet(fleet_table, base_dir)
        targets = fleet.all_targets()
    elif not raw_targets:
        raise ConfigError("targets", "is empty", "add at least one [[targets]] table")
    else:
        targets = tuple(_parse_target(t, f"targets[{i}]", base_dir) for i, t in enumerate(raw_targets))
    names = [t.name for t in targets]
    for i, t in enumerate(targets):
        if names.index(t.name) != i:
            raise ConfigError(f"targets[{i}].name", f"duplicate target name {t.name!r}", "give every target a unique name")
    urls = [t.url for t in targets if t.url]
    if len(urls) != len(set(urls)):
        raise ConfigError("targets", "two targets have the same url", "list each server once")
    return Experiment(name, results, load, prompts, targets, source, data, fleet, slo)


def _parse_load(t: StrictTable) -> LoadConfig:
    mode = t.get("mode", str, "closed")
    if mode not in ("closed", "open"):
        raise ConfigError("load.mode", f"unknown mode {mode!r}",
                          "use \"closed\" (fixed concurrency) or \"open\" (arrivals at a rate)")
    search = parse_search(t, rates=mode == "open")
    open_loop = parse_open_loop(t, mode, searching=search is not None)
    levels = t.get("concurrency", list) if open_loop is None and search is None else []
    if not levels and open_loop is None and search is None:
        raise ConfigError("load.concurrency", "is empty", "list the levels to sweep, e.g. [1, 2, 4, 8]")
    for i, c in enumerate(levels):
        if not isinstance(c, int) or isinstance(c, bool) or c < 1:
            raise ConfigError(f"load.concurrency[{i}]", f"must be a whole number >= 1, got {c!r}")
    if len(set(levels)) != len(levels):
        raise ConfigError("load.concurrency", "has a level twice", "use `repeats` to run a level again")
    repeats = t.get("repeats", int, 1)
    if repeats < 1:
        raise ConfigError("load.repeats", f"must be >= 1, got {repeats}")
    workers = t.get("workers_per_target", int, 1)
    if workers < 1:
        raise ConfigError("load.workers_per_target", f"must be >= 1, got {workers}")
    if open_loop is not None and open_loop.max_in_flight < workers:
        raise ConfigError("load.max_in_flight", f"{open_loop.max_in_flight} is below workers_per_target = {workers}",
                          "every worker needs at least one slot: raise max_in_flight")
    schedule = t.get("schedule", str, "together")
    if schedule not in ("together", "one_at_a_time"):
        raise ConfigError("load.schedule", f"unknown schedule {schedule!r}", "use \"together\" or \"one_at_a_time\"")
    requests = t.get("requests", int, None)
    if requests is not None and requests < 1:
        raise ConfigError("load.requests", f"must be >= 1, got {requests}", "or leave it out for timed windows")
    if requests is not None and ("measure_s" in t.data or "warmup_s" in t.data):
        raise ConfigError("load.requests", "fixed-count steps have no timed window",
                          "drop measure_s/warmup_s, or drop requests")
    config = LoadConfig(
        requests=requests, mode=mode, concurrency=tuple(levels), repeats=repeats, open_loop=open_loop,
        warmup_s=t.positive("warmup_s", 3.0, allow_zero=True), measure_s=t.positive("measure_s", 20.0),
        drain_timeout_s=t.positive("drain_timeout_s", 120.0, allow_zero=True),
        stall_timeout_s=t.positive("stall_timeout_s", 60.0), request_timeout_s=t.positive("request_timeout_s", 900.0),
        workers_per_target=workers, schedule=schedule, flush_cache=t.get("flush_cache", bool, True),
        error_budget=_error_budget(t), on_worker_death=_choice(t, "on_worker_death", ("continue", "stop")),
        min_measured=t.get("min_measured_requests", int, None), max_measure_s=t.positive("max_measure_s", 0.0, True),
        realtime_priority=t.get("realtime_priority", bool, True), search=search,
        stop_after_slo_failures=t.get("stop_after_slo_failures", int, None))
    t.done()
    if config.stop_after_slo_failures is not None and (search or config.stop_after_slo_failures < 1):
        raise ConfigError("load.stop_after_slo_failures", "must be >= 1, and only applies to a grid of levels",
                          "e.g. 2: stop a target once it failed the SLO at two levels in a row")
    if config.min_measured is not None and config.min_measured < 1:
        raise ConfigError("load.min_measured_requests", f"must be >= 1, got {config.min_measured}",
                          "or leave it out: at least one request per unit of concurrency")
    if config.max_measure_s and config.max_measure_s < config.measure_s:
        raise ConfigError("load.max_measure_s", f"{config.max_measure_s:g} is below measure_s = {config.measure_s:g}",
                          "the window can only be extended: raise it or leave it out")
    return config


def _error_budget(t: StrictTable) -> float | None:
    """A whole number is a count of failed requests per step; a fraction below 1 is a share of them."""
    raw = t.data.get("error_budget")
    value = t.get("error_budget", (int, float), None)
    if value is None:
        return None
    fix = "a whole number of failed requests per step (e.g. 10), or a share below 1 (e.g. 0.05)"
    if isinstance(raw, int) and value < 0 or isinstance(raw, float) and not 0 < value < 1:
        raise ConfigError("load.error_budget", f"must be {fix}, got {raw!r}", "or leave it out: never stop")
    return value


def _choice(t: StrictTable, name: str, options: tuple[str, ...]) -> str:
    value = t.get(name, str, options[0])
    if value not in options:
        raise ConfigError(f"load.{name}", f"unknown value {value!r}", "use " + " or ".join(f'"{o}"' for o in options))
    return value


def _parse_target(raw: Any, key: str, base_dir: Path) -> TargetConfig:
    t = StrictTable(raw, key)
    name = t.get("name", str)
    if not NAME_PATTERN.match(name):
        raise ConfigError(f"{key}.name", f"{name!r} is not a safe name", "use letters, digits, '.', '_' or '-'")
    flavor = t.get("flavor", str, "auto")  # auto: the worker's preflight identifies the server (loadgen.serverid)
    if flavor != "auto" and flavor not in ADAPTERS:
        raise ConfigError(f"{key}.flavor", f"unknown flavor {flavor!r}",
                          f"use auto or one of {', '.join(sorted(ADAPTERS))}")
    url = t.get("url", str, None)
    emulator = t.get("emulator", dict, None)
    if (url is None) == (emulator is None):
        raise ConfigError(key, "needs exactly one of `url` (a running server) or [emulator] (launched by loadgen)",
                          "set url = \"http://host:port\" or add a [targets.emulator] table")
    if url is not None:
        check_url(url, f"{key}.url")
        url = url.rstrip("/")
    args: tuple[str, ...] = ()
    if emulator is not None:
        args = emulator_args(emulator, f"{key}.emulator", base_dir)
        if "model-path" not in emulator:  # required by launch_server's flags; the emulator only reports it
            args += ("--model-path", "emulated/qwen3.8-27b-nvfp4")
        _check_emulator_flags(args, f"{key}.emulator")
    node = t.get("node", str, "local")
    api_key_env = t.get("api_key_env", str, None)
    api_key_file = t.get("api_key_file", str, None)
    if api_key_env is not None and api_key_file is not None:
        raise ConfigError(f"{key}.api_key_file", "cannot be combined with api_key_env", "give the key one way")
    if api_key_file is not None:
        api_key_file = str((base_dir / api_key_file).resolve())  # read on the worker, at preflight
    openai = _openai_options(t, key, flavor)
    t.done()
    return TargetConfig(name, flavor, url, args, node, api_key_env, api_key_file, *openai)


def _openai_options(t: StrictTable, key: str, flavor: str) -> tuple[str | None, bool, bool | None]:
    """model, continuous_usage, spec_details: request options of the openai-* flavours only."""
    if not flavor.startswith("openai-") and flavor != "auto":
        for name in ("model", "continuous_usage", "spec_details"):
            if name in t.data:
                raise ConfigError(f"{key}.{name}", f"only applies to openai-* flavors (flavor is {flavor!r})",
                                  "remove it, or set flavor = \"openai-completions\" / \"openai-chat\"")
    model = t.get("model", str, None)
    if model is not None and not model:
        raise ConfigError(f"{key}.model", "is empty", "leave it out to use the server's first model")
    return model, t.get("continuous_usage", bool, True), t.get("spec_details", bool, None)


def check_url(url: str, key: str) -> None:
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ConfigError(key, f"{url!r} is not an http://host:port URL", "e.g. url = \"http://127.0.0.1:30000\"")
    try:
        parts.port
    except ValueError as exc:
        raise ConfigError(key, f"bad port in {url!r}", "a port is 1..65535, e.g. url = \"http://127.0.0.1:30000\"") from exc
    if parts.path not in ("", "/"):
        raise ConfigError(key, f"{url!r} has a path", "give the server root; the route comes from the flavor")


def emulator_args(table: dict, key: str, base_dir: Path) -> tuple[str, ...]:
    """[targets.emulator] keys are launch_server flags without the dashes: speculative-algorithm = "NEXTN"."""
    args: list[str] = []
    for flag, value in table.items():
        if flag in ("host", "port"):
            raise ConfigError(f"{key}.{flag}", "is chosen by loadgen", "remove it")
        if flag == "speculative-algorithm" and value not in EMULATOR_ALGORITHMS:
            raise ConfigError(f"{key}.{flag}", f"unknown algorithm {value!r}", f"use one of {', '.join(EMULATOR_ALGORITHMS)}")
        if flag == "speculative-draft-model-path" and isinstance(value, str):
            value = str((base_dir / value).resolve())
        if is_secret_name(flag):   # api-key = { env = "VAR" } | { file = "path" }; a literal is refused
            args += [f"--{flag}", flag_ref(value, f"{key}.{flag}", base_dir)]
        elif isinstance(value, bool):
            if value:
                args.append(f"--{flag}")
        elif isinstance(value, (int, float, str)):
            args += [f"--{flag}", str(value)]
        else:
            raise ConfigError(f"{key}.{flag}", f"must be a string, number or boolean, got {type(value).__name__}")
    return tuple(args)


def _check_emulator_flags(args: tuple[str, ...], key: str) -> None:
    """Parse the flags with the emulator's own parser now, so a typo fails before any server starts."""
    from loadgen.emulator.args import build_parser

    parser = build_parser()
    parser.allow_abbrev = False  # a misspelt flag must not pass as an abbreviation of a real one

    def error(message: str) -> None:
        raise ConfigError(key, f"the emulator rejects these flags: {message}",
                          "see python -m loadgen.emulator --help (keys are its flags without the dashes)")

    parser.error = error  # type: ignore[method-assign]
    parser.parse_args([*args, "--host", "127.0.0.1", "--port", "1"])
