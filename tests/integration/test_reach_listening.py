"""The driver's early verdict on a `url` target (loadgen.driver.reach), against real sockets on loopback: refused and
not pinned decides; pinned to a node, a loopback url is left to that node's worker; a listening one passes."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from loadgen.config import parse_experiment
from loadgen.driver.reach import check_targets, unreachable
from loadgen.errors import TargetError
from loadgen.servers.ports import free_port


def _exp(*urls: str):
    return parse_experiment({"load": {"concurrency": [1]}, "targets": [
        {"name": f"t{i}", "url": url} for i, url in enumerate(urls)]}, Path("."))


def test_a_listening_server_passes_and_the_first_refused_target_is_named():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        up = f"http://127.0.0.1:{server.getsockname()[1]}"
        assert unreachable(up, pinned=False) is None
        check_targets(_exp(up))   # no error
        down = f"http://127.0.0.1:{free_port()}"
        with pytest.raises(TargetError) as err:
            check_targets(_exp(up, down))
    assert str(err.value).startswith(f"target t1: {down}: unreachable (connection refused")
