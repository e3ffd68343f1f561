"""The seeded prompt sequence a run sends: sources drawn by weight, then a template uniformly within
the source, then the next candidate of that template's shuffled order (no repeats until the template
is used up, then a fresh shuffle). Every choice comes from `random.Random` seeded by strings, so a
seed gives the same sequence in every process and on every machine with the same Python version
(and, for the built-ins, the same standard library sources).
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Callable
from typing import TypeGuard

from loadgen.errors import ConfigError
from loadgen.prompts import Prompt
from loadgen.prompts.code_tasks import code_pools
from loadgen.prompts.config import PromptsConfig, SourceConfig, parse_prompts_config
from loadgen.prompts.datasets import load_dataset
from loadgen.prompts.prose_tasks import prose_pools
from loadgen.prompts.task import Pool, Task

__all__ = ["PromptMix", "PromptsConfig", "parse_prompts_config"]


class PromptMix:
    """Builds every source's candidates once (the stdlib scan takes ~1.5 s) and hands out the same
    prompt sequence on every call: `take(5)` is a prefix of `take(50)`."""

    def __init__(self, cfg: PromptsConfig) -> None:
        self.cfg = cfg
        self._cumulative = list(itertools.accumulate(s.weight for s in cfg.sources))
        self._cursors = [
            [_Cursor(pool, self._fits, f"{cfg.seed}/{i}/{pool.template}") for pool in self._pools(src)]
            for i, src in enumerate(cfg.sources)
        ]
        self._rng = random.Random(f"{cfg.seed}/sources")
        self._taken: list[Prompt] = []

    def take(self, n: int) -> list[Prompt]:
        """The first n prompts of the seeded sequence."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"take() needs a count >= 0, got {n!r}")
        while len(self._taken) < n:
            self._taken.append(self._to_prompt(self._next_task()))
        return self._taken[:n]

    def _pools(self, src: SourceConfig) -> list[Pool]:
        if src.builtin == "code":
            pools = code_pools(src.templates)
        elif src.builtin == "prose":
            pools = prose_pools(src.templates)
        else:
            tasks = load_dataset(src)
            pools = [Pool(src.name, len(tasks), tasks.__getitem__)]
        fitting = [pool for pool in pools if any(self._fits(pool.render(i)) for i in range(pool.size))]
        if not fitting:
            raise ConfigError(
                src.key, f"none of its prompts ({', '.join(f'{p.size} {p.template}' for p in pools)}) is within "
                f"min_prompt_chars..max_prompt_chars = {self.cfg.min_prompt_chars}..{self.cfg.max_prompt_chars}",
                f"widen the bounds in [{self.cfg.key}] or drop this source")
        return fitting  # templates with nothing in bounds are left out: the bounds asked for that

    def _fits(self, task: Task | None) -> TypeGuard[Task]:
        return task is not None and self.cfg.min_prompt_chars <= task.chars(self.cfg.chat) <= self.cfg.max_prompt_chars

    def _next_task(self) -> Task:
        source = bisect.bisect_right(self._cumulative, self._rng.random() * self._cumulative[-1])
        cursors = self._cursors[min(source, len(self._cursors) - 1)]  # guard float rounding at the top
        return cursors[self._rng.randrange(len(cursors))].next()

    def _to_prompt(self, task: Task) -> Prompt:
        """The route's form, with the shared system prefix: a system message for chat, the text's
        first paragraph for completion routes."""
        prefix = self.cfg.system_prefix
        if self.cfg.chat:
            system = ({"role": "system", "content": prefix},) if prefix else ()
            return Prompt(task.task_id, task.kind, task.template, messages=system + task.messages)
        text = f"{prefix}\n\n{task.text}" if prefix else task.text
        return Prompt(task.task_id, task.kind, task.template, text=text)


class _Cursor:
    """Walks one pool in a seeded shuffled order, skipping candidates that do not apply or do not
    fit the length bounds; reshuffles (new seed) each time the order is used up."""

    def __init__(self, pool: Pool, fits: Callable[[Task | None], TypeGuard[Task]], seed: str) -> None:
        self._pool, self._fits, self._seed = pool, fits, seed
        self._cycle, self._order, self._pos = 0, self._shuffled(0), 0

    def _shuffled(self, cycle: int) -> list[int]:
        order = list(range(self._pool.size))
        random.Random(f"{self._seed}/{cycle}").shuffle(order)
        return order

    def next(self) -> Task:
        # Ends within two passes: PromptMix checked that some candidate fits.
        while True:
            if self._pos == len(self._order):
                self._cycle += 1
                self._order, self._pos = self._shuffled(self._cycle), 0
            task = self._pool.render(self._order[self._pos])
            self._pos += 1
            if self._fits(task):
                return task
