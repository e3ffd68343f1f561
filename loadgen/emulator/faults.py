"""Fault injection, with the flags and semantics of the client benchmark's firehose (see
shared/clientbench/README.md "Fault injection"), plus --fault-slow-first-token-ms.

A fraction --fault-rate of the requests (seeded by --fault-seed; the first --fault-skip requests are spared)
gets one of the enabled fault types at random. Every ground-truth record then carries `fault`:
null or {"type", "at", "applied", ...}, so a client's error accounting can be checked against the truth.

--fault-keepalive-requests is a connection fault instead, on every connection (see KeepAliveLimit).
"""

from __future__ import annotations

import argparse
import asyncio
import random
from dataclasses import dataclass, field


def add_fault_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("fault injection (off unless a fault type flag is given)")
    g.add_argument("--fault-rate", type=float, default=0.2, help="fraction of requests faulted")
    g.add_argument("--fault-seed", type=int, default=0)
    g.add_argument("--fault-skip", type=int, default=0, help="never fault the first N requests")
    g.add_argument("--fault-frame", type=int, default=-1, help="K: the token frame a fault hits (default: middle)")
    g.add_argument("--fault-close-after", type=int, default=None, metavar="N",
                   help="close the TCP connection after N token frames")
    g.add_argument("--fault-close-mode", choices=("fin", "rst"), default="fin",
                   help="how --fault-close-after and --fault-keepalive-requests close")
    g.add_argument("--fault-http", type=int, default=0, metavar="STATUS",
                   help="answer at once with STATUS and SGLang's error body")
    g.add_argument("--fault-stall-ms", type=float, default=0.0, metavar="MS",
                   help="hold token frame K (and all after it) back by MS")
    g.add_argument("--fault-malformed", action="store_true", help="send one truncated-JSON frame before frame K")
    g.add_argument("--fault-abort", action="store_true", help="end the stream at frame K with SGLang's abort")
    g.add_argument("--fault-abort-status", type=int, default=503)
    g.add_argument("--fault-no-done", action="store_true",
                   help="end the body cleanly after K frames: no finish frame, no [DONE]")
    g.add_argument("--fault-slow-first-token-ms", type=float, default=0.0, metavar="MS",
                   help="delay the first token frame by MS")
    g.add_argument("--fault", choices=("degraded-power",), default=None,
                   help="a state of the whole server: degraded-power = the DGX Spark stuck in a low-power state "
                        "(SM clock and speed divided by --degraded-power-factor, software power cap; "
                        "loadgen/emulator/gpu.py)")
    g.add_argument("--degraded-power-factor", type=float, default=3.0, metavar="F",
                   help="degraded-power: divide the SM clock and the speed by F (default 3: 2,405 -> 802 MHz)")
    g.add_argument("--fault-keepalive-requests", type=int, default=None, metavar="N",
                   help="a connection answers N generation requests; the next one on it is closed unanswered")


@dataclass(slots=True)
class Fault:
    """One request's fault: what, at which token frame, and whether it happened."""

    type: str
    at: int
    applied: bool = False
    info: dict = field(default_factory=dict)

    def record(self) -> dict:
        return {"type": self.type, "at": self.at, "applied": self.applied, **self.info}


class FaultPicker:
    """Decides, per request in arrival order, whether and how it is faulted (seeded, repeatable)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.types = [t for t, on in (
            ("close", args.fault_close_after is not None), ("http", bool(args.fault_http)),
            ("stall", args.fault_stall_ms > 0), ("malformed", args.fault_malformed),
            ("abort", args.fault_abort), ("no_done", args.fault_no_done),
            ("slow_first_token", args.fault_slow_first_token_ms > 0)) if on]
        self.rng = random.Random(args.fault_seed)
        self.seen = 0

    @property
    def enabled(self) -> bool:
        return bool(self.types)

    def pick(self, expected_frames: int) -> Fault | None:
        """The fault for the next request, or None. expected_frames sets the default K (the middle)."""
        if not self.types:
            return None
        self.seen += 1
        hit = self.rng.random() < self.args.fault_rate
        kind = self.types[0] if len(self.types) == 1 else self.rng.choice(self.types)
        if self.seen <= self.args.fault_skip or not hit:
            return None
        a = self.args
        if kind == "close":
            return Fault(kind, a.fault_close_after, info={"mode": a.fault_close_mode})
        if kind in ("http", "slow_first_token"):
            info = {"status": a.fault_http} if kind == "http" else {"ms": a.fault_slow_first_token_ms}
            return Fault(kind, 0, info=info)
        at = a.fault_frame if a.fault_frame >= 0 else max(0, expected_frames // 2)
        info = {"ms": a.fault_stall_ms} if kind == "stall" else {}
        if kind == "abort":
            info = {"status": a.fault_abort_status}
        return Fault(kind, at, info=info)


class KeepAliveLimit:
    """--fault-keepalive-requests N: each connection answers N generation requests (their answers keep it alive,
    no `Connection: close`), and the next request that arrives on it is not answered: the connection is closed
    (--fault-close-mode) as it arrives. A client meets this when a server closes a kept-alive connection just as
    a request goes out on it: an idle timeout firing, a per-connection limit, or llama-server (cpp-httplib), which
    closes after every streamed response without saying so (N = 1). Here it happens on every reuse past N, so a
    test can count it: `closed` is the number of requests the server dropped unread this way.

    Connections are told apart by their transport object (aiohttp's per-connection handler takes no attributes
    and no weak references); entries of closed connections are pruned as the table grows."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.closed = 0
        self.served: dict[int, tuple[asyncio.BaseTransport, int]] = {}   # id(transport) -> (it, requests answered)
        self.prune_at = 1024

    def admit(self, transport: asyncio.BaseTransport) -> bool:
        """True: answer this request; False: close its connection unanswered (counted)."""
        entry = self.served.get(id(transport))
        answered = entry[1] if entry is not None else 0
        if answered >= self.limit:
            del self.served[id(transport)]
            self.closed += 1
            return False
        self.served[id(transport)] = (transport, answered + 1)
        if len(self.served) >= self.prune_at:
            self.served = {k: v for k, v in self.served.items() if not v[0].is_closing()}
            self.prune_at = max(1024, 2 * len(self.served))
        return True
