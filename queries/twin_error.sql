-- twin_error: a twin's prediction beside the measurement, wherever both exist (docs/twin.md).
--
-- Pairs every predicted series (steps.predicted, written by `loadgen twin predict` or a [targets.twin]) with the
-- measured series of the same target name, algorithm and draft tokens at the same load level, in any run of the
-- selected ones (narrow with --run, or --set predicted_run=ID / measured_run=ID). A server that does not report its
-- draft budget (llama.cpp: the twin counts it from the frames) pairs with the unchanged twin's prediction, never with
-- a what-if's. Per pair, level and metric:
--   predicted, measured    views.sql level_metrics: tok_s (median aggregate output tok/s over the level's
--                          steps), ttft_p50_ms, ttft_p90_ms and tpot_p50_ms (over the level's measured ok
--                          requests), accept_len (sum(completion_tokens) / sum(spec_verify_ct))
--   error_pct              100 (predicted / measured - 1)
--   mape_pct               mean |error_pct| of the metric over the pair's levels (mean absolute % error)
--   worst_level, worst_error_pct  the level whose |error_pct| is the largest for the metric
--   in_fit                 the measured level is one the twin was fitted on (the same run and level: an
--                          in-sample figure); false: a level the twin never saw (out-of-sample)
--   over_limit             mape_pct above twin_limit_pct (default 15): the twin says so instead of answering quietly
--   emulated               the measured side ran on loadgen's emulator (or the twin was fitted to one)
WITH p AS (SELECT * FROM level_metrics WHERE predicted
           AND (getvariable('predicted_run') IS NULL OR run_id = getvariable('predicted_run'))),
m AS (SELECT * FROM level_metrics WHERE NOT predicted
      AND (getvariable('measured_run') IS NULL OR run_id = getvariable('measured_run'))),
pairs AS (
    SELECT p.run_id AS predicted_run, m.run_id AS measured_run, p.target, p.algorithm, p.draft_tokens,
           p.concurrency, p.rate, p.level, m.requests AS measured_requests, p.emulated OR m.emulated AS emulated,
           coalesce(ts.source_run = m.run_id AND list_contains(ts.fit_levels, p.level::DOUBLE), false) AS in_fit,
           [p.tok_s, p.ttft_p50, p.ttft_p90, p.tpot_p50, p.accept_len] AS pv,
           [m.tok_s, m.ttft_p50, m.ttft_p90, m.tpot_p50, m.accept_len] AS mv
    FROM p
    LEFT JOIN twin_sources ts ON ts.run_id = p.run_id AND ts.target = p.target
    JOIN m ON m.target = p.target AND m.algorithm IS NOT DISTINCT FROM p.algorithm
          AND (m.draft_tokens IS NOT DISTINCT FROM p.draft_tokens
               OR (m.draft_tokens IS NULL AND ts.what_if IS NULL))
          AND m.concurrency IS NOT DISTINCT FROM p.concurrency AND m.rate IS NOT DISTINCT FROM p.rate
),
long AS (
    SELECT * EXCLUDE (pv, mv, i), ['tok_s', 'ttft_p50_ms', 'ttft_p90_ms', 'tpot_p50_ms', 'accept_len'][i] AS metric,
           pv[i] AS predicted, mv[i] AS measured
    FROM pairs, range(1, 6) r(i)
),
errors AS (
    SELECT *, 100 * (predicted / measured - 1) AS error_pct FROM long
    WHERE predicted IS NOT NULL AND measured IS NOT NULL AND measured <> 0
)
SELECT predicted_run, measured_run, target, algorithm, draft_tokens, concurrency, rate, metric,
       round(predicted, 3) AS predicted, round(measured, 3) AS measured, round(error_pct, 1) AS error_pct,
       round(avg(abs(error_pct)) OVER w, 1) AS mape_pct,
       arg_max(level, abs(error_pct)) OVER w AS worst_level,
       round(arg_max(error_pct, abs(error_pct)) OVER w, 1) AS worst_error_pct,
       in_fit, measured_requests,
       avg(abs(error_pct)) OVER w > coalesce(getvariable('twin_limit_pct'), 15) AS over_limit, emulated
FROM errors
WINDOW w AS (PARTITION BY predicted_run, measured_run, target, algorithm, draft_tokens, metric)
ORDER BY predicted_run, measured_run, target, list_position(['tok_s', 'ttft_p50_ms', 'ttft_p90_ms', 'tpot_p50_ms',
         'accept_len'], metric), level;
