"""What every prompt source hands to the mix: tasks in both forms, grouped in per-template pools."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Task:
    """One prompt before the mix shapes it: both the completion form and the chat form, without the
    shared system prefix (the mix adds it and keeps the form the route needs)."""

    task_id: str
    kind: str
    template: str
    text: str
    messages: tuple[dict, ...]

    def chars(self, chat: bool) -> int:
        """Prompt length in characters in the form that will be sent (the bound is on this)."""
        return sum(len(m["content"]) for m in self.messages) if chat else len(self.text)


@dataclass(frozen=True, slots=True)
class Pool:
    """`size` candidate tasks of one template. `render(i)` builds candidate i, or None when the
    template does not apply to it (e.g. "complete the body" on a function without a docstring);
    rendering on demand keeps thousands of candidates cheap. `context(i, chars)`: at most `chars` characters of
    more material of the same kind to put before candidate i (ending in its separator), for input-length targets."""

    template: str
    size: int
    render: Callable[[int], Task | None]
    context: Callable[[int, int], str] | None = None


def user_task(task_id: str, kind: str, template: str, text: str) -> Task:
    """A single-turn task whose chat form is one user message holding the same text."""
    return Task(task_id, kind, template, text, ({"role": "user", "content": text},))


def stable_hash(text: str) -> int:
    """A 64-bit hash that is the same in every process (unlike `hash`, salted by PYTHONHASHSEED)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")
