-- hta.idle_time: per GPU stream, the gaps between consecutive ops split by
-- cause (HTA's idle time breakdown, docs/reference.md, HTA).
--
-- Built on hta_gpu_ops (included below, with its parameters). On each stream,
-- ops in start order; the gap before an op is its start minus the previous
-- op's end. The gap is host_wait when the CPU call launching the op started
-- after the previous op ended (the GPU waited for the host to enqueue it);
-- else kernel_wait when shorter than $kernel_wait_ps (back-to-back launch
-- latency); else other. HTA's default threshold is 30 (consecutive_kernel_delay),
-- compared with its microsecond times: 30 us. Every category gets a row per
-- stream, 0 when no gap has it.
--
-- Needs: GPU kernels or copies on streams (a Kineto GPU trace, an XSpace GPU plane)
--
-- Parameters:
--   $kernel_wait_ps  BIGINT  gaps shorter than this (and not host waits) are kernel waits, ps; HTA's 30 us [range: 0..] (default: 30000000)
--
-- Passes: $include_last_step $us_rounding (to its includes, with their defaults and meaning)
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   rank  BIGINT  distributed rank (profiles.rank)
--   device_id  INTEGER  devices.device_id of the GPU
--   stream_id  BIGINT  CUDA/HIP stream
--   category  VARCHAR  host_wait, kernel_wait or other
--   gaps  BIGINT  number of gaps of this category
--   idle_ps  BIGINT  the gaps summed, ps
--   ratio  DOUBLE  idle_ps over the stream's idle time (all categories); NULL when the stream never idles
WITH hta_gpu_ops AS (
-- @include hta._gpu_ops
),
gaps AS (
    SELECT profile_id, rank, device_id, stream_id, start_ps, launch_start_ps,
        lag(end_ps) OVER (PARTITION BY profile_id, device_id, stream_id ORDER BY start_ps, end_ps, event_id) AS prev_end_ps
    FROM hta_gpu_ops
    WHERE kernel_type IS NOT NULL
),
classified AS (
    SELECT profile_id, rank, device_id, stream_id, start_ps - prev_end_ps AS gap_ps,
        CASE
            WHEN launch_start_ps > prev_end_ps THEN 'host_wait'
            WHEN start_ps - prev_end_ps < CAST($kernel_wait_ps AS BIGINT) THEN 'kernel_wait'
            ELSE 'other'
        END AS category
    FROM gaps
    WHERE prev_end_ps IS NOT NULL
),
streams AS (
    SELECT DISTINCT profile_id, rank, device_id, stream_id FROM hta_gpu_ops
),
grid AS (
    SELECT s.*, c.category FROM streams AS s
    CROSS JOIN (VALUES ('host_wait'), ('kernel_wait'), ('other')) AS c(category)
),
totals AS (
    SELECT g.profile_id, g.rank, g.device_id, g.stream_id, g.category,
        count(c.gap_ps) AS gaps, CAST(coalesce(sum(c.gap_ps), 0) AS BIGINT) AS idle_ps
    FROM grid AS g
    LEFT JOIN classified AS c USING (profile_id, device_id, stream_id, category)
    GROUP BY ALL
)
SELECT *, idle_ps / nullif(sum(idle_ps) OVER (PARTITION BY profile_id, device_id, stream_id), 0) AS ratio
FROM totals
ORDER BY profile_id, device_id, stream_id, category
