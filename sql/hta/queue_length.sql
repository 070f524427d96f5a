-- hta.queue_length: per GPU stream, the number of launched but not yet started
-- ops over time (HTA's queue length, docs/reference.md, HTA): +1 when a CUDA call
-- launches an op on the stream, -1 when the op starts.
--
-- Built on hta_gpu_ops (included below, with its parameters). Launch calls are
-- the ones HTA counts (cuda*LaunchKernel*, cuLaunchKernel, runFunction) and
-- every call xprosql_launch_kind names (cudaMemcpyAsync, cudaMemsetAsync and the
-- HIP launches and copies, docs/reference.md, AMD GPUs); only ops with such a
-- call take part. One row per change; the value holds until the next row.
--
-- Passes: $include_last_step $us_rounding (to its includes, with their defaults and meaning)
--
-- Needs: GPU kernels or copies whose launching CUDA / HIP call is in the trace
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   rank  BIGINT  distributed rank (profiles.rank)
--   device_id  INTEGER  devices.device_id of the GPU
--   stream_id  BIGINT  CUDA/HIP stream
--   ts_ps  BIGINT  time of the change, ps
--   queue_length  BIGINT  ops launched on the stream and not yet started, from ts_ps on
--   dur_ps  BIGINT  time until the stream's next change, ps; NULL on its last row
WITH hta_gpu_ops AS (
-- @include hta._gpu_ops
),
launched AS (
    SELECT * FROM hta_gpu_ops
    WHERE regexp_matches(launch_name, '(cuda.*LaunchKernel)|(cuLaunchKernel)|(^runFunction)')
       OR xprosql_launch_kind(launch_name) IS NOT NULL
),
changes AS (
    SELECT profile_id, rank, device_id, stream_id, launch_start_ps AS ts_ps, 1 AS delta, event_id FROM launched
    UNION ALL
    SELECT profile_id, rank, device_id, stream_id, start_ps, -1, event_id FROM launched
),
series AS (
    SELECT profile_id, rank, device_id, stream_id, ts_ps,
        sum(delta) OVER (PARTITION BY profile_id, device_id, stream_id ORDER BY ts_ps, delta DESC, event_id
                         ROWS UNBOUNDED PRECEDING) AS queue_length,
        row_number() OVER (PARTITION BY profile_id, device_id, stream_id, ts_ps ORDER BY delta, event_id DESC) AS last_at_ts
    FROM changes
)
SELECT profile_id, rank, device_id, stream_id, ts_ps, CAST(queue_length AS BIGINT) AS queue_length,
    lead(ts_ps) OVER (PARTITION BY profile_id, device_id, stream_id ORDER BY ts_ps) - ts_ps AS dur_ps
FROM series
WHERE last_at_ts = 1  -- several changes at one instant: keep the value after all of them
ORDER BY profile_id, device_id, stream_id, ts_ps
