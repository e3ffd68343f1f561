-- acceptance_by_kind: acceptance length per step and prompt kind (code, prose, ...).
--
-- Same definitions as acceptance_by_concurrency.sql, grouped by requests.prompt_kind as well; the row with
-- prompt_kind '(all)' is the whole step, '(unknown)' collects requests without a kind.
--   accept_len       = sum(completion_tokens) / sum(spec_verify_ct), measured ok requests with spec_verify_ct > 0
--   accept_len_mean  = mean of per-request completion_tokens / spec_verify_ct
--   tokens_per_frame = mean output tokens per streamed frame (client-side proxy)
SELECT s.run_id, s.step_id, s.target, s.algorithm, s.draft_tokens, s.concurrency, s.rate, s."repeat",
       a.prompt_kind, a.ok_requests, a.spec_requests,
       round(a.accept_len, 3) AS accept_len, round(a.accept_len_mean, 3) AS accept_len_mean,
       round(a.tokens_per_frame, 3) AS tokens_per_frame,
       s.emulated, s.predicted
FROM step_info s
JOIN step_acceptance a ON a.run_id = s.run_id AND a.step_id = s.step_id AND a.target = s.target
ORDER BY s.run_id, s.target_index, s.target, s.algorithm, s.concurrency, s.rate, s."repeat", s.step_id,
         a.prompt_kind = '(all)' DESC, a.prompt_kind;
