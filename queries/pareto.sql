-- pareto: per-user output speed against aggregate output throughput, per series and load level.
--
-- The capacity planner's view (vLLM's `bench sweep plot_pareto`): each level of each series is a point
--   user_tok_s  median per-request decode rate, 1 / TPOT, of measured ok requests (pooled over the level's runs)
--   tok_s       median aggregate output tok/s over the level's runs (throughput_by_concurrency)
--   on_series_frontier  no other level of the same series is at least as good on both axes and better on one
--   on_frontier         the same against every series of the run
--   verdict     the level's SLO verdict (goodput / level_slo), NULL without an SLO
WITH points AS (
    SELECT r.run_id, r.target, r.algorithm, r.draft_tokens, r.concurrency, r.rate,
           coalesce(r.rate, r.concurrency) AS level, r.tok_s, u.user_tok_s, v.verdict, r.emulated,
           r.predicted
    FROM level_results r
    LEFT JOIN level_user_rate u ON u.run_id = r.run_id AND u.target = r.target AND u.level = coalesce(r.rate, r.concurrency)
    LEFT JOIN level_slo v ON v.run_id = r.run_id AND v.target = r.target
                         AND v.level = coalesce(r.rate, r.concurrency)
)
SELECT p.run_id, p.target, p.algorithm, p.draft_tokens, p.concurrency, p.rate,
       round(p.user_tok_s, 2) AS user_tok_s, round(p.tok_s, 2) AS tok_s,
       NOT EXISTS (SELECT 1 FROM points q WHERE q.run_id = p.run_id AND q.target = p.target
                   AND q.user_tok_s >= p.user_tok_s AND q.tok_s >= p.tok_s
                   AND (q.user_tok_s > p.user_tok_s OR q.tok_s > p.tok_s)) AS on_series_frontier,
       NOT EXISTS (SELECT 1 FROM points q WHERE q.run_id = p.run_id
                   AND q.user_tok_s >= p.user_tok_s AND q.tok_s >= p.tok_s
                   AND (q.user_tok_s > p.user_tok_s OR q.tok_s > p.tok_s)) AS on_frontier,
       p.verdict, p.emulated, p.predicted
FROM points p
WHERE p.user_tok_s IS NOT NULL AND p.tok_s IS NOT NULL
ORDER BY p.run_id, p.target, p.level;
