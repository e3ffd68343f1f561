"""Acceptance of a twin, fitted from the requests' own counts: the probability that one drafted token is accepted,
per prompt kind, its decay along the draft, and its drift along the output (docs/twin.md).

The emulator's engine (engine.py `draw_accept`) accepts the j-th drafted token of a verify step with probability
p x decay^(j-1), until the first rejection, plus the bonus token. So a step commits X tokens, 1 <= X <= K (K =
tokens verified per request), and a request of N tokens takes its first from the prompt pass and the rest from
verify steps, the last of them cut to what remains.
- Where every verify step is its own frame (SGLang streaming each step), the frames' token counts give
  P(X > j | X >= j) = p decay^(j-1) directly, at each position along the output where p may drift
  (accept_output_slope: p x (1 + slope x position / 1000)): log of it is linear in j and, to first order, in the
  position; one intercept per kind, a shared decay and slope.
- Everywhere, each kind's measured acceptance length (sum(completion_tokens) / sum(spec_verify_ct)) then fixes p
  exactly, with the decay and slope from the frames or, without them, from the prior profile.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

POOLED = "*"       # the pooled figure, for a kind the twin never saw (AlgorithmProfile.p_for)
P_MAX = 0.99       # the engine caps a request's p here
POSITION_BUCKET = 64   # output positions are grouped this wide (observe.py _STEP_TOKENS)


def step_distribution(p: float, decay: float, k: int) -> list[float]:
    """P(X = x) for x = 1..k: the tokens one verify step commits."""
    probs, alive = [], 1.0
    for j in range(1, k):
        q = min(P_MAX, p * decay ** (j - 1))
        probs.append(alive * (1.0 - q))
        alive *= q
    probs.append(alive)
    return probs


def p_at(p: float, slope: float, position: int) -> float:
    """The request's p after `position` output tokens (the engine's accept_output_slope, per 1000 tokens)."""
    return min(P_MAX, max(0.0, p * (1.0 + slope * position / 1000.0)))


def verify_steps(n: int, p: float, decay: float, k: int, slope: float = 0.0) -> float:
    """Expected verify steps of a request of n tokens (its first from the prompt pass), each step committing
    min(X, what remains) with X drawn at the output's position."""
    f = [0.0] * n            # f[m]: steps to commit the last m tokens, from position n - m
    for m in range(1, n):
        dist = step_distribution(p_at(p, slope, n - m), decay, k)
        f[m] = 1.0 + sum(px * f[max(0, m - x)] for x, px in enumerate(dist, start=1))
    return f[n - 1]


def accept_length(p: float, decay: float, k: int, completion: float, slope: float = 0.0) -> float:
    """completion_tokens / spec_verify_ct of a request of `completion` tokens (the first from the prompt pass)."""
    n = max(1, round(completion))
    if n <= 1:
        return float("nan")
    return n / verify_steps(n, p, decay, k, slope)


def p_for_length(target: float, decay: float, k: int, completion: float, slope: float = 0.0) -> float:
    """The p whose acceptance length is `target` (bisection; acceptance length grows with p)."""
    lo, hi = 0.0, P_MAX
    if target <= accept_length(lo, decay, k, completion, slope):
        return lo
    if target >= accept_length(hi, decay, k, completion, slope):
        return hi
    for _ in range(40):
        mid = (lo + hi) / 2
        if accept_length(mid, decay, k, completion, slope) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass(frozen=True)
class StepFit:
    """What one-step frames say: the decay along the draft (None: they cannot tell, a budget of one drafted
    token), the drift of p along the output per 1000 tokens (None: too narrow a span of positions), frames used."""

    decay: float | None
    slope: float | None
    used: int


def from_steps(step_tokens: Mapping[str, Mapping[tuple[int, int], int]], k: int) -> StepFit:
    """kind -> (position bucket start, tokens the step committed) -> steps. Weighted least squares of
    log P(X > j | X >= j) = log p_kind + (j - 1) log decay + slope x position / 1000 (first order in the slope)."""
    rows, rhs, weights, kinds = [], [], [], sorted(step_tokens)
    used = 0
    for i, kind in enumerate(kinds):
        by_position: dict[int, dict[int, int]] = {}
        for (position, x), n in step_tokens[kind].items():
            if x <= k:      # merged frames (two steps read together) are not one step each
                by_position.setdefault(position, {})[x] = n
        for position, counts in by_position.items():
            reach = [sum(n for x, n in counts.items() if x >= j) for j in range(1, k + 1)]
            used += reach[0]
            for j in range(1, k):
                if reach[j - 1] >= 20 and reach[j] > 0:
                    row = [0.0] * (len(kinds) + 2)
                    row[i], row[-2], row[-1] = 1.0, j - 1.0, (position + POSITION_BUCKET / 2) / 1000.0
                    rows.append(row)
                    rhs.append(math.log(reach[j] / reach[j - 1]))
                    weights.append(math.sqrt(reach[j - 1]))
    has_decay = k >= 3 and len({r[-2] for r in rows}) >= 2
    spread = [r[-1] for r in rows]
    has_slope = bool(spread) and max(spread) - min(spread) >= 0.1   # positions at least 100 tokens apart
    if not (has_decay or has_slope):
        return StepFit(None, None, used)
    columns = len(kinds) + 2
    keep = [c for c in range(columns) if c < len(kinds) or (c == columns - 2 and has_decay)
            or (c == columns - 1 and has_slope)]
    a, w = np.array(rows)[:, keep], np.array(weights)
    coef = dict(zip(keep, np.linalg.lstsq(a * w[:, None], np.array(rhs) * w, rcond=None)[0]))
    decay = min(1.0, max(0.5, math.exp(coef[columns - 2]))) if has_decay else None
    slope = max(-0.9, min(0.9, float(coef[columns - 1]))) if has_slope else None
    return StepFit(decay, slope, used)


def fit_acceptance(accepted: Iterable[tuple[str, int, int, int]], decay: float, k: int, slope: float = 0.0
                   ) -> dict[str, float]:
    """p per kind (and POOLED) from (kind, completion tokens, verify steps, requests) sums, at `decay` and
    `slope`."""
    sums: dict[str, list[int]] = {}
    for kind, tokens, steps, n in accepted:
        s = sums.setdefault(kind, [0, 0, 0])
        s[0], s[1], s[2] = s[0] + tokens, s[1] + steps, s[2] + n
    if not sums:
        return {}
    total = [sum(s[i] for s in sums.values()) for i in range(3)]
    out = {kind: _p(s, decay, k, slope) for kind, s in sorted(sums.items())}
    out[POOLED] = _p(total, decay, k, slope)
    return out


def _p(s: list[int], decay: float, k: int, slope: float) -> float:
    tokens, steps, n = s
    return round(p_for_length(tokens / steps, decay, k, tokens / n, slope), 4)
