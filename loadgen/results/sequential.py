"""The sequential SLO verdict: a level's window ends as soon as its call is clear at a stated error rate.

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
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

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
