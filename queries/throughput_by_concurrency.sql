-- throughput_by_concurrency: output throughput per step.
--
--   tok_s     aggregate output tok/s: the tokens of frames whose arrival t_ns lies inside the
--             measurement window [t_measure_start_ns, t_measure_end_ns), of ANY request in any phase and
--             status (the server produced those tokens in the window), / window seconds. A frame's tokens
--             are the server's per-frame count, else its request's usage total spread over its frames, else 1
--             where the server streams one token per event (llama.cpp): `token_method` says which
--             (views.sql window_tokens). 0 when no frame arrived in the window; NULL when some frame's tokens
--             cannot be known (frames_unknown_tokens > 0), never a partial sum.
--   tok_s_ok  the same counting only frames of requests that finished ok.
--   req_s     measured (phase 'measure') requests that finished ok / window seconds.
--   decode_tok_s_p50/p90/p99  per-request decode rate 1 / TPOT, TPOT = (t_last - t_first) /
--             (completion_tokens - 1), over measured ok requests with >= 2 tokens.
--   frames_unknown_tokens  window frames whose token count is unknown (not in tok_s).
SELECT s.run_id, s.step_id, s.target, s.algorithm, s.draft_tokens, s.concurrency, s.rate, s."repeat",
       round(t.window_s, 3) AS window_s,
       round(t.tok_s, 2) AS tok_s, round(t.tok_s_ok, 2) AS tok_s_ok, round(t.req_s, 3) AS req_s,
       round(d.s.q[1], 2) AS decode_tok_s_p50, round(d.s.q[2], 2) AS decode_tok_s_p90,
       round(d.s.q[3], 2) AS decode_tok_s_p99,
       t.window_frames, t.frames_unknown_tokens, t.token_method,
       s.emulated, s.predicted
FROM step_info s
JOIN step_throughput t USING (run_id, step_id, target)
LEFT JOIN (SELECT run_id, step_id, target, sample_stats(decode_tok_s) AS s FROM measured WHERE status = 'ok'
           GROUP BY run_id, step_id, target) d USING (run_id, step_id, target)
ORDER BY s.run_id, s.target_index, s.target, s.algorithm, s.concurrency, s.rate, s."repeat", s.step_id;
