-- fleet_profiles: one row per profile and device kind with its step time, busy
-- share and bottleneck shares: the columns to rank profiles of a fleet by.
--
-- Per profile (every row depends on one profile's rows), so it runs per share of
-- profiles on a Dask cluster like the analyses it builds on: steps (step times)
-- and memory_bound (the bottleneck shares, from the roofline).
--
-- Parameters: those of steps, memory_bound and roofline (included below).
--
-- Columns:
--   profile_id            profile (profiles.profile_id)
--   host                  profiles.host
--   tags                  profiles.tags
--   time_ns               profile time: Task Environment start when recorded, else profiles.start_ns, ns
--   device_kind           tpu, gpu, or host (steps.device_kind)
--   steps                 steps of the profile on that device kind (all devices of the kind)
--   step_time_ps          median step wall time, ps
--   max_step_time_ps      longest step, ps
--   busy_fraction         summed busy time over summed wall time of the steps
--   memory_bound_share    share of device time in memory-bound ops (memory_bound profile row)
--   compute_bound_share   share of device time in compute-bound ops
--   no_cost_data_share    share of device time in ops without cost data
--   idle_share            share of device time with no op running
--   flop_utilization      FLOPs over device time and peak (memory_bound profile row)
--   hbm_utilization       HBM bytes over device time and peak
WITH steps AS (
-- @include steps
),
memory_bound AS (
-- @include memory_bound
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
