-- acceptance_by_concurrency: acceptance length per step (tokens per verify step, bonus token included).
--
--   accept_len      = sum(completion_tokens) / sum(spec_verify_ct) over the step's measured (phase
--                     'measure') ok requests with spec_verify_ct > 0 and completion_tokens known.
--                     SGLang's own definition; token-weighted, so long requests weigh more.
--   accept_len_mean = mean over the same requests of completion_tokens / spec_verify_ct.
--   ok_requests     = measured ok requests; spec_requests = those with spec stats (0 for algorithm NONE, or
--                     a route without spec details: then both figures are NULL).
-- Other sources of the same figure (frame proxy, server's own): acceptance_sources.sql. Per prompt kind:
-- acceptance_by_kind.sql.
SELECT s.run_id, s.step_id, s.target, s.algorithm, s.draft_tokens, s.concurrency, s.rate, s."repeat",
       a.ok_requests, a.spec_requests,
       round(a.accept_len, 3) AS accept_len, round(a.accept_len_mean, 3) AS accept_len_mean,
       s.emulated, s.predicted
FROM step_info s
JOIN step_acceptance a ON a.run_id = s.run_id AND a.step_id = s.step_id AND a.target = s.target
WHERE a.prompt_kind = '(all)'
ORDER BY s.run_id, s.target_index, s.target, s.algorithm, s.concurrency, s.rate, s."repeat", s.step_id;
