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

A source with shared contexts (shared_prefix_tokens, prefixes) puts one of them, drawn from its own seeded sequence,
in front of each prompt (after the system prefix); a conversation source's prompts open sessions
(loadgen/prompts/conversation.py). Neither changes which tasks are drawn.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Callable
from dataclasses import replace

from loadgen.errors import ConfigError
from loadgen.prompts import Prompt
from loadgen.prompts.agent import tools_text
from loadgen.prompts.code_tasks import code_pools
from loadgen.prompts.config import BUILTIN_TEMPLATES, PromptsConfig, SourceConfig, parse_prompts_config
from loadgen.prompts.conversation import conversation_for, transcript_turn
from loadgen.prompts.datasets import load_dataset
from loadgen.prompts.families import family_pools
from loadgen.prompts.length import LengthModel, prompt_texts
from loadgen.prompts.prose_tasks import prose_pools
from loadgen.prompts.shared_prefix import shared_context
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
        self._prefix_rngs = [random.Random(f"{cfg.seed}/{i}/shared_prefix") for i in range(len(cfg.sources))]
        self._contexts: dict[tuple[str, int], str] = {}
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
        source = min(bisect.bisect_right(self._cumulative, self._rng.random() * self._cumulative[-1]),
                     len(self._cursors) - 1)  # guard float rounding at the top
        cursors = self._cursors[source]
        cursor = cursors[self._rng.randrange(len(cursors))]
        src = self.cfg.sources[source]
        prefix = self._shared_prefix(source, src)
        room = None if target is None else target - (src.shared_prefix_tokens or 0)
        i, task = cursor.next(lambda t: self._fits(t, room, cursor.whole))
        if target is None:
            return self._to_prompt(task, None, src, prefix)
        return self._sized(task, target, cursor.pool, i, src, prefix)

    def _shared_prefix(self, index: int, src: SourceConfig) -> tuple[str, str] | None:
        """(label, text) of the shared context this prompt starts with, drawn uniformly among the source's; None
        without shared_prefix_tokens. Its length in characters follows the server's prose fit (~4 characters per
        token without one)."""
        if src.shared_prefix_tokens is None:
            return None
        k = self._prefix_rngs[index].randrange(src.prefixes)
        if (src.name, k) not in self._contexts:
            chars = round(src.shared_prefix_tokens * self.lengths.fit("prose").chars_per_token)
            self._contexts[src.name, k] = shared_context(src.name, k, src.prefixes, chars)
        return f"{src.name}#{k}", self._contexts[src.name, k]

    def _sized(self, task: Task, target: int, pool: Pool, i: int, src: SourceConfig,
               prefix: tuple[str, str] | None) -> Prompt:
        """The prompt whose estimated count (the server's fit, system prefix and shared context included) is nearest
        `target`: a first guess in characters, corrected by what the fit estimates for the prompt built,
        SIZING_ROUNDS at most."""
        fit = self.lengths.fit(task.kind)
        empty = Task(task.task_id, task.kind, task.template, "", tuple(dict(m, content="") for m in task.messages))
        chars = fit.chars(target) - sum(map(len, prompt_texts(self._to_prompt(empty, target, src, prefix))))
        best: tuple[float, Prompt] | None = None
        for _ in range(SIZING_ROUNDS):
            room = chars - task.chars(self.cfg.chat)
            sized = (cut_task(task, chars, self.cfg.chat) if room < 0
                     else with_context(task, pool.context(i, room) if pool.context else ""))
            prompt = self._to_prompt(sized, target, src, prefix)
            miss = fit.estimate(prompt_texts(prompt)) - target
            if best is None or abs(miss) < abs(best[0]):
                best = (miss, prompt)
            if abs(miss) <= SIZING_SLACK * target:
                break
            chars = round(chars * (target - fit.overhead) / max(target - fit.overhead + miss, 1.0))
        assert best is not None   # SIZING_ROUNDS >= 1
        return best[1]

    def _pools(self, src: SourceConfig) -> list[Pool]:
        session = src.conversation or src.agent
        if session is not None:   # sessions open with a task of these kinds, every template
            pools = [p for kind in session.tasks for p in _builtin_pools(kind, BUILTIN_TEMPLATES[kind])]
        elif src.builtin is not None:
            pools = _builtin_pools(src.builtin, src.templates)
        else:
            tasks = load_dataset(src)
            pools = [Pool(src.name, len(tasks), tasks.__getitem__,
                          lambda i, chars: _rows_context(tasks, i, chars, self.cfg.chat))]
        span = self.cfg.input_tokens
        shortest = None if span is None else span.min - (src.shared_prefix_tokens or 0)
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

    def _to_prompt(self, task: Task, target: int | None, src: SourceConfig, prefix: tuple[str, str] | None) -> Prompt:
        """The route's form, with the system prefix and the shared context in front: a system message for chat,
        the text's first paragraphs for completion routes. A conversation's opening is a transcript turn on text
        routes (`User: ...` then `Assistant:`, which its answer continues), and carries the session's later
        messages."""
        agent = src.agent.agent if src.agent is not None else None
        tools = tools_text(agent) if agent is not None and not self.cfg.chat else None   # chat: OpenAI `tools`
        system = "\n\n".join(p for p in (self.cfg.system_prefix, prefix[1] if prefix else None, tools) if p)
        text = messages = None
        if self.cfg.chat:
            messages = (({"role": "system", "content": system},) if system else ()) + task.messages
        else:
            session = src.conversation is not None or agent is not None
            body = transcript_turn(task.text) if session else task.text
            text = f"{system}\n\n{body}" if system else body
        prompt = Prompt(task.task_id, task.kind, task.template, text, messages, target,
                        shared_prefix=prefix[0] if prefix else None)
        if agent is not None:
            return replace(prompt, prompt_id=f"agent/{task.task_id}", template=f"agent/{task.template}", agent=agent)
        if src.conversation is None:
            return prompt
        return replace(prompt, prompt_id=f"conversation/{task.task_id}", template=f"conversation/{task.template}",
                       conversation=conversation_for(task.task_id, task.kind, src.conversation, self.cfg.seed))


def _builtin_pools(kind: str, templates: tuple[str, ...]) -> list[Pool]:
    """The pools of a built-in source kind (code, prose or a task family)."""
    if kind == "code":
        return code_pools(templates)
    if kind == "prose":
        return prose_pools(templates)
    return family_pools(kind, templates)


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
