"""Row shipping: a load worker's rows (`requests`, `frames`, its samples) on their way to the results sink.

The invariants a `RowShipper` keeps, and why:
- Every request becomes exactly one `requests` row: a finished request is handed over once (`add`), shipped
  once, and whatever is still here when the step ends ships then (`end_step`).
- A measured request sent at or after the point the window is known to reach is held: the driver stamps the
  window's end before it tells the workers, and `close_window` may still move such a request to the drain.
  Shipped at once, a short request sent in between would have kept phase `measure`.
- A row counts as settled only once the sink acknowledged its write; until then `unsettled` returns it, so
  that the driver writes it as `lost` if the worker dies, and a request is never missing.
- Acknowledged writes are forgotten (`prune_at` outstanding ones at a time), else a long step holds one ref
  per flush; a failed one is kept, so `end_step` still raises its error.
- The frames batch is built a column at a time, letting the event loop go in between: built at once, a
  5,000-row batch held it for milliseconds, while every stream's reads waited and got coalesced.
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Callable, Iterable

import pyarrow as pa
import ray

from loadgen.client.messages import StepSpec
from loadgen.client.protocol.base import MEASURED, FrameBuffer, StreamState
from loadgen.results import schema

PRUNE_WRITES = 256          # outstanding sink writes before acknowledged ones are dropped
FLUSH_PERIOD_S = 0.1

Write = Callable[[dict[str, pa.RecordBatch]], ray.ObjectRef]   # the sink's `write.remote`
_measured = operator.attrgetter(*MEASURED)


def measured_from(state: StreamState, t_ns: int) -> bool:
    """A request still counted as measured that was sent at or after `t_ns`: past a window that ends at
    `t_ns` it belongs to the drain."""
    return state.phase == "measure" and state.t_scheduled_ns >= t_ns


def move_to_drain(states: Iterable[StreamState], t_end_ns: int) -> int:
    """The window ended at `t_end_ns`: measured requests sent at or after it belong to the drain. Returns how
    many moved."""
    moved = 0
    for state in states:
        if measured_from(state, t_end_ns):
            state.phase = "drain"
            moved += 1
    return moved


class RowShipper:
    """One load worker's rows, shipped to the sink in few large calls (fire and forget, awaited at the step's
    end): a Ray call costs ~2 ms of CPU across processes whatever its size. See the module's invariants."""

    def __init__(self, write: Write, worker: str, target: str, node: str, prune_at: int = PRUNE_WRITES) -> None:
        self.write = write
        self.worker = worker
        self.target = target
        self.node = node
        self.prune_at = prune_at
        self.frames = FrameBuffer()          # the worker's streams append their frames here
        self.finished: list[StreamState] = []  # finished requests not shipped yet (held ones too)
        self.in_transit: list[tuple[ray.ObjectRef, list[StreamState]]] = []  # requests rows not yet acked
        self.pending_writes: list[ray.ObjectRef] = []
        self.write_checks: list[asyncio.Future] = []  # finished writes whose errors end_step must still raise
        self.step: StepSpec | None = None
        self.window_open_until_ns = 0        # the window is known to reach at least this far
        self.holds_level = True              # closed loop keeps C requests in flight (not when users think)

    def begin(self, step: StepSpec) -> None:
        """A step starts: its rows carry its ids, and its window is known to reach its planned minimum end."""
        self.step = step
        self.window_open_until_ns = (step.t_measure_end_ns if step.t_measure_min_end_ns is None
                                     else step.t_measure_min_end_ns)

    def add(self, state: StreamState) -> None:
        """A finished request: its row ships with the next flush, unless held."""
        self.finished.append(state)

    def window_reaches(self, t_ns: int) -> None:
        """The driver knows the window lasts at least until `t_ns`: requests sent before it may ship."""
        self.window_open_until_ns = max(self.window_open_until_ns, t_ns)

    def close_window(self, t_end_ns: int) -> int:
        """The window ended at `t_end_ns`: held requests sent at or after it move to the drain, and ship.
        Returns how many moved."""
        self.window_reaches(t_end_ns)
        return move_to_drain(self.finished, t_end_ns)

    async def keep_flushing(self) -> None:
        """Flush every FLUSH_PERIOD_S, until cancelled (rows stay buffered until sent: a cancel loses none)."""
        while True:
            await asyncio.sleep(FLUSH_PERIOD_S)
            await self.flush()

    async def flush(self, final: bool = False) -> None:
        """Ship buffered frames and finished requests in one sink call; `final`: held rows too (the step is
        over). The frames batch is built in pieces, the reads that arrived meanwhile first after each."""
        step = self.step
        assert step is not None, "flush outside a step"
        n = len(self.frames)
        batches = {}
        if n:
            columns = {}
            for name, values in self.frames.columns().items():
                columns[name] = schema.column("frames", name, values[:n])
                await asyncio.sleep(0)
            if step.window_starts:   # a ramp: each frame under the window it arrived in
                columns["step_id"] = schema.column("frames", "step_id", [step.step_of(t) for t in columns["t_ns"]
                                                                         .to_pylist()])
            constants = {"run_id": step.run_id, "step_id": step.step_id}
            batches["frames"] = schema.batch_from_columns("frames", columns, constants)
        done, self.finished = (self.finished, []) if final else self._decided(self.finished)
        if done:
            batches["requests"] = schema.batch_from_rows("requests", [self.row(s) for s in done])
        sent = self._send(batches)
        self.frames.drop(n)
        if done and sent is not None:   # rows to ship make a batch, so a call was sent
            self.in_transit.append((sent, done))

    def _decided(self, finished: list[StreamState]) -> tuple[list[StreamState], list[StreamState]]:
        """(rows to ship, rows to hold): a measured request sent after the point the window is known to reach
        waits for `close_window`."""
        open_until = self.window_open_until_ns
        ship: list[StreamState] = []
        hold: list[StreamState] = []
        for state in finished:
            (hold if measured_from(state, open_until) else ship).append(state)
        return ship, hold

    def write_samples(self, rows: dict[str, list], server_rows: list[dict]) -> None:
        """The worker's own samples (column lists, `t_ns` first) and the server's (rows), in one sink call."""
        step = self.step
        assert step is not None, "samples outside a step"
        batches = {}
        if rows["t_ns"]:
            if step.window_starts:   # a ramp: each sample under the window it was taken in
                rows = dict(rows, step_id=[step.step_of(t) for t in rows["t_ns"]])
            if step.users is not None:   # a user ramp: the users this worker runs at each sample
                rows = dict(rows, target_in_flight=[step.users.running((t - step.t_start_ns) / 1e9)
                                                    for t in rows["t_ns"]])
            constants = {"run_id": step.run_id, "step_id": step.step_id, "worker": self.worker,
                         "node": self.node, "target_in_flight": step.concurrency if self.holds_level else None}
            batches["client_samples"] = schema.batch_from_columns("client_samples", rows, constants)
        if server_rows:
            batches["server_samples"] = schema.batch_from_rows("server_samples", server_rows)
        self._send(batches)

    def _send(self, batches: dict[str, pa.RecordBatch]) -> ray.ObjectRef | None:
        """One sink call for `batches` (none when empty); returns its ref. (Not `pending_writes[-1]`: the
        prune below may reorder or shorten that list.)"""
        if not batches:
            return None
        ref = self.write(batches)
        self.pending_writes.append(ref)
        if len(self.pending_writes) >= self.prune_at:
            self._prune_writes()
        return ref

    def _prune_writes(self) -> None:
        """Forget acknowledged writes. Finished ones are awaited (not ray.get: that blocks an async actor's
        loop), and a failed one is kept, so end_step still raises its error."""
        done, self.pending_writes = ray.wait(self.pending_writes, num_returns=len(self.pending_writes), timeout=0)
        if done:
            self.write_checks.append(asyncio.gather(*done))
        self.write_checks = [c for c in self.write_checks if not c.done() or c.exception() is not None]

    def unsettled(self, running: Iterable[StreamState]) -> list[dict]:
        """Rows (as they stand) of the `running` requests and of every request whose row the sink has not
        acknowledged; none outside a step."""
        if self.step is None:
            return []
        if self.in_transit:
            acked, _ = ray.wait([ref for ref, _ in self.in_transit], num_returns=len(self.in_transit), timeout=0)
            done = set(acked)
            self.in_transit = [(ref, states) for ref, states in self.in_transit if ref not in done]
        states = list(running) + self.finished
        states += [s for _, shipped in self.in_transit for s in shipped]
        return [self.row(s) for s in states]

    async def end_step(self) -> None:
        """The step is over: every row ships as it stands, and every write of the step is awaited (a failed
        one raises here)."""
        await self.flush(final=True)
        await asyncio.gather(*self.pending_writes, *self.write_checks)
        self.pending_writes.clear()
        self.write_checks.clear()
        self.in_transit.clear()
        self.step = None

    def row(self, s: StreamState) -> dict:
        """The request's `requests` row: the columns it measured by name, the others from where it ran."""
        step, p = self.step, s.prompt
        assert step is not None
        return dict(zip(MEASURED, _measured(s)), run_id=step.run_id, step_id=step.step_of(s.t_scheduled_ns),
                    target=self.target, node=self.node, worker=self.worker, prompt_id=p.prompt_id, prompt_kind=p.kind,
                    template=p.template, session_id=p.session_id, turn=p.turn, shared_prefix=p.shared_prefix,
                    prompt_tokens_target=p.target_tokens, completion_tokens_target=p.max_new_tokens)
