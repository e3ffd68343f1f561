"""Connecting to Ray the same way from the CLI, the job entry points and the tests."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from secrets import token_hex

import ray

from loadgen import clock
from loadgen.driver import stop

# Keep a single-machine Ray on loopback. Authentication is left at Ray's own default: a local cluster that
# ray.init starts uses token auth (docs/fleets.md, "Securing a fleet").
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

# Call arguments up to this size travel inside the call instead of through the object store. A worker's flush
# (~370 KB of frames at 50k frames/s) is over Ray's 100 KiB default, and the store's put, the raylet's
# wait for the argument and the fetch cost ~2 ms of CPU per call more than carrying it inline
# (tests/benchmarks/bench_sink_calls.py: 5.7 vs 3.5 ms a call, whole cluster). `ray start` takes the same
# setting from RAY_max_direct_call_object_size (infra/ray-*-fleet.sh).
INLINE_ARGUMENT_BYTES = 4 << 20

AUTH_SETUP_LOGGER = "ray._private.authentication.authentication_token_setup"


def connect(address: str | None = None) -> None:
    """Join the cluster at `address` (or $RAY_ADDRESS, as `ray job submit` sets it); else start a local Ray.
    The driver's own Ray log says warnings and errors only: its INFO lines (`Started a local Ray instance`,
    `Connecting to existing Ray cluster`) are not the run's output, nor is its warning that a local cluster uses token
    auth, Ray's default and loadgen's (docs/fleets.md). What the actors print still comes through."""
    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS")
    with stop.kept():   # a stop signal during ray.init is noted like any other; the run acts on it
        if address:
            env = clock.shared_env()   # a local Ray's workers inherit the clock's anchor; a cluster's need it
            ray.init(address=address, log_to_driver=True, logging_level=logging.WARNING,
                     runtime_env={"env_vars": env} if env else None)
        else:
            # its one warning here says that a new local Ray uses token auth: Ray's default and loadgen's, not news
            logging.getLogger(AUTH_SETUP_LOGGER).setLevel(logging.ERROR)
            _private_default_token()
            ray.init(address="local", include_dashboard=False, log_to_driver=True, logging_level=logging.WARNING,
                     _system_config={"max_direct_call_object_size": INLINE_ARGUMENT_BYTES})


def _private_default_token() -> None:
    """A new local Ray in token mode (Ray's default) writes a token to ~/.ray/auth_token when none exists, with
    the process umask (usually readable by everyone). Write that same kind of token first, readable by its owner
    only. Nothing is done when auth is off or a token is given (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, the file)."""
    if os.environ.get("RAY_AUTH_MODE", "token").lower() != "token":
        return
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return
    path = Path.home() / ".ray" / "auth_token"
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except OSError:
        return   # an unwritable home: Ray reports what it cannot do itself
    with os.fdopen(fd, "w") as f:
        f.write(token_hex(32))   # what ray._private.authentication's generator makes: 256 random bits
