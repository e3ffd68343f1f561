"""Where a run's results go: the folder given, else ./results, and under `ray job submit` a folder outside Ray's
session (the job's working directory is deleted with it)."""

from __future__ import annotations

import os
from pathlib import Path

JOB_RESULTS = "~/loadgen-results"   # the default under `ray job submit`: on the driver's node, outside Ray's session


def under_ray_job() -> bool:
    """True when this process is the driver of a `ray job submit` job: its working directory is Ray's unpacked
    package under the session folder, which is deleted with the Ray session."""
    return "RAY_JOB_CONFIG_JSON_ENV_VAR" in os.environ or "runtime_resources" in Path.cwd().parts


def results_folder(given: str | None) -> Path:
    """The absolute results folder: `given` (the flag or run.results), else ./results; under a Ray job the
    default is ~/loadgen-results and a relative path is taken from the home folder, never from the job's
    temporary working directory."""
    if not under_ray_job():
        return Path(given or "results").expanduser().resolve()
    if given is None:
        return Path(JOB_RESULTS).expanduser().resolve()
    path = Path(given).expanduser()
    return path if path.is_absolute() else (Path.home() / path).resolve()
