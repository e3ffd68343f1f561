"""Fleet config, profiles and node resolution without a cluster; a server dies with its actor."""

from __future__ import annotations

import os
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


def test_a_launched_server_runs_at_the_priority_of_one_started_by_hand(ray_local, tmp_path):
    """Ray runs its actors at nice 15; the server an actor launches is set back to 0 where the node allows it (root,
    as on CI), else it keeps the actor's, and its log says which."""
    server = ServerProcess.remote("nice", str(tmp_path))
    ray.get(server.start_server.remote("loadgen.emulator", ["--model-path", "m"], "127.0.0.1", 0, 30.0))
    pid = ray.get(server.pid.remote())
    actor_nice = psutil.Process(psutil.Process(pid).ppid()).nice()   # the actor that launched it
    expected = 0 if os.geteuid() == 0 else actor_nice
    assert actor_nice == 15 and psutil.Process(pid).nice() == expected
    assert f"[loadgen] pid {pid}, nice {expected}" in ray.get(server.log_tail.remote(50))
    ray.kill(server)
