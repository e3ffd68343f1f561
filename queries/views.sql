-- views.sql: the views every query in queries/ reads. Run it first.
--
-- Inputs (DuckDB variables, set before `.read queries/views.sql`):
--   results  (VARCHAR, required)   the results folder: <results>/<table>/run_id=<id>/part-*.parquet
--   run_ids  (VARCHAR[], optional) keep only these runs; unset or NULL = every run in the folder
--   baseline (VARCHAR, optional)   the comparison baseline, by target name or algorithm; unset = the
--                                   series of the lowest target_index (the experiment file's first target)
--
--   duckdb -c "SET VARIABLE results='results'" -c ".read queries/views.sql" -c ".read queries/compare_algorithms.sql"
--
-- Every file holds run_id as a column, so hive partitioning is off (the path would only repeat it) and a
-- run filter prunes whole files through Parquet statistics. Every table has at least one schema-only file
-- per run, so no glob below is ever empty.
--
-- Shared conventions of the derived views:
--   * A step is one (run_id, step_id, target) row of `steps`; its measurement window is
--     [t_measure_start_ns, t_measure_end_ns) and window_s is its length in seconds.
--   * Request-level metrics use only requests with phase 'measure' (sent inside the window); latency and
--     acceptance additionally only status 'ok'. Throughput counts frames by arrival time instead.
--   * A series is what a comparison compares: one (target, algorithm, draft_tokens) within a run.
--   * `emulated` travels with every row that carries numbers: the emulator's numbers are a model; so does
--     `predicted`: a twin's prediction in virtual time (docs/twin.md), never a measurement.

-- 100 * (new / old - 1): the % change every comparison reports.
CREATE OR REPLACE MACRO pct_change(new, old) AS 100 * (new / old - 1);

-- Is a difference a signal? NULL when neither side has 2+ repeats (the spread is unknown); TRUE only when
-- the [min, max] ranges over repeats do not overlap (every repeat of one side beats every repeat of the
-- other); FALSE when the difference is inside the spread.
CREATE OR REPLACE MACRO outside_spread(a_min, a_max, a_n, b_min, b_max, b_n) AS
    CASE WHEN greatest(a_n, b_n) < 2 THEN NULL ELSE a_min > b_max OR a_max < b_min END;

-- Every table's files, limited to the selected runs. by_name: match columns by name across files, for a table
-- whose columns changed between schema versions (DuckDB otherwise takes the first file's columns and silently
-- drops later ones); it costs the big tables ~4x, so only those that changed use it.
CREATE OR REPLACE MACRO results_table(name, by_name := false) AS TABLE
SELECT * FROM read_parquet(getvariable('results') || '/' || name || '/run_id=*/*.parquet', union_by_name = by_name)
WHERE getvariable('run_ids') IS NULL OR list_contains(getvariable('run_ids'), run_id);

-- A run writes its row twice: status 'running' at the start, the final status at the end (a driver killed
-- with SIGKILL leaves only the first); a resume (--resume) writes it again. The view keeps the newest row of
-- each run (written_at_ns; older files have none: their final row, else the running one).
-- Schema 3 added runs.slo and steps.probe, schema 4 runs.config_hash, superseded_steps and written_at_ns:
-- NULL in rows of older files.
CREATE OR REPLACE VIEW runs AS
FROM (FROM results_table('runs', by_name := true)
      UNION ALL BY NAME SELECT NULL::VARCHAR AS slo, NULL::VARCHAR AS config_hash,
                               NULL::INTEGER[] AS superseded_steps, NULL::BIGINT AS written_at_ns WHERE false)
QUALIFY row_number() OVER (PARTITION BY run_id ORDER BY coalesce(written_at_ns, finished_at_ns) DESC NULLS LAST) = 1;

-- A resumed run is one run: the steps that had not completed when its driver stopped (and a step the driver
-- died in, which has rows but no steps row) were run again after the resume, under new step ids. The resume
-- lists the old ids in runs.superseded_steps, and every view below leaves their rows out (the files keep them).
CREATE OR REPLACE VIEW superseded_steps AS
SELECT run_id, unnest(superseded_steps) AS step_id FROM runs WHERE superseded_steps IS NOT NULL;

-- The same as a list read once, here: NULL when no run was resumed (the usual case), and then the filter
-- below folds away at planning (an anti join on the 10M-row tables cost up to 2x even when empty).
SET VARIABLE superseded = (SELECT list({'run_id': run_id, 'step_id': step_id}) FROM superseded_steps);
CREATE OR REPLACE MACRO kept(run_id, step_id) AS
    getvariable('superseded') IS NULL
    OR NOT list_contains(getvariable('superseded'), {'run_id': run_id, 'step_id': step_id});

-- Schema 6 added steps.hardware (the node and GPU serving the target), speedup (trace replay), ramp,
-- level_start and level_end (a ramp's windows): NULL in rows of older files; and steps.predicted (a twin's
-- prediction, docs/twin.md): false in rows of older files.
CREATE OR REPLACE VIEW steps AS
SELECT * REPLACE (coalesce(predicted, false) AS predicted)
FROM (FROM results_table('steps', by_name := true)
      UNION ALL BY NAME SELECT NULL::VARCHAR AS probe, NULL::VARCHAR AS hardware, NULL::DOUBLE AS speedup,
                               NULL::VARCHAR AS ramp, NULL::DOUBLE AS level_start, NULL::DOUBLE AS level_end,
                               NULL::BOOLEAN AS predicted
                        WHERE false)
WHERE kept(run_id, step_id);

-- Schema 5 added requests.prompt_tokens_target; schema 6 resent, session_id, turn, shared_prefix and
-- completion_tokens_target; schema 7 t_first_answer_ns, reasoning_tokens, reasoning_from and turn_kind; schema 9
-- server_ttft_s (NULL in older files).
-- Read by name only when the folder mixes schema versions (analysis sets mixed_schemas): by position a newer file
-- first fails, an older first drops it.
CREATE OR REPLACE VIEW requests AS
FROM (FROM results_table('requests', by_name := coalesce(getvariable('mixed_schemas'), false))
      UNION ALL BY NAME SELECT NULL::BIGINT AS prompt_tokens_target, NULL::BOOLEAN AS resent,
                               NULL::VARCHAR AS session_id, NULL::INTEGER AS turn, NULL::VARCHAR AS shared_prefix,
                               NULL::BIGINT AS completion_tokens_target, NULL::BIGINT AS t_first_answer_ns,
                               NULL::BIGINT AS reasoning_tokens, NULL::VARCHAR AS reasoning_from,
                               NULL::VARCHAR AS turn_kind, NULL::DOUBLE AS server_ttft_s WHERE false)
WHERE kept(run_id, step_id);

CREATE OR REPLACE VIEW frames AS FROM results_table('frames') WHERE kept(run_id, step_id);

CREATE OR REPLACE VIEW server_samples AS FROM results_table('server_samples') WHERE kept(run_id, step_id);

-- Schema 2 added read_delay_max_ms: NULL in rows of older files (and present even when all files are older).
CREATE OR REPLACE VIEW client_samples AS
FROM (FROM results_table('client_samples', by_name := true)
      UNION ALL BY NAME SELECT NULL::DOUBLE AS read_delay_max_ms WHERE false)
WHERE kept(run_id, step_id);

-- A table that runs of older schemas never wrote: a folder of only such runs has no files of it, and read_parquet
-- refuses a glob that matches nothing; the table is then `empty`, a query of no rows with the same columns
-- (`files`: how many it has; query() takes the SQL chosen when views.sql is read).
CREATE OR REPLACE MACRO optional_table(name, files, empty) AS TABLE
FROM query(if(files > 0, 'FROM results_table(''' || name || ''')', empty));

-- GPU telemetry (schema 6; docs/telemetry.md)
SET VARIABLE gpu_sample_files = (SELECT count(*) FROM glob(getvariable('results') || '/gpu_samples/run_id=*/*.parquet'));
CREATE OR REPLACE VIEW gpu_samples AS
FROM optional_table('gpu_samples', getvariable('gpu_sample_files'),
    'SELECT NULL::VARCHAR AS run_id, NULL::INTEGER AS step_id, NULL::VARCHAR AS target, NULL::VARCHAR AS node,
            NULL::BIGINT AS t_ns, NULL::VARCHAR AS moment, NULL::VARCHAR AS source, NULL::VARCHAR AS gpu,
            NULL::VARCHAR AS gpu_uuid, NULL::DOUBLE AS power_w, NULL::DOUBLE AS energy_j,
            NULL::DOUBLE AS sm_clock_mhz, NULL::DOUBLE AS sm_clock_max_mhz, NULL::DOUBLE AS temperature_c,
            NULL::DOUBLE AS utilization_pct, NULL::DOUBLE AS memory_used_gb, NULL::VARCHAR AS memory_source,
            NULL::BIGINT AS clock_reasons_mask, NULL::VARCHAR[] AS clock_reasons,
            NULL::DOUBLE AS power_violation_s, NULL::DOUBLE AS thermal_violation_s WHERE false')
WHERE kept(run_id, step_id);

-- One row per step with the columns every result row is labelled with.
CREATE OR REPLACE VIEW step_info AS
SELECT run_id, step_id, target, target_index, node, emulated, predicted, algorithm, draft_tokens, mode,
       concurrency, rate, "repeat", status AS step_status, t_measure_start_ns, t_measure_end_ns,
       (t_measure_end_ns - t_measure_start_ns) / 1e9 AS window_s,
       coalesce(rate, concurrency) AS level, probe, (t_end_ns - t_start_ns) / 1e9 AS step_s, speedup
FROM steps;

-- Series of a run, ranked by first appearance (lowest target_index, then first step): rank 1 is the default
-- baseline, and the rank matches series across runs of the same experiment file (compare_runs).
CREATE OR REPLACE VIEW series AS
SELECT run_id, target, algorithm, draft_tokens,
       row_number() OVER (PARTITION BY run_id ORDER BY min(target_index), min(step_id), target) AS series_rank,
       bool_or(emulated) AS emulated, bool_or(predicted) AS predicted
FROM step_info
GROUP BY run_id, target, algorithm, draft_tokens;

CREATE OR REPLACE VIEW baseline_series AS
SELECT run_id, target, algorithm, draft_tokens FROM series
WHERE CASE WHEN getvariable('baseline') IS NULL THEN series_rank = 1
           ELSE getvariable('baseline') IN (target, algorithm) END;

-- Measured requests (phase 'measure') with their per-request metrics. NULL where undefined: TPOT needs at
-- least 2 tokens and a known completion_tokens, acceptance needs spec_verify_ct > 0. The same prompt_id at the
-- same level of two series is a pair (paired.sql; the draft-budget campaign's lead, loadgen/twin/crossover.py).
CREATE OR REPLACE VIEW measured AS
SELECT s.run_id, s.step_id, s.target, r.request_id, r.t_scheduled_ns, r.prompt_id, r.prompt_kind, r.status,
       r.completion_tokens, r.spec_verify_ct, r.spec_accept_length, r.session_id, r.turn, r.shared_prefix,
       r.prompt_tokens, r.cached_tokens,
       (r.t_first_token_ns - r.t_sent_ns) / 1e6 AS ttft_ms,
       (r.t_done_ns - r.t_sent_ns) / 1e6 AS e2e_ms,
       CASE WHEN r.completion_tokens > 1
            THEN (r.t_last_token_ns - r.t_first_token_ns) / 1e6 / (r.completion_tokens - 1) END AS tpot_ms,
       CASE WHEN r.completion_tokens > 1
            THEN 1e9 * (r.completion_tokens - 1) / (r.t_last_token_ns - r.t_first_token_ns) END AS decode_tok_s,
       CASE WHEN r.spec_verify_ct > 0 THEN r.completion_tokens / r.spec_verify_ct END AS accept_len
FROM requests r
JOIN step_info s USING (run_id, step_id, target)
WHERE r.phase = 'measure';

-- Each step's number, an integer: frame-level aggregates group by it instead of the (run_id, step_id, target)
-- strings (2x faster at 10M frames) and join the names back afterwards.
CREATE OR REPLACE VIEW step_numbers AS
SELECT run_id, step_id, target, dense_rank() OVER (ORDER BY run_id, step_id, target) AS step_no FROM step_info;

-- Frames of measured ok requests with the gap to the request's previous output frame (NULL for the first),
-- and its step's step_no.
-- The window sorts only integers (a request number, seq, t_ns): 3x faster than partitioning by the strings
-- and carrying them through the sort. MATERIALIZED keeps one numbering for both uses of m.
CREATE OR REPLACE VIEW measured_frames AS
WITH m AS MATERIALIZED (
    SELECT run_id, step_id, target, request_id, prompt_kind, row_number() OVER () AS request_no, n.step_no
    FROM measured JOIN step_numbers n USING (run_id, step_id, target) WHERE status = 'ok'
), g AS (
    SELECT m.request_no, f.seq, f.tokens, f.cum_tokens,
           f.t_ns - lag(f.t_ns) OVER (PARTITION BY m.request_no ORDER BY f.seq) AS gap_ns
    FROM frames f JOIN m USING (run_id, request_id)
)
SELECT m.run_id, m.step_id, m.target, m.step_no, m.request_id, m.prompt_kind, g.seq, g.tokens, g.cum_tokens,
       g.gap_ns
FROM g JOIN m USING (request_no);

-- Per-step acceptance, for all prompt kinds ('(all)') and per kind. Over measured ok requests:
--   accept_len       sum(completion_tokens) / sum(spec_verify_ct), requests with spec_verify_ct > 0 and
--                    completion_tokens known (SGLang's definition, bonus token included)
--   accept_len_mean  mean of per-request completion_tokens / spec_verify_ct
--   tokens_per_frame sum(frame tokens) / frames with known tokens (client-side proxy; exact only when the
--                    server streams every verify step)
--   server_final     mean of the final frame's spec_accept_length (the server's per-request figure)
CREATE OR REPLACE VIEW step_acceptance AS
WITH per_request AS (
    SELECT run_id, request_id, sum(tokens) AS frame_tokens, count(tokens) AS frames_with_tokens
    FROM measured_frames GROUP BY run_id, request_id
), ok AS (
    SELECT m.*, p.frame_tokens, p.frames_with_tokens,
           m.spec_verify_ct > 0 AND m.completion_tokens IS NOT NULL AS has_spec
    FROM measured m LEFT JOIN per_request p USING (run_id, request_id)
    WHERE m.status = 'ok'
)
SELECT run_id, step_id, target,
       if(grouping(prompt_kind) = 1, '(all)', coalesce(prompt_kind, '(unknown)')) AS prompt_kind,
       count(*) AS ok_requests,
       count(*) FILTER (has_spec) AS spec_requests,
       sum(completion_tokens) FILTER (has_spec) / sum(spec_verify_ct) FILTER (has_spec) AS accept_len,
       avg(accept_len) FILTER (has_spec) AS accept_len_mean,
       sum(frame_tokens) / nullif(sum(frames_with_tokens), 0) AS tokens_per_frame,
       avg(spec_accept_length) AS server_final
FROM ok
GROUP BY GROUPING SETS ((run_id, step_id, target), (run_id, step_id, target, prompt_kind));

-- The server's /get_server_info avg_spec_accept_length sampled right after the step (the cache, and with it
-- the counter, was flushed right before the step, so this is the step's mean including warm-up and drain).
CREATE OR REPLACE VIEW server_info_acceptance AS
SELECT run_id, step_id, target, arg_max(value, t_ns) AS server_info_after
FROM server_samples
WHERE name = 'avg_spec_accept_length' AND json_extract_string(labels, '$.when') = 'after'
GROUP BY run_id, step_id, target;

-- Output tokens of frames that arrived inside the step's window, of any request in any phase and status,
-- and of ok requests only. A frame counts for the step it is filed under (frames.step_id): its request's, except
-- in a ramp, whose windows are steps of one continuous load: there a frame is filed under the window it arrived
-- in, whichever window its request was sent in. A frame's tokens come from one of three methods (token_method):
--   'server'  the server's own per-frame count (SGLang meta_info, OpenAI continuous usage): exact;
--   'spread'  the server gave a request's total only (OpenAI usage at the end: llama.cpp, vLLM without
--             continuous_usage_stats): what its frames did not count is spread evenly over its uncounted frames
--             (fractional tokens; exact for the whole request, approximate inside a window);
--   'per_event' neither, but the server is known to stream one token per event (steps.server_info's server
--             'llama.cpp': one chunk per token, tools/server/server-context.cpp process_token): 1 per frame.
-- A frame none of these covers stays unknown (NULL): frames_unknown counts them, and tokens is then NULL, not 0.
CREATE OR REPLACE VIEW window_tokens AS
WITH one_per_event AS (   -- steps of a server known to stream one token per event (llama.cpp), parsed once
    SELECT run_id, step_id, target, json_extract_string(server_info, '$.server') = 'llama.cpp' AS yes
    FROM steps
), uncounted AS (         -- only requests with a frame of unknown tokens: what their other frames said
    SELECT f.run_id, f.request_id, count(*) - count(f.tokens) AS unknown_frames, sum(f.tokens) AS known_tokens
    FROM frames f
    SEMI JOIN (SELECT DISTINCT run_id, request_id FROM frames WHERE tokens IS NULL) x USING (run_id, request_id)
    GROUP BY f.run_id, f.request_id
), framed AS (            -- method: 1 server, 2 spread, 3 per_event, NULL unknown
    SELECT f.run_id, f.t_ns, f.step_id, r.target, r.status, f.tokens::DOUBLE AS tokens, 1 AS method
    FROM frames f JOIN requests r USING (run_id, request_id)
    WHERE f.tokens IS NOT NULL
    UNION ALL   -- frames the server gave no count for: the few, so the counted ones take the short path above
    SELECT f.run_id, f.t_ns, f.step_id, r.target, r.status,
           CASE WHEN r.completion_tokens IS NOT NULL
                    THEN greatest(r.completion_tokens - coalesce(u.known_tokens, 0), 0) / u.unknown_frames
                WHEN e.yes THEN 1.0 END,
           CASE WHEN r.completion_tokens IS NOT NULL THEN 2 WHEN e.yes THEN 3 END
    FROM frames f
    JOIN requests r USING (run_id, request_id)
    LEFT JOIN uncounted u USING (run_id, request_id)
    JOIN one_per_event e ON e.run_id = r.run_id AND e.step_id = r.step_id AND e.target = r.target
    WHERE f.tokens IS NULL
)
SELECT s.run_id, s.step_id, s.target,
       count(*) AS frames,
       count(*) - count(f.tokens) AS frames_unknown,
       if(count(*) = count(f.tokens), sum(f.tokens), NULL) AS tokens,
       if(count(*) FILTER (f.status = 'ok') = count(f.tokens) FILTER (f.status = 'ok'),
          coalesce(sum(f.tokens) FILTER (f.status = 'ok'), 0), NULL) AS tokens_ok,
       nullif(concat_ws('+', if(bool_or(f.method = 3), 'per_event', NULL), if(bool_or(f.method = 1), 'server', NULL),
                        if(bool_or(f.method = 2), 'spread', NULL)), '') AS token_method
FROM framed f
JOIN step_info s ON s.run_id = f.run_id AND s.step_id = f.step_id AND s.target = f.target
WHERE f.t_ns >= s.t_measure_start_ns AND f.t_ns < s.t_measure_end_ns
GROUP BY s.run_id, s.step_id, s.target;

-- Per-step throughput (token counts by window_tokens' methods; token_method names the one(s) used):
--   tok_s        window tokens (any request, any status) / window_s; 0 when no frame arrived in the window,
--                NULL when some frame's tokens cannot be known (frames_unknown_tokens > 0)
--   tok_s_ok     window tokens of ok requests / window_s; same rule for 0 and NULL
--   req_s        measured requests that finished ok / window_s
CREATE OR REPLACE VIEW step_throughput AS
SELECT s.run_id, s.step_id, s.target, s.window_s,
       coalesce(w.frames, 0) AS window_frames,
       coalesce(w.frames_unknown, 0) AS frames_unknown_tokens,
       if(coalesce(w.frames, 0) = 0, 0, w.tokens) / s.window_s AS tok_s,
       if(coalesce(w.frames, 0) = 0, 0, w.tokens_ok) / s.window_s AS tok_s_ok,
       coalesce(c.n, 0) / s.window_s AS req_s,
       w.token_method
FROM step_info s
LEFT JOIN window_tokens w USING (run_id, step_id, target)
LEFT JOIN (SELECT run_id, step_id, target, count(*) AS n FROM measured WHERE status = 'ok'
           GROUP BY run_id, step_id, target) c USING (run_id, step_id, target);

-- Summary of a sample: n, mean, q = quantile_cont at [0.5, 0.9, 0.99] (linear interpolation), max.
CREATE OR REPLACE MACRO sample_stats(x) AS
    {'n': count(x), 'mean': avg(x), 'q': quantile_cont(x, [0.5, 0.9, 0.99]), 'max': max(x)};

-- Aggregates over the requests where `ok` holds: the share of their prompt served from the prefix cache (100 x
-- cached / prompt tokens, over those reporting both; NULL when none reports a cached count), and their acceptance
-- length (output tokens / verify passes, over those with a pass counted).
CREATE OR REPLACE MACRO cached_pct_of(cached, prompt, ok) AS
    round(100 * sum(cached) FILTER (ok AND prompt IS NOT NULL)
          / nullif(sum(prompt) FILTER (ok AND cached IS NOT NULL), 0), 1);
CREATE OR REPLACE MACRO accept_len_of(completion, verify_ct, ok) AS
    round(sum(completion) FILTER (ok AND verify_ct > 0) / nullif(sum(verify_ct) FILTER (ok AND verify_ct > 0), 0), 3);

-- quantile_cont's result from the sorted sample's values lo and hi at positions floor(h) and ceil(h),
-- h = (n - 1) * q: DuckDB's linear interpolation (its build fuses the multiply-add: the last bit may differ).
CREATE OR REPLACE MACRO interpolate(lo, hi, h) AS
    CASE WHEN floor(h) = ceil(h) THEN lo ELSE lo * (1 - (h - floor(h))) + hi * (h - floor(h)) END;

-- A bucket of a time in ms that keeps the order of times (a <= b gives ms_bucket(a) <= ms_bucket(b)), with 2-3
-- significant digits: 1 us wide below 1 ms, 10 us below 10 ms, 0.1 ms below 100 ms, 1 ms below 1 s, then 10 ms.
-- Each range maps above the range before it (even where a product rounds up), so the order holds across them.
CREATE OR REPLACE MACRO ms_bucket(v) AS CASE
    WHEN v < 1 THEN floor(v * 1000) WHEN v < 10 THEN 1000 + floor(v * 100)
    WHEN v < 100 THEN 2000 + floor(v * 10) WHEN v < 1000 THEN 3000 + floor(v)
    ELSE 4000 + least(floor(v / 10), 1e9) END;

-- Latency percentiles per step, one row per metric, in ms (decode_tok_s in tokens/s):
--   ttft_ms       t_first_token_ns - t_sent_ns                  measured ok requests
--   tpot_ms       (t_last - t_first) / (completion_tokens - 1)  measured ok requests, >= 2 tokens
--   decode_tok_s  1 / TPOT in tokens/s                           same requests
--   e2e_ms        t_done_ns - t_sent_ns                          measured ok requests
--   itl_ms        token-weighted ITL: each output frame after the first gives one sample per token it
--                 carries, its gap to the previous frame / its tokens (SGLang bench_serving's ITL; the mean
--                 is the token-weighted TPOT)            frames of measured ok requests, tokens known and > 0
--   itl_frame_ms  gap between consecutive output frames, one sample per frame (vLLM bench serve's ITL: one
--                 sample per streamed chunk)              frames of measured ok requests
-- Aggregated wide (one pass per source) and unpivoted afterwards: 10x faster than a long sample table.
-- itl_ms's samples are not made (a frame's value repeated `tokens` times: 3x the rows, and 2x the time of the
-- whole query at 10M frames). A frame is one value v = gap / tokens of weight w = tokens: n = sum(w),
-- mean = sum(gap) / n, max = max(v), and the percentiles are quantile_cont's over the samples: the sample at
-- sorted position p (0-based) is the v of the frame whose weight, after the weight of the frames before it in
-- v order, covers p. Sorting every frame by v costs more than the expansion, so each step's frames are first
-- weighed per ms_bucket(v): the buckets that hold the wanted positions hold few frames, and only those are
-- sorted. tests/unit/test_queries_itl.py compares the result with the expanded samples.
CREATE OR REPLACE VIEW step_latency AS
WITH f AS MATERIALIZED (   -- frames after a request's first; v and b NULL when tokens are unknown or 0
    SELECT step_no, gap_ms, tokens, v, ms_bucket(v) AS b
    FROM (SELECT step_no, gap_ns / 1e6 AS gap_ms, tokens, if(tokens > 0, gap_ns / 1e6 / tokens, NULL) AS v
          FROM measured_frames WHERE gap_ns IS NOT NULL)
), per_step AS (
    SELECT step_no, sample_stats(gap_ms) AS itl_frame_ms,
           sum(tokens) FILTER (tokens > 0)::BIGINT AS n, sum(gap_ms) FILTER (tokens > 0) AS gap_sum, max(v) AS max
    FROM f GROUP BY step_no
), positions AS (          -- the sorted positions each percentile reads: floor(h) and ceil(h)
    SELECT step_no, q, h, unnest([floor(h), ceil(h)]) AS p, unnest(['lo', 'hi']) AS side
    FROM (SELECT step_no, q, (n - 1) * q AS h
          FROM (SELECT step_no, n, unnest([0.5, 0.9, 0.99]::DOUBLE[]) AS q FROM per_step WHERE n > 0))
), buckets AS (            -- each bucket's weight and the weight of the buckets below it
    SELECT *, sum(w) OVER (PARTITION BY step_no ORDER BY b ROWS UNBOUNDED PRECEDING) - w AS below
    FROM (SELECT step_no, b, sum(tokens)::BIGINT AS w FROM f WHERE tokens > 0 GROUP BY step_no, b)
), wanted AS (             -- the bucket of each position
    SELECT p.*, b.b, b.below
    FROM positions p JOIN buckets b ON b.step_no = p.step_no AND b.below <= p.p AND p.p < b.below + b.w
), sorted AS (             -- the frames of those buckets, each with its first position inside its bucket
    SELECT f.step_no, f.b, f.v, f.tokens AS w,
           sum(f.tokens) OVER (PARTITION BY f.step_no, f.b ORDER BY f.v ROWS UNBOUNDED PRECEDING) - f.tokens AS first
    FROM f SEMI JOIN (SELECT DISTINCT step_no, b FROM wanted) k USING (step_no, b)
), percentiles AS (
    SELECT step_no, list(interpolate(lo, hi, h) ORDER BY q) AS q
    FROM (SELECT w.step_no, w.q, any_value(w.h) AS h,
                 any_value(s.v) FILTER (w.side = 'lo') AS lo, any_value(s.v) FILTER (w.side = 'hi') AS hi
          FROM wanted w
          JOIN sorted s ON s.step_no = w.step_no AND s.b = w.b
                       AND w.below + s.first <= w.p AND w.p < w.below + s.first + s.w
          GROUP BY w.step_no, w.q)
    GROUP BY step_no
), wide AS (
    SELECT run_id, step_id, target,
           sample_stats(ttft_ms) AS ttft_ms, sample_stats(tpot_ms) AS tpot_ms,
           sample_stats(decode_tok_s) AS decode_tok_s, sample_stats(e2e_ms) AS e2e_ms,
           NULL AS itl_ms, NULL AS itl_frame_ms
    FROM measured WHERE status = 'ok'
    GROUP BY run_id, step_id, target
    UNION ALL BY NAME
    SELECT n.run_id, n.step_id, n.target, s.itl_frame_ms,
           CASE WHEN s.n > 0 THEN {'n': s.n, 'mean': s.gap_sum / s.n, 'q': p.q, 'max': s.max} END AS itl_ms
    FROM per_step s JOIN step_numbers n USING (step_no) LEFT JOIN percentiles p USING (step_no)
), long AS (
    UNPIVOT wide ON ttft_ms, tpot_ms, decode_tok_s, e2e_ms, itl_ms, itl_frame_ms
    INTO NAME metric VALUE s
)
SELECT run_id, step_id, target, metric, s.n, s.mean, s.q, s.max
FROM long
WHERE s.n > 0;

-- The two headline numbers of a step: acceptance length (all kinds) and aggregate tok/s.
CREATE OR REPLACE VIEW step_results AS
SELECT s.*, a.accept_len, t.tok_s, t.tok_s_ok
FROM step_info s
LEFT JOIN step_acceptance a ON a.run_id = s.run_id AND a.step_id = s.step_id AND a.target = s.target
                           AND a.prompt_kind = '(all)'
LEFT JOIN step_throughput t ON t.run_id = s.run_id AND t.step_id = s.step_id AND t.target = s.target;

-- One row per series and load level (concurrency, or rate in open loop), over its repeats.
CREATE OR REPLACE VIEW level_results AS
SELECT r.run_id, r.target, r.algorithm, r.draft_tokens, r.concurrency, r.rate,
       any_value(x.series_rank) AS series_rank, bool_or(b.run_id IS NOT NULL) AS is_baseline,
       count(*) AS repeats, list(r.tok_s ORDER BY r."repeat") AS tok_s_values,
       min(r.tok_s) AS tok_s_min, median(r.tok_s) AS tok_s, max(r.tok_s) AS tok_s_max,
       min(r.accept_len) AS accept_len_min, median(r.accept_len) AS accept_len,
       max(r.accept_len) AS accept_len_max,
       bool_or(r.emulated) AS emulated, bool_or(r.predicted) AS predicted
FROM step_results r
JOIN series x ON x.run_id = r.run_id AND x.target = r.target AND x.algorithm IS NOT DISTINCT FROM r.algorithm
             AND x.draft_tokens IS NOT DISTINCT FROM r.draft_tokens
LEFT JOIN baseline_series b ON b.run_id = r.run_id AND b.target = r.target
                           AND b.algorithm IS NOT DISTINCT FROM r.algorithm
                           AND b.draft_tokens IS NOT DISTINCT FROM r.draft_tokens
GROUP BY r.run_id, r.target, r.algorithm, r.draft_tokens, r.concurrency, r.rate;

-- Every series of a run next to the baseline at the same load level (medians over repeats), the baseline's
-- own rows included (is_baseline; their change and signal are NULL). signal compares the tok/s ranges over
-- repeats (outside_spread). Materialized: the level results are computed once, not once per side.
CREATE OR REPLACE VIEW comparison AS
WITH l AS MATERIALIZED (SELECT * FROM level_results)
SELECT o.*,
       b.target AS baseline_target, b.algorithm AS baseline_algorithm, b.draft_tokens AS baseline_draft_tokens,
       b.accept_len AS baseline_accept_len, b.tok_s AS baseline_tok_s, b.repeats AS baseline_repeats,
       if(o.is_baseline, NULL, pct_change(o.accept_len, b.accept_len)) AS accept_len_change_pct,
       if(o.is_baseline, NULL, pct_change(o.tok_s, b.tok_s)) AS tok_s_change_pct,
       if(o.is_baseline, NULL,
          outside_spread(o.tok_s_min, o.tok_s_max, o.repeats, b.tok_s_min, b.tok_s_max, b.repeats)) AS signal,
       b.emulated OR o.emulated AS any_emulated, b.predicted OR o.predicted AS any_predicted
FROM l o
JOIN l b ON b.run_id = o.run_id AND b.is_baseline
        AND b.concurrency IS NOT DISTINCT FROM o.concurrency AND b.rate IS NOT DISTINCT FROM o.rate;

-- Fleet runs (loadgen.config.fleet) name each target <node>.<configuration>: the configuration (launch profile set)
-- it ran. For targets not named that way the configuration is the target name. Used by fleet_*.sql.
CREATE OR REPLACE VIEW fleet_targets AS
SELECT DISTINCT run_id, target, node,
       if(starts_with(target, node || '.'), substr(target, length(node) + 2), target) AS configuration
FROM steps;

-- The sequential SLO rule's constants (level_sequential below), read by loadgen/results/sequential.py too (one
-- definition); rho_max: the misses' lag-1 correlation its rate holds to where a run gives no miss_correlation.
CREATE OR REPLACE MACRO sequential_rule() AS {'indifference': 0.5, 'rho_max': 0.7, 'rho_steps': 8, 'w_edge': 0.5, 'w_far': 0.4, 'far_pass': 0.1, 'far_fail': 0.5};

-- ---- Capacity at an SLO (queries/goodput.sql, capacity.sql, pareto.sql) ----
--
-- An SLO is per-request lines (TTFT, TPOT, e2e), the share of measured requests that must meet all of them
-- (attainment) and the share that may fail (max_error_rate). Each run saves its [slo] in runs.slo; each value
-- can be overridden with a variable (slo_ttft_ms, slo_tpot_ms, slo_e2e_s, slo_attainment, slo_max_error_rate),
-- so an old run is judged again against another SLO without running it again.
CREATE OR REPLACE VIEW run_slo AS
WITH saved AS (SELECT run_id, slo::JSON AS s FROM runs)
SELECT run_id,
       coalesce(getvariable('slo_ttft_ms'), (s->>'ttft_ms')::DOUBLE)::DOUBLE AS ttft_ms,
       coalesce(getvariable('slo_tpot_ms'), (s->>'tpot_ms')::DOUBLE)::DOUBLE AS tpot_ms,
       coalesce(getvariable('slo_e2e_s'), (s->>'e2e_s')::DOUBLE)::DOUBLE AS e2e_s,
       coalesce(getvariable('slo_attainment'), (s->>'attainment')::DOUBLE, 0.9)::DOUBLE AS attainment,
       coalesce(getvariable('slo_max_error_rate'), (s->>'max_error_rate')::DOUBLE, 0.01)::DOUBLE AS max_error_rate,
       coalesce(getvariable('slo_false_verdict'), (s->>'false_verdict')::DOUBLE)::DOUBLE AS false_verdict,
       coalesce(getvariable('slo_miss_correlation'), (s->>'miss_correlation')::DOUBLE,
                sequential_rule().rho_max)::DOUBLE AS miss_correlation
FROM saved;

-- The 95% Wilson score interval of a share k/n (z = 1.96; loadgen.results.slo.WILSON_Z): unlike k/n +- a normal
-- error it stays inside [0, 1] and is honest at 0/n and n/n, where attainment often sits.
-- side -1 gives the lower bound, +1 the upper.
CREATE OR REPLACE MACRO wilson_bound(k, n, side) AS CASE WHEN n > 0 THEN
    (k / n + 1.96 ^ 2 / (2 * n) + side * 1.96 * sqrt((k / n) * (1 - k / n) / n + 1.96 ^ 2 / (4 * n * n)))
    / (1 + 1.96 ^ 2 / n) END;

-- The call of an SLO on `met` of `measured` requests with `failed` failures: NULL without an SLO line; 'pass'
-- when attainment (met / measured) reaches the SLO's and the error rate stays at or below its ceiling.
-- clear: the attainment interval lies wholly on the side of the call (the error ceiling is judged on its point
-- value: a 1% ceiling could never be cleared by an interval on a few dozen requests). A step that measured no
-- request at all is a clear fail. A step whose server died (steps.status 'failed', README: "Servers that crash at
-- the limit") is a clear fail whatever its requests say: the server did not hold that load.
CREATE OR REPLACE MACRO slo_verdict(has_slo, met, measured, failed, attainment, max_error_rate, died := false) AS
    CASE WHEN NOT has_slo THEN NULL
         WHEN died THEN 'fail'
         WHEN measured > 0 AND met / measured >= attainment AND failed / measured <= max_error_rate THEN 'pass'
         ELSE 'fail' END;
CREATE OR REPLACE MACRO slo_clear(verdict, met, measured, attainment, died := false) AS
    CASE WHEN died AND verdict = 'fail' THEN true
         WHEN verdict = 'pass' THEN wilson_bound(met, measured, -1) >= attainment
         WHEN verdict = 'fail' THEN coalesce(wilson_bound(met, measured, 1) < attainment
                                             OR met / measured >= attainment, true) END;

-- Per step: every measured request (phase 'measure', any status) is judged. It meets the SLO when it finished
-- ok and its TTFT, TPOT and e2e are each at or under their line (a line not set, or a TPOT undefined for a
-- 1-token answer, is met). failed = status other than ok and cancelled (a request cut at the step's end is
-- not an error, but it did not meet the SLO). worst_line: the line that ok requests missed most.
CREATE OR REPLACE VIEW step_slo AS
WITH judged AS (
    SELECT m.run_id, m.step_id, m.target, m.status, m.completion_tokens,
           m.status = 'ok' AND m.ttft_ms > o.ttft_ms AS ttft_missed,
           m.status = 'ok' AND m.tpot_ms > o.tpot_ms AS tpot_missed,
           m.status = 'ok' AND m.e2e_ms > 1000 * o.e2e_s AS e2e_missed
    FROM measured m JOIN run_slo o USING (run_id)
), counts AS (
    SELECT run_id, step_id, target,
           count(*) AS measured,
           count(*) FILTER (status = 'ok') AS ok,
           count(*) FILTER (status NOT IN ('ok', 'cancelled')) AS failed,
           count(*) FILTER (status = 'ok' AND NOT coalesce(ttft_missed OR tpot_missed OR e2e_missed, false)) AS met,
           coalesce(sum(completion_tokens) FILTER (status = 'ok' AND NOT coalesce(
               ttft_missed OR tpot_missed OR e2e_missed, false)), 0) AS met_tokens,
           count(*) FILTER (ttft_missed) AS ttft_missed,
           count(*) FILTER (tpot_missed) AS tpot_missed,
           count(*) FILTER (e2e_missed) AS e2e_missed
    FROM judged GROUP BY run_id, step_id, target
)
SELECT s.run_id, s.step_id, s.target, s.level, s.window_s, s.step_s,
       coalesce(c.measured, 0) AS measured, coalesce(c.ok, 0) AS ok, coalesce(c.failed, 0) AS failed,
       coalesce(c.met, 0) AS met, coalesce(c.met_tokens, 0) AS met_tokens,
       c.ttft_missed, c.tpot_missed, c.e2e_missed,
       CASE WHEN greatest(c.ttft_missed, c.tpot_missed, c.e2e_missed) > 0 THEN
            CASE greatest(c.ttft_missed, c.tpot_missed, c.e2e_missed)
                 WHEN c.ttft_missed THEN 'ttft' WHEN c.tpot_missed THEN 'tpot' ELSE 'e2e' END END AS worst_line,
       o.ttft_ms IS NOT NULL OR o.tpot_ms IS NOT NULL OR o.e2e_s IS NOT NULL AS has_slo,
       o.attainment AS slo_attainment, o.max_error_rate AS slo_max_error_rate,
       s.step_status = 'failed' AS server_died
FROM step_info s
JOIN run_slo o USING (run_id)
LEFT JOIN counts c USING (run_id, step_id, target);

-- Per target and load level, over its runs: the median per-request decode rate (1 / TPOT) of measured ok
-- requests, what one user sees (capacity.sql at the capacity level, pareto.sql at every level).
CREATE OR REPLACE VIEW level_user_rate AS
SELECT s.run_id, s.target, s.level, median(m.decode_tok_s) AS user_tok_s
FROM measured m JOIN step_info s USING (run_id, step_id, target)
WHERE m.status = 'ok'
GROUP BY s.run_id, s.target, s.level;

-- Per series and load level, pooled over the level's runs (a search runs a level again while its call is
-- unclear; a grid has repeats): the verdict a plan acts on and capacity.sql reads.
-- The sequential call of each level (loadgen/results/sequential.py, the same rule; docs/capacity-search.md): with
-- runs.slo's false_verdict set, over the level's measured requests in step and schedule order, each met or not
-- (step_slo's rule), modelled as a two-state Markov chain (miss rate q, lag-1 correlation rho) so that misses in
-- runs count as the weaker evidence they are. After each request, two one-sided likelihood ratios: a mixture of
-- chains on the calling side (w_edge at its edge q and rho 0, w_far at a far q and rho_max, the rest spread
-- over the rho grid) against the best-fitting chain at the other side's edge (rho 0..rho_max); a call once
-- one reaches log(1 / false_verdict) (Ville's inequality: at most false_verdict wrong at every edge chain with
-- rho <= rho_max, the run's miss_correlation). sequential_verdict: the first call, sequential_n: the requests it was made on (NULL: none yet).
CREATE OR REPLACE VIEW level_sequential AS
WITH judged AS (
    SELECT m.run_id, m.target, s.level, o.attainment, o.false_verdict, o.miss_correlation,
           (m.status = 'ok' AND NOT coalesce(m.ttft_ms > o.ttft_ms OR m.tpot_ms > o.tpot_ms
                                             OR m.e2e_ms > 1000 * o.e2e_s, false))::INT AS met,
           row_number() OVER (PARTITION BY m.run_id, m.target, s.level
                              ORDER BY m.step_id, m.t_scheduled_ns, m.request_id) AS n
    FROM measured m JOIN step_info s USING (run_id, step_id, target) JOIN run_slo o USING (run_id)
    WHERE o.false_verdict IS NOT NULL AND o.attainment < 1
), paired AS (
    SELECT *, lag(met) OVER (PARTITION BY run_id, target, level ORDER BY n) AS prev FROM judged
), counted AS (   -- after each request: the first outcome and the four transition counts so far
    SELECT run_id, target, level, n, false_verdict, miss_correlation,
           first_value(met) OVER w AS first_met,
           coalesce(sum((prev = 1 AND met = 1)::INT) OVER w, 0) AS mm,
           coalesce(sum((prev = 1 AND met = 0)::INT) OVER w, 0) AS mx,
           coalesce(sum((prev = 0 AND met = 1)::INT) OVER w, 0) AS xm,
           coalesce(sum((prev = 0 AND met = 0)::INT) OVER w, 0) AS xx,
           (1 - attainment) * (1 - sequential_rule().indifference) AS q_pass,
           least((1 - attainment) * (1 + sequential_rule().indifference), (2 - attainment) / 2) AS q_fail
    FROM paired
    WINDOW w AS (PARTITION BY run_id, target, level ORDER BY n ROWS UNBOUNDED PRECEDING)
), grid AS (      -- per side: its edge chains (far = false) and far chains at each rho, with the mixture's weight
    SELECT side, far, k,
           ln(CASE WHEN NOT far AND k = 0 THEN sequential_rule().w_edge
                   WHEN far AND k = sequential_rule().rho_steps - 1 THEN sequential_rule().w_far
                   ELSE (1 - sequential_rule().w_edge - sequential_rule().w_far) / (2 * sequential_rule().rho_steps - 2)
              END) AS log_w
    FROM (VALUES ('pass'), ('fail')) sides(side), (VALUES (false), (true)) fars(far),
         range(CAST(sequential_rule().rho_steps AS BIGINT)) ks(k)
), chains AS (
    SELECT c.run_id, c.target, c.level, c.n, c.false_verdict, g.side, g.far, g.log_w,
           CASE WHEN g.side = 'pass' THEN (CASE WHEN g.far THEN c.q_pass * sequential_rule().far_pass ELSE c.q_pass END)
                ELSE (CASE WHEN g.far THEN c.q_fail + (1 - c.q_fail) * sequential_rule().far_fail ELSE c.q_fail END)
           END AS q, c.miss_correlation * g.k / (sequential_rule().rho_steps - 1) AS rho,
           c.first_met, c.mm, c.mx, c.xm, c.xx
    FROM counted c, grid g
), logs AS (      -- each chain's log likelihood of the requests so far (sequential.py _coefficients)
    SELECT run_id, target, level, n, false_verdict, side, far, log_w,
           first_met * ln(1 - q) + (1 - first_met) * ln(q) + mm * ln(1 - q * (1 - rho)) + mx * ln(q * (1 - rho))
           + xm * ln((1 - q) * (1 - rho)) + xx * ln(rho + (1 - rho) * q) AS ll
    FROM chains
), mixed AS (     -- per side: log of its mixture (max + log sum exp) and its best edge chain
    SELECT run_id, target, level, n, any_value(false_verdict) AS alpha, side,
           max(log_w + ll) + ln(sum(exp(log_w + ll - top))) AS mixture, max(ll) FILTER (NOT far) AS best
    FROM (SELECT *, max(log_w + ll) OVER (PARTITION BY run_id, target, level, n, side) AS top FROM logs)
    GROUP BY run_id, target, level, n, side
), scored AS (
    SELECT run_id, target, level, n, any_value(alpha) AS alpha,
           any_value(mixture) FILTER (side = 'pass') - any_value(best) FILTER (side = 'fail') AS pass_score,
           any_value(mixture) FILTER (side = 'fail') - any_value(best) FILTER (side = 'pass') AS fail_score
    FROM mixed GROUP BY run_id, target, level, n
)
SELECT run_id, target, level,
       arg_min(CASE WHEN fail_score >= ln(1 / alpha) THEN 'fail' ELSE 'pass' END, n) AS sequential_verdict,
       min(n) AS sequential_n
FROM scored WHERE fail_score >= ln(1 / alpha) OR pass_score >= ln(1 / alpha)
GROUP BY run_id, target, level;

CREATE OR REPLACE VIEW level_slo AS
WITH pooled AS (
    SELECT g.run_id, g.target, s.node, s.algorithm, s.draft_tokens, s.mode, s.concurrency, s.rate, g.level,
           count(*) AS steps, sum(g.step_s) AS step_s,
           sum(g.measured) AS measured, sum(g.failed) AS failed, sum(g.met) AS met,
           any_value(g.has_slo) AS has_slo, any_value(g.slo_attainment) AS slo_attainment,
           any_value(g.slo_max_error_rate) AS slo_max_error_rate, bool_or(s.emulated) AS emulated,
           bool_or(s.predicted) AS predicted,
           bool_or(g.server_died) AS server_died
    FROM step_slo g JOIN step_info s USING (run_id, step_id, target)
    GROUP BY ALL
)
, fixed AS (
    SELECT p.*, q.sequential_verdict, q.sequential_n, o.false_verdict IS NOT NULL AS sequential,
           slo_verdict(has_slo, met, measured, failed, slo_attainment, slo_max_error_rate, died := server_died) AS fixed
    FROM pooled p JOIN run_slo o USING (run_id)
    LEFT JOIN level_sequential q USING (run_id, target, level)
)
SELECT * EXCLUDE (fixed), met / nullif(measured, 0) AS attainment, failed / nullif(measured, 0) AS error_rate,
       CASE WHEN NOT sequential OR sequential_verdict IS NULL OR server_died
                 OR failed / nullif(measured, 0) > slo_max_error_rate THEN fixed
            ELSE sequential_verdict END AS verdict,
       CASE WHEN NOT sequential THEN slo_clear(fixed, met, measured, slo_attainment, died := server_died)
            WHEN server_died AND fixed = 'fail' OR measured = 0 THEN true
            WHEN failed / measured > slo_max_error_rate THEN met / measured >= slo_attainment
            ELSE sequential_verdict IS NOT NULL END AS clear
FROM fixed;

-- ---- GPU telemetry (queries/gpu_by_step.sql, energy.sql, confounders.sql; docs/telemetry.md) ----
--
-- Clock-event reasons that slow a GPU down (NVML's bits): software power cap 0x4, hardware slowdown 0x8, software
-- thermal slowdown 0x20, hardware thermal slowdown 0x40, power brake 0x80. Idle (0x1), application clocks, sync
-- boost and display clocks are not a slowdown of a working GPU.
CREATE OR REPLACE MACRO throttle_mask() AS 236;   -- 0x4 | 0x8 | 0x20 | 0x40 | 0x80
CREATE OR REPLACE MACRO reason_words(name) AS CASE name
    WHEN 'sw_power_cap' THEN 'software power cap' WHEN 'hw_slowdown' THEN 'hardware slowdown'
    WHEN 'sw_thermal_slowdown' THEN 'software thermal slowdown' WHEN 'hw_thermal_slowdown' THEN 'hardware thermal slowdown'
    WHEN 'hw_power_brake' THEN 'power brake' ELSE name END;

-- Per step, target and sample instant: the GPU samples inside the step's measurement window [t_measure_start_ns,
-- t_measure_end_ns], a sample's GPUs taken together (power summed; clock the median of the GPUs; temperature the
-- hottest; a reason when any GPU has it). busy: the GPU had work (no idle reason; without reasons, utilisation > 0).
CREATE OR REPLACE VIEW gpu_instants AS
SELECT s.run_id, s.step_id, s.target, any_value(s.node) AS node, g.t_ns,
       sum(g.power_w) AS power_w, median(g.sm_clock_mhz) AS sm_clock_mhz, max(g.sm_clock_max_mhz) AS sm_clock_max_mhz,
       max(g.temperature_c) AS temperature_c, avg(g.utilization_pct) AS utilization_pct,
       bit_or(g.clock_reasons_mask) AS mask,
       coalesce(bit_or(g.clock_reasons_mask) & 1 = 0, avg(g.utilization_pct) > 0, true) AS busy
FROM step_info s
JOIN gpu_samples g ON g.run_id = s.run_id AND g.target = s.target
 AND g.t_ns >= s.t_measure_start_ns AND g.t_ns <= s.t_measure_end_ns
GROUP BY s.run_id, s.step_id, s.target, g.t_ns;

-- Per step and target, over its window's instants: the SM clock's median while the GPU worked (idle samples
-- left out: a GPU waiting for work clocks down by design), power, temperature, each slowdown reason's share of
-- the samples, and the violation counters' growth as a share of the samples' span (where the source has them).
CREATE OR REPLACE VIEW gpu_window AS
WITH violations AS (
    SELECT s.run_id, s.step_id, s.target,
           -- at most all of it: a counter read a little after its sample's timestamp can outgrow the span
           100 * avg(if(v.power_s > v.span_s, v.span_s, v.power_s) / nullif(v.span_s, 0)) AS power_violation_pct,
           100 * avg(if(v.thermal_s > v.span_s, v.span_s, v.thermal_s) / nullif(v.span_s, 0)) AS thermal_violation_pct
    FROM step_info s,
         LATERAL (SELECT g.gpu, (max(g.t_ns) - min(g.t_ns)) / 1e9 AS span_s,
                         max(g.power_violation_s) - min(g.power_violation_s) AS power_s,
                         max(g.thermal_violation_s) - min(g.thermal_violation_s) AS thermal_s
                  FROM gpu_samples g
                  WHERE g.run_id = s.run_id AND g.target = s.target
                    AND g.t_ns >= s.t_measure_start_ns AND g.t_ns <= s.t_measure_end_ns
                  GROUP BY g.gpu) v
    GROUP BY s.run_id, s.step_id, s.target
)
SELECT i.run_id, i.step_id, i.target, any_value(i.node) AS node, count(*) AS samples,
       median(i.sm_clock_mhz) FILTER (i.busy) AS sm_clock_median_mhz, max(i.sm_clock_max_mhz) AS sm_clock_max_mhz,
       quantile_cont(i.power_w, 0.5) AS power_p50_w, max(i.power_w) AS power_max_w,
       max(i.temperature_c) AS temperature_max_c, avg(i.utilization_pct) AS utilization_pct,
       100 * avg(((i.mask & 1) <> 0)::INT) AS idle_pct,
       100 * avg(((i.mask & 4) <> 0)::INT) AS sw_power_cap_pct,
       100 * avg(((i.mask & 8) <> 0)::INT) AS hw_slowdown_pct,
       100 * avg(((i.mask & 32) <> 0)::INT) AS sw_thermal_slowdown_pct,
       100 * avg(((i.mask & 64) <> 0)::INT) AS hw_thermal_slowdown_pct,
       100 * avg(((i.mask & 128) <> 0)::INT) AS hw_power_brake_pct,
       100 * avg(((i.mask & throttle_mask()) <> 0)::INT) AS throttled_pct,
       any_value(v.power_violation_pct) AS power_violation_pct,
       any_value(v.thermal_violation_pct) AS thermal_violation_pct
FROM gpu_instants i
LEFT JOIN violations v USING (run_id, step_id, target)
GROUP BY i.run_id, i.step_id, i.target;

-- Energy over a step's window, per GPU, summed: the total-energy counter interpolated linearly at the window's
-- start and end from the samples on either side of each (energy_method 'counter'); a GPU without the counter
-- (a source that does not report it) gets its median power x window_s ('power'). The emulator's counter counts
-- modelled time, so its joules are the modelled GPU's at any --time-scale.
CREATE OR REPLACE VIEW gpu_step_energy AS
WITH e AS (
    SELECT run_id, target, gpu, t_ns, energy_j FROM gpu_samples WHERE energy_j IS NOT NULL
), edges AS (
    SELECT s.run_id, s.step_id, s.target, g.gpu, edge, t
    FROM step_info s
    JOIN (SELECT DISTINCT run_id, target, gpu FROM e) g USING (run_id, target)
    CROSS JOIN LATERAL (VALUES (0, s.t_measure_start_ns), (1, s.t_measure_end_ns)) x(edge, t)
), at_edges AS (
    SELECT d.run_id, d.step_id, d.target, d.gpu, d.edge, d.t,
           b.t_ns AS tb, b.energy_j AS eb, a.t_ns AS ta, a.energy_j AS ea
    FROM edges d
    ASOF LEFT JOIN e b ON b.run_id = d.run_id AND b.target = d.target AND b.gpu = d.gpu AND b.t_ns <= d.t
    ASOF LEFT JOIN e a ON a.run_id = d.run_id AND a.target = d.target AND a.gpu = d.gpu AND a.t_ns >= d.t
), valued AS (
    SELECT run_id, step_id, target, gpu, edge,
           CASE WHEN ta = tb THEN eb ELSE eb + (ea - eb) * (t - tb) / (ta - tb) END AS energy_at
    FROM at_edges
), counted AS (
    SELECT run_id, step_id, target,
           sum(energy_at) FILTER (edge = 1) - sum(energy_at) FILTER (edge = 0) AS energy_j,
           count(*) FILTER (energy_at IS NULL) AS missing
    FROM valued GROUP BY ALL
)
SELECT w.run_id, w.step_id, w.target,
       CASE WHEN c.energy_j IS NOT NULL AND c.missing = 0 THEN c.energy_j
            WHEN c.run_id IS NULL THEN w.power_p50_w * s.window_s END AS energy_j,
       CASE WHEN c.energy_j IS NOT NULL AND c.missing = 0 THEN 'counter'
            WHEN c.run_id IS NULL AND w.power_p50_w IS NOT NULL THEN 'power' END AS energy_method
FROM gpu_window w
JOIN step_info s USING (run_id, step_id, target)
LEFT JOIN counted c USING (run_id, step_id, target);

-- The hardware each target ran on (steps.hardware, recorded by its GPU sampler): its GPUs' model, driver and
-- CUDA version, the node's host name, OS and loadgen version, where they were read (source) or why nothing was
-- (unavailable). Values that differ between a target's GPUs or steps are joined by ' | '.
CREATE OR REPLACE VIEW target_hardware AS
WITH g AS (
    SELECT s.run_id, s.target, s.node, s.target_index, s.emulated, j.value ->> 'name' AS gpu_name,
           j.value ->> 'driver_version' AS driver_version, j.value ->> 'cuda_version' AS cuda_version,
           s.hardware ->> 'host' AS host, s.hardware ->> 'os' AS os, s.hardware ->> 'loadgen_version' AS loadgen_version,
           s.hardware ->> 'source' AS source, s.hardware ->> 'unavailable' AS unavailable
    FROM steps s LEFT JOIN LATERAL json_each(s.hardware, '$.gpus') j ON true
    WHERE s.hardware IS NOT NULL
)
SELECT run_id, target, any_value(node) AS node, min(target_index) AS target_index,
       count(DISTINCT gpu_name) AS gpus_named,
       string_agg(DISTINCT gpu_name, ' | ' ORDER BY gpu_name) AS gpu_name,
       string_agg(DISTINCT driver_version, ' | ' ORDER BY driver_version) AS driver_version,
       string_agg(DISTINCT cuda_version, ' | ' ORDER BY cuda_version) AS cuda_version,
       string_agg(DISTINCT host, ' | ' ORDER BY host) AS host, string_agg(DISTINCT os, ' | ' ORDER BY os) AS os,
       string_agg(DISTINCT loadgen_version, ' | ' ORDER BY loadgen_version) AS loadgen_version,
       string_agg(DISTINCT source, ' | ' ORDER BY source) AS source,
       string_agg(DISTINCT unavailable, ' | ' ORDER BY unavailable) AS unavailable, bool_or(emulated) AS emulated
FROM g GROUP BY run_id, target;

-- Hardware that makes a comparison unfair (confounders.sql, the answer, the report; docs/telemetry.md). A unit is a
-- node when the run's telemetry covers several nodes (a fleet), else a target (each its own server and GPU).
-- Per unit: the median SM clock while its GPU worked, over every window of its steps, against the median of the
-- other units' (its peers'); its worst window's throttled share (the larger of the samples with a slowdown
-- reason and the violation counters' share) and that window's main reason (the power violation counter counts
-- as the software power cap, the thermal one as the software thermal slowdown); its GPU model, driver and CUDA
-- version against the run's most common. A unit is named when its clock is more than `clock_drop_pct` (10) %
-- below its peers', when a window was throttled more than `throttled_max_pct` (5) % of the time, or when a
-- version differs. note: the sentence the answer and the report print.
CREATE OR REPLACE VIEW gpu_confounders AS
WITH runs_nodes AS (
    SELECT run_id, count(DISTINCT node) > 1 AS by_node FROM gpu_instants GROUP BY run_id
), unit_of AS (
    SELECT DISTINCT s.run_id, s.target, if(r.by_node, s.node, s.target) AS unit, r.by_node
    FROM step_info s JOIN runs_nodes r USING (run_id)
), clocks AS (
    SELECT u.run_id, u.unit, any_value(u.by_node) AS by_node, median(i.sm_clock_mhz) FILTER (i.busy) AS clock
    FROM gpu_instants i JOIN unit_of u USING (run_id, target)
    GROUP BY u.run_id, u.unit
), reasons AS (
    UNPIVOT (SELECT run_id, step_id, target,   -- a violation counter is evidence of its cap too
                    greatest(sw_power_cap_pct, coalesce(power_violation_pct, 0)) AS sw_power_cap_pct,
                    hw_slowdown_pct, greatest(sw_thermal_slowdown_pct, coalesce(thermal_violation_pct, 0))
                        AS sw_thermal_slowdown_pct, hw_thermal_slowdown_pct, hw_power_brake_pct
             FROM gpu_window)
    ON COLUMNS(* EXCLUDE (run_id, step_id, target)) INTO NAME reason VALUE pct
), windows AS (
    SELECT w.run_id, w.step_id, w.target,
           greatest(w.throttled_pct, coalesce(w.power_violation_pct, 0), coalesce(w.thermal_violation_pct, 0))
               AS share,
           (SELECT arg_max(r.reason, r.pct) FROM reasons r WHERE r.run_id = w.run_id AND r.step_id = w.step_id
               AND r.target = w.target) AS reason
    FROM gpu_window w
), worst AS (
    SELECT u.run_id, u.unit, arg_max(w.share, w.share) AS share,
           arg_max(w.reason, w.share) AS reason, arg_max(s.level, w.share) AS level,
           arg_max(s.mode, w.share) AS mode
    FROM windows w JOIN unit_of u USING (run_id, target) JOIN step_info s USING (run_id, step_id, target)
    GROUP BY u.run_id, u.unit
), versions AS (
    UNPIVOT (SELECT u.run_id, u.unit, string_agg(DISTINCT h.gpu_name, ' | ') AS "GPU",
                    string_agg(DISTINCT h.driver_version, ' | ') AS "driver",
                    string_agg(DISTINCT h.cuda_version, ' | ') AS "CUDA"
             FROM target_hardware h JOIN unit_of u USING (run_id, target) GROUP BY u.run_id, u.unit)
    ON "GPU", "driver", "CUDA" INTO NAME what VALUE value
), usual AS (
    SELECT run_id, what, mode(value) AS usual, count(DISTINCT value) AS kinds FROM versions GROUP BY ALL
), units AS (
    SELECT c.run_id, c.unit, c.by_node, c.clock, w.share, w.reason, w.level, w.mode,
           (SELECT string_agg(u.target, ', ' ORDER BY u.target) FROM unit_of u
               WHERE u.run_id = c.run_id AND u.unit = c.unit) AS targets,
           (SELECT median(p.clock) FROM clocks p WHERE p.run_id = c.run_id AND p.unit <> c.unit) AS peer_clock,
           (SELECT string_agg(p.unit, ', ' ORDER BY p.unit) FROM clocks p
               WHERE p.run_id = c.run_id AND p.unit <> c.unit) AS peers,
           (SELECT bool_or(s.emulated) FROM unit_of u JOIN step_info s USING (run_id, target)
               WHERE u.run_id = c.run_id AND u.unit = c.unit) AS emulated
    FROM clocks c LEFT JOIN worst w USING (run_id, unit)
), worded AS (
    SELECT *, if(by_node, 'on ', 'for ') || if(peers LIKE '%,%', 'its peers ' || peers, peers) AS versus,
           reason_words(CASE reason WHEN 'sw_power_cap_pct' THEN 'sw_power_cap'
                                    WHEN 'hw_slowdown_pct' THEN 'hw_slowdown'
                                    WHEN 'sw_thermal_slowdown_pct' THEN 'sw_thermal_slowdown'
                                    WHEN 'hw_thermal_slowdown_pct' THEN 'hw_thermal_slowdown'
                                    ELSE 'hw_power_brake' END) AS reason_text,
           share > coalesce(getvariable('throttled_max_pct'), 5)::DOUBLE AS throttled,
           clock < (1 - coalesce(getvariable('clock_drop_pct'), 10)::DOUBLE / 100) * peer_clock AS slow
    FROM units
)
SELECT run_id, unit, by_node, targets, 'gpu.sm_clock_median_mhz' AS setting, printf('%.0f', clock) AS value,
       printf('%.0f', peer_clock) AS peer_value, peers, round(pct_change(clock, peer_clock), 1) AS change_pct,
       format('{} ran at {:,.0f} MHz median vs {:,.0f} {}{}: its numbers are not comparable', unit, clock,
              peer_clock, versus,
              if(throttled, format(' ({} {:.0f}% of the window)', reason_text, share), '')) AS note,
       emulated
FROM worded WHERE slow
UNION ALL
SELECT run_id, unit, by_node, targets, 'gpu.throttled_pct', printf('%.1f', share),
       printf('%.0f', coalesce(getvariable('throttled_max_pct'), 5)::DOUBLE), '(limit)', NULL,
       format('{} was throttled {:.0f}% of a window ({}, at {}): its numbers are not comparable', unit, share,
              reason_text, if(mode = 'open', printf('%g req/s', level), printf('C=%g', level))),
       emulated
FROM worded WHERE throttled AND NOT coalesce(slow, false)
UNION ALL
SELECT v.run_id, v.unit, w.by_node, w.targets, 'gpu.' || lower(v.what), v.value, u.usual, w.peers, NULL,
       format('{} has {} {} vs {} on the others: its numbers are not comparable', v.unit, v.what, v.value, u.usual),
       w.emulated
FROM versions v JOIN usual u USING (run_id, what) JOIN worded w USING (run_id, unit)
WHERE u.kinds > 1 AND v.value <> u.usual;

-- ---- Twins (docs/twin.md, queries/twin_error.sql) ----
--
-- Per series and load level, over the level's steps (repeats, or a search's runs of it): the figures a twin is
-- fitted to (loadgen/twin/observe.py) and judged on (twin_error.sql): tok_s and accept_len as level_results
-- (medians over the steps), TTFT p50/p90 and TPOT p50 over the level's measured ok requests pooled.
CREATE OR REPLACE VIEW level_metrics AS
WITH req AS (
    SELECT s.run_id, s.target, s.algorithm, s.draft_tokens, s.concurrency, s.rate, count(*) AS requests,
           quantile_cont(m.ttft_ms, 0.5) AS ttft_p50, quantile_cont(m.ttft_ms, 0.9) AS ttft_p90,
           quantile_cont(m.tpot_ms, 0.5) AS tpot_p50
    FROM measured m JOIN step_info s USING (run_id, step_id, target)
    WHERE m.status = 'ok'
    GROUP BY ALL
)
SELECT r.run_id, r.target, r.algorithm, r.draft_tokens, r.concurrency, r.rate,
       coalesce(r.rate, r.concurrency) AS level, r.repeats AS steps, coalesce(q.requests, 0) AS requests,
       r.tok_s, r.accept_len, q.ttft_p50, q.ttft_p90, q.tpot_p50, r.emulated, r.predicted
FROM level_results r
LEFT JOIN req q ON q.run_id = r.run_id AND q.target = r.target AND q.algorithm IS NOT DISTINCT FROM r.algorithm
               AND q.draft_tokens IS NOT DISTINCT FROM r.draft_tokens
               AND q.concurrency IS NOT DISTINCT FROM r.concurrency AND q.rate IS NOT DISTINCT FROM r.rate;

-- A predicted step's twin, from its steps.server_info (key `twin`, written by loadgen/twin/predict.py): the run
-- and target it was fitted from, the levels it saw, and the error of that fit (mean absolute % error, averaged
-- over the metrics, in-sample and leave-one-level-out; max_mape_pct: the largest of any metric, which the 15%
-- limit is held against; `worst`: the metric and level that missed most).
CREATE OR REPLACE VIEW twin_sources AS
SELECT DISTINCT run_id, target, server_info->>'$.twin.source_run' AS source_run,
       server_info->>'$.twin.source_target' AS source_target,
       from_json(server_info->'$.twin.fit_levels', '["DOUBLE"]') AS fit_levels,
       (server_info->>'$.twin.error.in_sample_mape_pct')::DOUBLE AS in_sample_mape_pct,
       (server_info->>'$.twin.error.loo_mape_pct')::DOUBLE AS loo_mape_pct,
       (server_info->>'$.twin.error.max_mape_pct')::DOUBLE AS max_mape_pct,
       server_info->>'$.twin.error.worst' AS worst,
       server_info->>'$.twin.what_if' AS what_if
FROM steps
WHERE predicted;

-- A measured target that watches its twin (`watch_twin`, docs/twin.md): the twin's prediction of each measured level
-- (schema 8's twin_checks, an optional table), the newest check of a run when a resume checked it again.
SET VARIABLE twin_check_files = (SELECT count(*) FROM glob(getvariable('results') || '/twin_checks/run_id=*/*.parquet'));
CREATE OR REPLACE VIEW twin_checks AS
FROM optional_table('twin_checks', getvariable('twin_check_files'),
    'SELECT NULL::VARCHAR AS run_id, NULL::VARCHAR AS target, NULL::VARCHAR AS node, NULL::INTEGER AS concurrency,
            NULL::VARCHAR AS metric, NULL::DOUBLE AS predicted, NULL::DOUBLE AS band_pct, NULL::VARCHAR AS twin_file,
            NULL::VARCHAR AS twin_source, NULL::VARCHAR AS twin_date, NULL::VARCHAR AS predicted_run,
            NULL::BIGINT AS checked_at_ns WHERE false')
QUALIFY rank() OVER (PARTITION BY run_id, target ORDER BY checked_at_ns DESC) = 1;

-- Drift: each checked level beside its measurement (level_metrics). off_pct = 100 (measured / predicted - 1), how
-- far the node is from its own twin; drift when |off_pct| is above the twin's band (band_pct: twice its
-- leave-one-level-out error of the metric, at least 20%: loadgen.twin.model.Twin.band).
CREATE OR REPLACE VIEW twin_drift AS
SELECT c.run_id, c.target, c.node, c.concurrency, c.metric, c.predicted, m.measured,
       pct_change(m.measured, c.predicted) AS off_pct, c.band_pct,
       abs(pct_change(m.measured, c.predicted)) > c.band_pct AS drift,
       c.twin_file, c.twin_source, c.twin_date, c.predicted_run, m.requests AS measured_requests, m.emulated
FROM twin_checks c
JOIN (SELECT run_id, target, concurrency, requests, emulated, unnest(['tok_s', 'tpot_p50_ms']) AS metric,
             unnest([tok_s, tpot_p50]) AS measured
      FROM level_metrics WHERE NOT predicted AND rate IS NULL) m
  ON m.run_id = c.run_id AND m.target = c.target AND m.concurrency = c.concurrency AND m.metric = c.metric
WHERE m.measured IS NOT NULL AND c.predicted > 0;
