"""The driver's early verdict on a `url` target (loadgen.driver.reach), against real sockets on loopback: refused and
not pinned decides; pinned to a node, a loopback url is left to that node's worker; a listening one passes."""

from __future__ import annotations

import pytest

from loadgen.driver.reach import node_local, unreachable
from loadgen.servers.ports import free_port


def test_refused_and_not_pinned_is_decided_here():
    port = free_port()
    for host in ("127.0.0.1", "localhost"):   # localhost: every address it resolves to refuses
        why, fix = unreachable(f"http://{host}:{port}", pinned=False)
        assert why == f"connection refused: nothing listens on {host} port {port}" and "start the server" in fix


def test_a_loopback_url_pinned_to_a_node_is_left_to_its_worker():
    assert unreachable(f"http://127.0.0.1:{free_port()}", pinned=True) is None
    assert unreachable(f"http://localhost:{free_port()}", pinned=True) is None


@pytest.mark.parametrize("address,local", [
    ("127.0.0.1", True), ("127.0.1.1", True), ("::1", True), ("0.0.0.0", True), ("::", True),
    ("169.254.10.1", True), ("fe80::1%eth0", True),
    ("10.0.0.11", False), ("192.0.2.2", False), ("2001:db8::1", False),
])
def test_node_local_addresses_are_those_each_node_has_its_own_of(address, local):
    assert node_local(address) is local
