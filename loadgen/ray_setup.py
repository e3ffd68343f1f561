"""Connecting to Ray the same way from the CLI, the job entry points and the tests."""

from __future__ import annotations

import os

import ray

# Keep a single-machine Ray on loopback and without token auth (see README: running locally).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def connect(address: str | None = None) -> None:
    """Join the cluster at `address` (or $RAY_ADDRESS, as `ray job submit` sets it); else start a local Ray."""
    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, log_to_driver=True)
    else:
        ray.init(address="local", include_dashboard=False, log_to_driver=True)
