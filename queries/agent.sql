-- agent: agent sessions by turn kind: time to first token, acceptance length and output of the turns that called a
-- tool against those that answered.
--
-- One row per step, target and turn kind of agent sessions (requests.turn_kind: tool_call = the server answered
-- with a tool call, answer = it answered in prose; a step without agent sessions has no rows), over measured requests
-- (phase 'measure'; docs/workloads.md, "Agent sessions"):
--   requests          measured turns of that kind (any status); ok: those that finished ok
--   sessions          distinct sessions with such a turn inside the window
--   completion_tokens mean output tokens of the ok turns (a tool call's JSON, or the answer)
--   prompt_tokens     mean server-counted prompt tokens (the history grows with each call and tool result)
--   cached_pct        100 * sum(cached_tokens) / sum(prompt_tokens) over ok turns that report both
--   ttft_p50_ms, ttft_p90_ms   time to first token of the ok turns
--   accept_len        sum(completion_tokens) / sum(spec_verify_ct), ok turns with spec_verify_ct > 0
SELECT s.run_id, s.step_id, s.target, s.algorithm, s.draft_tokens, s.concurrency, s.rate, s."repeat", q.turn_kind,
       count(*) AS requests, count(*) FILTER (m.status = 'ok') AS ok,
       count(DISTINCT m.session_id) AS sessions,
       round(avg(m.completion_tokens) FILTER (m.status = 'ok'), 1) AS completion_tokens,
       round(avg(m.prompt_tokens) FILTER (m.status = 'ok'), 1) AS prompt_tokens,
       cached_pct_of(m.cached_tokens, m.prompt_tokens, m.status = 'ok') AS cached_pct,
       round(quantile_cont(m.ttft_ms, 0.5) FILTER (m.status = 'ok'), 1) AS ttft_p50_ms,
       round(quantile_cont(m.ttft_ms, 0.9) FILTER (m.status = 'ok'), 1) AS ttft_p90_ms,
       accept_len_of(m.completion_tokens, m.spec_verify_ct, m.status = 'ok') AS accept_len,
       any_value(s.emulated) AS emulated
FROM measured m
JOIN requests q USING (run_id, request_id)
JOIN step_info s ON s.run_id = m.run_id AND s.step_id = m.step_id AND s.target = m.target
WHERE q.turn_kind IS NOT NULL
GROUP BY s.run_id, s.step_id, s.target, s.target_index, s.algorithm, s.draft_tokens, s.concurrency, s.rate,
         s."repeat", q.turn_kind
ORDER BY s.run_id, s.target_index, s.target, s.concurrency, s.rate, s."repeat", s.step_id, q.turn_kind DESC;
