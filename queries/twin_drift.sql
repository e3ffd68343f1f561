-- twin_drift: each measured level of a target that watches its twin (`watch_twin`), against the twin's prediction
-- and band: drift names a node whose numbers fell off its own twin (docs/twin.md).
--
-- One row per checked level and metric (tok_s: the level's aggregate output tok/s; tpot_p50_ms: its TPOT p50; as
-- views.sql level_metrics):
--   predicted, measured   the twin's figure (in virtual time, under the run's own window and prompts) and the run's
--   off_pct               100 (measured / predicted - 1): the node against its own twin
--   band_pct              the twin's band: twice its leave-one-level-out error of the metric, at least 20%
--   drift                 |off_pct| > band_pct: the box or the server changed since the twin was fitted
--   twin_file, twin_source, twin_date   the twin it watches, what it was fitted from, and when
--   predicted_run         the prediction as a run (`loadgen query twin_error --set predicted_run=ID` pairs it)
SELECT run_id, target, node, concurrency, metric, round(predicted, 3) AS predicted, round(measured, 3) AS measured,
       round(off_pct, 1) AS off_pct, round(band_pct, 1) AS band_pct, drift, twin_date, twin_file, twin_source,
       predicted_run, measured_requests, emulated
FROM twin_drift
ORDER BY run_id, target, metric, concurrency;
