"""The seeded prompt sequence a run sends: sources drawn by weight, then a template uniformly within
the source, then the next candidate of that template's shuffled order (no repeats until the template
is used up, then a fresh shuffle). Every choice comes from `random.Random` seeded by strings, so a
seed gives the same sequence in every process and on every machine with the same Python version
(and, for the built-ins, the same standard library sources).

With an input-length target (prompts.input_tokens) each prompt's length in tokens is drawn from its own seeded
sequence and turned into characters by a LengthModel (the target server's fit); the candidate choice does not
depend on the fit (a built-in task is used only when it is at most SELECT_CHARS_PER_TOKEN characters per token
of its length), so every target gets the same tasks in the same order, each brought to length with its own fit:
more material of its kind in front (Pool.context), or, rarely, a cut at its end. Dataset rows are never
skipped: a long one is cut, a short one gets the rows that follow it as context.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Callable

from loadgen.errors import ConfigError
from loadgen.prompts import Prompt
from loadgen.prompts.code_tasks import code_pools
from loadgen.prompts.config import PromptsConfig, SourceConfig, parse_prompts_config
from loadgen.prompts.datasets import load_dataset
from loadgen.prompts.length import LengthModel, prompt_texts
from loadgen.prompts.prose_tasks import prose_pools
from loadgen.prompts.sizing import MIN_CONTEXT, boundary, cut_task, fill, with_context
from loadgen.prompts.task import Pool, Task

SELECT_CHARS_PER_TOKEN = 2.5   # below every common tokenizer's rate for code, so a chosen task rarely needs a cut
SIZING_ROUNDS, SIZING_SLACK = 4, 0.01   # a prompt is rebuilt until its estimate is within 1% of its length

__all__ = ["PromptMix", "PromptsConfig", "parse_prompts_config"]


class PromptMix:
    """Builds every source's candidates once (the stdlib scan takes ~1.5 s) and hands out the same
    prompt sequence on every call: `take(5)` is a prefix of `take(50)`."""

    def __init__(self, cfg: PromptsConfig, lengths: LengthModel | None = None) -> None:
        """`lengths`: the target server's characters-to-tokens fit, for cfg.input_tokens (None: ~4 characters
        per token)."""
        self.cfg = cfg
        self.lengths = lengths or LengthModel()
        self._cumulative = list(itertools.accumulate(s.weight for s in cfg.sources))
        self._cursors = [
            [_Cursor(pool, src.builtin is not None, f"{cfg.seed}/{i}/{pool.template}") for pool in self._pools(src)]
            for i, src in enumerate(cfg.sources)
        ]
        self._rng = random.Random(f"{cfg.seed}/sources")
        self._length_rng = random.Random(f"{cfg.seed}/input_tokens")
        prefix = cfg.system_prefix or ""
        self._prefix_chars = len(prefix) + (2 if prefix and not cfg.chat else 0)
        self._taken: list[Prompt] = []

    def take(self, n: int) -> list[Prompt]:
        """The first n prompts of the seeded sequence."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"take() needs a count >= 0, got {n!r}")
        while len(self._taken) < n:
            self._taken.append(self._next_prompt())
        return self._taken[:n]

    def sized(self, tokens: int) -> Prompt:
        """The next prompt of the sequence built to `tokens` instead of a drawn length (a trace row's)."""
        return self._next_prompt(tokens)

    def _next_prompt(self, target: int | None = None) -> Prompt:
        span = self.cfg.input_tokens
        if target is None and span is not None:
            target = self._length_rng.randint(span.min, span.max)
        source = bisect.bisect_right(self._cumulative, self._rng.random() * self._cumulative[-1])
        cursors = self._cursors[min(source, len(self._cursors) - 1)]  # guard float rounding at the top
        cursor = cursors[self._rng.randrange(len(cursors))]
        i, task = cursor.next(lambda t: self._fits(t, target, cursor.whole))
        if target is None:
            return self._to_prompt(task, None)
        return self._sized(task, target, cursor.pool, i)

    def _sized(self, task: Task, target: int, pool: Pool, i: int) -> Prompt:
        """The prompt whose estimated count (the server's fit, system prefix included) is nearest `target`: a first
        guess in characters, corrected by what the fit estimates for the prompt built, SIZING_ROUNDS at most."""
        fit = self.lengths.fit(task.kind)
        chars = fit.chars(target) - self._prefix_chars
        best: tuple[float, Prompt] | None = None
        for _ in range(SIZING_ROUNDS):
            room = chars - task.chars(self.cfg.chat)
            sized = (cut_task(task, chars, self.cfg.chat) if room < 0
                     else with_context(task, pool.context(i, room) if pool.context else ""))
            prompt = self._to_prompt(sized, target)
            miss = fit.estimate(prompt_texts(prompt)) - target
            if best is None or abs(miss) < abs(best[0]):
                best = (miss, prompt)
            if abs(miss) <= SIZING_SLACK * target:
                break
            chars = round(chars * (target - fit.overhead) / max(target - fit.overhead + miss, 1.0))
        assert best is not None   # SIZING_ROUNDS >= 1
        return best[1]

    def _pools(self, src: SourceConfig) -> list[Pool]:
        if src.builtin == "code":
            pools = code_pools(src.templates)
        elif src.builtin == "prose":
            pools = prose_pools(src.templates)
        else:
            tasks = load_dataset(src)
            pools = [Pool(src.name, len(tasks), tasks.__getitem__,
                          lambda i, chars: _rows_context(tasks, i, chars, self.cfg.chat))]
        span = self.cfg.input_tokens
        shortest = None if span is None else span.min
        whole = src.builtin is not None
        fitting = [pool for pool in pools if any(self._fits(pool.render(i), shortest, whole) for i in range(pool.size))]
        if not fitting:
            bounds = (f"min_prompt_chars..max_prompt_chars = {self.cfg.min_prompt_chars}..{self.cfg.max_prompt_chars}"
                      if span is None else f"{SELECT_CHARS_PER_TOKEN:g} characters per token of input_tokens = "
                      f"{span.min} ({SELECT_CHARS_PER_TOKEN * span.min:g} characters)")
            fix = (f"widen the bounds in [{self.cfg.key}]" if span is None else "raise input_tokens") + \
                " or drop this source"
            raise ConfigError(
                src.key, f"none of its prompts ({', '.join(f'{p.size} {p.template}' for p in pools)}) is within "
                f"{bounds}", fix)
        return fitting  # templates with nothing in bounds are left out: the bounds asked for that

    def _fits(self, task: Task | None, target: int | None, whole: bool) -> bool:
        """Within the character bounds; with a token target, a task kept whole (built-ins) must leave room."""
        if task is None:
            return False
        chars = task.chars(self.cfg.chat)
        if target is None:
            return self.cfg.min_prompt_chars <= chars <= self.cfg.max_prompt_chars
        return not whole or chars <= SELECT_CHARS_PER_TOKEN * target

    def _to_prompt(self, task: Task, target: int | None) -> Prompt:
        """The route's form, with the shared system prefix: a system message for chat, the text's
        first paragraph for completion routes."""
        prefix = self.cfg.system_prefix
        if self.cfg.chat:
            system = ({"role": "system", "content": prefix},) if prefix else ()
            return Prompt(task.task_id, task.kind, task.template, messages=system + task.messages,
                          target_tokens=target)
        text = f"{prefix}\n\n{task.text}" if prefix else task.text
        return Prompt(task.task_id, task.kind, task.template, text=text, target_tokens=target)


