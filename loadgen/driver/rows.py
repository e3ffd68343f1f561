"""The rows the driver writes itself: a step's `steps` row, the server's info as server_samples, the
`runs` row (with the checkout's commit)."""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
from pathlib import Path
from typing import Any

import ray

from loadgen import __version__
from loadgen.clock import anchor, now_ns
from loadgen.config import config_hash
from loadgen.driver.bringup import Target
from loadgen.driver.context import RunContext
from loadgen.plan.steps import PlannedStep, TargetLoad
from loadgen.results import schema
from loadgen.servers.probe import server_info_samples
from loadgen.servers.secrets import masked
from loadgen.values import as_int


def step_row(ctx: RunContext, step: PlannedStep, level: TargetLoad, t: Target, times: tuple[int, int, int, int],
             status: str, reason: str) -> dict:
    exp, run_id = ctx.exp, ctx.run_id
    t_start, t_ms, t_me, t_end = times
    info = t.info if t.input_fit is None else dict(t.info, input_tokens_fit=t.input_fit)
    algorithm = info.get("speculative_algorithm") or "NONE"
    return {
        "run_id": run_id, "step_id": step.step_id, "target": t.config.name, "target_index": t.index,
        "node": t.config.node, "flavor": info.get("flavor") or t.config.flavor,  # `auto` as resolved
        "emulated": bool(info.get("emulated", False)),
        "algorithm": str(algorithm).upper(), "draft_tokens": as_int(info.get("speculative_num_draft_tokens")),
        "num_steps": as_int(info.get("speculative_num_steps")), "topk": as_int(info.get("speculative_eagle_topk")),
        "server_version": str(info.get("version")), "server_info": json.dumps(info, sort_keys=True, default=str),
        "mode": exp.load.mode, "concurrency": level.concurrency if level.rate is None else None,
        "rate": level.rate, "repeat": step.repeat if level.repeat is None else level.repeat, "probe": level.probe,
        "prompt_mix": exp.prompts.describe(), "t_start_ns": t_start, "t_measure_start_ns": t_ms,
        "t_measure_end_ns": t_me, "t_end_ns": t_end, "status": status, "status_reason": reason,
        "hardware": t.gpu.hardware if t.gpu else None,
    }


def write_server_info_samples(sink: Any, run_id: str, step_id: int, t: Target, info: dict, t_ns: int,
                              when: str) -> None:
    rows = [{"run_id": run_id, "step_id": step_id, "target": t.config.name, "node": t.config.node, "t_ns": t_ns,
             "name": name, "value": value, "labels": json.dumps(dict(labels, when=when), sort_keys=True)}
            for name, value, labels in server_info_samples(info)]
    if rows:
        sink.write.remote({"server_samples": schema.batch_from_rows("server_samples", rows)})


def write_run(ctx: RunContext, started: int, finished: int | None, status: str, reason: str) -> None:
    exp, run_id = ctx.exp, ctx.run_id
    row = {
        "run_id": run_id, "name": exp.name, "started_at_ns": started, "finished_at_ns": finished,
        "status": status, "status_reason": reason, "config": json.dumps(masked(exp.raw), sort_keys=True, default=str),
        "loadgen_version": __version__, "schema_version": schema.SCHEMA_VERSION, "git_commit": git_commit(),
        "host": json.dumps({"hostname": socket.gethostname(), "python": platform.python_version(),
                            "ray": ray.__version__, "platform": platform.platform()}),
        "clock_anchor": json.dumps(anchor()), "slo": exp.slo.to_json() if exp.slo else None,
        "config_hash": config_hash(exp), "written_at_ns": now_ns(),
        "superseded_steps": [*(ctx.resume.superseded if ctx.resume else ()), *ctx.superseded] or None,
    }
    ray.get(ctx.sink.write.remote({"runs": schema.batch_from_rows("runs", [row])}))


CHECKOUT = Path(__file__).parents[2]   # the repo's root when loadgen runs from a checkout (not from a wheel)


def git_commit(root: Path = CHECKOUT) -> str | None:
    """The checkout's commit, where `root` is the top of a git work tree (an installed loadgen in a venv that lies
    inside some other checkout has none); under `ray job submit` (Ray uploads the working dir without .git) the
    one the submitter passes as LOADGEN_GIT_COMMIT (docs/fleets.md)."""
    if os.environ.get("LOADGEN_GIT_COMMIT"):
        return os.environ["LOADGEN_GIT_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "--show-toplevel", "HEAD"], capture_output=True, text=True,
                             timeout=5, cwd=root)
    except (OSError, subprocess.SubprocessError):
        return None
    found = out.stdout.split()
    if out.returncode != 0 or len(found) != 2 or Path(found[0]).resolve() != root.resolve():
        return None
    return found[1]
