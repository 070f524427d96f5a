-- fleet.profile_summary: one row per profile and device kind with its step time, busy
-- share and bottleneck shares: the columns to rank profiles of a fleet by.
--
-- Per profile (every row depends on one profile's rows), so it runs per share of
-- profiles on a Dask cluster like the analysis it builds on: steps.bottlenecks, whose step
-- rows (complete steps, as XProf) it sums per device kind. Every share and utilization here
-- is of step time, and equals the bottlenecks analysis's on the same steps (its profile row,
-- for a profile of one device kind): one definition of each number. The shares of the ops'
-- span of device time (ops.memory_bound's span_* columns) are another quantity, named apart.
--
-- Parameters: those of steps.bottlenecks and what it includes.
--
-- Passes: $peak_flops_per_s $peak_hbm_bytes_per_s $peak_source (to its includes, with their defaults and meaning)
--
-- Needs: a device that runs ops: TPU XLA Ops, GPU kernels or copies, or on a host without accelerators XLA ops or PyTorch cpu_ops
--
-- Show: profile_id, host, device_kind, steps, step_time_ps, busy_fraction, primary_bottleneck, memory_bound_share, compute_bound_share, idle_share, step_flop_utilization
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   host  VARCHAR  profiles.host
--   tags  MAP(VARCHAR, VARCHAR)  profiles.tags
--   time_ns  BIGINT  profile time: Task Environment start when recorded, else profiles.start_ns, ns since epoch; NULL when neither is a date (clock_absolute false)
--   clock_absolute  BOOLEAN  the profile's times are on the wall clock; false: they count from the start of the profiling session (start_ns before 1970-01-12, as TensorFlow's XSpace files of 2020 and JAX on CPU write them) and no session start is recorded, so the profile has no date
--   device_kind  VARCHAR  tpu, gpu, or host (steps.device_kind)
--   steps  BIGINT  complete steps of the profile on that device kind (device-steps: every device of the kind)
--   step_time_ps  BIGINT  median step wall time over the device-steps, ps
--   max_step_time_ps  BIGINT  longest step, ps
--   busy_fraction  DOUBLE  summed busy time over summed step time, 0..1
--   memory_bound_share  DOUBLE  share of step time in memory-bound ops (steps.bottlenecks), 0..1
--   compute_bound_share  DOUBLE  share of step time in compute-bound ops, 0..1
--   other_compute_share  DOUBLE  share of step time in ops without cost data or peaks, 0..1
--   idle_share  DOUBLE  share of step time idle with nothing more to run in the step (steps.bottlenecks idle), 0..1
--   step_flop_utilization  DOUBLE  FLOPs over peak FLOP/s x step time (steps.bottlenecks), 0..1
--   step_hbm_utilization  DOUBLE  bytes accessed over peak HBM bandwidth x step time (steps.bottlenecks), 0..1
--   primary_bottleneck  VARCHAR  steps.bottlenecks' primary bottleneck of the profile (its profile row)
WITH bottlenecks AS (
-- @include steps.bottlenecks
),
step_rows AS (
    SELECT * FROM bottlenecks WHERE scope = 'step'
),
kinds AS (
    SELECT
        profile_id,
        device_kind,
        count(*) AS steps,
        CAST(median(step_ps) AS BIGINT) AS step_time_ps,
        max(step_ps) AS max_step_time_ps,
        sum(busy_ps) / nullif(sum(step_ps), 0) AS busy_fraction,
        sum(memory_bound_ps) / nullif(sum(step_ps), 0) AS memory_bound_share,
        sum(compute_bound_ps) / nullif(sum(step_ps), 0) AS compute_bound_share,
        sum(other_compute_ps) / nullif(sum(step_ps), 0) AS other_compute_share,
        sum(idle_ps) / nullif(sum(step_ps), 0) AS idle_share,
        sum(flops) / nullif(sum(flop_capacity), 0) AS step_flop_utilization,
        sum(bytes_accessed) / nullif(sum(byte_capacity), 0) AS step_hbm_utilization
    FROM step_rows
    GROUP BY ALL
)
SELECT
    p.profile_id,
    p.host,
    p.tags,
    coalesce(p.profile_start_time_ns, CASE WHEN p.start_ns >= 1000000000000000 THEN p.start_ns END) AS time_ns,
    time_ns IS NOT NULL AS clock_absolute,
    k.device_kind,
    CAST(k.steps AS BIGINT) AS steps,
    k.step_time_ps,
    CAST(k.max_step_time_ps AS BIGINT) AS max_step_time_ps,
    k.busy_fraction,
    k.memory_bound_share,
    k.compute_bound_share,
    k.other_compute_share,
    k.idle_share,
    k.step_flop_utilization,
    k.step_hbm_utilization,
    b.primary_bottleneck
FROM profiles AS p
JOIN kinds AS k USING (profile_id)
LEFT JOIN (SELECT profile_id, primary_bottleneck FROM bottlenecks WHERE scope = 'profile') AS b USING (profile_id)
ORDER BY p.profile_id, k.device_kind