def _rows_context(tasks: list[Task], i: int, chars: int, chat: bool) -> str:
    """The dataset rows after row i (wrapping) as preceding context, in the form sent (chat: each row's last
    message)."""
    room = chars - 2
    if room < MIN_CONTEXT:
        return ""
    rows = (tasks[(i + k) % len(tasks)] for k in range(1, len(tasks) + 1))
    body = fill((t.messages[-1]["content"] if chat else t.text for t in rows), room, boundary(tasks[i].kind))
    return f"{body}\n\n" if body else ""


class _Cursor:
    """Walks one pool in a seeded shuffled order, skipping candidates that do not apply or do not
    fit the length bounds; reshuffles (new seed) each time the order is used up."""

    def __init__(self, pool: Pool, whole: bool, seed: str) -> None:
        """`whole`: the pool's tasks are kept whole (built-ins), so ones too long for a target are skipped."""
        self.pool, self.whole, self._seed = pool, whole, seed
        self._cycle, self._order, self._pos = 0, self._shuffled(0), 0

    def _shuffled(self, cycle: int) -> list[int]:
        order = list(range(self.pool.size))
        random.Random(f"{self._seed}/{cycle}").shuffle(order)
        return order

    def next(self, fits: Callable[[Task], bool]) -> tuple[int, Task]:
        """(candidate index, task) of the next candidate that `fits`. Ends within two passes: PromptMix checked
        that some candidate fits the shortest length asked for."""
        while True:
            if self._pos == len(self._order):
                self._cycle += 1
                self._order, self._pos = self._shuffled(self._cycle), 0
            i = self._order[self._pos]
            task = self.pool.render(i)
            self._pos += 1
            if task is not None and fits(task):
                return i, task
