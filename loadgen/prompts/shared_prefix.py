"""Shared contexts (`shared_prefix_tokens`, `prefixes`): the long start that many requests have in common, like an
agent's system prompt or a document many questions are asked about. Context k of n is documentation prose that
starts at its own paragraph (n starts spread evenly from a stable place, so two contexts share no cached prefix
beyond the words two paragraphs may begin with), ended by one line that tells the model to use it; each request
appends its own part after it."""

from __future__ import annotations

from loadgen.prompts.prose_tasks import prose_paragraphs
from loadgen.prompts.sizing import fill
from loadgen.prompts.task import stable_hash

CLOSING = "\n\nUse the reference material above when it helps with the request that follows."


def shared_context(source: str, k: int, n: int, chars: int) -> str:
    """Context k of a source's n, about `chars` characters long (whole paragraphs, the last cut at a word)."""
    texts = prose_paragraphs()
    start = stable_hash(f"shared-prefix/{source}") + k * max(1, len(texts) // n)
    body = fill((texts[(start + j) % len(texts)] for j in range(len(texts))), max(chars - len(CLOSING), 1), " \n")
    return body + CLOSING
