-- cost: what a million output tokens cost per series and load level, at the run's [cost] prices (currency-neutral).
--
-- The prices are the run's recorded config (runs.config): [cost] node_hour and energy_kwh, each overridden by a
-- target's own [targets.cost] key (0 where neither gives it); a run with no price has no rows. Per run, series
-- (target, algorithm, draft tokens) and load level, pooled over the level's repeats:
--   window_s        seconds of the steps' measurement windows: the node time the tokens took
--   tokens          output tokens of frames that arrived in the windows (energy's tokens: tok_s x window_s)
--   energy_j        joules the target's GPU(s) used over the windows (gpu_by_step's energy_j); NULL unless every
--                   step of the level has it
--   node_cost, energy_cost   window_s / 3600 x node_hour; energy_j / 3.6e6 x energy_kwh
--   cost_per_m_tokens        (node_cost + energy_cost) / tokens x 1e6 (loadgen.config.cost.Prices.per_million_tokens);
--                   NULL with no token, or when energy has a price but was not measured
WITH run_prices AS (
    SELECT run_id, config::JSON -> 'cost' AS cost, from_json(config::JSON -> 'targets', '["JSON"]') AS targets
    FROM runs
), own AS (
    SELECT run_id, t ->> 'name' AS target, t -> 'cost' AS cost
    FROM (SELECT run_id, unnest(targets) AS t FROM run_prices)
), prices AS (
    SELECT s.run_id, s.target,
           coalesce((o.cost ->> 'node_hour')::DOUBLE, (r.cost ->> 'node_hour')::DOUBLE, 0) AS node_hour,
           coalesce((o.cost ->> 'energy_kwh')::DOUBLE, (r.cost ->> 'energy_kwh')::DOUBLE, 0) AS energy_kwh
    FROM (SELECT DISTINCT run_id, target FROM step_info) s
    JOIN run_prices r USING (run_id)
    LEFT JOIN own o USING (run_id, target)
    WHERE r.cost IS NOT NULL OR o.cost IS NOT NULL
), levels AS (
    SELECT s.run_id, s.target, s.algorithm, s.draft_tokens, s.concurrency, s.rate, count(*) AS steps,
           sum(s.window_s) AS window_s, sum(t.tok_s * s.window_s) AS tokens,
           if(count(e.energy_j) = count(*), sum(e.energy_j), NULL) AS energy_j,
           bool_or(s.emulated) AS emulated, bool_or(s.predicted) AS predicted
    FROM step_info s
    JOIN step_throughput t USING (run_id, step_id, target)
    LEFT JOIN gpu_step_energy e USING (run_id, step_id, target)
    GROUP BY ALL
), priced AS (
    SELECT l.*, p.node_hour, p.energy_kwh,
           l.window_s / 3600 * p.node_hour AS node_cost, l.energy_j / 3.6e6 * p.energy_kwh AS energy_cost
    FROM levels l JOIN prices p USING (run_id, target)
)
SELECT run_id, target, algorithm, draft_tokens, concurrency, rate, steps, round(window_s, 3) AS window_s,
       round(tokens, 1) AS tokens, round(energy_j, 1) AS energy_j, node_hour, energy_kwh,
       round(node_cost, 6) AS node_cost, round(energy_cost, 6) AS energy_cost,
       round(CASE WHEN tokens <= 0 OR (energy_j IS NULL AND energy_kwh > 0) THEN NULL
                  ELSE (node_cost + coalesce(energy_cost, 0)) / tokens * 1e6 END, 4) AS cost_per_m_tokens,
       emulated, predicted
FROM priced
ORDER BY run_id, target, algorithm, draft_tokens, concurrency, rate;
