"""The server's prompt tokens from a prompt's text: a straight line per prompt kind, fitted to counts the server gave.

tokens = overhead + slope * measure(text as sent, system prefix included). The overhead absorbs what the server
adds to every prompt (a chat template, BOS). The measure is the one of two that fits the server's counts better:
characters (a server that counts characters, like loadgen's emulator), or pre-tokenizer pieces (words, numbers,
runs of punctuation or white space, split as byte-level BPE tokenizers split text before merging), which follow
a real tokenizer's count about twice as closely as characters do: a run of indentation is one piece, however
wide, and a line of symbols is many.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from loadgen.prompts import Prompt

ASSUMED_CHARS_PER_TOKEN = 4.0   # without the server's counts: a common figure for English text and BPE vocabularies
POOLED = "*"                    # the fit over every kind's counts: for a kind without its own
MIN_SPREAD = 1.25               # longest sample / shortest below this: too close for a slope, fit through 0
_PIECES = re.compile(r"""'(?:s|t|re|ve|m|ll|d)| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+""")

MEASURES: dict[str, Callable[[str], int]] = {
    "chars": len,
    "pieces": lambda text: len(_PIECES.findall(text)),
}


@dataclass(frozen=True, slots=True)
class LengthFit:
    overhead: float                       # tokens the server adds to every prompt
    slope: float                          # tokens per unit of `measure`
    measure: str = "chars"                # a key of MEASURES
    chars_per_token: float = ASSUMED_CHARS_PER_TOKEN   # beyond the overhead: a prompt's first guess in characters

    def estimate(self, texts: Iterable[str]) -> float:
        """The server's count for a prompt sent as these texts (its text, or its messages' contents)."""
        return self.overhead + self.slope * sum(MEASURES[self.measure](t) for t in texts)

    def chars(self, tokens: int) -> int:
        """A first guess of the characters for `tokens` (never negative)."""
        return max(0, round((tokens - self.overhead) * self.chars_per_token))


ASSUMED = LengthFit(0.0, 1 / ASSUMED_CHARS_PER_TOKEN)


@dataclass(frozen=True, slots=True)
class LengthModel:
    """Fits by prompt kind (POOLED: all kinds together). `counted` is False when the server gave no prompt token
    counts, so every kind uses ASSUMED (the input-token target is then only approximate)."""

    fits: tuple[tuple[str, LengthFit], ...] = ()
    counted: bool = False
    note: str = ""           # why the model is what it is, for the run's record and log

    def fit(self, kind: str) -> LengthFit:
        table = dict(self.fits)
        return table.get(kind) or table.get(POOLED) or ASSUMED

    def to_json(self) -> dict:
        fits = {kind: {"overhead_tokens": round(f.overhead, 2), "tokens_per_unit": round(f.slope, 4),
                       "measure": f.measure, "chars_per_token": round(f.chars_per_token, 3)} for kind, f in self.fits}
        return {"counted": self.counted, "note": self.note, "fits": fits}


def fit_line(points: Iterable[tuple[int, int]]) -> tuple[float, float] | None:
    """(intercept, slope) of the least-squares line through (x, y) points; through the origin when their x are too
    close for a slope; None without points or when the slope is not positive (no line to trust)."""
    pts = [(x, y) for x, y in points if x > 0]
    if not pts:
        return None
    if max(x for x, _ in pts) < MIN_SPREAD * min(x for x, _ in pts):
        rate = sum(y for _, y in pts) / sum(x for x, _ in pts)
        return (0.0, rate) if rate > 0 else None
    n = len(pts)
    mean_x, mean_y = sum(x for x, _ in pts) / n, sum(y for _, y in pts) / n
    slope = sum((x - mean_x) * (y - mean_y) for x, y in pts) / sum((x - mean_x) ** 2 for x, _ in pts)
    return (mean_y - slope * mean_x, slope) if slope > 0 else None


def fit_kind(samples: Sequence[tuple[Sequence[str], int]]) -> LengthFit | None:
    """The measure whose line has the smallest worst relative error over (texts, tokens) samples, with its line."""
    best: tuple[float, LengthFit] | None = None
    for name, measure in MEASURES.items():
        points = [(sum(measure(t) for t in texts), tokens) for texts, tokens in samples]
        line = fit_line(points)
        if line is None:
            continue
        overhead, slope = line
        worst = max(abs(overhead + slope * x - y) / y for x, y in points if y > 0)
        chars = sum(sum(len(t) for t in texts) for texts, _ in samples)
        fit = LengthFit(overhead, slope, name, chars / max(sum(y for _, y in samples) - overhead * len(samples), 1.0))
        if best is None or worst < best[0]:
            best = (worst, fit)
    return None if best is None else best[1]


def fit_model(samples: Iterable[tuple[str, Sequence[str], int]]) -> LengthModel:
    """(kind, texts as sent, server tokens) counts -> a fit per kind, and the pooled fit."""
    rows = list(samples)
    fits = {kind: fit_kind([(x, t) for k, x, t in rows if k == kind]) for kind in sorted({k for k, _, _ in rows})}
    fits[POOLED] = fit_kind([(x, t) for _, x, t in rows])
    kept = tuple((kind, f) for kind, f in fits.items() if f is not None)
    if not kept:
        return LengthModel(note="the server's counts fit no line; assumed ~4 characters per token")
    return LengthModel(kept, counted=True, note=f"fitted to {len(rows)} counts of the server")


def prompt_texts(prompt: Prompt) -> tuple[str, ...]:
    """The prompt's texts as sent: its text, or its messages' contents."""
    return (prompt.text,) if prompt.text is not None else tuple(m["content"] for m in prompt.messages or ())
