-- energy: output tokens per joule and joules per request, per series and load level, and how each series
-- compares with the baseline (docs/telemetry.md).
--
-- Per run, series (target, algorithm, draft tokens) and load level, pooled over the level's repeats (steps with
-- GPU telemetry and a known window energy, views.sql `gpu_step_energy`):
--   tokens          output tokens of frames that arrived in the windows (throughput_by_concurrency's tok_s x window_s)
--   energy_j        joules the target's GPU(s) used over the same windows (gpu_by_step's energy_j)
--   tok_per_j       tokens / energy_j: output tokens per joule
--   j_per_request   energy_j / measured requests that finished ok (throughput's req_s x window_s)
--   baseline_tok_per_j, tok_per_j_ratio   the baseline series at the same level, and tok_per_j / its
--                   ("DFlash2 serves 1.3x the tokens per joule of MTP at C=1"); tok_per_j_change_pct = 100 (ratio - 1)
--   energy_method   counter (the GPU's total-energy counter) or power (median power x window: no counter)
--   emulated        the emulator's modelled GPU: its joules are a model's (docs/telemetry.md)
WITH per_step AS (
    SELECT s.run_id, s.target, s.algorithm, s.draft_tokens, s.concurrency, s.rate, s.emulated,
           t.tok_s * s.window_s AS tokens, t.req_s * s.window_s AS requests, e.energy_j, e.energy_method
    FROM step_info s
    JOIN step_throughput t USING (run_id, step_id, target)
    JOIN gpu_step_energy e USING (run_id, step_id, target)
    WHERE e.energy_j > 0
), levels AS (
    SELECT p.run_id, p.target, p.algorithm, p.draft_tokens, p.concurrency, p.rate,
           count(*) AS steps, sum(p.tokens) AS tokens, sum(p.requests) AS requests, sum(p.energy_j) AS energy_j,
           string_agg(DISTINCT p.energy_method, '+') AS energy_method, bool_or(p.emulated) AS emulated,
           bool_or(b.run_id IS NOT NULL) AS is_baseline
    FROM per_step p
    LEFT JOIN baseline_series b ON b.run_id = p.run_id AND b.target = p.target
                               AND b.algorithm IS NOT DISTINCT FROM p.algorithm
                               AND b.draft_tokens IS NOT DISTINCT FROM p.draft_tokens
    GROUP BY ALL
)
SELECT o.run_id, o.target, o.algorithm, o.draft_tokens, o.concurrency, o.rate, o.steps,
       round(o.tokens, 1) AS tokens, round(o.energy_j, 1) AS energy_j,
       round(o.tokens / o.energy_j, 4) AS tok_per_j,
       round(o.energy_j / nullif(o.requests, 0), 2) AS j_per_request,
       b.target AS baseline_target, round(b.tokens / b.energy_j, 4) AS baseline_tok_per_j,
       if(o.is_baseline, NULL, round((o.tokens / o.energy_j) / (b.tokens / b.energy_j), 3)) AS tok_per_j_ratio,
       if(o.is_baseline, NULL, round(pct_change(o.tokens / o.energy_j, b.tokens / b.energy_j), 1))
           AS tok_per_j_change_pct,
       o.energy_method, o.emulated OR coalesce(b.emulated, false) AS emulated
FROM levels o
LEFT JOIN levels b ON b.run_id = o.run_id AND b.is_baseline
                  AND b.concurrency IS NOT DISTINCT FROM o.concurrency AND b.rate IS NOT DISTINCT FROM o.rate
ORDER BY o.run_id, NOT o.is_baseline, o.target, o.algorithm, o.draft_tokens, o.concurrency, o.rate;
