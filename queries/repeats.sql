-- repeats: the spread of each series and load level over its repeats, and whether its difference from the
-- baseline is a signal.
--
--   tok_s_values             aggregate tok/s of each repeat, in repeat order (frames inside the window / window s)
--   tok_s_min/median/max     over repeats; spread_pct = 100 * (max - min) / median
--   accept_len_min/median/max  sum(completion_tokens) / sum(spec_verify_ct) per repeat
--   tok_s_change_pct         100 * (median / baseline median - 1); NULL on the baseline's own rows
--   signal                   NULL when neither side was repeated; FALSE when the tok/s ranges over repeats of
--                            this series and the baseline overlap (the difference is inside the spread)
SELECT run_id, target, algorithm, draft_tokens, concurrency, rate, repeats,
       list_transform(tok_s_values, lambda v: round(v, 2)) AS tok_s_values,
       round(tok_s_min, 2) AS tok_s_min, round(tok_s, 2) AS tok_s_median, round(tok_s_max, 2) AS tok_s_max,
       round(100 * (tok_s_max - tok_s_min) / tok_s, 1) AS spread_pct,
       round(accept_len_min, 3) AS accept_len_min, round(accept_len, 3) AS accept_len_median,
       round(accept_len_max, 3) AS accept_len_max,
       round(tok_s_change_pct, 1) AS tok_s_change_pct, signal,
       emulated, predicted
FROM comparison
ORDER BY run_id, series_rank, concurrency, rate;
