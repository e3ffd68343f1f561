"""A tiny fake vocabulary: output token ids and the text they decode to (one id -> one piece).

The emulator never runs a tokenizer; its output is plausible-looking filler so that clients exercise
their text handling, while token counts always come from meta_info, as SGLang's do.
"""

from __future__ import annotations

import random

_PROSE = (" the", " model", " of", " a", " and", " to", " data", " is", " in", " that", " we", " it",
          " speculative", " token", " draft", " step", ",", ".", " with", " on", " for", " as", " this",
          " run", " each", " block", " verify", " server", " load", " batch")
_CODE = ("def", " x", "(", ")", ":", "\n", "    ", "return", " =", " +", " 1", "[", "]", " for", " in",
         " range", " if", " else", "_", "i", " n", ",", " self", ".", "append", " None", " True", "#", " #", " y")
BASE_ID = 1000
PIECES = _PROSE + _CODE + ("<think>", "</think>")
THINK_START = BASE_ID + len(_PROSE) + len(_CODE)   # a thinking model's first output token ...
THINK_END = THINK_START + 1                        # ... and the one that ends its thinking (SGLang's think_end_id)
_KIND_OFFSET = {"prose": 0, "code": len(_PROSE)}


def think_ids(rng: random.Random, start: int, n: int, think_len: int) -> list[int]:
    """Output tokens start .. start + n - 1 of a request that thinks for its first `think_len` tokens: <think>, prose,
    </think>; whatever follows is left to sample_ids."""
    ids = sample_ids(rng, "prose", n)
    for k in range(n):
        if start + k == 0:
            ids[k] = THINK_START
        elif start + k == think_len - 1:
            ids[k] = THINK_END
    return ids


def sample_ids(rng: random.Random, kind: str, n: int) -> list[int]:
    """n output token ids drawn from the pieces that fit the prompt's kind."""
    off = BASE_ID + _KIND_OFFSET.get(kind, 0)
    span = len(_PROSE) if kind != "code" else len(_CODE)
    return [off + int(rng.random() * span) for _ in range(n)]

