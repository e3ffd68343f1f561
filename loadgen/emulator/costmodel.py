"""How long one forward takes on the modelled hardware: a roofline per forward plus the draft's cost.

decode step = max(bytes / bandwidth, FLOPs / compute) + draft cost + overheads, where
  bytes = target weights + each request's KV reads (context x kv bytes/token) + its GDN state
          + a GDN state snapshot per verified token when the algorithm runs without ReplaySSM,
  FLOPs = 2 x params x (batch x tokens verified per request);
draft cost: a chain (MTP/EAGLE) pays one draft-head forward per step (linear in draft depth), a block
draft (DFlash) pays one forward per block, each itself max(bytes, FLOPs) + a latency floor per forward.
prefill = max(weights / bandwidth, 2 x params x new prompt tokens / prefill compute) (+ the draft's prefill).
All numbers come from the profiles; `time_scale` > 1 runs the model that many times faster than real.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from loadgen.emulator.profiles import HardwareProfile, ModelProfile
from loadgen.emulator.spec import SpecConfig


@dataclass(frozen=True, slots=True)
class Forward:
    """One forward's wall seconds, and the modelled seconds the target's memory and compute roofs take of it:
    the roofline utilisation the GPU model turns into power (loadgen.emulator.gpu)."""

    seconds: float        # wall time (time_scale applied)
    modelled_s: float     # the modelled hardware's time
    memory_s: float       # target forward: bytes / bandwidth
    compute_s: float      # target forward: FLOPs / compute


IDLE = Forward(0.0, 0.0, 0.0, 0.0)


class CostModel:
    """Seconds per prefill and per decode step for a batch; pure functions of the profiles."""

    def __init__(self, hw: HardwareProfile, model: ModelProfile, spec: SpecConfig, time_scale: float = 1.0) -> None:
        self.hw, self.model, self.spec = hw, model, spec
        self.zero = hw.zero_cost
        self.scale = 1.0 / time_scale
        self._bw = hw.bytes_per_s
        self._flops = hw.compute_tflops * 1e12
        self._pflops = hw.prefill_tflops * 1e12
        self._w = model.weight_gb * 1e9
        self._kv = model.kv_kb_per_token * 1e3
        self._state = model.state_mb_per_request * 1e6
        self._snap = spec.profile.state_snapshot_mb * 1e6
        self._p = model.params_b * 1e9
        self._dw = spec.profile.draft_weight_gb * 1e9
        self._dp = spec.profile.draft_params_b * 1e9
        self._dfloor = spec.profile.draft_forward_ms / 1e3
        self._overhead = hw.step_overhead_ms / 1e3
        self._req_overhead = hw.request_overhead_ms / 1e3

    def _forward(self, weight_bytes: float, params: float, tokens: float, flops_per_s: float,
                 extra_bytes: float = 0.0) -> float:
        return max(self._roofs(weight_bytes, params, tokens, flops_per_s, extra_bytes))

    def _roofs(self, weight_bytes: float, params: float, tokens: float, flops_per_s: float,
               extra_bytes: float = 0.0) -> tuple[float, float]:
        """(memory seconds, compute seconds) of one forward; its time is the larger."""
        return (weight_bytes + extra_bytes) / self._bw, 2.0 * params * tokens / flops_per_s

    def draft_time(self, batch: int) -> float:
        """Drafting for one decode step of `batch` requests (before verification)."""
        prof, spec = self.spec.profile, self.spec
        if prof.draft == "chain":
            assert spec.eagle_topk is not None and spec.num_steps is not None   # set by resolve() for a chain
            per_step = self._forward(self._dw, self._dp, batch * spec.eagle_topk, self._flops)
            return spec.num_steps * (per_step + self._dfloor)
        if prof.draft == "block":
            assert spec.num_draft_tokens is not None   # set by resolve() for a block draft
            return self._forward(self._dw, self._dp, batch * spec.num_draft_tokens, self._flops) + self._dfloor
        return 0.0

    def decode_time(self, context_lens: Sequence[int]) -> float:
        """One decode (verify) step over the running batch; context_lens are tokens held per request."""
        return self.decode(context_lens).seconds

    def decode(self, context_lens: Sequence[int]) -> Forward:
        """decode_time with its roofline split."""
        if self.zero or not context_lens:
            return IDLE
        batch = len(context_lens)
        verify = self.spec.verify_tokens
        extra = self._kv * sum(context_lens) + batch * (self._state + verify * self._snap)
        memory_s, compute_s = self._roofs(self._w, self._p, batch * verify, self._flops, extra)
        total = max(memory_s, compute_s) + self.draft_time(batch) + self._overhead + batch * self._req_overhead
        return Forward(total * self.scale, total, memory_s, compute_s)

    def prefill(self, prompt_tokens: Sequence[int]) -> Forward:
        """One prefill (extend) forward for newly admitted requests (yields each one's first token), with its
        roofline split."""
        if self.zero or not prompt_tokens:
            return IDLE
        n = sum(prompt_tokens)
        memory_s, compute_s = self._roofs(self._w, self._p, n, self._pflops, self._state * len(prompt_tokens))
        t = max(memory_s, compute_s)
        if self.spec.enabled:
            t += self._forward(self._dw, self._dp, n, self._pflops)
        total = t + self._overhead
        return Forward(total * self.scale, total, memory_s, compute_s)
