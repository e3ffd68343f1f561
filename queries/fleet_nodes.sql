-- fleet_nodes: every node against the fleet median, per configuration and concurrency.
--
-- A fleet run names its targets <node>.<configuration> (loadgen.config.fleet); `configuration` is that suffix
-- (the whole target name for other runs). Per node, configuration and load level, over its repeats:
--   tok_s, accept_len    medians over repeats of the step's aggregate tok/s and acceptance length
--                        (throughput_by_concurrency / acceptance_by_concurrency definitions)
--   peers                nodes of the same run and configuration running the same algorithm and draft
--                        tokens at the same load level (the node itself included)
--   fleet_tok_s, fleet_accept_len   median of those peers
--   tok_s_vs_fleet_pct   100 (tok_s / fleet_tok_s - 1); accept_len_vs_fleet_pct likewise
--   outlier              TRUE when tok/s or acceptance is more than `outlier_pct` (default 15) % off the
--                        fleet median; NULL with fewer than 3 peers (two nodes cannot say which one is off)
--   tok_s_vs_twin_pct    100 (tok_s / its own twin's tok/s - 1), for a target that watches its twin
--                        (`watch_twin`, views.sql twin_drift); twin_band_pct: the twin's tok/s band
--   drift                TRUE when tok/s or TPOT p50 is off the node's own twin by more than the twin's band;
--                        NULL for a target without a twin (docs/twin.md)
-- Measured runs only: a twin's prediction of the nodes (a watched run's check) is in twin_drift, not a fleet.
SELECT l.run_id, c.configuration, c.node, l.target, l.algorithm, l.draft_tokens, l.concurrency, l.rate,
       l.repeats, round(l.tok_s, 2) AS tok_s, round(l.accept_len, 3) AS accept_len,
       p.peers, round(p.fleet_tok_s, 2) AS fleet_tok_s, round(p.fleet_accept_len, 3) AS fleet_accept_len,
       round(pct_change(l.tok_s, p.fleet_tok_s), 1) AS tok_s_vs_fleet_pct,
       round(pct_change(l.accept_len, p.fleet_accept_len), 1) AS accept_len_vs_fleet_pct,
       CASE WHEN p.peers < 3 THEN NULL
            ELSE abs(pct_change(l.tok_s, p.fleet_tok_s)) > coalesce(getvariable('outlier_pct'), 15)
                 OR coalesce(abs(pct_change(l.accept_len, p.fleet_accept_len))
                             > coalesce(getvariable('outlier_pct'), 15), FALSE) END AS outlier,
       round(d.tok_s_off_pct, 1) AS tok_s_vs_twin_pct, round(d.tok_s_band_pct, 1) AS twin_band_pct, d.drift,
       l.emulated
FROM level_results l
JOIN fleet_targets c USING (run_id, target)
LEFT JOIN (SELECT run_id, target, concurrency, bool_or(drift) AS drift,
                  any_value(off_pct) FILTER (metric = 'tok_s') AS tok_s_off_pct,
                  any_value(band_pct) FILTER (metric = 'tok_s') AS tok_s_band_pct
           FROM twin_drift GROUP BY ALL) d
  ON d.run_id = l.run_id AND d.target = l.target AND d.concurrency = l.concurrency AND l.rate IS NULL
JOIN (SELECT l.run_id, c.configuration, l.algorithm, l.draft_tokens, l.concurrency, l.rate,
             count(*) AS peers, median(l.tok_s) AS fleet_tok_s, median(l.accept_len) AS fleet_accept_len
      FROM level_results l JOIN fleet_targets c USING (run_id, target)
      WHERE NOT l.predicted
      GROUP BY ALL) p
  ON p.run_id = l.run_id AND p.configuration = c.configuration
 AND p.algorithm IS NOT DISTINCT FROM l.algorithm AND p.draft_tokens IS NOT DISTINCT FROM l.draft_tokens
 AND p.concurrency IS NOT DISTINCT FROM l.concurrency AND p.rate IS NOT DISTINCT FROM l.rate
WHERE NOT l.predicted
ORDER BY l.run_id, c.configuration, l.concurrency, l.rate, c.node;
