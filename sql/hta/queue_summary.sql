-- hta.queue_summary: per GPU stream, how long its launch queue is and how long
-- it stays full (HTA's queue length summary and time blocked on a full queue).
--
-- Built on hta_queue_length (included below). The mean is weighted by time.
-- A CUDA stream queues at most 1024 launches (HTA's CUDA_MAX_LAUNCH_QUEUE_PER_STREAM);
-- at that length the next launch call blocks the CPU.
--
-- Needs: GPU kernels or copies whose launching CUDA / HIP call is in the trace
--
-- Parameters:
--   $max_queue_length  BIGINT  queue length at which the stream counts as full [range: 1..] (default: 1024)
--
-- Passes: $include_last_step $us_rounding (to its includes, with their defaults and meaning)
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   rank  BIGINT  distributed rank (profiles.rank)
--   device_id  INTEGER  devices.device_id of the GPU
--   stream_id  BIGINT  CUDA/HIP stream
--   changes  BIGINT  rows of hta_queue_length for the stream
--   max_queue_length  BIGINT  longest queue
--   mean_queue_length  DOUBLE  time-weighted mean queue length over the stream's first to last change
--   time_at_full_ps  BIGINT  time with queue_length >= $max_queue_length, ps
--   full_fraction  DOUBLE  time_at_full_ps over the profile's duration
WITH hta_queue_length AS (
-- @include hta.queue_length
)
SELECT
    q.profile_id, q.rank, q.device_id, q.stream_id,
    count(*) AS changes,
    max(q.queue_length) AS max_queue_length,
    sum(q.queue_length * q.dur_ps) / nullif(sum(q.dur_ps), 0) AS mean_queue_length,
    CAST(coalesce(sum(q.dur_ps) FILTER (WHERE q.queue_length >= CAST($max_queue_length AS BIGINT)), 0) AS BIGINT) AS time_at_full_ps,
    coalesce(sum(q.dur_ps) FILTER (WHERE q.queue_length >= CAST($max_queue_length AS BIGINT)), 0) / any_value(p.duration_ps) AS full_fraction
FROM hta_queue_length AS q
JOIN profiles AS p USING (profile_id)
GROUP BY q.profile_id, q.rank, q.device_id, q.stream_id
ORDER BY q.profile_id, q.device_id, q.stream_id
