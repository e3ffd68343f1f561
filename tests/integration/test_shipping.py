"""The row shipper against a real Ray actor as its sink: rows held while the window may still move them to the
drain, unsettled until the sink acknowledged them, a failed write raised at the step's end even after pruning,
every request and frame shipped exactly once, and a row's columns taken from the schema by name."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import replace

import pytest
import ray

from loadgen.client.messages import StepSpec
from loadgen.client.protocol.base import StreamState
from loadgen.client.shipping import RowShipper
from loadgen.prompts import Prompt
from loadgen.results import schema

PROMPT = Prompt("p7", "code", "tmpl", text="x", target_tokens=512, max_new_tokens=64, session_id="s1")
T_MIN_END = 1_000_000   # the window is known to last at least this long (ns on the step's clock)


@ray.remote
class GatedSink:
    """Records what it is sent; its writes wait while the gate is shut, and fail while told to."""

    def __init__(self) -> None:
        self.tables: dict[str, list[dict]] = {}
        self.gate = asyncio.Event()
        self.gate.set()
        self.failing = False

    async def write(self, batches) -> None:
        await self.gate.wait()
        if self.failing:
            raise RuntimeError("sink refused the write")
        for table, batch in batches.items():
            self.tables.setdefault(table, []).extend(batch.to_pylist())

    async def shut(self) -> None:
        self.gate.clear()

    async def open(self) -> None:
        self.gate.set()

    async def fail(self, failing: bool) -> None:
        self.failing = failing

    async def rows(self, table: str) -> list[dict]:
        return self.tables.get(table, [])


class Writes:
    """The shipper's `write`: the sink's `write.remote`, keeping the refs so a test can wait for them."""

    def __init__(self, sink) -> None:
        self.sink = sink
        self.refs: list[ray.ObjectRef] = []

    def __call__(self, batches) -> ray.ObjectRef:
        ref = self.sink.write.remote(batches)
        self.refs.append(ref)
        return ref

    async def settled(self) -> None:
        await asyncio.gather(*self.refs, return_exceptions=True)


def shipper_for(sink, prune_at: int = 256) -> tuple[RowShipper, Writes]:
    writes = Writes(sink)
    shipper = RowShipper(writes, "w3", "tgt", "node-a", prune_at=prune_at)
    shipper.begin(StepSpec("run-1", 4, 2, 0, 100, 1 << 62, 10.0, 10.0, sample_server=False,
                           t_measure_min_end_ns=T_MIN_END))
    return shipper, writes


def state(request_id: str, phase: str, t_scheduled_ns: int, shipper: RowShipper) -> StreamState:
    s = StreamState(request_id, PROMPT, phase, t_scheduled_ns, shipper.frames)
    s.close(t_scheduled_ns + 10)
    return s


def ids(rows: list[dict]) -> dict[str, str]:
    return {r["request_id"]: r["phase"] for r in rows}


def test_a_measured_row_sent_past_the_known_window_is_held_until_close_window_decides_it(ray_local):
    sink = GatedSink.remote()

    async def scenario() -> list[dict[str, str]]:
        shipper, writes = shipper_for(sink)
        seen = []
        for name, phase, t in (("warm", "warmup", 50), ("early", "measure", T_MIN_END - 1),
                               ("late", "measure", T_MIN_END + 10), ("later", "measure", T_MIN_END + 30)):
            shipper.add(state(name, phase, t, shipper))
        await shipper.flush()
        await writes.settled()
        seen.append(ids(await sink.rows.remote("requests")))
        shipper.window_reaches(T_MIN_END + 20)   # the driver now knows the window lasts past "late"
        await shipper.flush()
        await writes.settled()
        seen.append(ids(await sink.rows.remote("requests")))
        assert shipper.close_window(T_MIN_END + 25) == 1   # "later" was sent after the end: drain
        await shipper.flush()
        await shipper.end_step()
        seen.append(ids(await sink.rows.remote("requests")))
        return seen

    first, second, third = asyncio.run(scenario())
    assert first == {"warm": "warmup", "early": "measure"}
    assert second == {"warm": "warmup", "early": "measure", "late": "measure"}
    assert third == {"warm": "warmup", "early": "measure", "late": "measure", "later": "drain"}


def test_the_steps_end_ships_held_rows_as_they_stand(ray_local):
    """Every request becomes one row: one still held when the step ends is not left behind."""
    sink = GatedSink.remote()

    async def scenario() -> None:
        shipper, _ = shipper_for(sink)
        shipper.add(state("held", "measure", T_MIN_END + 10, shipper))
        await shipper.flush()
        await shipper.end_step()

    asyncio.run(scenario())
    assert ids(ray.get(sink.rows.remote("requests"))) == {"held": "measure"}


def test_rows_are_unsettled_until_the_sink_acknowledged_them(ray_local):
    sink = GatedSink.remote()

    async def scenario() -> tuple[list[str], list[str], list[str]]:
        shipper, writes = shipper_for(sink)
        await sink.shut.remote()
        shipper.add(state("shipped", "warmup", 10, shipper))
        await shipper.flush()                       # sent, but the sink has not answered
        shipper.add(state("buffered", "warmup", 20, shipper))
        running = state("running", "warmup", 30, shipper)
        before = [r["request_id"] for r in shipper.unsettled([running])]
        await sink.open.remote()
        await writes.settled()
        after = [r["request_id"] for r in shipper.unsettled([running])]
        await shipper.end_step()
        return before, after, [r["request_id"] for r in shipper.unsettled([running])]

    before, after, ended = asyncio.run(scenario())
    assert sorted(before) == ["buffered", "running", "shipped"]
    assert sorted(after) == ["buffered", "running"]
    assert ended == []                                  # no step: nothing the driver could record as lost
    assert [r["request_id"] for r in ray.get(sink.rows.remote("requests"))] == ["shipped", "buffered"]


def test_a_failed_write_raises_at_the_steps_end_even_after_the_acknowledged_writes_were_pruned(ray_local):
    sink = GatedSink.remote()

    async def scenario(shipper: RowShipper, writes: Writes) -> None:
        await sink.fail.remote(True)
        shipper.add(state("refused", "warmup", 10, shipper))
        await shipper.flush()
        await writes.settled()                      # the failed write is over before the prunes below
        await sink.fail.remote(False)
        for k in range(6):                          # every second write prunes (prune_at=2)
            shipper.add(state(f"r{k}", "warmup", 20 + k, shipper))
            await shipper.flush()
            await writes.settled()
        assert len(writes.refs) == 7
        await shipper.end_step()

    shipper, writes = shipper_for(sink, prune_at=2)
    with pytest.raises(Exception, match="sink refused the write"):
        asyncio.run(scenario(shipper, writes))
    assert len(shipper.pending_writes) < 2   # pruned indeed: the error came from a kept check
    assert sorted(ids(ray.get(sink.rows.remote("requests")))) == [f"r{k}" for k in range(6)]


def test_no_request_or_frame_is_lost_or_shipped_twice_across_many_flushes(ray_local):
    """Streams append frames and finish while a flush yields between its columns."""
    sink = GatedSink.remote()
    n_requests, frames_each = 600, 4

    async def produce(shipper: RowShipper) -> None:
        for i in range(n_requests):
            s = StreamState(f"q{i}", PROMPT, "warmup", i, shipper.frames)
            for k in range(frames_each):
                s.add_frame(1000 + k, 1, k + 1, 10)
                await asyncio.sleep(0)
            s.finished = True
            s.close(2000)
            shipper.add(s)

    async def scenario() -> int:
        shipper, writes = shipper_for(sink, prune_at=3)
        producer = asyncio.create_task(produce(shipper))
        flushes = 0
        while not producer.done():
            await shipper.flush()
            flushes += 1
            await asyncio.sleep(0)   # a flush with nothing to ship does not yield
        await shipper.end_step()
        return flushes

    flushes = asyncio.run(scenario())
    assert flushes > 20
    requests = Counter(r["request_id"] for r in ray.get(sink.rows.remote("requests")))
    frames = Counter((r["request_id"], r["seq"]) for r in ray.get(sink.rows.remote("frames")))
    assert requests == Counter(f"q{i}" for i in range(n_requests))
    assert frames == Counter((f"q{i}", k) for i in range(n_requests) for k in range(frames_each))


def test_a_row_has_every_requests_column_measured_ones_from_the_state_by_name(ray_local):
    sink = GatedSink.remote()
    turn = replace(PROMPT, session_id="sess-1", turn=2, shared_prefix="code#1")   # a conversation's second turn
    s = StreamState("rq", turn, "measure", 11, None)  # type: ignore[arg-type]   # no frames here
    values = {"server_request_id": "srv-9", "prompt_tokens": 101, "completion_tokens": 102, "cached_tokens": 103,
              "spec_verify_ct": 104, "spec_accept_length": 2.5, "finish_reason": "length", "t_sent_ns": 12,
              "t_headers_ns": 13, "t_first_token_ns": 14, "t_last_token_ns": 15, "t_done_ns": 16,
              "server_e2e_s": 0.25, "server_ttft_s": 0.05, "num_frames": 17, "status": "ok", "http_status": 200,
              "error": "none",
              "resent": True, "t_first_answer_ns": 18, "reasoning_tokens": 40, "reasoning_from": "server",
              "turn_kind": "tool_call"}
    for name, value in values.items():
        setattr(s, name, value)

    async def scenario() -> dict:
        shipper, _ = shipper_for(sink)
        row = shipper.row(s)
        shipper.add(s)
        await shipper.end_step()
        return row

    row = asyncio.run(scenario())
    expected = dict(values, request_id="rq", phase="measure", t_scheduled_ns=11, run_id="run-1", step_id=4,
                    target="tgt", node="node-a", worker="w3", prompt_id="p7", prompt_kind="code", template="tmpl",
                    session_id="sess-1", turn=2, shared_prefix="code#1", prompt_tokens_target=512,
                    completion_tokens_target=64)
    assert set(row) == set(schema.REQUESTS.names)
    assert row == expected
    [written] = ray.get(sink.rows.remote("requests"))
    assert written == expected
