"""Resuming a run (`--resume RUN_ID`): what a run already holds, read back from its results before any load.

A run records a hash of its validated experiment (runs.config_hash). A resume checks the experiment is the same
one (a changed one is refused with what changed), keeps every step that finished (status complete, or failed: its
server died, a measured outcome), and lists every other step id in runs.superseded_steps: those that did not
complete, and those the driver died in (rows in requests or samples, no steps row). The views leave superseded
steps out, and the plan runs them again under new step ids after the highest one used (docs/failures.md,
"Resuming a run").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import duckdb

from loadgen.config import Experiment, config_hash
from loadgen.errors import LoadgenError
from loadgen.servers.secrets import masked

DONE = ("complete", "failed")   # step statuses a resume keeps
GridKey = tuple[int, frozenset]  # (repeat, {(target, level)}): a grid step, as plan.GridPlan skips it


@dataclass(frozen=True)
class ResumeState:
    run_id: str
    started_at_ns: int
    next_step_id: int               # after every step id used so far, in any table
    superseded: tuple[int, ...]     # step ids the views leave out (earlier resumes' included)
    done: frozenset                 # GridKey of every kept step


def load_resume(results: Path, run_id: str, exp: Experiment) -> ResumeState:
    """What the run `run_id` in `results` holds; LoadgenError (one line, with the fix) when it cannot be
    resumed with `exp`."""
    runs_dir = results / "runs" / f"run_id={run_id}"
    if not runs_dir.is_dir():
        known = sorted(p.name.removeprefix("run_id=") for p in (results / "runs").glob("run_id=*"))
        raise LoadgenError(f"--resume {run_id}: no such run in {results} (runs there: {', '.join(known) or 'none'}); "
                           "pass the run id the job printed and the same --results")
    con = duckdb.connect()
    glob = f"{results}/%s/run_id={run_id}/*.parquet"
    found = con.execute(
        "SELECT status, started_at_ns, config_hash, config, superseded_steps "
        f"FROM (FROM read_parquet('{glob % 'runs'}', "
        "union_by_name = true) UNION ALL BY NAME SELECT NULL::VARCHAR AS config_hash, NULL::INTEGER[] AS "
        "superseded_steps, NULL::BIGINT AS written_at_ns WHERE false) "
        "ORDER BY coalesce(written_at_ns, finished_at_ns) DESC NULLS LAST LIMIT 1").fetchall()
    if not found:
        raise LoadgenError(f"--resume {run_id}: the run's row was never written (its driver stopped while starting), "
                           "so nothing was kept; start a new run without --resume")
    [(status, started, stored_hash, stored_config, superseded)] = found
    if status == "complete":
        raise LoadgenError(f"--resume {run_id}: the run is complete, there is nothing to resume; start a new run "
                           "without --resume")
    if stored_hash is None:
        raise LoadgenError(f"--resume {run_id}: the run was written by an older loadgen that recorded no experiment "
                           "hash, so it cannot be checked; start a new run without --resume")
    if stored_hash != config_hash(exp):
        what = _what_changed(stored_config, exp)
        raise LoadgenError(f"--resume {run_id}: the experiment changed since the run started ({what}); "
                           "resume with the experiment it started with, or start a new run without --resume")
    old = set(superseded or [])
    steps = con.execute(f"SELECT step_id, status, \"repeat\", target, coalesce(rate, concurrency) "
                        f"FROM read_parquet('{glob % 'steps'}', union_by_name = true)").fetchall()
    used = {sid for (sid,) in con.execute(
        " UNION ".join(f"SELECT DISTINCT step_id FROM read_parquet('{glob % t}')"
                       for t in ("requests", "server_samples", "client_samples"))).fetchall() if sid is not None}
    by_step: dict[int, list[tuple]] = {}
    for sid, st, repeat, target, level in steps:
        if sid not in old:
            by_step.setdefault(sid, []).append((st, repeat, target, level))
    kept = {sid for sid, rows in by_step.items() if all(r[0] in DONE for r in rows)}
    all_ids = used | {sid for sid, *_ in steps}
    done = frozenset((rows[0][1], frozenset((r[2], float(r[3])) for r in rows))
                     for sid, rows in by_step.items() if sid in kept)
    return ResumeState(run_id, started, max(all_ids, default=-1) + 1,
                       tuple(sorted(old | (all_ids - kept))), done)


def _what_changed(stored_config: str | None, exp: Experiment) -> str:
    """The keys whose values differ between the run's recorded experiment and this one (the first few)."""
    before = _flat(json.loads(stored_config or "{}"))
    after = _flat(json.loads(json.dumps(masked(exp.raw), default=str)))
    changed = [f"{k}: {_show(before.get(k))} -> {_show(after.get(k))}"
               for k in sorted(before.keys() | after.keys()) if before.get(k) != after.get(k)]
    if not changed:
        return "a file it names changed: the fleet file, a launch profile or the targets they resolve to"
    return "; ".join(changed[:4]) + (f"; and {len(changed) - 4} more" if len(changed) > 4 else "")


def _flat(obj: object, key: str = "") -> dict[str, object]:
    """{"load": {"concurrency": [1, 2]}} -> {"load.concurrency[0]": 1, "load.concurrency[1]": 2}."""
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else None
    if items is None:
        return {key: obj}
    out: dict[str, object] = {}
    for k, v in items:
        out.update(_flat(v, f"{key}[{k}]" if isinstance(k, int) else f"{key}.{k}" if key else str(k)))
    return out


def _show(value: object) -> str:
    return "(none)" if value is None else json.dumps(value)
