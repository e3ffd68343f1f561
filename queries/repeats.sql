-- repeats: the spread of each series and load level over its repeats, and whether its difference from the
-- baseline is a signal.
--
--   tok_s_values             aggregate tok/s of each repeat, in repeat order (frames inside the window / window s)
--   tok_s_min/median/max     over repeats; spread_pct = 100 * (max - min) / median
--   accept_len_min/median/max  sum(completion_tokens) / sum(spec_verify_ct) per repeat
--   tok_s_change_pct         100 * (median / baseline median - 1); NULL on the baseline's own rows
--   signal                   NULL when neither side was repeated; FALSE when the tok/s ranges over repeats of
--                            this series and the baseline overlap (the difference is inside the spread)
SELECT l.run_id, l.target, l.algorithm, l.draft_tokens, l.concurrency, l.rate, l.repeats,
       list_transform(l.tok_s_values, lambda v: round(v, 2)) AS tok_s_values,
       round(l.tok_s_min, 2) AS tok_s_min, round(l.tok_s, 2) AS tok_s_median, round(l.tok_s_max, 2) AS tok_s_max,
       round(100 * (l.tok_s_max - l.tok_s_min) / l.tok_s, 1) AS spread_pct,
       round(l.accept_len_min, 3) AS accept_len_min, round(l.accept_len, 3) AS accept_len_median,
       round(l.accept_len_max, 3) AS accept_len_max,
       round(c.tok_s_change_pct, 1) AS tok_s_change_pct, c.signal,
       l.emulated
FROM level_results l
LEFT JOIN comparison c ON c.run_id = l.run_id AND c.target = l.target
                      AND c.algorithm IS NOT DISTINCT FROM l.algorithm
                      AND c.draft_tokens IS NOT DISTINCT FROM l.draft_tokens
                      AND c.concurrency IS NOT DISTINCT FROM l.concurrency
                      AND c.rate IS NOT DISTINCT FROM l.rate
JOIN series s ON s.run_id = l.run_id AND s.target = l.target AND s.algorithm IS NOT DISTINCT FROM l.algorithm
             AND s.draft_tokens IS NOT DISTINCT FROM l.draft_tokens
ORDER BY l.run_id, s.series_rank, l.concurrency, l.rate;
