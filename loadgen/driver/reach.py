"""Telling on the driver, before Ray starts, that a `url` target cannot be reached: one line at once, instead of
after Ray's start, the workers' creation and their preflight.

The driver decides only what a worker would see the same way; everything else is left to the worker's
preflight (loadgen.servers.serverid), which asks from the node the load comes from:
- Only a definite answer decides: the connection is refused (nothing listens at that host and port), or the
  host name does not exist. A connect that times out decides nothing: a firewall may drop the driver's
  packets and not the workers'.
- A target of a run without a fleet is not pinned: its workers go wherever Ray puts them, the driver's node
  included, so its url has to answer from here; refused here, or no such name here, is final.
- A fleet target is pinned to its node. The driver decides it only when its host resolves here to addresses
  that name the same machine from every node: not loopback, unspecified (0.0.0.0) or link-local, which each
  node has its own of (a server bound to 127.0.0.1 on its node answers only there). A name that does not
  resolve here decides nothing either: it may be defined only on that node (its /etc/hosts).
Assumed: any other address is the same machine from every node (one cluster network), and a server that
refuses the driver's connection refuses the workers' too (a firewall that rejects the driver's node but
accepts the workers' would break this; one that only drops packets does not).
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from loadgen.config import Experiment
from loadgen.errors import TargetError

CONNECT_TIMEOUT_S = 1.0   # a connect within a cluster takes milliseconds; no answer by then decides nothing
_UNUSABLE_HERE = (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT, errno.ENETUNREACH)
_NO_SUCH_NAME = (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME))   # not EAI_AGAIN: temporary


def check_targets(exp: Experiment) -> None:
    """TargetError for the first `url` target the driver can tell is unreachable (the module's rule); the
    targets are asked at the same time, so a run waits at most about CONNECT_TIMEOUT_S here."""
    targets = {t.url: t for t in exp.targets if t.url is not None}
    pinned = exp.fleet is not None
    if not targets:
        return
    with ThreadPoolExecutor(max_workers=len(targets)) as pool:
        answers = list(pool.map(lambda url: unreachable(url, pinned), targets))
    for (url, target), answer in zip(targets.items(), answers):
        if answer is not None:
            why, fix = answer
            raise TargetError(f"target {target.name}: {url}: unreachable ({why}) (fix: {fix})")


def unreachable(url: str, pinned: bool) -> tuple[str, str] | None:
    """(why, fix) when `url` is certainly unreachable from the workers as well as from here; None when it
    answers, or when only the worker can tell (see the module's rule)."""
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or 80
    try:
        addresses = [info[4] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
    except socket.gaierror as exc:
        if exc.errno in _NO_SUCH_NAME and not pinned:
            return f"host name {host} does not resolve", "correct the host name in the target's url"
        return None
    if pinned and any(node_local(str(address[0])) for address in addresses):
        return None
    outcomes = [_connect(address) for address in addresses]
    if "refused" not in outcomes or any(o not in ("refused", "unusable") for o in outcomes):
        return None   # something listens, or an address gave no answer in time: the worker decides
    return (f"connection refused: nothing listens on {host} port {port}",
            "start the server, or correct the target's url")


def node_local(address: str) -> bool:
    """An address each node has its own of: loopback, unspecified (0.0.0.0, `::`), link-local."""
    ip = ipaddress.ip_address(address.split("%")[0])   # an IPv6 link-local address may carry a %zone
    return ip.is_loopback or ip.is_unspecified or ip.is_link_local


def _connect(address: tuple) -> str:
    """"listens", "refused", "unusable" (this machine has no use for the address at all, e.g. an IPv6 one of
    `localhost` without IPv6 here: it decides only beside a refused one), or "unknown" (no answer in time, no
    route to the host, ...)."""
    family = socket.AF_INET6 if len(address) == 4 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.settimeout(CONNECT_TIMEOUT_S)
            sock.connect(address)
    except ConnectionRefusedError:
        return "refused"
    except OSError as exc:
        return "unusable" if exc.errno in _UNUSABLE_HERE else "unknown"
    return "listens"
