"""Does the server draft? Asked of what it does, not of what it says.

llama.cpp's /props reports `speculative.types: none` for a server started with a draft model (`-md`), while its
requests' `timings` show drafts (`draft_n`, `draft_n_accepted`). So before any load one short greedy request is
sent and its own figures decide: `spec_verify_ct` is set (protocol/openai.py `_timings`) only when the server
drafted for it. What the server said stays recorded beside it (steps.server_info `server_speculative`).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable

from loadgen.client.http_stream import Endpoint, ReadLoop, stream_request
from loadgen.client.protocol.base import Adapter, FrameBuffer, SamplingSpec, StreamState
from loadgen.clock import now_ns
from loadgen.prompts import Prompt

PROBE_TOKENS = 16
PROBE = Prompt("draft-probe", "code", "draft-probe",
               text='def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n')
SAMPLING = SamplingSpec(max_new_tokens=PROBE_TOKENS, ignore_eos=True, temperature=0.0)


async def observe(endpoint: Endpoint, adapter: Adapter, reads: ReadLoop, timeout_s: float,
                  counters: Callable[[], Awaitable[dict[str, float]]]) -> dict:
    """`speculative_observed` for steps.server_info: whether one probe request was drafted for, with its figures
    (completion tokens, target passes after the prompt pass, drafted tokens accepted), or why it is unknown; and
    what the server's own counters (`counters()`: its /metrics, unlabelled) moved by during it, so that anyone
    reconciling counters with a run's requests can take the probe out."""
    before = await counters()
    state = StreamState(f"draft-probe-{uuid.uuid4().hex[:8]}", PROBE, "warmup", now_ns(), FrameBuffer())
    body = adapter.body(state.request_id, PROBE, SAMPLING)
    try:
        await asyncio.wait_for(stream_request(endpoint, adapter, state, body, {}, reads), timeout_s)
    except TimeoutError:
        return {"drafts": None, "why": f"the probe request got no whole answer within {timeout_s:g} s"}
    after = await counters()
    moved = {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}
    if state.status != "ok" or state.completion_tokens is None:
        return {"drafts": None, "why": f"the probe request ended {state.status}: {state.error}", "counters": moved}
    out = {"drafts": state.spec_verify_ct is not None, "completion_tokens": state.completion_tokens,
           "source": "probe request timings", "counters": moved}
    if state.spec_verify_ct is not None:
        out.update(verify_passes=state.spec_verify_ct, accepted=state.completion_tokens - 1 - state.spec_verify_ct)
    return out


def with_observed(info: dict, observed: dict) -> dict:
    """steps.server_info with the probe's evidence (`speculative_observed`) and the algorithm it implies."""
    said = str(info.get("speculative_algorithm") or "UNKNOWN")
    return dict(info, speculative_observed=observed, speculative_algorithm=algorithm_from(said, observed))


def algorithm_from(said: str, observed: dict) -> str:
    """steps.algorithm for a llama.cpp server: what it says, unless its requests show otherwise (DRAFT: it
    drafted although it says none; NONE: it said a type but drafted nothing)."""
    drafts = observed.get("drafts")
    if drafts is True and said in ("NONE", "UNKNOWN"):
        return "DRAFT"
    if drafts is False and said not in ("NONE", "UNKNOWN"):
        return "NONE"
    return said


def describe(said: dict, observed: dict) -> str:
    """The start-up line's words on drafting: the measured evidence first, what the server says after it."""
    said_text = f"server says {json.dumps(said, sort_keys=True)}" if said else "server says nothing of its drafting"
    drafts = observed.get("drafts")
    if drafts is None:
        return f"drafting unknown ({observed.get('why')}); {said_text}"
    if not drafts:
        return f"no drafts in a {observed['completion_tokens']}-token probe request; {said_text}"
    return (f"drafts: a {observed['completion_tokens']}-token probe request took {observed['verify_passes']} target "
            f"passes ({observed['accepted']} drafted tokens accepted); {said_text}")
