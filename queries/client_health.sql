-- client_health: could the load generator itself have distorted a step's numbers?
--
-- Over client_samples (every worker, about every 0.5 s) with t_ns inside the step's measurement window
-- (the union of its targets' windows; workers are not tied to one target in this table):
--   loop_lag_p99_ms / loop_lag_max_ms  event-loop lag: requests go out late by this much (reads are dated
--                                      by the kernel's receive stamps, so their times are not)
--   read_delay_p99_ms / _max_ms        of the per-sample worst wait of received data in a socket before the
--                                      worker read it: frames that waited longer than their gap were read
--                                      together and share one timestamp (their ITL is merged)
--   cpu_p90_percent                    worker process CPU
--   in_flight_share                    share of samples whose in_flight reached target_in_flight (closed
--                                      loop: the offered load really was C), counting only the samples a
--                                      worker took between its target_in_flight-th send and its last send
--                                      of the step: before, its slots are still starting; after, in flight
--                                      necessarily falls from C to 0 (a counted run's tail, --requests N), and
--                                      neither is the client's doing. A worker without request rows: every
--                                      sample in the window. NULL (passes) when no sample is in that span.
--   read_together_pct                  of measured ok requests' frames after their first, the share that came
--                                      out of one read with the previous frame (same timestamp, gap 0: their
--                                      ITL is merged). The client read late (see read_delay) or the server
--                                      sent them together; shown, not judged (a bursting server is no fault
--                                      of the client). NULL without such frames.
--   resent                             the step's requests (any phase) sent a second time on a new connection
--                                      because the server had closed their kept-alive one before a byte of the
--                                      response (it never read them; loadgen's one resend, docs/client.md).
--                                      Shown, not judged: each cost its request the time of one failed send.
-- verdict: 'unknown: ...' without samples; 'ok' when loop_lag_p99_ms <= max_loop_lag_ms (default 10),
-- read_delay_p99_ms <= max_read_delay_ms (default 10; NULL without kernel stamps passes),
-- cpu_p90_percent <= max_cpu_percent (default 90) and in_flight_share >= min_in_flight_share (default 0.95);
-- otherwise 'suspect: ' and the failed checks. Thresholds: SET VARIABLE max_loop_lag_ms = 20, etc.
-- distorted is NULL / false / true for unknown / ok / suspect.
WITH w AS (
    SELECT run_id, step_id, min(t_measure_start_ns) AS t0, max(t_measure_end_ns) AS t1,
           string_agg(DISTINCT target, ', ' ORDER BY target) AS targets,
           any_value(concurrency) AS concurrency, any_value(rate) AS rate, any_value("repeat") AS "repeat",
           bool_or(emulated) AS emulated
    FROM step_info GROUP BY run_id, step_id
), limits AS (
    SELECT coalesce(getvariable('max_loop_lag_ms'), 10) AS lag_ms,
           coalesce(getvariable('max_read_delay_ms'), 10) AS read_ms,
           coalesce(getvariable('max_cpu_percent'), 90) AS cpu,
           coalesce(getvariable('min_in_flight_share'), 0.95) AS share
), h AS (
    SELECT w.run_id, w.step_id, count(c.t_ns) AS samples, count(DISTINCT c.worker) AS workers,
           quantile_cont(c.loop_lag_ms, 0.99) AS lag_p99, max(c.loop_lag_ms) AS lag_max,
           quantile_cont(c.read_delay_max_ms, 0.99) AS read_p99, max(c.read_delay_max_ms) AS read_max,
           quantile_cont(c.cpu_percent, 0.9) AS cpu_p90
    FROM w LEFT JOIN client_samples c
      ON c.run_id = w.run_id AND c.step_id = w.step_id AND c.t_ns >= w.t0 AND c.t_ns < w.t1
    GROUP BY w.run_id, w.step_id
), sends AS (   -- each worker's send times in the step, in order
    SELECT run_id, step_id, worker, list(t ORDER BY t) AS ts
    FROM (SELECT run_id, step_id, worker, coalesce(t_sent_ns, t_scheduled_ns) AS t FROM requests)
    GROUP BY ALL
), loaded AS (  -- the samples of the span where the worker's C slots were all started and still sending
    SELECT w.run_id, w.step_id, avg((c.in_flight >= c.target_in_flight)::int) AS share
    FROM w JOIN client_samples c
      ON c.run_id = w.run_id AND c.step_id = w.step_id AND c.t_ns >= w.t0 AND c.t_ns < w.t1
    LEFT JOIN sends s ON s.run_id = c.run_id AND s.step_id = c.step_id AND s.worker = c.worker
    WHERE s.worker IS NULL OR (c.t_ns >= s.ts[greatest(c.target_in_flight, 1)] AND c.t_ns <= s.ts[-1])
    GROUP BY w.run_id, w.step_id
), resends AS (
    SELECT run_id, step_id, count_if(resent) AS n FROM requests GROUP BY run_id, step_id
), together AS (
    SELECT run_id, step_id, 100 * avg((gap_ns = 0)::int) AS pct
    FROM measured_frames WHERE gap_ns IS NOT NULL
    GROUP BY run_id, step_id
), checks AS (
    SELECT h.*, concat_ws('; ',
               if(h.lag_p99 > limits.lag_ms, format('loop lag p99 {:.1f} ms > {} ms', h.lag_p99, limits.lag_ms), NULL),
               if(h.read_p99 > limits.read_ms,
                  format('socket read delay p99 {:.1f} ms > {} ms', h.read_p99, limits.read_ms), NULL),
               if(h.cpu_p90 > limits.cpu, format('cpu p90 {:.0f}% > {}%', h.cpu_p90, limits.cpu), NULL),
               if(h.share < limits.share, format('in flight at target in {:.0f}% of samples < {:.0f}%',
                                                 100 * h.share, 100 * limits.share), NULL)) AS failed
    FROM (SELECT h.*, l.share FROM h LEFT JOIN loaded l USING (run_id, step_id)) h, limits
)
SELECT w.run_id, w.step_id, w.targets, w.concurrency, w.rate, w."repeat", c.samples, c.workers,
       round(c.lag_p99, 2) AS loop_lag_p99_ms, round(c.lag_max, 2) AS loop_lag_max_ms,
       round(c.read_p99, 2) AS read_delay_p99_ms, round(c.read_max, 2) AS read_delay_max_ms,
       round(c.cpu_p90, 1) AS cpu_p90_percent, round(c.share, 3) AS in_flight_share,
       round(g.pct, 2) AS read_together_pct,
       coalesce(rs.n, 0) AS resent,
       CASE WHEN c.samples = 0 THEN 'unknown: no client samples in the window'
            WHEN c.failed = '' THEN 'ok' ELSE 'suspect: ' || c.failed END AS verdict,
       CASE WHEN c.samples = 0 THEN NULL ELSE c.failed <> '' END AS distorted,
       w.emulated
FROM w JOIN checks c USING (run_id, step_id) LEFT JOIN together g USING (run_id, step_id)
LEFT JOIN resends rs USING (run_id, step_id)
ORDER BY w.run_id, w.step_id;
