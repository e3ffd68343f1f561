-- latency_by_concurrency: latency percentiles per step, one row per metric (ms; decode_tok_s in tok/s).
--
-- Over measured (phase 'measure') requests that finished ok, and their frames:
--   ttft_ms       t_first_token_ns - t_sent_ns (SGLang bench_serving's and vLLM bench serve's TTFT, with the
--                 first frame that carries output)
--   itl_ms        token-weighted inter-token latency: every output frame after a request's first gives one
--                 sample per token it carries, gap to the previous frame / its tokens (frames with unknown or
--                 0 tokens skipped). This is SGLang bench_serving's ITL (its /generate client splits each
--                 chunk's gap evenly over the chunk's new tokens); its mean is the token-weighted TPOT.
--   itl_frame_ms  gap between consecutive output frames of a request, one sample per frame. This is vLLM bench
--                 serve's ITL (one sample per streamed chunk, whatever it carries): with speculative decoding a
--                 frame carries the accepted tokens of a verify step, so it reads ~tokens-per-frame x itl_ms.
--   tpot_ms       (t_last_token_ns - t_first_token_ns) / (completion_tokens - 1); requests with >= 2 tokens
--                 (SGLang's and vLLM's TPOT: per request, the percentiles are over requests)
--   decode_tok_s  1000 / tpot_ms (per-request decode rate)
--   e2e_ms        t_done_ns - t_sent_ns
-- p50/p90/p99 are quantile_cont (linear interpolation); n is the number of samples.
SELECT s.run_id, s.step_id, s.target, s.algorithm, s.draft_tokens, s.concurrency, s.rate, s."repeat",
       l.metric, l.n, round(l.mean, 2) AS mean, round(l.q[1], 2) AS p50, round(l.q[2], 2) AS p90,
       round(l.q[3], 2) AS p99, round(l.max, 2) AS max,
       s.emulated, s.predicted
FROM step_info s
JOIN step_latency l USING (run_id, step_id, target)
ORDER BY s.run_id, s.target_index, s.target, s.algorithm, s.concurrency, s.rate, s."repeat", s.step_id,
         list_position(['ttft_ms', 'itl_ms', 'itl_frame_ms', 'tpot_ms', 'decode_tok_s', 'e2e_ms'], l.metric);
