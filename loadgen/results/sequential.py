"""Sequential verdicts at a stated error rate: the SLO call of a level (its window ends as soon as the call is
clear), and the throughput lead of one series over another at a level (the draft-budget campaign's, below).

Wald's sequential probability ratio test (SPRT; Wald 1945) on the stream of measured requests in the order they
were scheduled, each met (1) or missed (0). The two hypotheses sit either side of the SLO's attainment `a`, an
indifference zone apart: a pass means a miss rate of at most (1 - INDIFFERENCE) x the allowed one, a fail at least
(1 + INDIFFERENCE) x; between the two either call is acceptable (the tie band). The test says "fail" when the log
likelihood ratio reaches log((1 - alpha) / alpha) and "pass" when it reaches log(alpha / (1 - alpha)): each false
call at most `alpha` at the zone's edges, less beyond them (alpha = beta = `false_verdict`).

Requests in one window are correlated (they share the server's queue), and an SPRT on correlated outcomes calls
too early. The long-run variance is estimated by batch means (a batch: `batch` consecutive requests, one round of
the closed loop's C streams) and the log likelihood ratio divided by the variance inflation factor (batch size x
the batch means' variance / p(1 - p), at least 1): the Brownian approximation of the SPRT then has its iid
drift-to-variance ratio again, so Wald's bounds hold (the batch-means correction of Kim & Nelson 2006). The test
looks only at batch ends, from MIN_BATCHES batches on.

The same rule is queries/views.sql `level_sequential`, which replays it over a level's measured requests (pooled
over its runs, in step then schedule order): the driver (loadgen.driver.window) ends a window when this module
says the call is clear, and SQL finds that call again at the same request.

The throughput lead is the same SPRT on a normal approximation (see its section); Python alone defines it (SQL
only reads the pairs it is made on).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

INDIFFERENCE = 0.5     # the tie band: a miss rate within +-50% of the allowed one may be called either way
MIN_BATCHES = 3        # the fewest batches a call is made on (the batch means' variance needs a few)


@dataclass(frozen=True)
class Call:
    verdict: str           # 'pass' or 'fail'
    n: int                 # the requests it was called on (the rest of the window is overrun, not judged)


def hypotheses(attainment: float) -> tuple[float, float]:
    """(p_pass, p_fail): the attainments the test tells apart, the tie band's edges."""
    miss = 1.0 - attainment
    return 1.0 - miss * (1 - INDIFFERENCE), 1.0 - min(miss * (1 + INDIFFERENCE), (1 + miss) / 2)


def llr(met: int, n: int, attainment: float) -> float:
    """log P(outcomes | fail) / P(outcomes | pass) of `met` of `n` requests."""
    p_pass, p_fail = hypotheses(attainment)
    return met * math.log(p_fail / p_pass) + (n - met) * math.log((1 - p_fail) / (1 - p_pass))


def inflation(met: int, n: int, batch_var: float, batch: int) -> float:
    """The variance inflation factor of the outcomes by batch means: batch x var(batch means) / p(1 - p), >= 1."""
    p = met / n
    if not 0 < p < 1:
        return 1.0
    return max(1.0, batch * batch_var / (p * (1 - p)))


def bound(alpha: float) -> float:
    """The log likelihood ratio at which a call is made (fail at +bound, pass at -bound)."""
    return math.log((1 - alpha) / alpha)


def decide(outcomes: Sequence[bool], batch: int, attainment: float, alpha: float) -> Call | None:
    """The first clear call on `outcomes` (met or not, in schedule order), or None while it is not clear."""
    batch = max(1, batch)
    means: list[float] = []
    met = 0
    for j in range(len(outcomes) // batch):
        chunk = outcomes[j * batch:(j + 1) * batch]
        means.append(sum(chunk) / batch)
        met += sum(chunk)
        if len(means) < MIN_BATCHES:
            continue
        n = len(means) * batch
        mean = sum(means) / len(means)
        var = sum((m - mean) ** 2 for m in means) / (len(means) - 1)
        score = llr(met, n, attainment) / inflation(met, n, var, batch)
        if abs(score) >= bound(alpha):
            return Call("fail" if score > 0 else "pass", n)
    return None


def fewest_requests(attainment: float, alpha: float, batch: int) -> int:
    """The fewest requests a clear pass can be called on (every one met): a window shorter than this is never
    enough."""
    p_pass, p_fail = hypotheses(attainment)
    n = math.ceil(bound(alpha) / math.log(p_pass / p_fail))
    batches = max(MIN_BATCHES, math.ceil(n / max(1, batch)))
    return batches * max(1, batch)


# ---- the throughput lead: which of two series serves more tokens per second at one closed-loop level ----------
#
# The draft-budget campaign's level verdict (loadgen/twin/crossover.py lead_verdicts; docs/twin.md). Every target
# draws the same seeded prompts in the same order, so at a level both series served the same prompts: each prompt
# both served is a pair (queries/paired.sql reads the same pairs). In a closed loop of C streams each stream sends
# its next request when the last one ends, so a series' aggregate tok/s is C x its tokens / its request time
# (Little's law): the other leads when its tokens per request-second over the pairs exceed the baseline's. The
# log of that ratio is estimated with its variance (the delta method over the pairs' influence values, or the
# means of batches of LEAD_BATCH consecutive pairs where those vary more, as the SLO test corrects), and Wald's
# SPRT tells apart a ratio of 1 + TIE from 1 / (1 + TIE) on the normal approximation: log likelihood ratio
# 2 log(1 + TIE) x estimate / variance, called at +-bound(alpha), looked at every LEAD_BATCH pairs from MIN_PAIRS
# on. Within the tie band either call is acceptable; at its edges a call is wrong at most `alpha` of the time,
# less beyond them. A variance estimated from few pairs calls too early: it is scaled by Student's t over the
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
        if var > 0 and abs(2 * edge * theta / var) >= bound(alpha):
            return Lead("ahead" if theta > 0 else "behind", n, ratio)
    return Lead(None, len(pairs), ratio)


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile by the Cornish-Fisher expansion about the normal's (within 0.1% from 10 df on)."""
    z = NormalDist().inv_cdf(p)
    return (z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * df ** 3))
