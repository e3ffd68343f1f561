-- acceptance_sources: the step's acceptance length from every source, side by side, with disagreement, and
-- which source each figure came from.
--
--   server            who served the step (steps.server_info's `server`, loadgen/servers/serverid.py; 'sglang' for
--                     steps written before it was recorded)
--   request_source    where the per-request spec_verify_ct of accept_len came from:
--                       'sglang meta_info/sglext'  SGLang's own spec_verify_ct (native final frame, or the
--                                                  OpenAI route's sglext.spec_tokens_details);
--                       'llama.cpp timings'        llama-server's `timings` on the last chunk, mapped as
--                                                  spec_verify_ct = predicted_n - 1 - draft_n_accepted (target
--                                                  decode passes after the prompt pass; see
--                                                  loadgen/client/protocol/openai.py _timings for the derivation);
--                       'vllm per-request metrics' vLLM's `metrics.speculative_decoding` on the usage chunk
--                                                  (--per-request-spec-decode-metrics), mapped the same way:
--                                                  spec_verify_ct = completion_tokens - 1 - accepted draft tokens
--                                                  (openai.py _vllm_spec);
--                       NULL                       no request carried spec stats
--   accept_len        sum(completion_tokens) / sum(spec_verify_ct), measured ok requests (SGLang's definition,
--                     bonus token included; the reference the others are compared with)
--   tokens_per_frame  frame proxy: mean output tokens per streamed frame of the same requests (client side;
--                     exact only when every verify step is streamed as its own frame; 1 on llama.cpp, which
--                     streams one token per chunk)
--   server_final      mean of the final frame's spec_accept_length of the same requests (server's figure)
--   server_info_after SGLang's /get_server_info avg_spec_accept_length sampled right after the step; the
--                     counter was flushed right before it, so it covers the whole step incl. warm-up and drain,
--                     and it is refreshed only every --decode-log-interval decode steps
--   counter_source    which /metrics counters gave counter_accept_len and counter_draft_step_len:
--                     'llamacpp:' (llama-server --metrics) or 'vllm:' (vLLM); deltas between the first and the
--                     last server sample of the step (a sample is taken at the step's start and end), so they
--                     cover the whole step (warm-up and drain too) and every client of the server
--   counter_accept_len SGLang's definition from counters: generated tokens / target decode passes, passes =
--                     tokens - accepted draft tokens - finished requests (each request's first token comes from
--                     its prompt pass). llama.cpp: tokens_predicted_total, spec_decode_num_accepted_tokens_total,
--                     and the step's finished ok requests of loadgen (llama.cpp counts requests nowhere; its
--                     counters are updated when a request ends). vLLM: generation_tokens_total,
--                     spec_decode_num_accepted_tokens_total, request_success_total; vLLM counts draft tokens
--                     accepted past a request's max_tokens (then dropped) as accepted, so on vLLM this can exceed
--                     accept_len by those (at most num_speculative_tokens - 1 a request)
--   counter_draft_step_len  the servers' own "mean acceptance length": 1 + accepted / drafts, over decode
--                     steps that verified a draft only (llama.cpp spec_decode_num_drafts_total = its verification
--                     steps; vLLM spec_decode_num_drafts, vllm/v1/spec_decode/metrics.py). Larger than
--                     accept_len when some passes drafted nothing.
--   *_diff_pct        100 * (source / accept_len - 1)
WITH counters AS (   -- one value per counter and sample time (label series summed: vLLM's engines, reasons)
    SELECT run_id, step_id, target, t_ns, regexp_replace(name, '_total$', '') AS name, sum(value) AS value
    FROM server_samples
    WHERE name SIMILAR TO '(llamacpp|vllm):(tokens_predicted|generation_tokens|spec_decode_num_accepted_tokens|spec_decode_num_drafts|request_success)(_total)?'
    GROUP BY ALL
), deltas AS (
    SELECT run_id, step_id, target, name, arg_max(value, t_ns) - arg_min(value, t_ns) AS delta
    FROM counters GROUP BY ALL
), step_counters AS (
    SELECT run_id, step_id, target,
           any_value(split_part(name, ':', 1) || ':') AS counter_source,
           sum(delta) FILTER (name IN ('llamacpp:tokens_predicted', 'vllm:generation_tokens')) AS tokens,
           sum(delta) FILTER (name LIKE '%:spec_decode_num_accepted_tokens') AS accepted,
           sum(delta) FILTER (name LIKE '%:spec_decode_num_drafts') AS drafts,
           sum(delta) FILTER (name = 'vllm:request_success') AS finished
    FROM deltas GROUP BY ALL
), finished_ok AS (
    SELECT run_id, step_id, target, count(*) AS n FROM requests WHERE status = 'ok' GROUP BY ALL
), req_source AS (
    SELECT run_id, step_id, target,
           count(*) FILTER (spec_verify_ct IS NOT NULL) AS with_spec
    FROM requests WHERE phase = 'measure' AND status = 'ok' GROUP BY ALL
), srv AS (
    SELECT run_id, step_id, target, coalesce(json_extract_string(server_info, '$.server'), 'sglang') AS server
    FROM steps
)
SELECT s.run_id, s.step_id, s.target, v.server, s.algorithm, s.draft_tokens, s.concurrency, s.rate, s."repeat",
       CASE WHEN coalesce(q.with_spec, 0) = 0 THEN NULL
            WHEN v.server = 'llama.cpp' THEN 'llama.cpp timings'
            WHEN v.server = 'vllm' THEN 'vllm per-request metrics'
            ELSE 'sglang meta_info/sglext' END AS request_source,
       round(a.accept_len, 3) AS accept_len,
       round(a.tokens_per_frame, 3) AS tokens_per_frame,
       round(a.server_final, 3) AS server_final,
       round(i.server_info_after, 3) AS server_info_after,
       c.counter_source,
       round(c.tokens / nullif(c.tokens - c.accepted - coalesce(c.finished, f.n), 0), 3) AS counter_accept_len,
       round(1 + c.accepted / nullif(c.drafts, 0), 3) AS counter_draft_step_len,
       round(100 * (a.tokens_per_frame / a.accept_len - 1), 1) AS proxy_diff_pct,
       round(100 * (a.server_final / a.accept_len - 1), 1) AS server_final_diff_pct,
       round(100 * (i.server_info_after / a.accept_len - 1), 1) AS server_info_diff_pct,
       round(100 * (c.tokens / nullif(c.tokens - c.accepted - coalesce(c.finished, f.n), 0) / a.accept_len - 1), 1)
           AS counter_diff_pct,
       s.emulated, s.predicted
FROM step_info s
JOIN step_acceptance a ON a.run_id = s.run_id AND a.step_id = s.step_id AND a.target = s.target
JOIN srv v ON v.run_id = s.run_id AND v.step_id = s.step_id AND v.target = s.target
LEFT JOIN req_source q ON q.run_id = s.run_id AND q.step_id = s.step_id AND q.target = s.target
LEFT JOIN server_info_acceptance i ON i.run_id = s.run_id AND i.step_id = s.step_id AND i.target = s.target
LEFT JOIN step_counters c ON c.run_id = s.run_id AND c.step_id = s.step_id AND c.target = s.target
LEFT JOIN finished_ok f ON f.run_id = s.run_id AND f.step_id = s.step_id AND f.target = s.target
WHERE a.prompt_kind = '(all)'
ORDER BY s.run_id, s.target_index, s.target, s.algorithm, s.concurrency, s.rate, s."repeat", s.step_id;
