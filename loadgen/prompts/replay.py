"""The prompts of a trace replay: one per row, in row order, each brought to its row's input length with the
target server's own fit and asking for its row's output length.

A row with text is sent as it is. Every other row takes the next prompt of the run's seeded mix built to its
length (loadgen.prompts.mix, sized as for prompts.input_tokens); a row shorter than any whole built-in task
(config.trace.WHOLE_TASK_TOKENS) takes one built to that length, cut at a word break at its end to the row's length
in characters by the fit. Each prompt's id is the trace's name and the row's index (`requests.prompt_id`), so a
request can be matched with its row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from loadgen.prompts import Prompt
from loadgen.prompts.config import PromptsConfig
from loadgen.prompts.length import LengthModel
from loadgen.prompts.mix import PromptMix
from loadgen.prompts.sizing import boundary, cut
from loadgen.prompts.traces import Trace, TraceRow


def replay_prompts(cfg: PromptsConfig, models: Sequence[LengthModel | None], trace: Trace) -> list[list[Prompt]]:
    """Each target's prompts, one per row (targets with the same fit share one list)."""
    built: dict[LengthModel | None, list[Prompt]] = {}
    for model in models:
        if model not in built:
            mix = PromptMix(cfg, model) if cfg.input_tokens is not None else None
            built[model] = [_prompt(row, trace.name, cfg, mix, model) for row in trace.rows]
    return [built[model] for model in models]


def _prompt(row: TraceRow, name: str, cfg: PromptsConfig, mix: PromptMix | None, model: LengthModel | None
            ) -> Prompt:
    prompt_id = f"{name}#{row.index}"
    if row.text is not None:
        form = {"messages": ({"role": "user", "content": row.text},)} if cfg.chat else {"text": row.text}
        return Prompt(prompt_id, "trace", name, target_tokens=row.input_tokens, max_new_tokens=row.output_tokens,
                      session_id=row.session_id, **form)
    assert mix is not None and cfg.input_tokens is not None and row.input_tokens is not None  # trace_prompts
    shortest = cfg.input_tokens.min
    prompt = mix.sized(max(row.input_tokens, shortest))
    if row.input_tokens < shortest:
        prompt = _cut(prompt, (model or LengthModel()).fit(prompt.kind).chars(row.input_tokens))
    return replace(prompt, prompt_id=prompt_id, target_tokens=row.input_tokens, max_new_tokens=row.output_tokens,
                   session_id=row.session_id)


def _cut(prompt: Prompt, chars: int) -> Prompt:
    """The prompt cut at its end to about `chars` characters (chat: its last message), never to nothing: at a word
    break, code too (a short row would lose a tenth of its length to a line break)."""
    at = boundary("prose")
    if prompt.messages is None:
        text = prompt.text or ""
        return replace(prompt, text=cut(text, chars, at) or text.split()[0])
    *earlier, last = prompt.messages
    room = chars - sum(len(m["content"]) for m in earlier)
    content = cut(last["content"], room, at) or last["content"].split()[0]
    return replace(prompt, messages=(*earlier, dict(last, content=content)))
