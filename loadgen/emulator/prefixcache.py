"""The emulated radix cache: which leading tokens of a prompt the server already holds, as SGLang's RadixCache.

SGLang keeps the KV of every prompt it prefilled, and of every finished request's prompt + output, in a radix
tree over token ids; a new request reuses its longest cached prefix (`meta_info.cached_tokens`) and prefills
only the rest. Leaves are evicted least recently used first when the pool needs room.

The emulator runs no tokenizer: a text prompt is ceil(len / 4) tokens (promptinfo.estimate_tokens), so its
tokens here are its 4-character slices from the start, and an `input_ids` prompt's tokens are its ids. A prefix
is keyed by a hash chained over its tokens (h_i = hash(h_{i-1}, token_i)), so a lookup walks the prompt once and
stops at the first token not held: the same answer as a radix tree's match, without storing a tree. Entries are
touched longest first, so that among the prefixes of one path the longest is the oldest: eviction then takes
leaves before the prefixes others still share, as a radix tree's leaf eviction does.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from loadgen.emulator.promptinfo import CHARS_PER_TOKEN


def cache_tokens(prompt: str | Sequence[int]) -> list[str] | list[int]:
    """A prompt's tokens as the cache sees them: 4-character slices of a text, or the ids themselves."""
    if isinstance(prompt, str):
        return [prompt[i:i + CHARS_PER_TOKEN] for i in range(0, len(prompt), CHARS_PER_TOKEN)]
    return list(prompt)


class PrefixCache:
    """Cached prefixes of at most `capacity` tokens (the KV pool); LRU eviction, leaves first."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(0, capacity)
        self._entries: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def match(self, tokens: Sequence[str | int]) -> int:
        """How many leading tokens are cached (the matched prefix is touched)."""
        keys: list[int] = []
        h = 0
        for token in tokens:
            h = hash((h, token))
            if h not in self._entries:
                break
            keys.append(h)
        self._touch(keys)
        return len(keys)

    def insert(self, tokens: Sequence[str | int]) -> None:
        """Hold every prefix of `tokens` (a prefilled prompt, or a finished prompt + output); evict past capacity."""
        keys: list[int] = []
        h = 0
        for token in tokens:
            h = hash((h, token))
            keys.append(h)
        self._touch(keys)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        """/flush_cache: SGLang empties the tree."""
        self._entries.clear()

    def _touch(self, keys: list[int]) -> None:
        entries = self._entries
        for key in reversed(keys):   # longest first: the shortest prefixes end up the most recent
            entries[key] = None
            entries.move_to_end(key)
