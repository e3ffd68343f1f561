"""One clock anchor per boot: processes on one machine stamp on one clock, whatever the wall clock did since.

A window's end is stamped by the driver and compared with the workers' send times; a worker that took its own
wall/monotonic pair after the wall clock was stepped disagrees with the driver by the step (a loaded suite saw
150 ms, and requests fell on the wrong side of windows)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from loadgen import clock

PRINT_ANCHOR = "import json; from loadgen import clock; print(json.dumps(clock.anchor()))"


def _child_anchor(env: dict[str, str]) -> dict[str, int]:
    out = subprocess.run([sys.executable, "-c", PRINT_ANCHOR], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_a_process_started_from_this_one_stamps_on_its_anchor():
    assert os.environ[clock.ANCHOR_ENV].endswith(f":{clock.anchor()['wall_ns']}:{clock.anchor()['monotonic_ns']}")
    assert _child_anchor(dict(os.environ)) == clock.anchor()


def test_an_anchor_from_another_boot_or_garbled_is_replaced_by_a_fresh_one():
    _, wall, mono = os.environ[clock.ANCHOR_ENV].split(":")
    for value in (f"another-boot:{wall}:{mono}", "garbled", f"{clock._boot_id()}:x:y"):
        child = _child_anchor({**os.environ, clock.ANCHOR_ENV: value})
        assert child != clock.anchor() and child["monotonic_ns"] > clock.anchor()["monotonic_ns"], value


def test_shared_env_names_the_anchor_only_where_this_process_took_it():
    code = "from loadgen import clock; print(clock.shared_env())"
    took = subprocess.run([sys.executable, "-c", code], env={k: v for k, v in os.environ.items()
                                                             if k != clock.ANCHOR_ENV},
                          capture_output=True, text=True, check=True).stdout
    inherited = subprocess.run([sys.executable, "-c", code], env=dict(os.environ),
                               capture_output=True, text=True, check=True).stdout
    assert clock.ANCHOR_ENV in took and inherited.strip() == "{}"


def test_ray_workers_stamp_on_the_drivers_anchor(ray_local):
    import ray

    @ray.remote
    def worker_anchor() -> dict[str, int]:
        from loadgen import clock as worker_clock
        return worker_clock.anchor()

    assert ray.get(worker_anchor.remote()) == clock.anchor()
