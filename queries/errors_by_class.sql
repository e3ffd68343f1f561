-- errors_by_class: requests per step and outcome class (requests.status), by phase.
--
--   requests            every request sent in the step, any phase (exactly one row per request sent)
--   measured/warmup/drain  of those, by phase (send time relative to the window)
--   pct_of_measured     100 * measured with this status / measured requests of the step
--   example_error       one error text of the class, to start debugging from
-- 'cancelled' drain requests are cut by design once every measured request finished; a measured request that
-- is not 'ok' is a failure of the measurement.
WITH c AS (
    SELECT run_id, step_id, target, status,
           count(*) AS requests,
           count(*) FILTER (phase = 'measure') AS measured,
           count(*) FILTER (phase = 'warmup') AS warmup,
           count(*) FILTER (phase = 'drain') AS drain,
           any_value(error) AS example_error
    FROM requests
    GROUP BY run_id, step_id, target, status
)
SELECT s.run_id, s.step_id, s.target, s.algorithm, s.draft_tokens, s.concurrency, s.rate, s."repeat",
       c.status, c.requests, c.measured, c.warmup, c.drain,
       round(100 * c.measured / sum(c.measured) OVER (PARTITION BY c.run_id, c.step_id, c.target), 2)
           AS pct_of_measured,
       c.example_error,
       s.emulated, s.predicted
FROM c
JOIN step_info s USING (run_id, step_id, target)
ORDER BY s.run_id, s.target_index, s.target, s.algorithm, s.concurrency, s.rate, s."repeat", s.step_id,
         list_position(['ok', 'http_error', 'timeout', 'stream_broken', 'server_abort', 'malformed_frame',
                        'client_error', 'cancelled', 'lost'], c.status);
