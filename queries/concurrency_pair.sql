-- concurrency_pair: the field report's "C=8 vs C=16" table, for every series of the run.
--
-- SET VARIABLE conc_a / conc_b to choose the two concurrencies (default 8 and 16). Per series and metric,
-- over measured ok requests (definitions in latency_by_concurrency.sql), the median over repeats of:
--   p50 and mean of ttft_ms, itl_ms (token-weighted ITL, SGLang bench_serving's), itl_frame_ms (gap between
--   output frames, vLLM bench serve's ITL), decode_tok_s (per-request tok/s = 1 / TPOT)
--   The field report's ITL row (48 ms at C=8, 85 ms at C=16, next to 21.3 and 12.7 tok/s per request) is
--   bench_serving's mean ITL: compare it with itl_ms's mean_a / mean_b.
--   change_pct = 100 * (p50 at conc_b / p50 at conc_a - 1)
-- Rows appear only for series that ran both concurrencies.
WITH pick AS (
    SELECT coalesce(getvariable('conc_a'), 8) AS conc_a, coalesce(getvariable('conc_b'), 16) AS conc_b
), per_level AS (
    SELECT s.run_id, s.target, s.algorithm, s.draft_tokens, s.concurrency, l.metric,
           median(l.q[1]) AS p50, median(l.mean) AS mean, bool_or(s.emulated) AS emulated
    FROM step_info s JOIN step_latency l USING (run_id, step_id, target), pick
    WHERE l.metric IN ('ttft_ms', 'itl_ms', 'itl_frame_ms', 'decode_tok_s')
      AND s.concurrency IN (pick.conc_a, pick.conc_b)
    GROUP BY ALL
)
SELECT a.run_id, a.target, a.algorithm, a.draft_tokens, a.metric,
       a.concurrency AS conc_a, round(a.p50, 2) AS p50_a, round(a.mean, 2) AS mean_a,
       b.concurrency AS conc_b, round(b.p50, 2) AS p50_b, round(b.mean, 2) AS mean_b,
       round(pct_change(b.p50, a.p50), 1) AS change_pct,
       a.emulated OR b.emulated AS emulated
FROM per_level a, pick
JOIN per_level b ON b.run_id = a.run_id AND b.target = a.target AND b.metric = a.metric
                AND b.algorithm IS NOT DISTINCT FROM a.algorithm
                AND b.draft_tokens IS NOT DISTINCT FROM a.draft_tokens
WHERE a.concurrency = pick.conc_a AND b.concurrency = pick.conc_b
ORDER BY a.run_id, a.target, a.algorithm, a.draft_tokens,
         list_position(['ttft_ms', 'itl_ms', 'itl_frame_ms', 'decode_tok_s'], a.metric);
