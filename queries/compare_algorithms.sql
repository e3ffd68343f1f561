-- compare_algorithms: baseline vs each other series per load level, in the field report's format.
--
-- A series is one (target, algorithm, draft_tokens) of a run. The baseline is the series of the lowest
-- target_index (the experiment file's first target), or SET VARIABLE baseline = '<target or algorithm>'.
-- Per concurrency (or rate), over the step's repeats (median when repeated):
--   accept_len  sum(completion_tokens) / sum(spec_verify_ct) of measured ok requests (see acceptance_by_concurrency)
--   tok_s       aggregate output tok/s of frames inside the window (see throughput_by_concurrency)
--   *_change_pct = 100 * (other / baseline - 1)
--   signal      NULL without repeats; FALSE when the tok/s ranges over repeats overlap (inside the spread)
SELECT run_id, concurrency, rate,
       baseline_target, baseline_algorithm, target, algorithm,
       round(baseline_accept_len, 3) AS baseline_accept_len, round(accept_len, 3) AS accept_len,
       round(accept_len_change_pct, 1) AS accept_len_change_pct,
       round(baseline_tok_s, 2) AS baseline_tok_s, round(tok_s, 2) AS tok_s,
       round(tok_s_change_pct, 1) AS tok_s_change_pct,
       baseline_repeats, repeats, signal, any_emulated AS emulated,
       any_predicted AS predicted
FROM comparison
WHERE NOT is_baseline
ORDER BY run_id, target, algorithm, draft_tokens, concurrency, rate;
