"""Servers that crash at the limit: a server that died, hung or stopped answering during a step is a measured
outcome, not the end of the run (docs/failures.md, "Servers that crash at the limit").

After every step the driver asks each target's server how it is: a launched server's process exit code, then a
control call. What it finds is a `Death`: the target's step row says `failed` with the cause and the log tail
(the views make its level a clear SLO fail), a `server_death` row goes to server_samples, and then
`on_server_death` decides: "restart" starts a launched server again with the same profile on the same port
(bounded attempts, back-off), retries a `url` target for `server_retry_s`; a target that does not come back is
dropped from the rest of the run while the others go on. "stop" ends the run after the step's rows are written.

Hung or slow: a hung server accepts connections and sends nothing, so its requests end at the stall timeout and
its control calls time out; a slow one still streams (requests finish late or hit the request timeout) and
answers control calls. The cause says which, with the count of requests the stall timeout cut.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import ray
from tenacity import Retrying, stop_after_attempt, stop_after_delay, wait_exponential

from loadgen.config import LoadConfig
from loadgen.driver import stop
from loadgen.errors import TargetError, user_message

RESTART_ATTEMPTS = 3      # tries to bring a dead server up again, per death
MAX_DEATHS = 3            # deaths of one target in a run before it is dropped (it keeps dying: stop probing it)
LOG_TAIL_LINES = 12
CHECK_S = 1.0             # a server check after a step retries a refused connect this long; recover() owns the wait


@dataclass(frozen=True)
class Death:
    target: str
    cause: str                # exited | hung | unreachable | lost (the server's actor is gone)
    exit_code: int | None
    describe: str             # one line for steps.status_reason
    log_tail: str


def check_server(target: Any, load: LoadConfig) -> tuple[dict | None, Death | None]:
    """(server info, None) for a healthy server; (None, Death) for one that exited, hung or stopped answering.
    `target` is bringup.Target."""
    name = target.config.name
    code, tail = None, ""
    if target.server is not None:
        try:
            code = ray.get(target.server.exit_code.remote(), timeout=30)
            tail = ray.get(target.server.log_tail.remote(LOG_TAIL_LINES), timeout=30) if code is not None else ""
        except (ray.exceptions.RayError, TimeoutError):
            return None, Death(name, "lost", None, f"server {name} is lost: its Ray actor is gone (its node may have "
                               "been removed); its level counts as an SLO fail", "")
        if code is not None:
            why = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
            return None, Death(name, "exited", code, f"server {name} died during the step ({why}); its level counts "
                               f"as an SLO fail; log tail: {_one_line(tail)}", tail)
    try:
        return _server_info(target), None
    except TargetError as exc:
        hung = "Timeout" in user_message(exc)
        if hung:
            cause = (f"server {name} hung: it accepts connections but sent nothing (a control call timed out; requests "
                     f"were cut by the {load.stall_timeout_s:g} s stall timeout, where a slow server keeps streaming)")
        else:
            cause = f"server {name} stopped answering ({user_message(exc)})"
        if target.server is not None:
            tail = ray.get(target.server.log_tail.remote(LOG_TAIL_LINES), timeout=30)
        return None, Death(name, "hung" if hung else "unreachable", None,
                           f"{cause}; its level counts as an SLO fail"
                           + (f"; log tail: {_one_line(tail)}" if tail else ""),
                           tail)


def _server_info(target: Any) -> dict:
    """Server info from the first worker that answers (one may have died in the step), each asked once with
    CHECK_S for a refused connect: a dead server is named at once, not after a control call's own retries."""
    error: BaseException | None = None
    for worker in target.workers:
        try:
            return ray.get(worker.server_info.remote(CHECK_S))
        except ray.exceptions.RayActorError as exc:
            error = exc
    raise TargetError(f"no worker of {target.config.name} answers ({error})")


def stall_note(results: Path, run_id: str, step_id: int, target: str, stall_s: float) -> str | None:
    """For a server that answers after the step: say it was slow, not hung, when the stall timeout cut some of
    its requests (read back after the step's flush)."""
    glob = f"{results}/requests/run_id={run_id}/*.parquet"
    [(n,)] = duckdb.execute(f"SELECT count(*) FROM read_parquet('{glob}') WHERE step_id = ? AND target = ? AND "
                            "status = 'timeout' AND error LIKE '%stall timeout%'", [step_id, target]).fetchall()
    if not n:
        return None
    return (f"server {target} is slow, not hung: {n} requests sent nothing for {stall_s:g} s (stall timeout), "
            "but it answers")


def death_sample(run_id: str, step_id: int, target: Any, death: Death, t_ns: int) -> dict:
    """A server_samples row for the death: value = exit code (NULL when it hung or stopped answering)."""
    labels = {"cause": death.cause, "log_tail": death.log_tail, "when": "after"}
    return {"run_id": run_id, "step_id": step_id, "target": target.config.name, "node": target.config.node,
            "t_ns": t_ns, "name": "server_death", "value": death.exit_code,
            "labels": json.dumps(labels, sort_keys=True)}


def recover(target: Any, load: LoadConfig, deaths_so_far: int, log: Callable[[str], None]) -> str | None:
    """Bring the target back (launched: restart with the same profile; url: retry until server_retry_s).
    None when it is back; else why it is dropped from the rest of the run."""
    name = target.config.name
    if deaths_so_far > MAX_DEATHS:
        return f"server {name} died {deaths_so_far} times (more than {MAX_DEATHS}): dropped from the rest of the run"
    started = time.monotonic()
    try:
        if target.server is not None:
            for attempt in Retrying(stop=stop_after_attempt(RESTART_ATTEMPTS), reraise=True, sleep=stop.sleep,
                                    wait=wait_exponential(multiplier=1, max=8)):
                with attempt:
                    stop.get(target.server.restart.remote())
        else:
            for attempt in Retrying(stop=stop_after_delay(load.server_retry_s), reraise=True, sleep=stop.sleep,
                                    wait=wait_exponential(multiplier=0.5, max=5)):
                with attempt:
                    _server_info(target)
    except (TargetError, ray.exceptions.RayError) as exc:
        what = f"{RESTART_ATTEMPTS} restarts failed" if target.server is not None else (
            f"no answer within server_retry_s = {load.server_retry_s:g} s")
        why = user_message(exc) if isinstance(exc, TargetError) else str(exc)
        return f"server {name}: {what} ({_one_line(why)[:300]}): dropped from the rest of the run"
    log(f"  server {name} {'restarted' if target.server is not None else 'answers again'} "
        f"after {time.monotonic() - started:.1f} s")
    return None


def _one_line(text: str) -> str:
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())[-1500:]
