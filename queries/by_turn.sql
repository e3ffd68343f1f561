-- by_turn: conversations turn by turn: time to first token, acceptance length and prefix-cache hits per turn.
--
-- One row per step, target and turn of the conversation requests (requests.turn, from 1; a step without
-- conversations has no rows), over measured requests (phase 'measure'):
--   requests          measured requests of that turn (any status); ok: those that finished ok
--   sessions          distinct sessions that sent that turn inside the window
--   prompt_tokens     mean server-counted prompt tokens of the ok requests (the history grows turn by turn)
--   cached_tokens     mean cached prompt tokens the server reported for them (SGLang meta_info.cached_tokens, OpenAI
--                     usage.prompt_tokens_details.cached_tokens, llama.cpp timings.cache_n)
--   cached_pct        100 * sum(cached_tokens) / sum(prompt_tokens) over ok requests that report both: the share of
--                     the prompt served from the server's prefix cache; NULL when the server reports no cached count
--   hit_pct           share of the ok requests with cached_tokens > 0
--   ttft_p50_ms, ttft_p90_ms   time to first token (t_first_token_ns - t_sent_ns) of the ok requests
--   accept_len        sum(completion_tokens) / sum(spec_verify_ct), ok requests with spec_verify_ct > 0
SELECT s.run_id, s.step_id, s.target, s.algorithm, s.draft_tokens, s.concurrency, s.rate, s."repeat", m.turn,
       count(*) AS requests, count(*) FILTER (m.status = 'ok') AS ok,
       count(DISTINCT m.session_id) AS sessions,
       round(avg(m.prompt_tokens) FILTER (m.status = 'ok'), 1) AS prompt_tokens,
       round(avg(m.cached_tokens) FILTER (m.status = 'ok'), 1) AS cached_tokens,
       cached_pct_of(m.cached_tokens, m.prompt_tokens, m.status = 'ok') AS cached_pct,
       round(100 * count(*) FILTER (m.status = 'ok' AND m.cached_tokens > 0)
             / nullif(count(m.cached_tokens) FILTER (m.status = 'ok'), 0), 1) AS hit_pct,
       round(quantile_cont(m.ttft_ms, 0.5) FILTER (m.status = 'ok'), 1) AS ttft_p50_ms,
       round(quantile_cont(m.ttft_ms, 0.9) FILTER (m.status = 'ok'), 1) AS ttft_p90_ms,
       accept_len_of(m.completion_tokens, m.spec_verify_ct, m.status = 'ok') AS accept_len,
       any_value(s.emulated) AS emulated
FROM measured m
JOIN step_info s USING (run_id, step_id, target)
WHERE m.turn IS NOT NULL
GROUP BY s.run_id, s.step_id, s.target, s.target_index, s.algorithm, s.draft_tokens, s.concurrency, s.rate,
         s."repeat", m.turn
ORDER BY s.run_id, s.target_index, s.target, s.concurrency, s.rate, s."repeat", s.step_id, m.turn;
