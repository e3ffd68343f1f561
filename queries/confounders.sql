-- confounders: recorded server settings, besides the speculative ones, that differ between two compared series.
-- A comparison (the baseline and another series of a run) is like-for-like only when this returns no rows for it.
--
-- From steps.server_info (the JSON of /get_server_info taken before each step: SGLang's server args, e.g.
-- mem_fraction_static, max_running_requests, chunked_prefill_size, attention_backend, model_path, plus
-- max_total_num_tokens, the KV pool in tokens, and version). Every leaf of that JSON is a setting, named by
-- its path ('emulator.time_scale'); a list counts as one value. Not compared, because they differ by design
-- or describe the instance rather than its configuration:
--   speculative settings  any key containing 'speculative' or 'draft', and the emulator's algorithm_profile
--                         and dflash_version
--   instance identity     host, port, random_seed, the emulator's seed, startup_time
--   live state            internal_states (acceptance, throughput, memory in use, queue lengths)
-- A series whose steps recorded several values of a setting (a restarted server) shows them joined by ' | '.
--   baseline_value / value  the setting's value in each series; '(absent)' when that server did not report it
--   change_pct              100 * (value / baseline_value - 1) when both are numbers (e.g. a smaller KV pool)
--   emulated                either series ran on loadgen's emulator (its settings are the emulator's)
-- Series without any server_info (non-SGLang servers) are not compared.
--
-- Hardware (views.sql `gpu_confounders`, from the GPU telemetry; docs/telemetry.md): a node (in a fleet; a target
-- on one node) whose SM clock median while working is more than `clock_drop_pct` (10) % below its peers', that
-- was throttled more than `throttled_max_pct` (5) % of a window, or whose GPU model, driver or CUDA version
-- differs from the others'. Its rows name it in `node` (the unit: a node, or a target) and `target` (its
-- targets), the peers in `baseline_target`, the setting as gpu.sm_clock_median_mhz, gpu.throttled_pct (value:
-- the worst window's share; baseline_value: the limit), gpu.gpu, gpu.driver or gpu.cuda, and `note` says it in
-- a sentence ("spark2 ran at 780 MHz median vs 2,405 on spark1 (software power cap 92% of the window): its
-- numbers are not comparable"). Setting rows have node and note NULL.
WITH leaves AS (
    SELECT s.run_id, s.target, s.algorithm, s.draft_tokens,
           regexp_replace(j.fullkey, '^\$\.', '') AS setting,
           if(j.type = 'VARCHAR', j.value ->> '$', j.value::VARCHAR) AS value
    FROM steps s, json_tree(s.server_info) j
    WHERE s.server_info IS NOT NULL AND j.type <> 'OBJECT' AND NOT j.fullkey LIKE '%]'
      AND NOT regexp_matches(j.fullkey, '^\$\.(internal_states|host$|port$|random_seed$|startup_time$)')
      AND j.fullkey NOT IN ('$.emulator.seed', '$.emulator.algorithm_profile', '$.emulator.dflash_version')
      AND NOT regexp_matches(j.fullkey, 'speculative|draft')
), settings AS (
    SELECT run_id, target, algorithm, draft_tokens, setting, string_agg(DISTINCT value, ' | ' ORDER BY value) AS value
    FROM leaves
    GROUP BY ALL
), pairs AS (
    SELECT b.run_id, b.target AS baseline_target, b.algorithm AS baseline_algorithm,
           b.draft_tokens AS baseline_draft_tokens, o.target, o.algorithm, o.draft_tokens
    FROM baseline_series b
    JOIN series o ON o.run_id = b.run_id
     AND NOT (o.target = b.target AND o.algorithm IS NOT DISTINCT FROM b.algorithm
              AND o.draft_tokens IS NOT DISTINCT FROM b.draft_tokens)
    WHERE EXISTS (SELECT 1 FROM settings x WHERE x.run_id = b.run_id AND x.target = b.target)
      AND EXISTS (SELECT 1 FROM settings x WHERE x.run_id = o.run_id AND x.target = o.target)
), sides AS (   -- each pair's two series, side 'b' (baseline) and 'o'
    SELECT p.*, 'b' AS side, p.baseline_target AS s_target, p.baseline_algorithm AS s_algorithm,
           p.baseline_draft_tokens AS s_draft_tokens FROM pairs p
    UNION ALL
    SELECT p.*, 'o', p.target, p.algorithm, p.draft_tokens FROM pairs p
), compared AS (
    SELECT sides.run_id, baseline_target, baseline_algorithm, sides.target, sides.algorithm, x.setting,
           any_value(x.value) FILTER (side = 'b') AS baseline_value,
           any_value(x.value) FILTER (side = 'o') AS value
    FROM sides
    JOIN settings x ON x.run_id = sides.run_id AND x.target = s_target
     AND x.algorithm IS NOT DISTINCT FROM s_algorithm AND x.draft_tokens IS NOT DISTINCT FROM s_draft_tokens
    GROUP BY sides.run_id, baseline_target, baseline_algorithm, baseline_draft_tokens, sides.target,
             sides.algorithm, sides.draft_tokens, x.setting
)
SELECT run_id, baseline_target, baseline_algorithm, target, algorithm, setting,
       coalesce(baseline_value, '(absent)') AS baseline_value, coalesce(value, '(absent)') AS value,
       round(pct_change(try_cast(value AS DOUBLE), try_cast(baseline_value AS DOUBLE)), 1) AS change_pct,
       (SELECT bool_or(s.emulated) FROM steps s WHERE s.run_id = compared.run_id
           AND s.target IN (compared.baseline_target, compared.target)) AS emulated,
       NULL::VARCHAR AS node, NULL::VARCHAR AS note
FROM compared
WHERE baseline_value IS DISTINCT FROM value
UNION ALL
SELECT run_id, peers, NULL, targets, NULL, setting, peer_value, value, change_pct,
       emulated, unit, note
FROM gpu_confounders
ORDER BY run_id, node NULLS FIRST, baseline_target, target, algorithm, setting;
