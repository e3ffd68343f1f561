-- failed_partial_tokens: tokens that requests which did not finish ok still delivered, per step and status.
--
-- The headline numbers keep them apart: latency_by_concurrency is over ok requests only; throughput's
-- tok_s counts every frame in the window (the server did produce those tokens) and tok_s_ok only frames of
-- ok requests. This query shows the difference: what failed requests received before they failed.
--   requests             requests of the step with this status (any phase)
--   with_tokens          of those, requests that received at least one output frame
--   delivered_tokens     sum(frames.tokens) of those requests (their partial output; all frames, any time)
--   measured_tokens      the same over measured (phase 'measure') requests only
--   pct_of_step_tokens   100 * delivered_tokens / tokens delivered to every request of the step
-- 'cancelled' drain requests are cut by design at the end of a step; 'lost' ones belonged to a worker
-- that died (their frames are those flushed before it died).
WITH per_request AS (
    SELECT r.run_id, r.step_id, r.target, r.request_id, r.status, r.phase,
           coalesce(sum(f.tokens), 0) AS tokens, count(f.seq) AS frames
    FROM requests r
    LEFT JOIN frames f USING (run_id, step_id, request_id)
    GROUP BY ALL
), per_status AS (
    SELECT run_id, step_id, target, status,
           count(*) AS requests,
           count(*) FILTER (frames > 0) AS with_tokens,
           sum(tokens) AS delivered_tokens,
           sum(tokens) FILTER (phase = 'measure') AS measured_tokens,
           100 * sum(tokens) / nullif(sum(sum(tokens)) OVER (PARTITION BY run_id, step_id, target), 0) AS pct
    FROM per_request
    GROUP BY run_id, step_id, target, status
)
SELECT s.run_id, s.step_id, s.target, s.algorithm, s.draft_tokens, s.concurrency, s.rate, s."repeat",
       p.status, p.requests, p.with_tokens, p.delivered_tokens::BIGINT AS delivered_tokens,
       coalesce(p.measured_tokens, 0)::BIGINT AS measured_tokens, round(p.pct, 2) AS pct_of_step_tokens,
       s.emulated, s.predicted
FROM per_status p
JOIN step_info s USING (run_id, step_id, target)
WHERE p.status <> 'ok'
ORDER BY s.run_id, s.target_index, s.target, s.algorithm, s.concurrency, s.rate, s."repeat", s.step_id,
         list_position(['http_error', 'timeout', 'stream_broken', 'server_abort', 'malformed_frame',
                        'client_error', 'cancelled', 'lost'], p.status);
