-- capacity: the highest load level each target serves at the SLO, with its interval, for a grid or a search.
--
-- Per run and target (one server + draft configuration on one node), from the SLO verdict of each load level
-- (concurrency, or rate in open loop), pooled over the level's runs (views.sql `level_slo`; see goodput.sql):
--   capacity       the highest passing level below the lowest failing one (NULL: even the lowest level failed)
--   capacity_low   the highest level below the lowest failing one whose pass was clear (its attainment
--                  interval above the SLO's)
--   capacity_high  the highest probed level below the lowest clear fail (NULL: no level failed, so the
--                  capacity is at least `capacity`). "capacity 12 (11-13)": 11 passed clearly, 12 passed,
--                  13 might pass, the next level up failed clearly.
--   first_fail     the lowest failing level
--   tok_s, accept_len  at the capacity level: median aggregate output tok/s and acceptance length over its runs
--   user_tok_s     at the capacity level: median per-request decode rate (1 / TPOT) of measured ok requests
--   levels_probed, steps, step_s  what the answer cost: levels run, steps, and their seconds (start to end)
--   note           every level failed / no level failed / levels whose call stayed unclear / its GPU ran slow,
--                  throttled or on other hardware than its peers' (views.sql `gpu_confounders`: its numbers
--                  are not comparable)
-- Fleet runs (targets named <node>.<configuration>, views.sql `fleet_targets`) also get a row per
-- configuration with node '(fleet)': the sum of its nodes' capacities (and intervals) at the same SLO.
WITH l AS MATERIALIZED (SELECT * FROM level_slo WHERE verdict IS NOT NULL),
bounds AS (
    SELECT run_id, target,
           min(level) FILTER (verdict = 'fail') AS first_fail,
           min(level) FILTER (verdict = 'fail' AND clear) AS first_clear_fail
    FROM l GROUP BY run_id, target
),
answer AS (
    SELECT l.run_id, l.target, any_value(l.node) AS node, any_value(l.algorithm) AS algorithm,
           any_value(l.draft_tokens) AS draft_tokens, any_value(l.mode) AS mode,
           max(l.level) FILTER (l.verdict = 'pass' AND l.level < coalesce(b.first_fail, 'inf')) AS capacity,
           max(l.level) FILTER (l.verdict = 'pass' AND l.clear AND l.level < coalesce(b.first_fail, 'inf'))
               AS capacity_low,
           if(b.first_fail IS NULL, NULL, max(l.level) FILTER (l.level < coalesce(b.first_clear_fail, 'inf')))
               AS capacity_high,
           b.first_fail,
           list(l.level ORDER BY l.level) FILTER (NOT l.clear) AS unclear_levels,
           min(l.level) AS lowest, max(l.level) AS highest,
           count(*) AS levels_probed, sum(l.steps) AS steps, sum(l.step_s) AS step_s,
           bool_or(l.emulated) AS emulated, bool_or(l.predicted) AS predicted
    FROM l JOIN bounds b USING (run_id, target)
    GROUP BY l.run_id, l.target, b.first_fail, b.first_clear_fail
),
per_target AS (
    SELECT a.run_id, a.target, a.node, a.algorithm, a.draft_tokens, a.mode,
           a.capacity, a.capacity_low, a.capacity_high, a.first_fail,
           r.tok_s, u.user_tok_s, r.accept_len,
           a.levels_probed, a.steps, a.step_s,
           concat_ws('; ',
               CASE WHEN a.capacity IS NULL THEN 'every level failed: the capacity is below ' || printf('%g', a.lowest) END,
               CASE WHEN a.first_fail IS NULL THEN 'no level failed: the capacity is at least ' || printf('%g', a.highest) END,
               CASE WHEN len(a.unclear_levels) > 0 THEN 'unclear at '
                    || array_to_string(list_transform(a.unclear_levels, lambda x: printf('%g', x)), ', ')
                    || ' (decided on the point estimate)' END,
               g.note) AS note,
           a.emulated, a.predicted
    FROM answer a
    LEFT JOIN (SELECT run_id, target, string_agg(note, '; ' ORDER BY setting) AS note
               FROM (SELECT run_id, unnest(string_split(targets, ', ')) AS target, setting, note FROM gpu_confounders)
               GROUP BY run_id, target) g ON g.run_id = a.run_id AND g.target = a.target
    LEFT JOIN level_results r ON r.run_id = a.run_id AND r.target = a.target
                             AND coalesce(r.rate, r.concurrency) = a.capacity
    LEFT JOIN level_user_rate u ON u.run_id = a.run_id AND u.target = a.target AND u.level = a.capacity
),
fleet AS (
    SELECT p.run_id, f.configuration AS target, '(fleet)' AS node, any_value(p.algorithm) AS algorithm,
           any_value(p.draft_tokens) AS draft_tokens, any_value(p.mode) AS mode,
           sum(p.capacity) AS capacity, sum(p.capacity_low) AS capacity_low,
           if(bool_or(p.capacity_high IS NULL), NULL, sum(p.capacity_high)) AS capacity_high, NULL AS first_fail,
           sum(p.tok_s) AS tok_s, median(p.user_tok_s) AS user_tok_s, median(p.accept_len) AS accept_len,
           sum(p.levels_probed) AS levels_probed, sum(p.steps) AS steps, sum(p.step_s) AS step_s,
           count(*) || ' nodes' AS note, bool_or(p.emulated) AS emulated,
           bool_or(p.predicted) AS predicted
    FROM per_target p JOIN fleet_targets f USING (run_id, target)
    WHERE f.configuration <> f.target
    GROUP BY p.run_id, f.configuration
    HAVING count(*) > 1
)
SELECT run_id, target, node, algorithm, draft_tokens, mode,
       capacity, capacity_low, capacity_high, first_fail,
       round(tok_s, 2) AS tok_s, round(user_tok_s, 2) AS user_tok_s, round(accept_len, 3) AS accept_len,
       levels_probed, steps, round(step_s, 1) AS step_s, nullif(note, '') AS note, emulated,
       predicted
FROM (FROM per_target UNION ALL BY NAME FROM fleet) c
ORDER BY run_id, node = '(fleet)',
         (SELECT min(target_index) FROM steps s WHERE s.run_id = c.run_id AND s.target = c.target), target;
