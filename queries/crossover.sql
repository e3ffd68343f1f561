-- crossover: the load levels where the winner between the baseline and another series changes.
--
-- Walking each (baseline, other) pair of compare_algorithms up in concurrency (or rate), a row for every
-- level whose tok/s winner differs from the previous level's: `concurrency` is the first level won by
-- `winner`, `previous_concurrency` the last one won by the other side. Winner = the higher median aggregate
-- tok/s (frames inside the window / window s); an exact tie has no winner and is skipped. No rows = no
-- crossover. `signal` is that of the crossover level (see compare_algorithms: NULL without repeats).
WITH w AS (
    SELECT *, sign(tok_s_change_pct) AS side
    FROM comparison
    WHERE NOT is_baseline AND tok_s_change_pct <> 0
), walk AS (
    SELECT *,
           lag(side) OVER pair AS previous_side,
           lag(concurrency) OVER pair AS previous_concurrency,
           lag(rate) OVER pair AS previous_rate,
           lag(tok_s_change_pct) OVER pair AS previous_change_pct
    FROM w
    WINDOW pair AS (PARTITION BY run_id, baseline_target, baseline_algorithm, baseline_draft_tokens,
                                 target, algorithm, draft_tokens
                    ORDER BY concurrency, rate)
)
SELECT run_id, baseline_target, baseline_algorithm, target, algorithm,
       previous_concurrency, concurrency, previous_rate, rate,
       if(side > 0, target, baseline_target) AS winner,
       round(previous_change_pct, 1) AS previous_tok_s_change_pct,
       round(tok_s_change_pct, 1) AS tok_s_change_pct,
       signal, any_emulated AS emulated, any_predicted AS predicted
FROM walk
WHERE previous_side IS NOT NULL AND side <> previous_side
ORDER BY run_id, target, algorithm, concurrency, rate;
