"""`loadgen plan --confirm NAME=URL`: one real node per configuration measured at the plan's load per node and one
level above it (a user more; a rate 25% higher, open loop), judged by the run's own SLO verdicts (views.sql
level_slo), beside the twin's prediction of the same levels (the node's target watches its twin, `watch_twin`: a
predicted run of the same target name in the same folder, so `loadgen query twin_error` keeps the plan's error as it
keeps a twin's, and a node off its twin is named by the shared drift rule, views.sql twin_drift). The plan holds for
a configuration when its node met the SLO at its planned load.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.campaigns.plan import ConfigPlan, Plan
from loadgen.campaigns.plan_fleet import Demand
from loadgen.config import parse_experiment
from loadgen.driver import reach
from loadgen.driver.runner import run_experiment
from loadgen.results import analysis
from loadgen.results.drift import drift_lines, drift_rows
from loadgen.twin.commands import error_lines

RATE_ABOVE = 1.25     # a rate plan's level above is this much more


@dataclass(frozen=True)
class Confirmation:
    name: str
    load: Demand                   # what the plan puts on one node: ceil(users / nodes) users, or rate / nodes
    above: float                   # the level measured above it
    passed: dict[float, bool]      # measured level -> met the SLO
    measured_run: str
    predicted_run: str | None      # None: a rate plan (no prediction of open-loop levels)
    errors: list[str]              # twin_error's lines: the prediction against the measurement at these levels
    drift: str | None = None       # the node served off its own twin by more than the twin's band (else None)

    @property
    def holds(self) -> bool:
        return _at(self.passed, self.load.amount) or False

    def words(self) -> str:
        above = _at(self.passed, self.above)
        planned = f"{self.load.number()} {self.load.unit}"
        head = (f"{self.name}: the plan holds: one node met the SLO at its planned {planned}"
                if self.holds else f"{self.name}: the plan does NOT hold: one node missed the SLO at its planned "
                f"{planned}; plan more nodes, or refit its twin (`loadgen twin fit`) from run "
                f"{self.measured_run}")
        if above is not None:
            head += (f"; at {self.load.number(self.above)} it "
                     f"{'met it too (headroom)' if above else 'missed it (no headroom)'}")
        return head + (f"\n  DRIFT: {self.drift}" if self.drift else "")


def confirm(plan: Plan, urls: dict[str, str], experiment: dict[str, Any], results: Path,
            log: Callable[[str], None]) -> list[Confirmation]:
    """Measure each configuration of `urls` at its planned load and one above; `experiment`: the [prompts] and
    [load] window settings of the run (its levels are replaced)."""
    by_name = {p.config.name: p for p in plan.configs}
    out = []
    for name, url in urls.items():
        p = by_name[name]
        if p.fleet.level is None:
            log(f"{name}: nothing to confirm (no fleet planned)")
            continue
        out.append(_confirm_one(plan, p, url, experiment, results, log))
    return out


def _confirm_one(plan: Plan, p: ConfigPlan, url: str, experiment: dict[str, Any], results: Path,
                 log: Callable[[str], None]) -> Confirmation:
    name = p.config.name
    demand = plan.demand
    if demand.rate:
        load = Demand(round(demand.amount / p.fleet.nodes, 3), rate=True)
        levels: dict[str, Any] = {"mode": "open", "rates": [load.amount, round(RATE_ABOVE * load.amount, 3)]}
    else:
        load = Demand(math.ceil(demand.amount / p.fleet.nodes))
        levels = {"concurrency": [int(load.amount), int(load.amount) + 1]}
    above = float((levels.get("rates") or levels["concurrency"])[1])
    watch = {} if demand.rate else {"watch_twin": p.config.twin_file}   # a twin predicts closed-loop levels only
    window = {k: v for k, v in experiment.get("load", {}).items()
              if k in ("warmup_s", "measure_s", "min_measured_requests", "drain_timeout_s", "max_measure_s")}
    base = {"load": {**window, **levels}, "prompts": experiment.get("prompts", {}),
            "slo": {k: v for k, v in vars(plan.slo).items() if v is not None}}
    exp = parse_experiment({**base, "run": {"name": f"plan-confirm-{name}"},
                            "targets": [{"name": name, "url": url, **watch}]}, Path("."), "--confirm")
    reach.check_targets(exp)
    log(f"{name}: measuring one node at {load.number()} {load.unit} (the plan's load per node) and "
        f"{load.number(above)} at {url}")
    result = run_experiment(exp, str(results), log=lambda line: log(f"  {line}"))
    verdicts = analysis.level_verdicts(results, result.run_id, [name])[name]
    passed = {float(level): v.passed for level, v in verdicts.items()}
    if demand.rate:
        return Confirmation(name, load, above, passed, result.run_id, None,
                            ["no twin_error: a twin predicts closed-loop levels only"])
    con = analysis.open_results(results, [result.run_id])
    rows = drift_rows(con)   # the run's target watched its twin: its prediction of the same levels, the band
    con.close()
    predicted = rows[0]["predicted_run"] if rows else ""
    con = analysis.open_results(results)
    errors = error_lines(con, predicted, result.run_id)
    con.close()
    found = drift_lines(rows)
    return Confirmation(name, load, above, passed, result.run_id, predicted, errors,
                        f"{found[0]} ({url}); refit the twin from this run before planning on it" if found else None)


def _at(passed: dict[float, bool], level: float) -> bool | None:
    """The verdict at `level` (a rate as the run recorded it: to a part in a thousand)."""
    return next((v for k, v in passed.items() if abs(k - level) <= 1e-3 * max(1.0, level)), None)
