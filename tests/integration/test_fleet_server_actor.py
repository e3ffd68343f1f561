"""Fleet config, profiles and node resolution without a cluster; a server dies with its actor."""

from __future__ import annotations

import time

import psutil
import ray

from loadgen.servers.process import ServerProcess


def test_server_dies_with_its_actor(ray_local, tmp_path):
    """ray.kill (what Ray does to a job's actors when the job dies) takes the server with it."""
    server = ServerProcess.remote("pdeathsig", str(tmp_path))
    ray.get(server.start_server.remote("loadgen.emulator", ["--model-path", "m"], "127.0.0.1", 0, 30.0))
    pid = ray.get(server.pid.remote())
    assert psutil.pid_exists(pid)
    ray.kill(server)
    deadline = time.monotonic() + 10
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the server outlived its actor"
        time.sleep(0.1)
