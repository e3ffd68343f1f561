-- acceptance_sources: the step's acceptance length from every source, side by side, with disagreement.
--
--   accept_len        sum(completion_tokens) / sum(spec_verify_ct), measured ok requests (SGLang's definition;
--                     the reference the others are compared with)
--   tokens_per_frame  frame proxy: mean output tokens per streamed frame of the same requests (client side;
--                     exact only when every verify step is streamed as its own frame)
--   server_final      mean of the final frame's spec_accept_length of the same requests (server's figure)
--   server_info_after /get_server_info avg_spec_accept_length sampled right after the step; the counter was
--                     flushed right before it, so it covers the whole step incl. warm-up and drain, and it is
--                     refreshed only every --decode-log-interval decode steps
--   *_diff_pct        100 * (source / accept_len - 1)
SELECT s.run_id, s.step_id, s.target, s.algorithm, s.draft_tokens, s.concurrency, s.rate, s."repeat",
       round(a.accept_len, 3) AS accept_len,
       round(a.tokens_per_frame, 3) AS tokens_per_frame,
       round(a.server_final, 3) AS server_final,
       round(i.server_info_after, 3) AS server_info_after,
       round(100 * (a.tokens_per_frame / a.accept_len - 1), 1) AS proxy_diff_pct,
       round(100 * (a.server_final / a.accept_len - 1), 1) AS server_final_diff_pct,
       round(100 * (i.server_info_after / a.accept_len - 1), 1) AS server_info_diff_pct,
       s.emulated
FROM step_info s
JOIN step_acceptance a ON a.run_id = s.run_id AND a.step_id = s.step_id AND a.target = s.target
LEFT JOIN server_info_acceptance i ON i.run_id = s.run_id AND i.step_id = s.step_id AND i.target = s.target
WHERE a.prompt_kind = '(all)'
ORDER BY s.run_id, s.target_index, s.target, s.algorithm, s.concurrency, s.rate, s."repeat", s.step_id;
