-- compare_runs: one run against another (before/after a server change), per series and load level.
--
-- run_a = SET VARIABLE run_a (default: the earliest selected run by started_at), run_b likewise (default:
-- the latest). Series are matched by their position in the experiment (series_rank: target order, then
-- first step), so a changed algorithm or draft budget on the same target still lines up. Medians over
-- repeats of accept_len (sum completion / sum verify) and aggregate tok/s (frames inside the window / s);
-- *_change_pct = 100 * (b / a - 1); signal as in compare_algorithms (ranges over repeats).
-- No rows: fewer than two runs selected, or no common load levels.
WITH pick AS (
    SELECT coalesce(getvariable('run_a'), (SELECT arg_min(run_id, started_at_ns) FROM runs)) AS run_a,
           coalesce(getvariable('run_b'), (SELECT arg_max(run_id, started_at_ns) FROM runs)) AS run_b
), l AS MATERIALIZED (
    SELECT * FROM level_results
)
SELECT a.run_id AS run_a, b.run_id AS run_b, a.series_rank AS series, a.concurrency, a.rate,
       a.target AS target_a, a.algorithm AS algorithm_a, a.draft_tokens AS draft_tokens_a,
       b.target AS target_b, b.algorithm AS algorithm_b, b.draft_tokens AS draft_tokens_b,
       round(a.accept_len, 3) AS accept_len_a, round(b.accept_len, 3) AS accept_len_b,
       round(pct_change(b.accept_len, a.accept_len), 1) AS accept_len_change_pct,
       round(a.tok_s, 2) AS tok_s_a, round(b.tok_s, 2) AS tok_s_b,
       round(pct_change(b.tok_s, a.tok_s), 1) AS tok_s_change_pct,
       a.repeats AS repeats_a, b.repeats AS repeats_b,
       outside_spread(b.tok_s_min, b.tok_s_max, b.repeats, a.tok_s_min, a.tok_s_max, a.repeats) AS signal,
       a.emulated OR b.emulated AS emulated
FROM pick
JOIN l a ON a.run_id = pick.run_a
JOIN l b ON b.run_id = pick.run_b AND b.series_rank = a.series_rank
        AND b.concurrency IS NOT DISTINCT FROM a.concurrency AND b.rate IS NOT DISTINCT FROM a.rate
WHERE pick.run_a <> pick.run_b
ORDER BY a.series_rank, a.concurrency, a.rate;
