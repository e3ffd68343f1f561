"""`loadgen plan --confirm NAME=URL`: one real node per configuration measured at the plan's load per node and one
user above it, judged by the run's own SLO verdicts (views.sql level_slo), beside the twin's prediction of the same
levels (the node's target watches its twin, `watch_twin`: a predicted run of the same target name in the same
folder, so `loadgen query twin_error` keeps the plan's error as it keeps a twin's, and a node off its twin is named
by the shared drift rule, views.sql twin_drift). The plan holds for a configuration when its node met the SLO at
its planned load.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.campaigns.plan import ConfigPlan, Plan
from loadgen.config import parse_experiment
from loadgen.driver import reach
from loadgen.driver.runner import run_experiment
from loadgen.results import analysis
from loadgen.results.drift import drift_lines, drift_rows
from loadgen.twin.commands import error_lines


@dataclass(frozen=True)
class Confirmation:
    name: str
    load: int                      # users per node the plan puts on one node: ceil(users / nodes)
    passed: dict[int, bool]        # measured level -> met the SLO
    measured_run: str
    predicted_run: str
    errors: list[str]              # twin_error's lines: the prediction against the measurement at these levels
    drift: str | None = None       # the node served off its own twin by more than the twin's band (else None)

    @property
    def holds(self) -> bool:
        return self.passed.get(self.load, False)

    def words(self) -> str:
        above = self.passed.get(self.load + 1)
        head = (f"{self.name}: the plan holds: one node met the SLO at its planned {self.load} users"
                if self.holds else f"{self.name}: the plan does NOT hold: one node missed the SLO at its planned "
                f"{self.load} users; plan more nodes, or refit its twin (`loadgen twin fit`) from run "
                f"{self.measured_run}")
        if above is not None:
            head += f"; at {self.load + 1} it {'met it too (headroom)' if above else 'missed it (no headroom)'}"
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
    load = math.ceil(plan.users / p.fleet.nodes)
    levels = [load, load + 1]
    window = {k: v for k, v in experiment.get("load", {}).items()
              if k in ("warmup_s", "measure_s", "min_measured_requests", "drain_timeout_s", "max_measure_s")}
    base = {"load": {**window, "concurrency": levels}, "prompts": experiment.get("prompts", {}),
            "slo": {k: v for k, v in vars(plan.slo).items() if v is not None}}
    exp = parse_experiment({**base, "run": {"name": f"plan-confirm-{name}"},
                            "targets": [{"name": name, "url": url, "watch_twin": p.config.twin_file}]},
                           Path("."), "--confirm")
    reach.check_targets(exp)
    log(f"{name}: measuring one node at {load} users (the plan's load per node) and {load + 1} at {url}")
    result = run_experiment(exp, str(results), log=lambda line: log(f"  {line}"))
    verdicts = analysis.level_verdicts(results, result.run_id, [name])[name]
    con = analysis.open_results(results, [result.run_id])
    rows = drift_rows(con)   # the run's target watched its twin: its prediction of the same levels, the band
    con.close()
    predicted = rows[0]["predicted_run"] if rows else ""
    con = analysis.open_results(results)
    errors = error_lines(con, predicted, result.run_id)
    con.close()
    found = drift_lines(rows)
    return Confirmation(name, load, {int(level): v.passed for level, v in verdicts.items()}, result.run_id,
                        predicted, errors, f"{found[0]} ({url}); refit the twin from this run before planning on it"
                        if found else None)
