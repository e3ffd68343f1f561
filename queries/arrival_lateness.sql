-- arrival_lateness: did the client send each open-loop request when it was planned to?
--
-- Per open-loop step (steps.mode = 'open') and trace replay step (mode 'trace': t_scheduled_ns is the row's
-- timestamp divided by steps.speedup, after the step's start), over its measured requests (phase 'measure' =
-- planned inside the window, whatever their status):
--   measured          requests planned inside the window
--   unsent            of those, never sent (t_sent_ns NULL: connect failed, or cut before sending)
--   lateness_*_ms     t_sent_ns - t_scheduled_ns of the sent ones: p50 / p99 (quantile_cont) / max, in ms.
--                     t_scheduled_ns is the planned arrival, t_sent_ns when the request's bytes were written
--                     (after the TCP connect, ~0.1 ms on loopback).
--   share_late_1ms    share of sent requests more than 1 ms late
-- A request is late when the worker's event loop was busy (see client_health) or when load.max_in_flight
-- requests were already in flight: it then waits for a free slot and later arrivals queue behind it in order
-- (the offered rate was not delivered: the server is overloaded, or the cap is too low).
SELECT s.run_id, s.step_id, s.target, s.algorithm, s.draft_tokens, s.mode, s.rate, s.speedup, s."repeat",
       count(*) AS measured,
       count(*) FILTER (r.t_sent_ns IS NULL) AS unsent,
       round(quantile_cont(r.t_sent_ns - r.t_scheduled_ns, 0.5) / 1e6, 3) AS lateness_p50_ms,
       round(quantile_cont(r.t_sent_ns - r.t_scheduled_ns, 0.99) / 1e6, 3) AS lateness_p99_ms,
       round(max(r.t_sent_ns - r.t_scheduled_ns) / 1e6, 3) AS lateness_max_ms,
       round(avg((r.t_sent_ns - r.t_scheduled_ns > 1e6)::int), 4) AS share_late_1ms,
       s.emulated, s.predicted
FROM step_info s
JOIN requests r ON r.run_id = s.run_id AND r.step_id = s.step_id AND r.target = s.target
WHERE s.mode IN ('open', 'trace') AND r.phase = 'measure'
GROUP BY ALL
ORDER BY s.run_id, s.target, s.algorithm, s.rate, s."repeat", s.step_id;
