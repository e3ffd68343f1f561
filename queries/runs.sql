-- runs: the runs in the folder with a summary of what each ran (from its steps).
--
--   series        target=algorithm/draft_tokens of each series, in experiment order
--   concurrency   the distinct concurrency levels (rates for open-loop steps)
--   repeats       repeats per level (max repeat + 1); window_s = the median measurement window
--   duration_s    finished_at - started_at (NULL while running)
WITH st AS (
    SELECT run_id, count(*) AS steps,
           list(DISTINCT concurrency ORDER BY concurrency) FILTER (concurrency IS NOT NULL) AS concurrency,
           list(DISTINCT rate ORDER BY rate) FILTER (rate IS NOT NULL) AS rate,
           max("repeat") + 1 AS repeats, median(window_s) AS window_s, bool_or(emulated) AS emulated,
           bool_or(predicted) AS predicted
    FROM step_info GROUP BY run_id
), se AS (
    SELECT run_id, string_agg(target || '=' || coalesce(algorithm, '?') || coalesce('/' || draft_tokens, ''),
                              ', ' ORDER BY series_rank) AS series
    FROM series GROUP BY run_id
)
SELECT r.run_id, r.name, r.status, make_timestamp(r.started_at_ns // 1000) AS started_at,
       round((r.finished_at_ns - r.started_at_ns) / 1e9, 1) AS duration_s,
       coalesce(st.steps, 0) AS steps, se.series, st.concurrency, st.rate, st.repeats,
       round(st.window_s, 1) AS window_s,
       r.loadgen_version, r.git_commit, r.schema_version,
       st.emulated, st.predicted
FROM runs r
LEFT JOIN st USING (run_id)
LEFT JOIN se USING (run_id)
ORDER BY r.started_at_ns, r.run_id;
