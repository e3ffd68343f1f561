"""A measured target that watches its twin (`watch_twin = "mtp.toml"`, docs/twin.md): its twin file is read before
any load (a bad one stops the run in one line); after the run's steps the twin predicts every closed-loop level the
target was measured at, under the run's own window and prompts, as a predicted run of the same target name (so
`loadgen query twin_error` pairs the two), and the run records the twin's figures and band per level and metric
(results table twin_checks), which views.sql twin_drift judges: a node off its own twin is named in the answer.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loadgen.clock import now_ns
from loadgen.config import Experiment, parse_experiment
from loadgen.results import analysis, schema
from loadgen.results.sink import flush
from loadgen.twin.model import DRIFT_METRICS, Twin, load_twin
from loadgen.twin.predict import run_predicted

_LEVELS = """
SELECT target, any_value(node), concurrency, any_value(algorithm), any_value(draft_tokens)
FROM steps WHERE run_id = ? AND NOT predicted AND status = 'complete' AND mode = 'closed' AND rate IS NULL
     AND concurrency IS NOT NULL
GROUP BY target, concurrency ORDER BY target, concurrency
"""
_FIGURES = "SELECT target, concurrency, tok_s, tpot_p50 FROM level_metrics WHERE run_id = ?"   # DRIFT_METRICS


def watched(exp: Experiment) -> dict[str, Twin]:
    """Each watching target's twin, by target name; a file that is not a twin stops the run here, in one line."""
    return {t.name: load_twin(t.watch_twin, f"targets[{i}].watch_twin")
            for i, t in enumerate(exp.targets) if t.watch_twin is not None}


def record(exp: Experiment, run_id: str, results: Path, sink: Any, log: Callable[[str], None]) -> None:
    """Predict each watching target's measured levels on its twin and write the run's twin_checks rows."""
    twins = watched(exp)
    if not twins:
        return
    flush(sink)   # the run's steps on disk for the levels below
    con = analysis.open_results(results, [run_id])
    measured: dict[str, list[int]] = defaultdict(list)
    nodes: dict[str, str] = {}
    for target, node, level, algorithm, draft in con.execute(_LEVELS, [run_id]).fetchall():
        twin = twins.get(target)
        if twin is None:
            continue
        if algorithm != twin.server.algorithm or draft not in (None, twin.server.draft_tokens):
            log(f"target {target}: runs {algorithm} with {draft} draft tokens, its twin {twin.server.algorithm} with "
                f"{twin.server.draft_tokens}: not checked against it (fit a twin of this server)")
            twins.pop(target)
            continue
        measured[target].append(int(level))
        nodes[target] = node
    con.close()
    if not measured:
        log("watch_twin: no closed-loop level measured to check against a twin")
        return
    files = {t.name: t.watch_twin for t in exp.targets if t.name in measured}
    predicted_exp = _experiment(exp, files, nodes, sorted({c for levels in measured.values() for c in levels}))
    predicted_run = run_predicted(predicted_exp, results, log=lambda _: None)
    con = analysis.open_results(results, [predicted_run])
    figures = {(t, int(c)): dict(zip(DRIFT_METRICS, row))
               for t, c, *row in con.execute(_FIGURES, [predicted_run]).fetchall()}
    con.close()
    stamp, rows = now_ns(), []
    for target, levels in measured.items():
        twin = twins[target]
        for level in levels:
            for metric in DRIFT_METRICS:
                value = figures.get((target, level), {}).get(metric)
                rows.append({"run_id": run_id, "target": target, "node": nodes[target], "concurrency": level,
                             "metric": metric, "predicted": value, "band_pct": 100 * twin.band(metric),
                             "twin_file": files[target], "twin_source": twin.describe_source(),
                             "twin_date": twin.fitted_on(), "predicted_run": predicted_run, "checked_at_ns": stamp})
        log(f"target {target}: checked against its {twin.describe_source()} at C = "
            f"{', '.join(map(str, levels))} (tok/s band {100 * twin.band('tok_s'):.0f}%; predicted run "
            f"{predicted_run})")
    sink.write.remote({"twin_checks": schema.batch_from_rows("twin_checks", rows)})
    flush(sink)


def _experiment(exp: Experiment, files: dict[str, str | None], nodes: dict[str, str], levels: list[int]
                ) -> Experiment:
    """The run's workload on the twins: a grid of the measured levels, the run's window, its parsed prompts."""
    cfg = exp.load
    load: dict[str, Any] = {"concurrency": levels, "warmup_s": cfg.warmup_s, "measure_s": cfg.measure_s,
                            "drain_timeout_s": cfg.drain_timeout_s}
    for key, value in (("min_measured_requests", cfg.min_measured), ("requests", cfg.requests),
                       ("max_measure_s", cfg.max_measure_s or None)):
        if value is not None:
            load[key] = value
    data = {"run": {"name": f"{exp.name}-twin"}, "load": load,
            "targets": [{"name": name, "node": nodes[name], "twin": {"profile": file}} for name, file in files.items()]}
    return dataclasses.replace(parse_experiment(data, Path("."), "watch_twin"), prompts=exp.prompts)
