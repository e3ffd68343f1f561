"""The experiment file: load, prompts, SLO and targets (or a fleet), validated completely before any request is
sent. Unknown keys are errors (a misspelt key that is silently ignored is a wrong experiment that looks right).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from loadgen.config.cost import Prices, read_prices
from loadgen.config.fleet import Fleet, parse_fleet
from loadgen.config.load import LoadConfig, parse_load, parse_load_table
from loadgen.config.tables import check_name, load_toml
from loadgen.config.targets import TargetConfig, TwinRef, parse_target, parse_twin_ref
from loadgen.config.trace import trace_prompts
from loadgen.errors import ConfigError
from loadgen.keys import REQUIRED, Key, Keys, StrictTable
from loadgen.prompts.mix import PromptsConfig, parse_prompts_config
from loadgen.results.slo import Slo, parse_slo
from loadgen.servers.secrets import masked

__all__ = ["RUN", "TOP", "Experiment", "LoadConfig", "config_hash", "experiment_document", "load_experiment",
           "parse_experiment", "parse_load_table"]

TOP = Keys("", "The file's tables; every one but the targets (or a fleet) is optional.", (
    Key("run", dict, {}, "the run's name and where its results go"),
    Key("load", dict, {}, "how hard and how long each step drives the targets"),
    Key("prompts", dict, {}, "what is asked (loadgen/prompts/README.md)"),
    Key("slo", dict, None, "what an acceptable experience is; each step passes or fails it"),
    Key("cost", dict, None, "prices: the answer's cost per million output tokens"),
    Key("targets", list, REQUIRED, "the servers driven, a [[targets]] table each", shown="required without [fleet]"),
    Key("fleet", dict, None, "a fleet of nodes and launch profiles instead of [[targets]] (docs/fleets.md)"),
))
RUN = Keys("run", "The run.", (
    Key("name", str, None, "part of the run id: letters, digits, . _ -", shown="the file's name"),
    Key("results", str, None, "the results folder, relative to where the job runs", shown="--results, else ./results"),
))


@dataclass(frozen=True)
class Experiment:
    name: str
    results: str | None
    load: LoadConfig
    prompts: PromptsConfig
    targets: tuple[TargetConfig, ...]  # with a fleet: every stage's targets
    source: str = ""                 # the file it came from, for messages
    raw: dict[str, Any] = field(default_factory=dict, compare=False)
    fleet: Fleet | None = None       # when the file has [fleet] instead of [[targets]]
    slo: Slo | None = None           # [slo]: what an acceptable experience is; steps pass or fail it
    cost: Prices | None = None       # [cost]: what a node hour and a kWh cost; a [[targets]]'s own: TargetConfig.cost


def load_experiment(path: str | Path, slo: dict[str, float] | None = None) -> Experiment:
    """Read and validate an experiment TOML file; `slo` (from --slo) sets or overrides lines of its [slo]."""
    path = Path(path)
    data = load_toml(path, "--config", "give the path of an experiment .toml file")
    if slo:
        data["slo"] = {**data.get("slo", {}), **slo}
    return parse_experiment(data, path.parent.resolve(), str(path))


def parse_experiment(data: dict, base_dir: Path, source: str = "experiment") -> Experiment:
    top = StrictTable(data, "", TOP)
    run = StrictTable(top.read("run"), "run", RUN)
    name = check_name(run.read("name", Path(source).stem), "run.name", " (it becomes part of paths and SQL)")
    results = run.read("results")
    run.done()
    load = parse_load(top.read("load"), base_dir)
    prompts_table = top.read("prompts")
    prompts = parse_prompts_config(prompts_table, "prompts", base_dir)
    if load.trace is not None:
        prompts = trace_prompts(prompts, prompts_table, load.trace)
    slo_table = top.read("slo")
    slo = None if slo_table is None else parse_slo(slo_table)
    if load.false_verdict is not None:
        slo = _sequential_slo(load, slo)
    if slo is None and (load.search or load.stop_after_slo_failures):
        key = "load.search" if load.search else "load.stop_after_slo_failures"
        raise ConfigError(key, "needs an SLO to judge steps by",
                          "add an [slo] table, e.g. ttft_ms = 2000 and tpot_ms = 100 (or --slo)")
    cost_table = top.read("cost")
    cost = None if cost_table is None else read_prices(cost_table)   # checked before a target's table over it
    fleet_table = top.read("fleet")
    raw_targets = top.read("targets", REQUIRED if fleet_table is None else [])
    top.done()
    fleet = None
    if fleet_table is not None:
        if raw_targets:
            raise ConfigError("targets", "cannot be combined with [fleet]", "the fleet's nodes are the targets")
        fleet = parse_fleet(fleet_table, base_dir)
        targets = fleet.all_targets()
    elif not raw_targets:
        raise ConfigError("targets", "is empty", "add at least one [[targets]] table")
    else:
        targets = tuple(parse_target(t, f"targets[{i}]", base_dir, cost_table) for i, t in enumerate(raw_targets))
    names = [t.name for t in targets]
    for i, t in enumerate(targets):
        if names.index(t.name) != i:
            raise ConfigError(f"targets[{i}].name", f"duplicate target name {t.name!r}",
                              "give every target a unique name")
    urls = [t.url for t in targets if t.url]
    if len(urls) != len(set(urls)):
        raise ConfigError("targets", "two targets have the same url", "list each server once")
    if load.search is not None and isinstance(load.search.twin, dict):
        load = replace(load, search=replace(load.search, twin=_search_twins(load.search.twin, names, base_dir)))
    return Experiment(name, results, load, prompts, targets, source, data, fleet, slo, cost)


def _search_twins(table: dict, names: list[str], base_dir: Path) -> tuple[tuple[str, TwinRef], ...]:
    """search_twin as a table: every target's twin file (or [targets.twin]-like table), and no other name."""
    for name in table:
        if name not in names:
            raise ConfigError(f"load.search_twin.{name}", "is not a target", f"use the targets' names: {names}")
    missing = [n for n in names if n not in table]
    if missing:
        raise ConfigError(f"load.search_twin.{missing[0]}", "is required: every target's search starts from its twin",
                          'give its twin file, e.g. mtp = "mtp.toml", or search_twin = "<run id>" to fit each')
    return tuple((n, parse_twin_ref(table[n], f"load.search_twin.{n}", base_dir)) for n in names)


