"""Waiting for a server process loadgen started to answer GET /health (the emulator in tests, servers on nodes).

The only place a refused connection is waited out: a server loadgen just started is still loading. A `url`
target is said to be running, so its preflight asks once (loadgen.servers.serverid)."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable

from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed


class NotHealthy(Exception):
    """/health did not answer 200 (yet)."""


def wait_healthy(url: str, timeout_s: float, check_alive: Callable[[], None], poll_s: float = 0.1) -> None:
    """Poll `url`/health until it answers 200. `check_alive` raises its own error once the process has exited
    (no point waiting out the timeout); after `timeout_s` the last NotHealthy is raised."""
    for attempt in Retrying(stop=stop_after_delay(timeout_s), wait=wait_fixed(poll_s), reraise=True,
                            retry=retry_if_exception_type(NotHealthy)):
        with attempt:
            check_alive()
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:  # open also with --api-key
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:
                raise NotHealthy(str(exc)) from None
            raise NotHealthy(f"/health answered {resp.status}")
