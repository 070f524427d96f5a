-- fleet.profile_summary: one row per profile and device kind with its step time, busy
-- share and bottleneck shares: the columns to rank profiles of a fleet by.
--
-- Per profile (every row depends on one profile's rows), so it runs per share of
-- profiles on a Dask cluster like the analyses it builds on: steps (step times)
-- and memory_bound (the bottleneck shares, from the roofline).
--
-- Parameters: those of steps, memory_bound and roofline (included below).
--
-- Passes: $peak_flops_per_s $peak_hbm_bytes_per_s $peak_source (to its includes, with their defaults and meaning)
--
-- Needs: a device that runs ops: TPU XLA Ops, GPU kernels or copies, or on a host without accelerators XLA ops or PyTorch cpu_ops
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   host  VARCHAR  profiles.host
--   tags  MAP(VARCHAR, VARCHAR)  profiles.tags
--   time_ns  BIGINT  profile time: Task Environment start when recorded, else profiles.start_ns, ns
--   device_kind  VARCHAR  tpu, gpu, or host (steps.device_kind)
--   steps  BIGINT  steps of the profile on that device kind (all devices of the kind)
--   step_time_ps  BIGINT  median step wall time, ps
--   max_step_time_ps  BIGINT  longest step, ps
--   busy_fraction  DOUBLE  summed busy time over summed wall time of the steps
--   memory_bound_share  DOUBLE  share of device time in memory-bound ops (memory_bound profile row)
--   compute_bound_share  DOUBLE  share of device time in compute-bound ops
--   no_cost_data_share  DOUBLE  share of device time in ops without cost data
--   idle_share  DOUBLE  share of device time with no op running
--   flop_utilization  DOUBLE  FLOPs over device time and peak (memory_bound profile row)
--   hbm_utilization  DOUBLE  HBM bytes over device time and peak
WITH every_step AS (
-- @include steps.steps
),
-- XProf leaves the incomplete first and last steps of a long trace out (steps.complete);
-- so do we. NULL: a step stored by an older xprosql, kept.
steps AS (
    SELECT * FROM every_step WHERE complete IS NOT false
),
memory_bound AS (
-- @include ops.memory_bound
),
step_stats AS (
    SELECT
        profile_id,
        device_kind,
        count(*) AS steps,
        CAST(median(wall_ps) AS BIGINT) AS step_time_ps,
        max(wall_ps) AS max_step_time_ps,
        sum(busy_ps) / nullif(sum(wall_ps), 0) AS busy_fraction
    FROM steps
    GROUP BY ALL
),
bound AS (
    SELECT
        profile_id,
        CASE WHEN device_kind = 'cpu' THEN 'host' ELSE device_kind END AS device_kind,
        memory_bound_share, compute_bound_share, no_cost_data_share, idle_share, flop_utilization, hbm_utilization
    FROM memory_bound
    WHERE row_kind = 'profile'
)
SELECT
    p.profile_id,
    p.host,
    p.tags,
    coalesce(p.profile_start_time_ns, p.start_ns) AS time_ns,
    s.device_kind,
    s.steps,
    s.step_time_ps,
    s.max_step_time_ps,
    s.busy_fraction,
    b.memory_bound_share,
    b.compute_bound_share,
    b.no_cost_data_share,
    b.idle_share,
    b.flop_utilization,
    b.hbm_utilization
FROM profiles AS p
JOIN step_stats AS s USING (profile_id)
LEFT JOIN bound AS b USING (profile_id, device_kind)
ORDER BY p.profile_id, s.device_kind
