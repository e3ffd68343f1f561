-- reasoning: reasoning models by phase: thinking and answer tokens, time to first token beside time to the answer,
-- acceptance and decode rate while thinking and while answering.
--
-- One row per step and target with thinking requests (requests.reasoning_tokens > 0; a step where no request
-- thought has no row), over measured requests that finished ok (docs/workloads.md, "Reasoning models"):
--   requests, thinking     ok requests; those that thought
--   reasoning_tokens       mean thinking tokens (</think> included) of the thinking requests: the server's own count
--                          where it reports one (requests.reasoning_from = 'server'), else counted from the stream
--   answer_tokens          mean completion_tokens - reasoning_tokens of the same requests
--   ttft_p50_ms            median time to the first output of any kind (the first thought): t_first_token_ns - t_sent_ns
--   answer_p50_ms          median time to the first answer output: t_first_answer_ns - t_sent_ns (same requests)
--   ttft_p90_ms, answer_p90_ms   the 90th percentiles
--   think_accept_len       tokens per output frame while thinking: the frames read before the request's first answer
--                          output, its first frame left out (it holds the prefill's token); with every verify step its
--                          own frame (stream_interval 1, a client that keeps up) this is the acceptance length
--   answer_accept_len      the same for the frames from the first answer output on, the first left out (its verify
--                          step may have begun in the thinking)
--   think_decode_tok_s     mean over requests of 1e9 * (thinking tokens after the first frame) / (last thinking frame
--                          - first frame): the decode rate while thinking
--   answer_decode_tok_s    mean over requests of 1e9 * (answer tokens after the first answer frame) / (last frame -
--                          first answer frame): the decode rate while answering
-- Frames of unknown tokens (no per-frame usage) leave the acceptance and decode columns NULL.
WITH r AS (
    SELECT m.run_id, m.step_id, m.target, m.request_id, m.ttft_ms, m.completion_tokens, q.reasoning_tokens,
           q.t_first_token_ns, q.t_first_answer_ns, (q.t_first_answer_ns - q.t_sent_ns) / 1e6 AS answer_ms
    FROM measured m
    JOIN requests q USING (run_id, request_id)
    WHERE m.status = 'ok' AND q.reasoning_tokens > 0
), f AS (   -- each frame of those requests, its phase, and whether it opens its phase (its first frame there)
    SELECT r.run_id, r.step_id, r.target, r.request_id, f.tokens, f.t_ns,
           coalesce(f.t_ns >= r.t_first_answer_ns, false) AS answering,
           row_number() OVER (PARTITION BY r.run_id, r.request_id, coalesce(f.t_ns >= r.t_first_answer_ns, false)
                              ORDER BY f.seq) = 1 AS opens
    FROM frames f JOIN r USING (run_id, request_id)
), per_request AS (
    SELECT run_id, step_id, target, request_id, answering,
           sum(tokens) FILTER (NOT opens) AS tokens, count(*) FILTER (NOT opens) AS frames,
           count(*) FILTER (tokens IS NULL) AS unknown,
           max(t_ns) - min(t_ns) AS span_ns
    FROM f GROUP BY ALL
), phases AS (
    SELECT run_id, step_id, target,
           sum(tokens) FILTER (NOT answering AND unknown = 0)
               / nullif(sum(frames) FILTER (NOT answering AND unknown = 0), 0) AS think_accept_len,
           sum(tokens) FILTER (answering AND unknown = 0) / nullif(sum(frames) FILTER (answering AND unknown = 0), 0)
               AS answer_accept_len,
           avg(1e9 * tokens / nullif(span_ns, 0)) FILTER (NOT answering AND unknown = 0) AS think_decode_tok_s,
           avg(1e9 * tokens / nullif(span_ns, 0)) FILTER (answering AND unknown = 0) AS answer_decode_tok_s
    FROM per_request GROUP BY ALL
), totals AS (
    SELECT run_id, step_id, target, count(*) AS thinking,
           avg(reasoning_tokens) AS reasoning_tokens, avg(completion_tokens - reasoning_tokens) AS answer_tokens,
           quantile_cont(ttft_ms, 0.5) AS ttft_p50_ms, quantile_cont(answer_ms, 0.5) AS answer_p50_ms,
           quantile_cont(ttft_ms, 0.9) AS ttft_p90_ms, quantile_cont(answer_ms, 0.9) AS answer_p90_ms
    FROM r GROUP BY ALL
)
SELECT s.run_id, s.step_id, s.target, s.algorithm, s.draft_tokens, s.concurrency, s.rate, s."repeat",
       (SELECT count(*) FROM measured m WHERE m.status = 'ok' AND m.run_id = s.run_id AND m.step_id = s.step_id
                                           AND m.target = s.target) AS requests,
       t.thinking, round(t.reasoning_tokens, 1) AS reasoning_tokens, round(t.answer_tokens, 1) AS answer_tokens,
       round(t.ttft_p50_ms, 1) AS ttft_p50_ms, round(t.answer_p50_ms, 1) AS answer_p50_ms,
       round(t.ttft_p90_ms, 1) AS ttft_p90_ms, round(t.answer_p90_ms, 1) AS answer_p90_ms,
       round(p.think_accept_len, 3) AS think_accept_len, round(p.answer_accept_len, 3) AS answer_accept_len,
       round(p.think_decode_tok_s, 1) AS think_decode_tok_s, round(p.answer_decode_tok_s, 1) AS answer_decode_tok_s,
       s.emulated
FROM totals t
JOIN step_info s USING (run_id, step_id, target)
LEFT JOIN phases p USING (run_id, step_id, target)
ORDER BY s.run_id, s.target_index, s.target, s.concurrency, s.rate, s."repeat", s.step_id;
