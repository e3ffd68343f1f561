"""The prompts of a trace replay: one per row, in row order, each brought to its row's input length with the
target server's own fit and asking for its row's output length.

A row with text is sent as it is. Every other row takes the next prompt of the run's seeded mix built to its
length (loadgen.prompts.mix, sized as for prompts.input_tokens); a row shorter than any whole built-in task
(config.trace.WHOLE_TASK_TOKENS) takes one built to that length, cut at a word break at its end to the row's length
in characters by the fit. Each prompt's id is the trace's name and the row's index (`requests.prompt_id`), so a
request can be matched with its row.

A row with `hash_ids` (Mooncake) is built from blocks instead: each id's block is seeded prose of BLOCK_TOKENS in
the server's tokens (the fit), the same text wherever the id appears and different for each id, so rows that share
leading ids share that prefix and the server can reuse what the trace says it could. The last block is cut to what
the row's input length leaves, and a row with fewer ids than its length holds ends in text of its own. Such a
prompt's shared_prefix is the trace's name and its first id, so its request keeps the server's prefix reuse on and
`prefix_cache` (queries/) reads its hits.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import replace

from loadgen.prompts import Prompt
from loadgen.prompts.config import PromptsConfig
from loadgen.prompts.length import LengthFit, LengthModel
from loadgen.prompts.mix import SIZING_ROUNDS, SIZING_SLACK, PromptMix
from loadgen.prompts.prose_tasks import prose_paragraphs
from loadgen.prompts.sizing import boundary, cut, fill
from loadgen.prompts.traces import BLOCK_TOKENS, Trace, TraceRow

BLOCK_SEP = "\n\n"   # ends every block: the next block starts on a paragraph of its own


def replay_prompts(cfg: PromptsConfig, models: Sequence[LengthModel | None], trace: Trace) -> list[list[Prompt]]:
    """Each target's prompts, one per row (targets with the same fit share one list)."""
    built: dict[LengthModel | None, list[Prompt]] = {}
    for model in models:
        if model not in built:
            mixed = cfg.input_tokens is not None and any(r.text is None and not r.hash_ids for r in trace.rows)
            mix = PromptMix(cfg, model) if mixed else None
            blocks = Blocks((model or LengthModel()).fit("prose"), cfg.seed)
            built[model] = [_blocks_prompt(row, trace.name, cfg, blocks) if row.hash_ids
                            else _prompt(row, trace.name, cfg, mix, model) for row in trace.rows]
    return [built[model] for model in models]


class Blocks:
    """The text of each block id, BLOCK_TOKENS long in the server's tokens by `fit` (built once per id)."""

    def __init__(self, fit: LengthFit, seed: int) -> None:
        self.fit = fit
        self.seed = seed
        self._full: dict[str, str] = {}

    def tokens(self, text: str) -> float:
        """The server's tokens for `text` inside a prompt (the fit without its per-prompt overhead)."""
        return self.fit.estimate([text]) - self.fit.overhead

    def full(self, key: str) -> str:
        if key not in self._full:
            self._full[key] = self.sized(key, BLOCK_TOKENS)
        return self._full[key]

    def sized(self, key: str, tokens: float) -> str:
        """Block `key`'s text at about `tokens` (its first words: at most one word for under a word's worth):
        a first guess in characters, corrected by the fit's estimate, SIZING_ROUNDS at most."""
        chars = max(round(tokens * self.fit.chars_per_token), 1)
        best: tuple[float, str] | None = None
        for _ in range(SIZING_ROUNDS):
            body = fill(self._pieces(key), max(chars - len(BLOCK_SEP), 1), boundary("prose"))
            text = (body or next(self._pieces(key)).split()[0]) + BLOCK_SEP
            miss = self.tokens(text) - tokens
            if best is None or abs(miss) < abs(best[0]):
                best = (miss, text)
            if abs(miss) <= SIZING_SLACK * tokens:
                break
            chars = max(round(chars * tokens / max(tokens + miss, 1.0)), 1)
        assert best is not None   # SIZING_ROUNDS >= 1
        return best[1]

    def _pieces(self, key: str) -> Iterator[str]:
        """Block `key`'s endless seeded prose: paragraphs drawn at random, the first from a random word of its own,
        so two blocks start alike only by a chance of one in ~300,000 word positions."""
        rng = random.Random(f"trace-block:{self.seed}:{key}")
        texts = prose_paragraphs()
        words = rng.choice(texts).split(" ")
        yield " ".join(words[rng.randrange(len(words)):])
        while True:
            yield rng.choice(texts)


def _blocks_prompt(row: TraceRow, name: str, cfg: PromptsConfig, blocks: Blocks) -> Prompt:
    """A row built from its hash ids' blocks, the last cut (or a text of the row's own added) to its length."""
    assert row.input_tokens is not None   # a Mooncake row has its input_length
    keys = [str(h) for h in row.hash_ids]
    whole = keys if len(keys) * BLOCK_TOKENS <= row.input_tokens else keys[:-1]
    head = "".join(blocks.full(k) for k in whole)
    left = row.input_tokens - blocks.fit.overhead - blocks.tokens(head)
    key = keys[-1] if len(whole) < len(keys) else f"row{row.index}"
    tail = "" if head and left < 1 else blocks.sized(key, max(left, 1.0))
    text = head + tail
    form = {"messages": ({"role": "user", "content": text},)} if cfg.chat else {"text": text}
    return Prompt(f"{name}#{row.index}", "prose", name, target_tokens=row.input_tokens,
                  max_new_tokens=row.output_tokens, shared_prefix=f"{name}#{row.hash_ids[0]}",
                  session_id=row.session_id, **form)


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
