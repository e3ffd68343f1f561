"""Meeting an input-length target (prompts.input_tokens) in the target server's own tokens.

Before any load, the first worker of each target sends a few one-token requests: the run's own kind of prompts
(SAMPLES_PER_SIZE per kind) built at two lengths, and reads the prompt token count the server reports (SGLang
`meta_info.prompt_tokens`, OpenAI `usage.prompt_tokens`). A straight line per kind (loadgen.prompts.length) maps
characters to that count, chat template included, and the target's prompts are built with it. A server that
reports no count cannot meet a token target: its prompts assume ~4 characters per token, and the run says so.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace

from loadgen.client.http_stream import Endpoint, ReadLoop, stream_request
from loadgen.client.protocol.base import Adapter, FrameBuffer, SamplingSpec, StreamState
from loadgen.clock import now_ns
from loadgen.errors import ConfigError, TargetError
from loadgen.prompts import Prompt
from loadgen.prompts.config import InputTokens, PromptsConfig
from loadgen.prompts.length import ASSUMED_CHARS_PER_TOKEN, LengthModel, fit_model, prompt_texts
from loadgen.prompts.mix import PromptMix

SAMPLES_PER_SIZE = 4     # prompts per kind at each of the two lengths
DRAWS = 64               # the first prompts of the run's sequence searched for each kind
ONE_TOKEN = SamplingSpec(max_new_tokens=1, ignore_eos=False, temperature=0.0)


def calibration_prompts(cfg: PromptsConfig) -> list[Prompt]:
    """Prompts of every kind in the run's first DRAWS, at two lengths (~4 characters per token): the range's ends,
    or half the length and the length for a fixed target. Empty without an input-length target."""
    span = cfg.input_tokens
    if span is None:
        return []
    sizes = (span.min, span.max) if span.min < span.max else (span.min // 2, span.min)
    out: list[Prompt] = []
    for size in sizes:
        try:
            mix = PromptMix(replace(cfg, input_tokens=InputTokens(size, size)))
        except ConfigError:
            if size == span.min:
                raise   # the run's own shortest length: the user's setting is what is wrong
            continue    # half a short fixed length has no whole task: the line goes through the origin instead
        chosen: dict[str, list[Prompt]] = {}
        for prompt in mix.take(DRAWS):
            of_kind = chosen.setdefault(prompt.kind, [])
            if len(of_kind) < SAMPLES_PER_SIZE:
                of_kind.append(prompt)
        out += [p for of_kind in chosen.values() for p in of_kind]
    return out


async def server_counts(endpoint: Endpoint, adapter: Adapter, reads: ReadLoop, prompts: list[Prompt],
                        timeout_s: float) -> list[tuple[int | None, str | None]]:
    """(the server's prompt token count or None, the error of a request that failed or None) per prompt. No step's
    watchdog runs yet, so each request has its own `timeout_s` (the run's request timeout): a server that stops
    answering fails the calibration in one line instead of holding the run before its first step."""
    tag = uuid.uuid4().hex[:8]

    async def count(k: int, prompt: Prompt) -> tuple[int | None, str | None]:
        state = StreamState(f"calibrate-{tag}-{k}", prompt, "warmup", now_ns(), FrameBuffer())
        body = adapter.body(state.request_id, prompt, ONE_TOKEN)
        try:
            await asyncio.wait_for(stream_request(endpoint, adapter, state, body, {}, reads), timeout_s)
        except TimeoutError:
            return None, f"timeout: no whole answer within {timeout_s:g} s (load.request_timeout_s)"
        if state.status != "ok":
            return None, f"{state.status}: {state.error}"
        return state.prompt_tokens, None

    return list(await asyncio.gather(*(count(k, p) for k, p in enumerate(prompts))))


def length_model(target: str, prompts: list[Prompt], counts: list[tuple[int | None, str | None]]) -> LengthModel:
    """The target's fit from its counts; TargetError when a calibration request failed (the same prompts would fail
    under load, e.g. longer than the server's context)."""
    for prompt, (_, error) in zip(prompts, counts):
        if error is not None:
            raise TargetError(f"target {target}: a {prompt.target_tokens}-token calibration prompt failed ({error}); "
                              "lower prompts.input_tokens, or give the server a longer context")
    if any(tokens is None for tokens, _ in counts):
        return LengthModel(note=f"the server reports no prompt token count: input_tokens cannot be met, prompts "
                                f"assume ~{ASSUMED_CHARS_PER_TOKEN:g} characters per token")
    return fit_model((p.kind, prompt_texts(p), tokens) for p, (tokens, _) in zip(prompts, counts)
                     if tokens is not None)


def describe(model: LengthModel) -> str:
    """One line for the run's log, e.g. "code 3.12 chars/token + 28 tokens, prose 4.40 chars/token + 28 tokens"."""
    if not model.counted:
        return model.note
    return ", ".join(f"{'all kinds' if kind == '*' else kind} {f.chars_per_token:.2f} chars/token "
                     f"{f.overhead:+.0f} tokens (by {f.measure})" for kind, f in model.fits)


def prompts_for(cfg: PromptsConfig, models: list[LengthModel | None], n: int) -> list[list[Prompt]]:
    """The first n prompts of the run for each target's model (targets with the same model share one list)."""
    built: dict[LengthModel | None, list[Prompt]] = {}
    for model in models:
        if model not in built:
            built[model] = PromptMix(cfg, model).take(n)
    return [built[model] for model in models]
