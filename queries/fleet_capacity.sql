-- fleet_capacity: what the whole fleet serves, per configuration and concurrency (C per node).
--
--   nodes          nodes that ran the configuration at this level
--   fleet_tok_s    sum over nodes of each node's median tok/s over repeats (fleet_nodes' tok_s): the
--                  fleet's aggregate output throughput at C streams per node
--   node_tok_s_min / _max   the slowest and fastest node
--   accept_len     median over nodes of their median acceptance length
--   together       TRUE when the nodes were driven in the same steps (load.schedule = "together": a true
--                  fleet capacity); FALSE when one at a time (the sum of isolated nodes: an upper bound)
SELECT l.run_id, c.configuration, l.concurrency, l.rate,
       count(*) AS nodes,
       round(sum(l.tok_s), 2) AS fleet_tok_s,
       round(min(l.tok_s), 2) AS node_tok_s_min, round(max(l.tok_s), 2) AS node_tok_s_max,
       round(median(l.accept_len), 3) AS accept_len,
       bool_and(t.shared) AS together,
       bool_or(l.emulated) AS emulated
FROM level_results l
JOIN fleet_targets c USING (run_id, target)
JOIN (SELECT run_id, target, bool_and(n > 1) AS shared
      FROM (SELECT run_id, step_id, target, count(*) OVER (PARTITION BY run_id, step_id) AS n FROM steps)
      GROUP BY run_id, target) t USING (run_id, target)
WHERE NOT l.predicted   -- measured runs only (a watched run's twin check is in twin_drift)
GROUP BY l.run_id, c.configuration, l.concurrency, l.rate
ORDER BY l.run_id, c.configuration, l.concurrency, l.rate;
