-- paired: each series against the baseline prompt by prompt. Every target draws the same seeded prompts in the same
-- order, so at a load level the two series served the same prompts: per-prompt ratios leave out what the prompts
-- themselves vary (length, kind, how well a draft guesses them), and one repeat can give a verdict where the level's
-- medians (compare_algorithms) need several to see past their spread.
--
-- One row per run, load level and series other than the baseline (SET VARIABLE baseline as compare_algorithms), over
-- the measured ok requests of the prompts both served at that level (a prompt served more than once: its mean):
--   pairs                    prompts both served
--   tpot_ratio               the other's time per output token over the baseline's, per prompt, as a geometric mean
--                            (exp of the mean log ratio): 0.80 = the other decodes each prompt in 80% of the time
--   tpot_ratio_low, _high    its 95% interval (mean log ratio +- 1.96 sd / sqrt(pairs); NULL below 3 pairs)
--   ttft_ratio               the same for time to first token
--   verdict                  faster | slower (the TPOT interval lies below | above 1) | no difference (it spans 1)
WITH per_prompt AS (
    SELECT s.run_id, s.target, s.algorithm, s.draft_tokens, s.concurrency, s.rate, m.prompt_id,
           avg(m.tpot_ms) AS tpot_ms, avg(m.ttft_ms) AS ttft_ms, any_value(s.emulated) AS emulated
    FROM measured m
    JOIN step_info s ON s.run_id = m.run_id AND s.step_id = m.step_id AND s.target = m.target
    WHERE m.status = 'ok' AND m.tpot_ms > 0 AND m.ttft_ms > 0 AND m.prompt_id IS NOT NULL
    GROUP BY ALL
), pairs AS (
    SELECT o.run_id, o.concurrency, o.rate, b.target AS baseline_target, o.target, o.algorithm, o.draft_tokens,
           ln(o.tpot_ms / b.tpot_ms) AS tpot_log, ln(o.ttft_ms / b.ttft_ms) AS ttft_log,
           o.emulated OR b.emulated AS emulated
    FROM per_prompt o
    JOIN baseline_series bs ON bs.run_id = o.run_id
    JOIN per_prompt b ON b.run_id = o.run_id AND b.target = bs.target
                     AND b.algorithm IS NOT DISTINCT FROM bs.algorithm
                     AND b.draft_tokens IS NOT DISTINCT FROM bs.draft_tokens
                     AND b.concurrency IS NOT DISTINCT FROM o.concurrency AND b.rate IS NOT DISTINCT FROM o.rate
                     AND b.prompt_id = o.prompt_id
    WHERE NOT (o.target = bs.target AND o.algorithm IS NOT DISTINCT FROM bs.algorithm
               AND o.draft_tokens IS NOT DISTINCT FROM bs.draft_tokens)
), summary AS (
    SELECT run_id, concurrency, rate, baseline_target, target, algorithm, draft_tokens, count(*) AS pairs,
           avg(tpot_log) AS m, stddev_samp(tpot_log) AS sd, avg(ttft_log) AS ttft_m, bool_or(emulated) AS emulated
    FROM pairs GROUP BY ALL
)
SELECT run_id, concurrency, rate, baseline_target, target, algorithm, draft_tokens, pairs,
       round(exp(m), 3) AS tpot_ratio,
       CASE WHEN pairs >= 3 THEN round(exp(m - 1.96 * sd / sqrt(pairs)), 3) END AS tpot_ratio_low,
       CASE WHEN pairs >= 3 THEN round(exp(m + 1.96 * sd / sqrt(pairs)), 3) END AS tpot_ratio_high,
       round(exp(ttft_m), 3) AS ttft_ratio,
       CASE WHEN pairs < 3 THEN NULL
            WHEN m + 1.96 * sd / sqrt(pairs) < 0 THEN 'faster'
            WHEN m - 1.96 * sd / sqrt(pairs) > 0 THEN 'slower'
            ELSE 'no difference' END AS verdict,
       emulated
FROM summary
ORDER BY run_id, target, algorithm, draft_tokens, concurrency, rate;
