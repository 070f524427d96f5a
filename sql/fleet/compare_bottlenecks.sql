-- fleet.compare_bottlenecks: two cohorts of profiles side by side per bottleneck
-- category (compute-bound, memory-bound, other compute, exposed collectives,
-- exposed host offload, exposed DMA, launch overhead, input wait, host wait,
-- idle): time per profile and share of step time in each cohort, the largest
-- change first.
-- scope: fleet
--
-- Built on bottlenecks (included below; its profile rows, whose ten category
-- times sum to the step time; per share of profiles on a Dask cluster). Cohorts
-- as in fleet_compare: lists of profile ids, made by xprosql.fleet.compare from
-- SQL predicates on profiles.
--
-- Parameters:
--   $baseline   VARCHAR[]  profile ids of the baseline cohort (run.compare takes these or, as xprosql compare does, a SQL expression on profiles) [choices: profiles.profile_id]
--   $candidate  VARCHAR[]  profile ids of the candidate cohort (run.compare takes these or, as xprosql compare does, a SQL expression on profiles) [choices: profiles.profile_id]
--
-- Passes: $input_events $peak_flops_per_s $peak_hbm_bytes_per_s $peak_source (to its includes, with their defaults and meaning)
--
-- Columns:
--   device_kind  VARCHAR  bottlenecks.device_kind of the profile rows (tpu, gpu, host; joined by + for several)
--   bottleneck  VARCHAR  the category: compute_bound, memory_bound, other_compute, exposed_collective,
--                                  exposed_host_offload, exposed_dma, launch_overhead, input_wait, host_wait, idle
--   baseline_time_per_profile_ps  DOUBLE  category time per baseline profile, ps
--   candidate_time_per_profile_ps  DOUBLE  category time per candidate profile, ps
--   delta_time_per_profile_ps  DOUBLE  candidate minus baseline, signed (below 0: the candidate is faster), ps (rows sorted by its size)
--   baseline_share  DOUBLE  share of the baseline cohort's step time
--   candidate_share  DOUBLE  share of the candidate cohort's step time
--   delta_share  DOUBLE  candidate_share - baseline_share, signed, -1..1
--   baseline_primary_profiles  BIGINT  baseline profiles whose primary bottleneck is this category's
--   candidate_primary_profiles  BIGINT  candidate profiles whose primary bottleneck is this category's
WITH bottlenecks AS (
-- @include steps.bottlenecks
),
cohorts AS (
    SELECT DISTINCT unnest(CAST($baseline AS VARCHAR[])) AS profile_id, 'baseline' AS cohort
    UNION ALL
    SELECT DISTINCT unnest(CAST($candidate AS VARCHAR[])), 'candidate'
),
sizes AS (
    SELECT cohort, count(*) AS profiles FROM cohorts GROUP BY ALL
),
profile_rows AS (
    SELECT
        c.cohort, b.device_kind, b.step_ps, b.primary_bottleneck,
        b.compute_bound_ps AS compute_bound, b.memory_bound_ps AS memory_bound, b.other_compute_ps AS other_compute,
        b.exposed_collective_ps AS exposed_collective, b.exposed_host_offload_ps AS exposed_host_offload,
        b.exposed_dma_ps AS exposed_dma, b.launch_overhead_ps AS launch_overhead, b.input_wait_ps AS input_wait,
        b.host_wait_ps AS host_wait, b.idle_ps AS idle
    FROM bottlenecks AS b
    JOIN cohorts AS c USING (profile_id)
    WHERE b.scope = 'profile'
),
categories AS (
    UNPIVOT (SELECT * EXCLUDE (step_ps, primary_bottleneck) FROM profile_rows)
    ON compute_bound, memory_bound, other_compute, exposed_collective, exposed_host_offload, exposed_dma,
       launch_overhead, input_wait, host_wait, idle
    INTO NAME bottleneck VALUE time_ps
),
per_category AS (
    SELECT cohort, device_kind, bottleneck, sum(time_ps) AS time_ps FROM categories GROUP BY ALL
),
step_time AS (
    SELECT cohort, device_kind, sum(step_ps) AS step_ps FROM profile_rows GROUP BY ALL
),
primaries AS (
    -- bottlenecks.primary_bottleneck names: device_compute is other_compute, collective_bound exposed_collective, ...
    SELECT cohort, device_kind,
        CASE primary_bottleneck
            WHEN 'compute_bound' THEN 'compute_bound' WHEN 'memory_bound' THEN 'memory_bound'
            WHEN 'device_compute' THEN 'other_compute' WHEN 'collective_bound' THEN 'exposed_collective'
            WHEN 'host_offload_bound' THEN 'exposed_host_offload' WHEN 'data_transfer_bound' THEN 'exposed_dma'
            WHEN 'input_bound' THEN 'input_wait' WHEN 'launch_bound' THEN 'launch_overhead'
            WHEN 'host_bound' THEN 'host_wait' ELSE primary_bottleneck END AS bottleneck,
        count(*) AS profiles
    FROM profile_rows GROUP BY ALL
),
shares AS (
    SELECT p.cohort, p.device_kind, p.bottleneck,
           p.time_ps / s.profiles AS time_per_profile_ps,
           p.time_ps / nullif(t.step_ps, 0) AS share,
           coalesce(q.profiles, 0) AS primary_profiles
    FROM per_category AS p
    JOIN sizes AS s USING (cohort)
    JOIN step_time AS t USING (cohort, device_kind)
    LEFT JOIN primaries AS q USING (cohort, device_kind, bottleneck)
)
SELECT
    device_kind,
    bottleneck,
    coalesce(max(time_per_profile_ps) FILTER (WHERE cohort = 'baseline'), 0) AS baseline_time_per_profile_ps,
    coalesce(max(time_per_profile_ps) FILTER (WHERE cohort = 'candidate'), 0) AS candidate_time_per_profile_ps,
    candidate_time_per_profile_ps - baseline_time_per_profile_ps AS delta_time_per_profile_ps,
    max(share) FILTER (WHERE cohort = 'baseline') AS baseline_share,
    max(share) FILTER (WHERE cohort = 'candidate') AS candidate_share,
    candidate_share - baseline_share AS delta_share,
    coalesce(max(primary_profiles) FILTER (WHERE cohort = 'baseline'), 0) AS baseline_primary_profiles,
    coalesce(max(primary_profiles) FILTER (WHERE cohort = 'candidate'), 0) AS candidate_primary_profiles
FROM shares
GROUP BY ALL
ORDER BY abs(delta_time_per_profile_ps) DESC NULLS LAST, device_kind, bottleneck
