-- acceptance_by_position: how acceptance changes along the output (tokens 1-32, 33-64, ...).
--
-- Per-request spec_verify_ct has no position, so this is the frame proxy per position bucket: over frames of
-- the step's measured ok requests with known tokens, a frame belongs to the bucket of its last token,
-- floor((cum_tokens - 1) / 32), and
--   tokens_per_frame = sum(frame tokens) / frames in the bucket
-- Exact acceptance only when the server streams every verify step (stream interval 1, client keeping up);
-- the first frame's token comes from prefill. requests = requests with a frame in the bucket.
-- Bucket width: SET VARIABLE position_bucket = 64 (default 32).
WITH w AS (SELECT coalesce(getvariable('position_bucket'), 32) AS width),
b AS (
    SELECT run_id, step_id, target, (cum_tokens - 1) // w.width AS bucket,
           count(DISTINCT request_id) AS requests, count(*) AS frames, sum(tokens) AS tokens
    FROM measured_frames, w
    WHERE tokens IS NOT NULL AND cum_tokens IS NOT NULL
    GROUP BY run_id, step_id, target, bucket
)
SELECT s.run_id, s.step_id, s.target, s.algorithm, s.draft_tokens, s.concurrency, s.rate, s."repeat",
       (b.bucket * w.width + 1) || '-' || ((b.bucket + 1) * w.width) AS positions,
       b.requests, b.frames, round(b.tokens / b.frames, 3) AS tokens_per_frame,
       s.emulated, s.predicted
FROM b JOIN step_info s USING (run_id, step_id, target), w
ORDER BY s.run_id, s.target_index, s.target, s.algorithm, s.concurrency, s.rate, s."repeat", s.step_id,
         b.bucket;