def _sequential_slo(load: LoadConfig, slo: Slo | None) -> Slo:
    """The SLO judged by the sequential test (loadgen/results/sequential.py): closed-loop timed windows only."""
    if slo is None:
        raise ConfigError("load.window", "a sequential window ends on an SLO call", "add an [slo] table (or --slo)")
    if load.open_loop is not None or load.requests is not None or load.trace or load.ramp:
        raise ConfigError("load.window", "sequential windows are closed-loop timed windows only",
                          'remove window = "sequential", or use mode = "closed" without requests, trace or ramp')
    if slo.attainment >= 1:
        raise ConfigError("slo.attainment", "a sequential test needs misses to be allowed (attainment < 1)",
                          'e.g. attainment = 0.99, or remove window = "sequential"')
    return replace(slo, false_verdict=load.false_verdict, miss_correlation=load.miss_correlation)


def experiment_document(exp: Experiment) -> dict:
    """What the hash covers: the experiment as written (secrets masked, --slo applied) and every target as
    resolved (a fleet's profiles are in other files). Paths are left out: `ray job submit` unpacks the
    working directory somewhere new each time."""
    targets = [{"name": t.name, "flavor": t.flavor, "url": t.url, "emulator_args": list(t.emulator_args),
                "node": t.node, "model": t.model} for t in exp.targets]
    return {"config": masked(exp.raw), "targets": targets}


def config_hash(exp: Experiment) -> str:
    text = json.dumps(experiment_document(exp), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()
