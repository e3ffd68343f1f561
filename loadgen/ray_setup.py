"""Connecting to Ray the same way from the CLI, the job entry points and the tests."""

from __future__ import annotations

import os

import ray

# Keep a single-machine Ray on loopback and without token auth (see README: running locally).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

# Call arguments up to this size travel inside the call instead of through the object store. A worker's flush
# (~370 KB of frames at 50k frames/s) is over Ray's 100 KiB default, and the store's put, the raylet's
# wait for the argument and the fetch cost ~2 ms of CPU per call more than carrying it inline
# (tests/benchmarks/bench_sink_calls.py: 5.7 vs 3.5 ms a call, whole cluster). `ray start` takes the same
# setting from RAY_max_direct_call_object_size (infra/ray-*-fleet.sh).
INLINE_ARGUMENT_BYTES = 4 << 20


def connect(address: str | None = None) -> None:
    """Join the cluster at `address` (or $RAY_ADDRESS, as `ray job submit` sets it); else start a local Ray."""
    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, log_to_driver=True)
    else:
        ray.init(address="local", include_dashboard=False, log_to_driver=True,
                 _system_config={"max_direct_call_object_size": INLINE_ARGUMENT_BYTES})
