-- prefix_cache: did the shared contexts hit the server's prefix cache, and did the hits shorten time to first token?
--
-- One row per step, target and source of shared contexts (requests.shared_prefix is '<source>#<k>'; the row is the
-- source's, over its k = 0..prefixes-1), over measured ok requests that started with a shared context and had no
-- other history (single requests, and a conversation's first turn: later turns hit their history, see by_turn.sql):
--   requests          measured ok requests; prefixes: distinct shared contexts among them
--   prompt_tokens     mean server-counted prompt tokens
--   cached_tokens     mean cached prompt tokens the server reported (NULL: it reports none)
--   cached_pct        100 * sum(cached_tokens) / sum(prompt_tokens) over requests that report both
--   hit_pct           share of the requests with cached_tokens > 0 (the first request of each context in a step
--                     misses, unless the server kept it from before: SGLang's cache is flushed between steps)
--   ttft_hit_p50_ms / ttft_miss_p50_ms   median time to first token of the requests that hit / missed
--   ttft_hit_vs_miss  ttft_hit_p50_ms / ttft_miss_p50_ms (below 1: the cached prefix saved prefill time)
WITH r AS (
    SELECT *, regexp_replace(shared_prefix, '#[0-9]+$', '') AS source, cached_tokens > 0 AS hit
    FROM measured
    WHERE shared_prefix IS NOT NULL AND coalesce(turn, 1) = 1 AND status = 'ok'
)
SELECT s.run_id, s.step_id, s.target, s.algorithm, s.draft_tokens, s.concurrency, s.rate, s."repeat", r.source,
       count(*) AS requests, count(DISTINCT r.shared_prefix) AS prefixes,
       round(avg(r.prompt_tokens), 1) AS prompt_tokens, round(avg(r.cached_tokens), 1) AS cached_tokens,
       cached_pct_of(r.cached_tokens, r.prompt_tokens, true) AS cached_pct,
       round(100 * count(*) FILTER (r.hit) / nullif(count(r.cached_tokens), 0), 1) AS hit_pct,
       round(median(r.ttft_ms) FILTER (r.hit), 1) AS ttft_hit_p50_ms,
       round(median(r.ttft_ms) FILTER (NOT r.hit), 1) AS ttft_miss_p50_ms,
       round(median(r.ttft_ms) FILTER (r.hit) / median(r.ttft_ms) FILTER (NOT r.hit), 3) AS ttft_hit_vs_miss,
       any_value(s.emulated) AS emulated
FROM r
JOIN step_info s USING (run_id, step_id, target)
GROUP BY s.run_id, s.step_id, s.target, s.target_index, s.algorithm, s.draft_tokens, s.concurrency, s.rate,
         s."repeat", r.source
ORDER BY s.run_id, s.target_index, s.target, s.concurrency, s.rate, s."repeat", s.step_id, r.source;
