"""Where one series overtakes another (the field report's question: up to which concurrency is DFlash2 ahead of
MTP?), predicted by twins and confirmed by measurement with the same search the capacity uses
(loadgen/plan/search.py: a pure function of verdicts), here on the verdict "the other series is ahead".

A level's verdict: passed when the other series' median aggregate tok/s (views.sql level_results, over the
level's steps) is above the baseline's; clear when the ranges over repeats do not overlap, or, with a single
step, when the difference is at least CLEAR_PCT; runs = the level's steps. The crossover is then found like a
capacity: the highest level the other series leads below the first level it does not.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

from loadgen.results import analysis
from loadgen.results.slo import Verdict

CLEAR_PCT = 3.0     # one step each: a difference this large is called without running the level again

_LEVELS = """
SELECT concurrency, target, median(tok_s) AS tok_s, min(tok_s) AS lo, max(tok_s) AS hi, count(*) AS steps
FROM step_results WHERE list_contains(?, target) AND concurrency IS NOT NULL
GROUP BY concurrency, target
"""


def level_tok_s(results: str | Path, run_ids: list[str], targets: list[str]) -> dict[str, dict[int, tuple]]:
    """target -> C -> (median tok/s, min, max, steps) over the steps of `run_ids`."""
    con = analysis.open_results(results, run_ids)
    out: dict[str, dict[int, tuple]] = {t: {} for t in targets}
    for c, target, tok_s, lo, hi, steps in con.execute(_LEVELS, [targets]).fetchall():
        if tok_s is not None:
            out[target][int(c)] = (tok_s, lo, hi, steps)
    con.close()
    return out


def verdicts(levels: Mapping[str, Mapping[int, tuple]], baseline: str, other: str) -> dict[float, Verdict]:
    """Per level measured for both: is `other` ahead of `baseline`, and is that clear."""
    out = {}
    for c in sorted(set(levels[baseline]) & set(levels[other])):
        b, o = levels[baseline][c], levels[other][c]
        ahead = o[0] > b[0]
        if min(b[3], o[3]) >= 2:
            clear = o[1] > b[2] or o[2] < b[1]
        else:
            clear = abs(100 * (o[0] / b[0] - 1)) >= CLEAR_PCT
        out[float(c)] = Verdict(ahead, clear, min(b[3], o[3]))
    return out


def crossover(found: Mapping[float, Verdict]) -> float | None:
    """The highest level `other` leads below the first level it does not (None: it leads nowhere probed);
    the crossover lies between it and the next level up."""
    first_loss = min((c for c, v in found.items() if not v.passed), default=math.inf)
    leads = [c for c, v in found.items() if v.passed and c < first_loss]
    return max(leads, default=None)


def predicted_crossover(tok_s: Mapping[int, float], base: Mapping[int, float], spread: float
                        ) -> tuple[float | None, float | None, float | None]:
    """(crossover, low, high) over the predicted levels: the crossover, then where it would be if the other
    series were `spread` (relative) slower or faster than its twin says (the fit's tok/s error)."""
    def at(scale: float) -> float | None:
        return crossover({float(c): Verdict(tok_s[c] * scale > base[c], True, 1) for c in base if c in tok_s})
    return at(1.0), at(1.0 - spread), at(1.0 + spread)
