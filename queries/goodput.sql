-- goodput: each step judged against the SLO (the run's [slo], or --set slo_ttft_ms=... and friends).
--
-- Over measured requests (phase 'measure', any status); see views.sql `step_slo` for the rules:
--   measured      requests sent inside the window
--   met           finished ok with TTFT <= slo_ttft_ms, TPOT <= slo_tpot_ms and e2e <= slo_e2e_s (lines not
--                 set are met; TPOT = (t_last - t_first) / (completion_tokens - 1), as in latency_by_concurrency)
--   attainment    met / measured (DistServe's "SLO attainment"), with its 95% Wilson interval
--   error_rate    requests that failed (status other than ok and cancelled) / measured
--   goodput_req_s met / window seconds (vLLM bench serve --goodput: "request goodput")
--   goodput_tok_s completion tokens of met requests / window seconds
--   worst_line    the line ok requests missed most (ttft | tpot | e2e)
--   verdict       pass when attainment >= slo_attainment and error_rate <= slo_max_error_rate; NULL without SLO
--   clear         the attainment interval lies wholly on the verdict's side (a search runs an unclear level again)
--   probe         why a capacity search ran this level (NULL in a grid)
SELECT s.run_id, s.step_id, s.target, s.node, s.algorithm, s.draft_tokens, s.concurrency, s.rate, s."repeat",
       s.probe, g.measured, g.ok, g.met,
       round(g.met / nullif(g.measured, 0), 4) AS attainment,
       round(wilson_bound(g.met, g.measured, -1), 4) AS attainment_low,
       round(wilson_bound(g.met, g.measured, 1), 4) AS attainment_high,
       round(g.failed / nullif(g.measured, 0), 4) AS error_rate,
       round(g.met / s.window_s, 3) AS goodput_req_s,
       round(g.met_tokens / s.window_s, 2) AS goodput_tok_s,
       g.worst_line,
       slo_verdict(g.has_slo, g.met, g.measured, g.failed, g.slo_attainment, g.slo_max_error_rate,
                   died := g.server_died) AS verdict,
       slo_clear(slo_verdict(g.has_slo, g.met, g.measured, g.failed, g.slo_attainment, g.slo_max_error_rate,
                             died := g.server_died), g.met, g.measured, g.slo_attainment, died := g.server_died) AS clear,
       s.emulated, s.predicted
FROM step_info s
JOIN step_slo g USING (run_id, step_id, target)
ORDER BY s.run_id, s.target_index, s.target, s.level, s.step_id;
