"""Acceptance of a twin, fitted from the requests' own counts: the probability that one drafted token is accepted,
per prompt kind, and its decay along the draft (docs/twin.md).

The emulator's engine (engine.py `draw_accept`) accepts the j-th drafted token of a verify step with probability
p x decay^(j-1), until the first rejection, plus the bonus token. So a step commits X tokens, 1 <= X <= K (K =
tokens verified per request), and a request of N tokens takes its first from the prompt pass and the rest from
verify steps, the last of them cut to what remains.
- Where every verify step is its own frame (SGLang streaming each step), the frames' token counts give
  P(X > j | X >= j) = p decay^(j-1) directly: log of it is a line in j, one intercept per kind, one shared slope.
- Everywhere, each kind's measured acceptance length (sum(completion_tokens) / sum(spec_verify_ct)) then fixes p
  exactly, with the decay from the frames or, without them, from the prior profile.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np

POOLED = "*"       # the pooled figure, for a kind the twin never saw (AlgorithmProfile.p_for)
P_MAX = 0.99       # the engine caps a request's p here


def step_distribution(p: float, decay: float, k: int) -> list[float]:
    """P(X = x) for x = 1..k: the tokens one verify step commits."""
    probs, alive = [], 1.0
    for j in range(1, k):
        q = min(P_MAX, p * decay ** (j - 1))
        probs.append(alive * (1.0 - q))
        alive *= q
    probs.append(alive)
    return probs


def verify_steps(tokens: int, dist: list[float]) -> float:
    """Expected verify steps to commit `tokens` tokens, each step committing min(X, what remains)."""
    f = [0.0] * (tokens + 1)
    for m in range(1, tokens + 1):
        f[m] = 1.0 + sum(px * f[max(0, m - x)] for x, px in enumerate(dist, start=1))
    return f[tokens]


def accept_length(p: float, decay: float, k: int, completion: float) -> float:
    """completion_tokens / spec_verify_ct of a request of `completion` tokens (the first from the prompt pass)."""
    n = max(1, round(completion))
    if n <= 1:
        return float("nan")
    return n / verify_steps(n - 1, step_distribution(p, decay, k))


def p_for_length(target: float, decay: float, k: int, completion: float) -> float:
    """The p whose acceptance length is `target` (bisection; acceptance length grows with p)."""
    lo, hi = 0.0, P_MAX
    if target <= accept_length(lo, decay, k, completion):
        return lo
    if target >= accept_length(hi, decay, k, completion):
        return hi
    for _ in range(40):
        mid = (lo + hi) / 2
        if accept_length(mid, decay, k, completion) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def decay_from_steps(step_tokens: Mapping[str, Mapping[int, int]], k: int) -> tuple[float, int] | None:
    """The decay along the draft from one verify step per frame: (decay, frames used), or None when the frames
    cannot tell (a budget of one drafted token, or too few steps). Weighted least squares of
    log P(X > j | X >= j) = log p_kind + (j - 1) log decay."""
    rows, rhs, weights, kinds = [], [], [], sorted(step_tokens)
    used = 0
    for i, kind in enumerate(kinds):
        counts = step_tokens[kind]
        if any(x > k for x in counts):   # merged frames (two steps read together): not one step each
            counts = {x: n for x, n in counts.items() if x <= k}
        reach = [sum(n for x, n in counts.items() if x >= j) for j in range(1, k + 1)]
        used += reach[0]
        for j in range(1, k):
            if reach[j - 1] >= 20 and reach[j] > 0:
                row = [0.0] * (len(kinds) + 1)
                row[i], row[-1] = 1.0, j - 1.0
                rows.append(row)
                rhs.append(math.log(reach[j] / reach[j - 1]))
                weights.append(math.sqrt(reach[j - 1]))
    if k < 3 or len({r[-1] for r in rows}) < 2:
        return None
    a, w = np.array(rows), np.array(weights)
    coef, *_ = np.linalg.lstsq(a * w[:, None], np.array(rhs) * w, rcond=None)
    return min(1.0, max(0.5, math.exp(coef[-1]))), used


def fit_acceptance(accepted: Iterable[tuple[str, int, int, int]], decay: float, k: int) -> dict[str, float]:
    """p per kind (and POOLED) from (kind, completion tokens, verify steps, requests) sums, at `decay`."""
    sums: dict[str, list[int]] = {}
    for kind, tokens, steps, n in accepted:
        s = sums.setdefault(kind, [0, 0, 0])
        s[0], s[1], s[2] = s[0] + tokens, s[1] + steps, s[2] + n
    if not sums:
        return {}
    total = [sum(s[i] for s in sums.values()) for i in range(3)]
    out = {kind: _p(s, decay, k) for kind, s in sorted(sums.items())}
    out[POOLED] = _p(total, decay, k)
    return out


def _p(s: list[int], decay: float, k: int) -> float:
    tokens, steps, n = s
    return round(p_for_length(tokens / steps, decay, k, tokens / n), 4)
