-- hta.temporal_breakdown: per GPU, how the time from its first op's start to
-- its last op's end splits into idle, compute and non-compute time (HTA's
-- temporal breakdown, docs/reference.md, HTA).
--
-- Built on hta_gpu_ops (included below, with its parameters: HTA's iteration
-- filter and optional microsecond rounding). Idle is that span minus the union
-- of all ops; compute the union of COMPUTATION ops; non-compute the rest
-- (communication, copies, and compute-free overlap). Overlapping ops count once.
--
-- Passes: $include_last_step $us_rounding (to its includes, with their defaults and meaning)
--
-- Needs: GPU kernels or copies on streams (a Kineto GPU trace, an XSpace GPU plane)
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   rank  BIGINT  distributed rank (profiles.rank)
--   device_id  INTEGER  devices.device_id of the GPU
--   kernel_time_ps  BIGINT  last op end - first op start, ps
--   idle_ps  BIGINT  kernel_time_ps minus the union of all ops, ps
--   compute_ps  BIGINT  union of COMPUTATION ops, ps
--   non_compute_ps  BIGINT  kernel_time_ps - compute_ps - idle_ps, ps
--   idle_pct  DOUBLE  100 * idle_ps / kernel_time_ps
--   compute_pct  DOUBLE  100 * compute_ps / kernel_time_ps
--   non_compute_pct  DOUBLE  100 * non_compute_ps / kernel_time_ps
WITH hta_gpu_ops AS (
-- @include hta._gpu_ops
),
-- Union of intervals: a new run starts where an op starts after every earlier op ended.
tagged AS (
    SELECT profile_id, rank, device_id, start_ps, end_ps, kernel_type = 'COMPUTATION' AS is_compute
    FROM hta_gpu_ops
),
runs AS (
    SELECT *, sum(CASE WHEN reach IS NULL OR start_ps > reach THEN 1 ELSE 0 END)
        OVER (PARTITION BY profile_id, device_id, subset ORDER BY start_ps, end_ps ROWS UNBOUNDED PRECEDING) AS run
    FROM (
        SELECT *, max(end_ps) OVER (PARTITION BY profile_id, device_id, subset ORDER BY start_ps, end_ps
                                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
        FROM (
            SELECT profile_id, rank, device_id, start_ps, end_ps, 'all' AS subset FROM tagged
            UNION ALL
            SELECT profile_id, rank, device_id, start_ps, end_ps, 'compute' FROM tagged WHERE is_compute
        )
    )
),
unions AS (
    SELECT profile_id, rank, device_id,
        sum(run_ps) FILTER (WHERE subset = 'all') AS busy_ps,
        coalesce(sum(run_ps) FILTER (WHERE subset = 'compute'), 0) AS compute_ps,
        min(run_start) FILTER (WHERE subset = 'all') AS first_ps,
        max(run_end) FILTER (WHERE subset = 'all') AS last_ps
    FROM (
        SELECT profile_id, rank, device_id, subset, min(start_ps) AS run_start, max(end_ps) AS run_end,
            max(end_ps) - min(start_ps) AS run_ps
        FROM runs GROUP BY profile_id, rank, device_id, subset, run
    )
    GROUP BY ALL
)
SELECT
    profile_id, rank, device_id,
    CAST(last_ps - first_ps AS BIGINT) AS kernel_time_ps,
    CAST(last_ps - first_ps - busy_ps AS BIGINT) AS idle_ps,
    CAST(compute_ps AS BIGINT) AS compute_ps,
    CAST(busy_ps - compute_ps AS BIGINT) AS non_compute_ps,
    100 * (last_ps - first_ps - busy_ps) / nullif(last_ps - first_ps, 0) AS idle_pct,
    100 * compute_ps / nullif(last_ps - first_ps, 0) AS compute_pct,
    100 * (busy_ps - compute_ps) / nullif(last_ps - first_ps, 0) AS non_compute_pct
FROM unions
ORDER BY profile_id, device_id
