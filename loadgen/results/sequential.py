"""Sequential verdicts at a stated error rate: the SLO call of a level (its window ends as soon as the call is
clear, also when misses come in runs), and the throughput lead of one series over another at a level (the
draft-budget campaign's, its own section below).

The outcomes are the level's measured requests in the order they were scheduled, each met (1) or missed (0). The
two hypotheses sit either side of the SLO's attainment `a`, an indifference zone apart: a pass means a miss rate
of at most (1 - indifference) x the allowed one, a fail at least (1 + indifference) x; between the two either call
is acceptable (the tie band). Wald's sequential probability ratio test (Wald 1945) tells them apart when the
outcomes are independent; requests of one window are not (they share the server's queue: a miss makes the next
one likelier), and an SPRT that counts them as independent calls too early.

So the outcomes are modelled as a two-state Markov chain: its miss rate q and its lag-1 correlation rho (0:
independent; 0.5: misses in runs of about two; 0.7: of about four), the chance that a request repeats the one
before beyond chance. Its likelihood depends on the first outcome and the four transition counts (met->met,
met->missed, missed->met, missed->missed), so the chain's own transitions say how correlated the window is. Two
one-sided tests, each a likelihood ratio against the *best-fitting* chain of the hypothesis it rejects:

    pass once  log sum_k w_k L(q_k, rho_k) over the pass side - max_{rho <= rho_max} log L(q_fail, rho) >= log(1/alpha)
    fail once  log sum_k w_k L(q_k, rho_k) over the fail side - max_{rho <= rho_max} log L(q_pass, rho) >= log(1/alpha)

The numerator is a fixed mixture of chains on the calling side (its edge q at rho 0 with weight w_edge, a far q at
rho_max with w_far: the all-met or all-missed window, the rest spread over the grid); against any one chain of the
rejected side it is a nonnegative martingale, and dividing by the best fit only makes it smaller, so by Ville's
inequality a false call has probability at most alpha at every edge chain with rho <= rho_max, at every look
(not only at the window's end). rho_max = 0.7 covers misses in runs of four (the mean run at the fail edge is
1 / ((1 - rho)(1 - q))); tests/unit/test_sequential.py measures the rate on independent outcomes, on runs of two
and four of both kinds (Markov runs and fixed blocks), at both edges.

What it costs, and why no rule is cheaper: a window whose requests all meet the SLO cannot show how its misses
would have clustered. At the fail edge with misses in runs of four, the first n requests are all met with
probability 0.85 x 0.955^(n - 1), above 5% until n = 63: a rule that passes an all-met window sooner calls more
than 5% of such levels wrong, whatever it estimates (fewest_requests: this rule's 83).

The same rule is queries/views.sql `level_sequential`, which replays it over a level's measured requests (pooled
over its runs, in step then schedule order); its constants are views.sql's `sequential_rule()` macro, read here,
so there is one definition. The driver (loadgen.driver.window) ends a window when this module says the call is
clear, and SQL finds that call again at the same request.

The throughput lead is Wald's SPRT on a normal approximation (see its section); Python alone defines it (SQL
only reads the pairs it is made on).
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from loadgen.results.analysis import QUERIES_DIR

VIEWS_SQL = QUERIES_DIR / "views.sql"


def _rule_constants() -> dict[str, float]:
    """views.sql's `CREATE OR REPLACE MACRO sequential_rule() AS {...};`: the one definition of the constants."""
    found = re.search(r"MACRO sequential_rule\(\) AS (\{[^}]*\})", VIEWS_SQL.read_text())
    if found is None:
        raise RuntimeError(f"{VIEWS_SQL}: no sequential_rule() macro")
    return {k: float(v) for k, v in ast.literal_eval(found.group(1)).items()}


RULE = _rule_constants()
INDIFFERENCE = RULE["indifference"]   # the tie band: a miss rate within +-50% of the allowed one may go either way
RHO_MAX = RULE["rho_max"]             # the default largest lag-1 correlation the rate holds for (runs of four)


@dataclass(frozen=True)
class Call:
    verdict: str           # 'pass' or 'fail'
    n: int                 # the requests it was called on (the rest of the window is overrun, not judged)


def edges(attainment: float) -> tuple[float, float]:
    """(q_pass, q_fail): the miss rates at the tie band's edges."""
    miss = 1.0 - attainment
    return miss * (1 - INDIFFERENCE), min(miss * (1 + INDIFFERENCE), (1 + miss) / 2)


def hypotheses(attainment: float) -> tuple[float, float]:
    """(p_pass, p_fail): the attainments at the tie band's edges."""
    q_pass, q_fail = edges(attainment)
    return 1.0 - q_pass, 1.0 - q_fail


def _coefficients(q: float, rho: float) -> list[float]:
    """The chain's log likelihood per feature: first met, first missed, met->met, met->missed, missed->met,
    missed->missed (views.sql level_sequential writes the same six logs)."""
    return [math.log(1 - q), math.log(q), math.log(1 - q * (1 - rho)), math.log(q * (1 - rho)),
            math.log((1 - q) * (1 - rho)), math.log(rho + (1 - rho) * q)]


