-- workload_check: did the server run the workload that was asked for? One row per step and target (prompt_kind
-- '(all)'), and with an input-length target (prompts.input_tokens) one more per prompt kind.
--
--   server              who served it (steps.server_info's `server`; 'sglang' for steps written before)
--   ok_requests         measured ok requests
--   asked_ignore_eos    the run sent ignore_eos (runs.config prompts.ignore_eos; loadgen run --no-ignore-eos
--                       turns it off)
--   early_stops         of those, requests that ended with finish_reason 'stop' (loadgen sends no stop strings,
--                       so with ignore_eos a request ends by 'length'): the server ignored ignore_eos (the
--                       outputs, and so throughput and TPOT, are not the workload asked for)
--   prompt_tokens / cached_tokens   sums over the measured ok requests that report them (usage
--                       prompt_tokens_details.cached_tokens; llama.cpp timings.cache_n) and are not meant to reuse
--                       a prefix (conversation turns and shared contexts are: queries/by_turn.sql, prefix_cache.sql)
--   cached_pct          100 * cached / prompt tokens: a prefix served from the server's cache instead of computed
--                       (loadgen asks llama.cpp for cache_prompt false and flushes SGLang's cache between steps)
--   input_tokens_asked / input_tokens_actual   mean prompt_tokens_target and mean server-counted prompt_tokens
--                       of the measured ok requests that had a target (NULL without one)
--   input_ratio_p5 / input_ratio_p95   5th / 95th percentile of actual / asked over those requests
--   output_tokens_asked / output_tokens_actual   mean completion_tokens_target (a trace row's output length) and
--                       mean completion_tokens of the measured ok requests that had one (NULL without)
--   flags               'ignores ignore_eos' when early_stops > 0 while ignore_eos was asked;
--                       'prompt cache hits' when cached_pct > max_cached_pct (default 5; SET VARIABLE
--                       max_cached_pct = 20 in duckdb); 'input tokens off target' when input_ratio_p5 < 0.9 or
--                       input_ratio_p95 > 1.1; 'input tokens not counted' when a target was asked but the server
--                       reported no prompt token count; 'output tokens short' when output_tokens_actual is more
--                       than 1% below output_tokens_asked; NULL when none
WITH cfg AS (
    SELECT run_id,
           coalesce(try_cast(json_extract_string(config, '$.prompts.ignore_eos') AS BOOLEAN), true) AS ignore_eos
    FROM runs
), per_step AS (
    SELECT r.run_id, r.step_id, r.target,
           CASE WHEN grouping(r.prompt_kind) = 1 THEN '(all)' ELSE r.prompt_kind END AS prompt_kind,
           count(*) AS ok_requests,
           count(*) FILTER (r.finish_reason = 'stop') AS stops,
           sum(r.prompt_tokens) FILTER (r.cached_tokens IS NOT NULL AND NOT planned) AS prompt_tokens,
           sum(r.cached_tokens) FILTER (NOT planned) AS cached_tokens,
           any_value(c.ignore_eos) AS ignore_eos,
           avg(r.prompt_tokens_target) AS asked,
           avg(r.prompt_tokens) FILTER (r.prompt_tokens_target IS NOT NULL) AS actual,
           quantile_cont(r.prompt_tokens / r.prompt_tokens_target, 0.05) AS ratio_p5,
           quantile_cont(r.prompt_tokens / r.prompt_tokens_target, 0.95) AS ratio_p95,
           avg(r.completion_tokens_target) AS out_asked,
           avg(r.completion_tokens) FILTER (r.completion_tokens_target IS NOT NULL) AS out_actual
    FROM (SELECT *, session_id IS NOT NULL OR shared_prefix IS NOT NULL AS planned FROM requests) r
    LEFT JOIN cfg c USING (run_id)
    WHERE r.phase = 'measure' AND r.status = 'ok'
    GROUP BY GROUPING SETS ((r.run_id, r.step_id, r.target), (r.run_id, r.step_id, r.target, r.prompt_kind))
    HAVING grouping(r.prompt_kind) = 1 OR count(r.prompt_tokens_target) > 0 OR count(r.completion_tokens_target) > 0
)
SELECT s.run_id, s.step_id, s.target,
       coalesce(json_extract_string(st.server_info, '$.server'), 'sglang') AS server,
       s.concurrency, s.rate, s."repeat", coalesce(p.prompt_kind, '(all)') AS prompt_kind,
       p.ok_requests, p.ignore_eos AS asked_ignore_eos,
       CASE WHEN p.ignore_eos THEN p.stops ELSE 0 END AS early_stops,
       p.prompt_tokens, p.cached_tokens,
       round(100 * p.cached_tokens / nullif(p.prompt_tokens, 0), 1) AS cached_pct,
       round(p.asked, 1) AS input_tokens_asked, round(p.actual, 1) AS input_tokens_actual,
       round(p.ratio_p5, 3) AS input_ratio_p5, round(p.ratio_p95, 3) AS input_ratio_p95,
       round(p.out_asked, 1) AS output_tokens_asked, round(p.out_actual, 1) AS output_tokens_actual,
       nullif(concat_ws(', ',
           CASE WHEN p.ignore_eos AND p.stops > 0 THEN 'ignores ignore_eos' END,
           CASE WHEN 100 * p.cached_tokens / nullif(p.prompt_tokens, 0)
                     > coalesce(getvariable('max_cached_pct'), 5) THEN 'prompt cache hits' END,
           CASE WHEN p.ratio_p5 < 0.9 OR p.ratio_p95 > 1.1 THEN 'input tokens off target' END,
           CASE WHEN p.asked IS NOT NULL AND p.actual IS NULL THEN 'input tokens not counted' END,
           CASE WHEN p.out_actual < 0.99 * p.out_asked THEN 'output tokens short' END), '') AS flags,
       s.emulated, s.predicted
FROM step_info s
JOIN steps st ON st.run_id = s.run_id AND st.step_id = s.step_id AND st.target = s.target
LEFT JOIN per_step p ON p.run_id = s.run_id AND p.step_id = s.step_id AND p.target = s.target
ORDER BY s.run_id, s.target_index, s.target, s.concurrency, s.rate, s."repeat", s.step_id,
         p.prompt_kind <> '(all)', p.prompt_kind;
