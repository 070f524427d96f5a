-- diagnose.exposed_communication: steps in which collectives run with no compute beside them:
-- communication that overlapping it with compute would hide.
--
-- XProf's overview page reports collective time not overlapped by compute as a share of step
-- time (moderate from 3%, high from 15%; a step is collective-bound from 30%) and suggests
-- overlapping communication with compute. The time is steps._bottleneck_steps'
-- exposed_collective_ps: no compute op runs while a collective does (an NCCL / RCCL kernel, a
-- synchronous or async XLA collective, a gloo / c10d collective on a host).
--
-- Saving: the exposed time overlap can hide, bounded by the compute there is to hide it behind:
-- per step and device least(exposed_collective_ps, compute_ps), compute_ps being the step's
-- compute_bound_ps + memory_bound_ps + other_compute_ps. A collective fully overlapped still takes
-- its time; the step only gets shorter by the exposed part compute can run beside, so a step with
-- 40 ms of exposed all-reduce and 10 ms of compute saves at most 10 ms. Still an upper bound: data
-- dependencies (the last gradient bucket's all-reduce, the first layer's all-gather) leave some
-- of it exposed whatever the schedule, and the compute it overlaps with runs slower when the
-- collective takes SMs and memory bandwidth. The rule fires on the exposed share, not the
-- saving: a profile whose collectives cannot be hidden still learns how exposed they are.
--
-- Subjects: the collectives with the most exposed time in the complete steps: async
-- collectives (GPU NCCL kernels, TPU async collectives) by async.async_ops' exposed_ps (the part
-- of the window no other op covers), synchronous XLA collective ops and host collectives
-- (gloo:all_reduce, c10d::) by their time in the steps.
--
-- One finding per profile whose complete steps spend at least $min_share of their time in
-- exposed collectives.
--
-- Parameters:
--   $min_share  DOUBLE  exposed collective share of step time from which the rule fires; XProf's moderate collective share (high: 15%, collective-bound: 30%) [range: 0..1] (default: 0.03)
--
-- Show: profile_id, rule, severity, expected_saving_share, title
--
-- Columns:
--   profile_id  VARCHAR  profile
--   job  VARCHAR  NULL (a finding about one profile)
--   rank  BIGINT  NULL
--   device  VARCHAR  the device with the largest exposed collective share in a step
--   step  BIGINT  that step
--   rule  VARCHAR  exposed_communication
--   severity  VARCHAR  high, medium or low (xprosql_severity of expected_saving_share)
--   title  VARCHAR  one line a person reads
--   evidence  VARCHAR  the numbers as a sentence
--   measures  MAP(VARCHAR, DOUBLE)  exposed_collective_ps, exposed_collective_share, compute_ps, overlappable_ps, worst_step_exposed_collective_share, steps_count
--   subjects  VARCHAR[]  the collectives with the most exposed time, most first
--   expected_saving_ps  BIGINT  the exposed collective time compute could hide, per device over the complete steps, ps
--   expected_saving_share  DOUBLE  that time's share of step time, 0..1
--   saving_method  VARCHAR  how the saving is estimated
--   fix  VARCHAR  what to change
--   reference  VARCHAR  where the rule comes from
WITH step_rows AS (
-- @include steps._bottleneck_steps
),
per_profile AS (
    SELECT
        profile_id,
        sum(exposed_collective_ps) AS exposed_ps,
        sum(compute_bound_ps + memory_bound_ps + other_compute_ps) AS compute_ps,
        sum(least(exposed_collective_ps, compute_bound_ps + memory_bound_ps + other_compute_ps)) AS overlappable_ps,
        sum(step_ps) AS device_step_ps,
        count(DISTINCT device_id) AS devices,
        count(*) AS step_rows,
        arg_max(device, exposed_collective_ps / nullif(step_ps, 0)) AS worst_device,
        arg_max(step, exposed_collective_ps / nullif(step_ps, 0)) AS worst_step,
        max(exposed_collective_ps / nullif(step_ps, 0)) AS worst_share
    FROM step_rows
    GROUP BY profile_id
),
found AS (
    SELECT p.*, p.exposed_ps / nullif(p.device_step_ps, 0) AS exposed_share,
        p.overlappable_ps / nullif(p.device_step_ps, 0) AS share
    FROM per_profile AS p
    WHERE p.exposed_ps / nullif(p.device_step_ps, 0) >= CAST($min_share AS DOUBLE)
),
found_steps AS (
    SELECT s.profile_id, s.device_id, s.device_kind, s.start_ps, s.end_ps
    FROM step_rows AS s SEMI JOIN found USING (profile_id)
),
async_ops AS (
-- @include async.async_ops
),
-- The collective ops by name, each distinct name classified once, into a column: as a filter on the events, or here
-- (DuckDB pushes it below the DISTINCT), the classification's regular expressions ran on every event of the profiles
-- (0.9 of 1.1 s over 100 profiles; the filter here, 0.4 of 0.7 s of CPU).
collective_names AS MATERIALIZED (
    SELECT op, category,
        xprosql_collective(op, category) IS NOT NULL AND NOT regexp_matches(op, '-(start|done)(\.[0-9]+)?$') AS collective
    FROM (SELECT DISTINCT coalesce(hlo_op, name) AS op, category FROM events
          WHERE profile_id IN (SELECT profile_id FROM found_steps))
),
-- Each collective's exposed time in the complete steps, by name.
collective_time AS (
    -- async collectives: the part of their window nothing else covers
    SELECT a.profile_id, coalesce(a.start_op, a.kind) AS name, a.exposed_ps AS ps
    FROM async_ops AS a
    JOIN found_steps AS s
      ON s.profile_id = a.profile_id AND s.device_id = a.device_id AND a.start_ps >= s.start_ps AND a.start_ps < s.end_ps
    WHERE a.paired AND a.kind NOT IN ('copy', 'host_offload', 'memset') AND NOT starts_with(a.kind, 'memcpy_')
    UNION ALL
    -- synchronous XLA collectives on a TPU's op line (async start / done ops are in async_ops), and collective
    -- events of a host that is the device (gloo, c10d, XLA:CPU): the device waits their whole time
    SELECT e.profile_id, coalesce(e.hlo_op, e.name), e.dur_ps
    FROM events AS e
    JOIN found_steps AS s
      ON s.profile_id = e.profile_id AND s.device_id = e.device_id AND e.start_ps >= s.start_ps AND e.start_ps < s.end_ps
    JOIN collective_names AS c ON c.op IS NOT DISTINCT FROM coalesce(e.hlo_op, e.name) AND c.category IS NOT DISTINCT FROM e.category
     AND c.collective
    LEFT JOIN tracks AS t ON t.profile_id = e.profile_id AND t.device_id = e.device_id AND t.track_id = e.track_id
    WHERE s.device_kind IN ('tpu', 'host')
      AND (s.device_kind = 'host' OR t.name = 'XLA Ops')
      AND e.name NOT IN ('record_param_comms')
),
by_name AS (
    SELECT profile_id, name, sum(ps) AS ps, count(*) AS n
    FROM collective_time GROUP BY profile_id, name
),
named AS (
    SELECT profile_id, list(name ORDER BY ps DESC, name)[1:5] AS subjects,
        arg_max(name, ps) AS top_name, max(ps) AS top_ps, arg_max(n, ps) AS top_n, sum(n) AS n
    FROM by_name WHERE ps > 0 GROUP BY profile_id
)
SELECT
    f.profile_id,
    CAST(NULL AS VARCHAR) AS job,
    CAST(NULL AS BIGINT) AS rank,
    f.worst_device AS device,
    f.worst_step AS step,
    'exposed_communication' AS rule,
    xprosql_severity(f.share) AS severity,
    printf('%s: collectives run with no compute beside them %.1f%% of step time; overlap could save %.1f%%',
        CASE WHEN f.exposed_share >= 0.3 THEN 'collective-bound' ELSE 'exposed communication' END,
        100 * f.exposed_share, 100 * f.share) AS title,
    printf('%s of %s step time per device runs collectives with no compute beside them (%.1f%%; worst step %s %.1f%%); '
           || 'the steps hold %s of compute per device to overlap them with, so overlap hides at most %s (%.1f%%)%s',
        xprosql_duration(f.exposed_ps / f.devices), xprosql_duration(f.device_step_ps / f.devices), 100 * f.exposed_share,
        coalesce(CAST(f.worst_step AS VARCHAR), '-'), 100 * f.worst_share,
        xprosql_duration(f.compute_ps / f.devices), xprosql_duration(f.overlappable_ps / f.devices), 100 * f.share,
        CASE WHEN n.top_name IS NULL THEN ''
             ELSE printf('; most exposed collective: %s (%d calls, %s of exposed time summed over devices)',
                         left(n.top_name, 120), n.top_n, xprosql_duration(n.top_ps)) END) AS evidence,
    MAP {'exposed_collective_ps': CAST(f.exposed_ps AS DOUBLE), 'exposed_collective_share': f.exposed_share,
         'compute_ps': CAST(f.compute_ps AS DOUBLE), 'overlappable_ps': CAST(f.overlappable_ps AS DOUBLE),
         'worst_step_exposed_collective_share': f.worst_share,
         'steps_count': CAST(f.step_rows AS DOUBLE) / f.devices} AS measures,
    coalesce(n.subjects, CAST([] AS VARCHAR[])) AS subjects,
    CAST(f.overlappable_ps / f.devices AS BIGINT) AS expected_saving_ps,
    f.share AS expected_saving_share,
    'per step and device, the exposed collective time (steps._bottleneck_steps exposed_collective_ps) up to the step''s '
        || 'compute time (compute_bound + memory_bound + other_compute): what overlapping could hide; an upper bound' AS saving_method,
    'Overlap communication with compute: PyTorch DDP(bucket_cap_mb=..., gradient_as_bucket_view=True) so gradient buckets '
        || 'all-reduce during backward; FSDP(backward_prefetch=BackwardPrefetch.BACKWARD_PRE, forward_prefetch=True, '
        || 'limit_all_gathers=True); JAX / XLA: let the scheduler overlap async collectives (GPU: '
        || '--xla_gpu_enable_latency_hiding_scheduler=true; TPU: --xla_tpu_enable_async_collective_fusion=true, '
        || '--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true, --xla_tpu_overlap_compute_collective_tc=true); '
        || 'fewer or smaller collectives (gradient accumulation, bf16 gradients); NCCL: check the transport '
        || '(NCCL_DEBUG=INFO: NVLink / IB rather than sockets), NCCL_ALGO / NCCL_PROTO, more NCCL_NCHANNELS' AS fix,
    'XProf overview page, collective time not overlapped (3% moderate, 15% high, 30% collective-bound); '
        || 'HTA comm/comp overlap; PyTorch DDP and FSDP documentation (bucket_cap_mb, backward_prefetch); '
        || 'XLA GPU flags guide (latency hiding scheduler)' AS reference
FROM found AS f
LEFT JOIN named AS n USING (profile_id)
ORDER BY expected_saving_ps DESC, f.profile_id
