"""Where one series overtakes another (the field report's question: up to which concurrency is DFlash2 ahead of
MTP?), predicted by twins and confirmed by measurement with the same search the capacity uses
(loadgen/plan/search.py: a pure function of verdicts), here on the verdict "the other series is ahead".

A level's verdict, by one of two rules:
- `lead_verdicts` (the campaign's default, `[job] verdict = "paired"`): the throughput lead of the other series
  over the baseline read prompt by prompt (loadgen/results/sequential.py decide_lead: an SPRT whose clear call is
  wrong at most `false_verdict` of the time at the tie band's edges, +-TIE), over every pair of the level's steps;
  without a clear call the point estimate decides, unclear;
- `verdicts` (`verdict = "medians"`): passed when the other series' median aggregate tok/s (views.sql
  level_results, over the level's steps) is above the baseline's; clear when the ranges over repeats do not
  overlap, or, with a single step, when the difference is at least CLEAR_PCT (no stated error rate).
runs = the level's steps. The crossover is then found like a capacity: the highest level the other series leads
below the first level it does not.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import duckdb

from loadgen.results import analysis
from loadgen.results.sequential import TIE, Pair, decide_lead
from loadgen.results.slo import Verdict

CLEAR_PCT = 100 * TIE   # the tie band; `verdicts`: one step each, a difference this large is called

_LEVELS = """
SELECT concurrency, target, median(tok_s) AS tok_s, min(tok_s) AS lo, max(tok_s) AS hi, count(*) AS steps
FROM step_results WHERE list_contains(?, target) AND concurrency IS NOT NULL
GROUP BY concurrency, target
"""


def level_tok_s(results: str | Path, run_ids: list[str], targets: list[str]) -> dict[str, dict[int, tuple]]:
    """target -> C -> (median tok/s, min, max, steps) over the steps of `run_ids`."""
    con = analysis.open_results(results, run_ids)
    out = _level_tok_s(con, targets)
    con.close()
    return out


def _level_tok_s(con: duckdb.DuckDBPyConnection, targets: list[str]) -> dict[str, dict[int, tuple]]:
    out: dict[str, dict[int, tuple]] = {t: {} for t in targets}
    for c, target, tok_s, lo, hi, steps in con.execute(_LEVELS, [targets]).fetchall():
        if tok_s is not None:
            out[target][int(c)] = (tok_s, lo, hi, steps)
    return out


_PAIRS = """
SELECT s.concurrency, m.target, m.prompt_id, m.e2e_ms / 1e3 AS seconds, m.completion_tokens
FROM measured m JOIN step_info s USING (run_id, step_id, target)
WHERE list_contains(?, m.target) AND s.concurrency IS NOT NULL AND m.status = 'ok' AND m.prompt_id IS NOT NULL
      AND m.e2e_ms > 0 AND m.completion_tokens > 0
ORDER BY s.concurrency, m.t_scheduled_ns, m.request_id
"""


def level_pairs(results: str | Path, run_ids: list[str], baseline: str, other: str) -> dict[int, list[Pair]]:
    """C -> every prompt both served at C over the steps of `run_ids`, in the order `other` scheduled them (a
    prompt the baseline served more than once: the mean of its times and tokens)."""
    return read_levels(results, run_ids, baseline, other)[1]


def read_levels(results: str | Path, run_ids: list[str], baseline: str, other: str
                ) -> tuple[dict[str, dict[int, tuple]], dict[int, list[Pair]]]:
    """level_tok_s of the two and their level_pairs, from one read of the folder."""
    con = analysis.open_results(results, run_ids)
    levels = _level_tok_s(con, [baseline, other])
    rows = con.execute(_PAIRS, [[baseline, other]]).fetchall()
    con.close()
    base: dict[tuple[int, str], list[tuple[float, int]]] = {}
    for c, target, prompt, seconds, tokens in rows:
        if target == baseline:
            base.setdefault((c, prompt), []).append((seconds, tokens))
    pairs: dict[int, list[Pair]] = {}
    for c, target, prompt, seconds, tokens in rows:
        if target == other and (b := base.get((c, prompt))):
            pairs.setdefault(int(c), []).append(Pair(sum(v[0] for v in b) / len(b),
                                                     round(sum(v[1] for v in b) / len(b)), seconds, tokens))
    return levels, pairs


def lead_verdicts(levels: Mapping[str, Mapping[int, tuple]], pairs: Mapping[int, Sequence[Pair]], baseline: str,
                  other: str, alpha: float) -> dict[float, Verdict]:
    """Per level measured for both (`levels`: level_tok_s): is `other` ahead of `baseline` in aggregate tok/s, read
    from the level's `pairs` (level_pairs), and is that a clear call (else its point estimate decides); runs = the
    fewer steps of the two there. A level without a pair (no prompt ids) falls back on the medians, unclear."""
    out = {}
    for c in sorted(set(levels[baseline]) & set(levels[other])):
        b, o = levels[baseline][c], levels[other][c]
        if c not in pairs:
            out[float(c)] = Verdict(o[0] > b[0], False, min(b[3], o[3]))
            continue
        lead = decide_lead(pairs[c], alpha)
        out[float(c)] = Verdict(lead.ratio > 1 if lead.verdict is None else lead.verdict == "ahead",
                                lead.verdict is not None, min(b[3], o[3]))
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
