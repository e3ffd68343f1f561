"""`loadgen twin fit` and `loadgen twin predict`: the twin's command-line bodies (cli.py holds the flags)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from loadgen.config import Experiment, load_experiment, parse_experiment
from loadgen.errors import ConfigError
from loadgen.results import analysis, answer
from loadgen.results.slo import parse_slo_flag
from loadgen.twin.fit import fit_twin
from loadgen.twin.model import METRICS, Twin, load_twin
from loadgen.twin.observe import read_source
from loadgen.twin.predict import run_predicted, twin_targets


def fit_command(args: argparse.Namespace) -> int:
    source = read_source(args.results, args.run, args.target, levels=args.levels)
    print(f"fitting a twin of {source.target} ({source.server}{', emulated' if source.emulated else ''}) from run "
          f"{source.run_id}: C = {', '.join(str(lv.concurrency) for lv in source.levels)}", flush=True)
    for note in source.notes:
        print(f"  note: {note}")
    twin = fit_twin(source, args.hardware, args.model_profile, args.algorithm_profile, args.draft_tokens,
                    log=lambda line: print(f"  {line}", flush=True))
    print(fit_report(twin))
    twin.save(args.output)
    print(f"wrote {args.output}")
    return 0


def fit_report(twin: Twin) -> str:
    """The fitted numbers (and what set each), then the error per metric: in-sample and leave-one-level-out."""
    lines = ["fitted numbers (prior: the base profile, rescaled to the lowest level; set by the data when its sd is "
             "below half the prior's):"]
    for name, f in twin.fitted.items():
        if isinstance(f, dict):
            lines.append(f"  {name:22s} {f['value']:>10.4g}  prior {f['prior']:<10.4g} sd {f['sd_pct']:>5.1f}%  "
                         f"set by the {f['set_by']:5s} ({f['identified_by']})")
    lines.append(f"  acceptance: {twin.fitted.get('acceptance')}")
    if "power" in twin.fitted:
        lines.append(f"  {twin.fitted['power']}")
    err = twin.error
    if err is None:
        return "\n".join(lines)
    lines.append("error, MAPE % (predicted vs measured):      in-sample   leave-one-level-out")
    for m in METRICS:
        if m in err.in_sample or m in err.leave_one_out:
            lines.append(f"  {m:40s} {_pct(err.in_sample.get(m)):>9}   {_pct(err.leave_one_out.get(m)):>9}")
    lines.append(f"  {err.describe()}")
    if (line := err.over_limit()) is not None:
        lines.append(f"twin {twin.source.get('target')}: {line}")
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.1f}"


def predict_command(args: argparse.Namespace) -> int:
    from loadgen.results.folder import results_folder
    if (args.config is None) == (args.twin is None):
        raise ConfigError("--config", "give exactly one of --config (an experiment whose targets are twins) or "
                          "--twin (one twin file)", "e.g. --twin mtp.toml --concurrency 1 2 4 8 16 32 64")
    exp = (load_experiment(args.config, parse_slo_flag(args.slo) if args.slo else None) if args.config
           else twin_experiment(args))
    if not twin_targets(exp):
        raise ConfigError("targets", f"{exp.source}: no target is a twin", "give each target a [targets.twin] table")
    folder = results_folder(args.results or exp.results)
    run_id = run_predicted(exp, folder, log=lambda line: print(line, flush=True))
    con = analysis.open_results(folder)
    found = answer.findings(con)
    answer.write_summary(con, str(folder), run_id, "complete", found)
    print(answer.answer_text(con, str(folder), run_id, found))
    print("\n".join(error_lines(con, run_id)))
    return 0


def twin_experiment(args: argparse.Namespace) -> Experiment:
    """`--twin FILE --concurrency ...` as an experiment: the twin's own workload unless flags change it."""
    twin = load_twin(args.twin, "--twin")
    target: dict[str, Any] = {"profile": str(Path(args.twin).resolve())}
    for key, value in (("draft_tokens", args.draft_tokens), ("max_running_requests", args.max_running),
                       ("kv_pool_tokens", args.kv_pool)):
        if value is not None:
            target[key] = value
    prompts = dict(twin.source.get("prompts") or {})
    if args.max_tokens is not None:
        prompts["max_new_tokens"] = args.max_tokens
    load: dict[str, Any] = {"warmup_s": 5.0, "measure_s": 30.0}
    if args.concurrency:
        load["concurrency"] = args.concurrency
    elif args.search_max:
        load.update(search="capacity", search_min=1, search_max=args.search_max)
    else:
        raise ConfigError("--concurrency", "say which levels to predict", "--concurrency 1 2 4 8 ..., or --slo "
                          "LINES --search-max N for the capacity")
    data: dict[str, Any] = {"run": {"name": f"twin-{twin.source.get('target')}"}, "load": load, "prompts": prompts,
                            "targets": [{"name": args.name or str(twin.source.get("target")), "twin": target}]}
    if args.slo:
        data["slo"] = parse_slo_flag(args.slo)
    return parse_experiment(data, Path("."), "--twin")


def error_lines(con: Any, run_id: str, measured_run: str | None = None) -> list[str]:
    """The prediction against measured steps of the same targets and levels in the folder (queries/twin_error.sql;
    only `measured_run`'s when given), per target and metric: MAPE and the worst level; nothing when no level was
    measured."""
    params = {"predicted_run": run_id} | ({"measured_run": measured_run} if measured_run else {})
    rows = analysis.run_query(con, "twin_error", params).to_pylist()
    if not rows:
        return ["twin_error: no measured level of these targets in the folder to compare with"]
    out = ["twin_error (predicted vs measured, where both exist; loadgen query twin_error for every level):"]
    seen = set()
    for r in rows:
        key = (r["measured_run"], r["target"], r["metric"])
        if key in seen:
            continue
        seen.add(key)
        flag = "  OVER 15%" if r["over_limit"] else ""
        out.append(f"  {r['target']} vs run {r['measured_run']}: {r['metric']:12s} MAPE {r['mape_pct']:5.1f}%  "
                   f"worst C={r['worst_level']:g} ({r['worst_error_pct']:+.1f}%){flag}")
    return out
