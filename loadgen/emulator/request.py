"""One request as the emulated engine holds it: what it asked for, what it produced, and its record (the ledger's
row at GET /emulator/requests)."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

from loadgen.emulator import vocab
from loadgen.emulator.faults import Fault


@dataclass(slots=True, eq=False)
class EmuRequest:
    """One request's life in the engine, and its ground-truth record."""

    id: str
    rid: str | None
    kind: str
    route: str
    prompt_tokens: int
    max_new_tokens: int
    ignore_eos: bool
    stream_interval: int
    min_new_tokens: int = 0
    fault: Fault | None = None
    prompt: str | list[int] | None = None   # what the prefix cache sees (None: the request is never cached)
    cached_tokens: int = 0          # leading prompt tokens found in the prefix cache at admission
    t_received_ns: int = field(default_factory=time.time_ns)
    t_arrived_ns: int = 0           # when its head arrived (server.arrival_middleware), before the body was read
    t_admitted_ns: int = 0
    t_first_ns: int = 0
    t_done_ns: int = 0
    t_received_perf: float = field(default_factory=time.perf_counter)
    target_len: int = 0
    natural_stop: bool = False
    p_accept: float = 0.0
    script: tuple[str, ...] = ()    # its output's text, token by token, when fixed (a tool call); else sampled
    think_len: int = 0              # its first output tokens are thinking, <think> .. </think> (0: it answers at once)
    p_think: float = 0.0            # acceptance probability of a drafted token while it thinks
    think_verify_ct: int = 0        # verify steps that committed thinking tokens only ...
    think_verify_tokens: int = 0    # ... and the tokens they committed (a step that reaches the answer is the answer's)
    output_ids: list[int] = field(default_factory=list)
    text: str = ""                  # decoded output so far
    text_ends: list[int] = field(default_factory=list)    # len(text) after each output token
    accepted: list[int] = field(default_factory=list)     # tokens accepted per verify step
    spec_verify_ct: int = 0
    finish_reason: dict | None = None
    status: str = "queued"          # queued | running | finished | aborted | client_disconnected
    emit_upto: int = 0              # tokens released to the stream so far (stream_interval rule)
    event: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def completion_tokens(self) -> int:
        return len(self.output_ids)

    def text_upto(self, n: int) -> str:
        """Decoded text of the first n output tokens."""
        return self.text[:self.text_ends[n - 1]] if n > 0 else ""

    def text_between(self, a: int, b: int) -> str:
        return self.text[(self.text_ends[a - 1] if a > 0 else 0):(self.text_ends[b - 1] if b > 0 else 0)]

    @property
    def p_now(self) -> float:
        """The acceptance probability of its next verify step: thinking drafts with its own."""
        return self.p_think if len(self.output_ids) < self.think_len else self.p_accept

    def verified(self, n: int) -> None:
        """Record a verify step that commits n tokens (before they are appended)."""
        self.spec_verify_ct += 1
        self.accepted.append(n)
        if len(self.output_ids) + n <= self.think_len:   # a step that reaches the answer counts as the answer's
            self.think_verify_ct += 1
            self.think_verify_tokens += n

    @property
    def reasoning_tokens(self) -> int:
        """Thinking tokens produced so far, </think> included: SGLang's count (Req.update_reasoning_tokens)."""
        return min(len(self.output_ids), self.think_len)

    def thinking_between(self, a: int, b: int) -> tuple[str, str]:
        """Output tokens a .. b-1 as (thinking text without its tags, answer text): what a reasoning parser streams."""
        cut = max(a, min(b, self.think_len))
        thought = self.text_between(a, cut).replace(vocab.PIECES[vocab.THINK_START - vocab.BASE_ID], "")
        return thought.replace(vocab.PIECES[vocab.THINK_END - vocab.BASE_ID], ""), self.text_between(cut, b)

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    @property
    def correct_drafts(self) -> int:
        return sum(self.accepted) - len(self.accepted)

    def record(self) -> dict:
        """The ground-truth row of GET /emulator/requests."""
        return {"rid": self.rid, "id": self.id, "kind": self.kind, "route": self.route,
                "prompt_tokens": self.prompt_tokens, "cached_tokens": self.cached_tokens,
                "prompt_chars": len(self.prompt) if isinstance(self.prompt, str) else None,
                "output_chars": len(self.text), "completion_tokens": self.completion_tokens,
                "spec_verify_ct": self.spec_verify_ct, "reasoning_tokens": self.reasoning_tokens,
                "think_verify_ct": self.think_verify_ct, "think_verify_tokens": self.think_verify_tokens,
                "finish_reason": self.finish_reason["type"] if self.finish_reason else None,
                "status": self.status, "fault": self.fault.record() if self.fault else None,
                "max_new_tokens": self.max_new_tokens, "t_arrived_ns": self.t_arrived_ns or None,
                "t_received_ns": self.t_received_ns,
                "t_first_ns": self.t_first_ns or None, "t_done_ns": self.t_done_ns or None}

    def append_tokens(self, n: int, rng: random.Random | None, eos: int) -> None:
        """Commit n output tokens: sampled ids of its kind and their text, or (rng None: virtual time, where only
        the count matters) placeholders. A request that stops naturally ends on the end-of-sequence token."""
        if rng is None:
            self.output_ids.extend([0] * n)
            return
        start = len(self.output_ids)
        if self.script:   # written out: its pieces, then the end-of-turn token
            pieces = list(self.script[start:start + n])
            ids = [vocab.BASE_ID] * len(pieces) + [eos] * (n - len(pieces))
        else:
            thinking = max(0, min(n, self.think_len - start))
            ids = vocab.think_ids(rng, start, thinking, self.think_len) + vocab.sample_ids(rng, self.kind, n - thinking)
            if self.natural_stop and len(self.output_ids) + n == self.target_len and ids:
                ids[-1] = eos
            pieces = [vocab.PIECES[i - vocab.BASE_ID] for i in ids if i != eos]
        self.output_ids.extend(ids)
        text, ends = self.text, self.text_ends
        for k in range(n):
            text += pieces[k] if k < len(pieces) else ""
            ends.append(len(text))
        self.text = text