def _grid(attainment: float, rho_max: float | None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per side, (log weights, coefficients) of its mixture, and per side its edge chains at each rho (the
    best-fit denominators: weight 0)."""
    q_pass, q_fail = edges(attainment)
    steps = int(RULE["rho_steps"])
    top = RHO_MAX if rho_max is None else rho_max      # None: the rule's default
    rhos = [top * k / (steps - 1) for k in range(steps)]
    far = {"pass": q_pass * RULE["far_pass"], "fail": q_fail + (1 - q_fail) * RULE["far_fail"]}
    edge = {"pass": q_pass, "fail": q_fail}
    rest = (1 - RULE["w_edge"] - RULE["w_far"]) / (2 * steps - 2)
    grid = {}
    for side in ("pass", "fail"):
        weights, coefs = [], []
        for is_far, q in ((False, edge[side]), (True, far[side])):
            for k, rho in enumerate(rhos):
                w = RULE["w_edge"] if not is_far and k == 0 else RULE["w_far"] if is_far and k == steps - 1 else rest
                weights.append(math.log(w))
                coefs.append(_coefficients(q, rho))
        grid[side] = (np.array(weights), np.array(coefs).T)
        grid[f"{side}_edge"] = (np.zeros(steps), np.array([_coefficients(edge[side], rho) for rho in rhos]).T)
    return grid


def _features(outcomes: np.ndarray) -> np.ndarray:
    """(streams, looks, 6): the counts after each request (first met, first missed, then the transitions)."""
    x = outcomes.astype(np.int64)
    streams, n = x.shape
    prev, cur = x[:, :-1], x[:, 1:]
    zero = np.zeros((streams, 1), np.int64)
    counts = [np.concatenate([zero, np.cumsum(t, axis=1)], axis=1)
              for t in (prev & cur, prev & (1 - cur), (1 - prev) & cur, (1 - prev) & (1 - cur))]
    first = np.repeat(x[:, :1], n, axis=1)
    return np.stack([first, 1 - first, *counts], axis=2).astype(float)


def _log_sum(weights: np.ndarray, coefs: np.ndarray, feats: np.ndarray) -> np.ndarray:
    """log sum_k exp(weights_k + feats . coefs_k), as max + log(sum(exp(. - max))) (the SQL's way)."""
    terms = feats @ coefs + weights
    top = terms.max(axis=-1, keepdims=True)
    return top[..., 0] + np.log(np.exp(terms - top).sum(axis=-1))


def scores(outcomes: np.ndarray, attainment: float, rho_max: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(pass score, fail score) after each request of each stream (streams x looks): the log likelihood ratios
    that a call needs at log(1 / alpha)."""
    grid = _grid(attainment, rho_max)
    feats = _features(np.atleast_2d(outcomes))
    best = {side: (feats @ grid[f"{side}_edge"][1]).max(axis=-1) for side in ("pass", "fail")}
    return _log_sum(*grid["pass"], feats) - best["fail"], _log_sum(*grid["fail"], feats) - best["pass"]


def first_calls(outcomes: np.ndarray, attainment: float, alpha: float, rho_max: float | None = None, chunk: int = 256
                ) -> tuple[np.ndarray, np.ndarray]:
    """The first clear call of each stream (rows of met-or-not, schedule order): (verdict: +1 fail, -1 pass,
    0 none; n: the requests it was made on, 0 for none). Looked at in chunks of requests, streams that are
    called dropping out: a simulation of thousands of windows stays fast."""
    outcomes = np.atleast_2d(np.asarray(outcomes, dtype=bool))
    streams, total = outcomes.shape
    verdict, n = np.zeros(streams, np.int8), np.zeros(streams, np.int64)
    bound = math.log(1 / alpha)
    open_ = np.arange(streams)
    for start in range(0, total, chunk):
        end = min(start + chunk, total)
        s_pass, s_fail = (s[:, start:] for s in scores(outcomes[open_, :end], attainment, rho_max))
        call = np.where(s_fail >= bound, 1, np.where(s_pass >= bound, -1, 0))
        hit = (call != 0).any(axis=1)
        j = (call != 0).argmax(axis=1)
        verdict[open_[hit]] = call[hit, j[hit]]
        n[open_[hit]] = start + j[hit] + 1
        open_ = open_[~hit]
        if not open_.size:
            break
    return verdict, n


def decide(outcomes: Sequence[bool], attainment: float, alpha: float, rho_max: float | None = None) -> Call | None:
    """The first clear call on `outcomes` (met or not, in schedule order), or None while it is not clear."""
    if not len(outcomes):
        return None
    verdict, n = first_calls(np.array([list(outcomes)], dtype=bool), attainment, alpha, rho_max,
                             chunk=max(1, len(outcomes)))
    return Call("fail" if verdict[0] > 0 else "pass", int(n[0])) if verdict[0] else None


def fewest_requests(attainment: float, alpha: float, rho_max: float | None = None) -> int:
    """The fewest requests a clear pass can be called on (every one met): a window shorter than this is never
    enough."""
    call = decide([True] * 2000, attainment, alpha, rho_max)
    assert call is not None and call.verdict == "pass"
    return call.n


# ---- the throughput lead: which of two series serves more tokens per second at one closed-loop level ----------
#
# The draft-budget campaign's level verdict (loadgen/twin/crossover.py lead_verdicts; docs/twin.md). Every target
# draws the same seeded prompts in the same order, so at a level both series served the same prompts: each prompt
# both served is a pair (queries/paired.sql reads the same pairs). In a closed loop of C streams each stream sends
# its next request when the last one ends, so a series' aggregate tok/s is C x its tokens / its request time
# (Little's law): the other leads when its tokens per request-second over the pairs exceed the baseline's. The
# log of that ratio is estimated with its variance (the delta method over the pairs' influence values, or the
# means of batches of LEAD_BATCH consecutive pairs where those vary more: runs of alike prompts), and Wald's SPRT
# tells apart a ratio of 1 + TIE from 1 / (1 + TIE) on the normal approximation: log likelihood ratio
# 2 log(1 + TIE) x estimate / variance, called at +-log((1 - alpha) / alpha), looked at every LEAD_BATCH pairs
# from MIN_PAIRS on. Within the tie band either call is acceptable; at its edges a call is wrong at most `alpha` of
# the time, less beyond them. A variance estimated from few pairs calls too early: it is scaled by Student's t over the
# normal quantile (n - 1 degrees of freedom), and no call is made before MIN_PAIRS (on the emulator's engine the
# rate held from there, bench_twin.py --part verdict; tests/unit/test_sequential.py on constructed pairs).

TIE = 0.03           # the tie band: within +-3% in aggregate tok/s either call is acceptable
MIN_PAIRS = 16       # the fewest pairs a lead is called on (its variance is estimated from them)
LEAD_BATCH = 4       # pairs per batch: the batch means catch the runs of alike prompts a closed loop sends


@dataclass(frozen=True)
class Pair:
    """One prompt both series served at the level: each one's request time (sent to last byte, s) and tokens."""

    base_s: float
    base_tokens: int
    other_s: float
    other_tokens: int


@dataclass(frozen=True)
class Lead:
    verdict: str | None    # 'ahead' | 'behind': the other series leads | trails; None: no clear call
    n: int                 # the pairs the call was made on (every pair when there is none)
    ratio: float           # the other's aggregate tok/s over the baseline's, estimated on every pair


def lead_ratio(pairs: Sequence[Pair]) -> tuple[float, float]:
    """(log ratio, its variance) of the other's tokens per request-second over the baseline's."""
    n = len(pairs)
    sb, tb = sum(p.base_s for p in pairs) / n, sum(p.base_tokens for p in pairs) / n
    so, to = sum(p.other_s for p in pairs) / n, sum(p.other_tokens for p in pairs) / n
    theta = math.log(to / so) - math.log(tb / sb)
    psi = [p.other_tokens / to - p.other_s / so - p.base_tokens / tb + p.base_s / sb for p in pairs]
    var = sum(v * v for v in psi) / max(1, n - 1) / n     # the influence values have mean 0
    k = n // LEAD_BATCH
    if k >= 2:
        means = [sum(psi[j * LEAD_BATCH:(j + 1) * LEAD_BATCH]) / LEAD_BATCH for j in range(k)]
        mean = sum(means) / k
        var = max(var, sum((m - mean) ** 2 for m in means) / (k - 1) / k)
    return theta, var


def decide_lead(pairs: Sequence[Pair], alpha: float) -> Lead:
    """The first clear call on `pairs` (in the order the other series scheduled them), or none; the ratio on
    every pair either way (the level's point estimate)."""
    edge = math.log(1 + TIE)
    ratio = math.exp(lead_ratio(pairs)[0]) if pairs else 1.0
    z = NormalDist().inv_cdf(1 - alpha)
    for n in range(LEAD_BATCH * math.ceil(MIN_PAIRS / LEAD_BATCH), len(pairs) + 1, LEAD_BATCH):
        theta, var = lead_ratio(pairs[:n])
        var *= (t_quantile(1 - alpha, n - 1) / z) ** 2   # the variance is estimated: Student's t, not the normal
        if var > 0 and abs(2 * edge * theta / var) >= math.log((1 - alpha) / alpha):
            return Lead("ahead" if theta > 0 else "behind", n, ratio)
    return Lead(None, len(pairs), ratio)


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile by the Cornish-Fisher expansion about the normal's (within 0.1% from 10 df on)."""
    z = NormalDist().inv_cdf(p)
    return (z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * df ** 3))
