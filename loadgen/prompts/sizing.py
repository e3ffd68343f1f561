"""Bringing a task to a length in characters: more material of its own kind in front of it, or a cut at its end.

Context goes before the task (the question stays last, as people ask it) and is made of whole pieces (functions,
paragraphs, dataset rows), the last one cut at a line break (code) or a word break (other text), so a prompt
lands within one line or word of its length. A task longer than its length is cut the same way at its end.
"""

from __future__ import annotations

from collections.abc import Iterable

from loadgen.prompts.task import Task

MIN_CONTEXT = 40        # characters: less than this is not worth a context block (the shortfall is a few tokens)


def boundary(kind: str) -> str:
    """The characters text of this kind may be cut before: code at line breaks, anything else at any white space."""
    return "\n" if kind == "code" else " \n\t"


def cut(text: str, chars: int, at: str) -> str:
    """The longest prefix of `text` of at most `chars` characters that ends before one of the characters in `at`
    (all of it if it fits; empty when there is no such place)."""
    if len(text) <= chars:
        return text
    head = text[:max(chars, 0)]
    return head[:max(0, *(head.rfind(c) for c in at))]


def fill(pieces: Iterable[str], chars: int, at: str, sep: str = "\n\n") -> str:
    """Whole pieces joined by `sep` up to `chars` characters, the last cut at `at`. `pieces` may be endless."""
    out: list[str] = []
    used = 0
    for piece in pieces:
        room = chars - used - (len(sep) if out else 0)
        part = cut(piece, room, at)
        if not part:
            break
        out.append(part)
        used += len(part) + (len(sep) if len(out) > 1 else 0)
        if len(part) < len(piece):
            break
    return sep.join(out)


def with_context(task: Task, context: str) -> Task:
    """`context` (ending in its own separator) in front of the text and of the last message's content."""
    if not context:
        return task
    *earlier, last = task.messages
    messages = (*earlier, dict(last, content=context + last["content"]))
    return Task(task.task_id, task.kind, task.template, context + task.text, tuple(messages))


def cut_task(task: Task, chars: int, chat: bool) -> Task:
    """The task cut at its end to `chars` characters in the form sent (chat: the last message gives way)."""
    at = boundary(task.kind)
    if not chat:
        return Task(task.task_id, task.kind, task.template, cut(task.text, chars, at), task.messages)
    *earlier, last = task.messages
    room = chars - sum(len(m["content"]) for m in earlier)
    messages = (*earlier, dict(last, content=cut(last["content"], room, at)))
    return Task(task.task_id, task.kind, task.template, task.text, tuple(messages))
