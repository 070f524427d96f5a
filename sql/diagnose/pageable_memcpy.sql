-- diagnose.pageable_memcpy: asynchronous copies between the GPU and pageable host memory
-- inside steps: copies that cannot overlap compute until the host memory is pinned.
--
-- Nsight Systems' expert-system rule cuda_memcpy_async lists the copies made by an async call
-- (cudaMemcpyAsync, any call with Async in its name) whose source or destination is pageable
-- host memory (CUPTI's memory kind PAGEABLE): such a copy goes through a staging buffer, the
-- call blocks the host, and the copy runs synchronously; nsys advises pinned memory. This rule
-- reads the same copies from the memcpys table (src_kind / dst_kind 'Pageable', as CUPTI and
-- Kineto record them: "Memcpy HtoD (Pageable -> Device)"), in complete steps only (steps.steps
-- complete IS NOT false), in both directions as nsys does (device-to-host copies to pageable
-- memory also block the host: diagnose.sync_calls counts the GPU idle that causes, this rule
-- the copy's own time, so the two never count the same instant). Copies made by synchronous
-- calls (cudaMemcpy) are sync_calls' (nsys cuda_memcpy_sync). ROCm traces that say only "Host",
-- and XSpace traces (their memcpy_details carry no memory kind), do not tell pageable from
-- pinned memory: they never show here.
--
-- Saving: the exposed copy time, the time a pageable copy runs while no other op (kernel,
-- other copy, memset) runs on the GPU, summed over GPUs and complete steps. From pinned memory
-- with non_blocking=True the copy is truly asynchronous: issued ahead (DataLoader
-- pin_memory=True with its prefetching, or on a side stream) it runs on a copy engine beside
-- compute, so its exposed time is what a fix can hide. It is computed as the step's busy time
-- (every op) less the busy time of the other ops (steps.steps' union of intervals for both).
-- Pinned copies are also faster (no staging copy), which this bound does not count.
--
-- One finding per profile whose exposed pageable copy time reaches $min_share of step time.
--
-- Parameters:
--   $min_share  DOUBLE  exposed pageable copy time, share of step time, from which the rule fires; nsys lists every such copy, 1% leaves out those whose cost is noise [range: 0..1] (default: 0.01)
--
-- Show: profile_id, rule, severity, expected_saving_share, title
--
-- Columns:
--   profile_id  VARCHAR  profile
--   job  VARCHAR  NULL (a finding about one profile)
--   rank  BIGINT  NULL
--   device  VARCHAR  the GPU with the most exposed pageable copy time
--   step  BIGINT  the step with the most exposed pageable copy time
--   rule  VARCHAR  pageable_memcpy
--   severity  VARCHAR  high, medium or low (xprosql_severity of expected_saving_share)
--   title  VARCHAR  one line a person reads
--   evidence  VARCHAR  the numbers as a sentence, naming the ops that made the copies
--   measures  MAP(VARCHAR, DOUBLE)  exposed_copy_ps (summed over GPUs), exposed_copy_share, copy_ps (the pageable copies' GPU time), copies_count, copy_bytes, htod_count, dtoh_count
--   subjects  VARCHAR[]  the ops that made the copies (the outermost namespaced PyTorch op around the launch, e.g. aten::to; the API name without one), longest copy time first
--   expected_saving_ps  BIGINT  the exposed copy time per device: the share times one device's step time, ps
--   expected_saving_share  DOUBLE  exposed_copy_ps over the device step time, 0..1
--   saving_method  VARCHAR  how the saving is estimated
--   fix  VARCHAR  what to change
--   reference  VARCHAR  where the rule comes from
WITH every_step AS (
-- @include steps.steps
),
profile_steps AS (
-- @include diagnose._profile_steps
),
gpu_steps AS MATERIALIZED (
    SELECT profile_id, device_id, device, step_index, step, start_ps AS step_start_ps, end_ps AS step_end_ps
    FROM every_step
    WHERE complete IS NOT false AND device_kind = 'gpu' AND wall_ps > 0
),
launch_calls AS (
    SELECT profile_id, correlation_id, event_id, CAST(name AS VARCHAR) AS api
    FROM api_calls
    WHERE correlation_id IS NOT NULL AND profile_id IN (SELECT profile_id FROM gpu_steps)
    QUALIFY row_number() OVER (PARTITION BY profile_id, correlation_id ORDER BY start_ps, event_id) = 1
),
-- GPU ops, the pageable copies of async calls marked (a copy of unknown call counts: Kineto keeps the call).
gpu_ops AS MATERIALIZED (
    SELECT profile_id, device_id, event_id, start_ps, start_ps + dur_ps AS end_ps, false AS pageable,
        NULL AS kind, NULL AS bytes, NULL AS api
    FROM kernels WHERE start_ps IS NOT NULL AND dur_ps > 0 AND profile_id IN (SELECT profile_id FROM gpu_steps)
    UNION ALL
    SELECT m.profile_id, m.device_id, m.event_id, m.start_ps, m.start_ps + m.dur_ps,
        coalesce(m.src_kind = 'Pageable' OR m.dst_kind = 'Pageable', false) AND coalesce(contains(l.api, 'Async'), true),
        CAST(m.kind AS VARCHAR), m.bytes, l.api
    FROM memcpys AS m
    LEFT JOIN launch_calls AS l USING (profile_id, correlation_id)
    WHERE m.start_ps IS NOT NULL AND m.dur_ps > 0 AND m.profile_id IN (SELECT profile_id FROM gpu_steps)
),
-- Each op clipped to the steps it overlaps, once in the set of every op and, unless a pageable
-- copy, once in the set of the others.
clipped AS (
    SELECT s.profile_id, s.device_id, s.step_index, x.op_set,
        greatest(o.start_ps, s.step_start_ps) AS start_ps, least(o.end_ps, s.step_end_ps) AS end_ps
    FROM gpu_steps AS s
    JOIN gpu_ops AS o
      ON o.profile_id = s.profile_id AND o.device_id = s.device_id
     AND o.start_ps < s.step_end_ps AND o.end_ps > s.step_start_ps
    JOIN (VALUES ('all'), ('others')) AS x(op_set) ON x.op_set = 'all' OR NOT o.pageable
    WHERE s.profile_id IN (SELECT profile_id FROM gpu_ops WHERE pageable)
),
reach AS (
    SELECT *, max(end_ps) OVER (PARTITION BY profile_id, device_id, step_index, op_set ORDER BY start_ps, end_ps
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach_ps
    FROM clipped
),
runs AS (
    SELECT *, sum(CASE WHEN reach_ps IS NULL OR start_ps > reach_ps THEN 1 ELSE 0 END)
        OVER (PARTITION BY profile_id, device_id, step_index, op_set ORDER BY start_ps, end_ps ROWS UNBOUNDED PRECEDING) AS run
    FROM reach
),
unions AS (
    SELECT profile_id, device_id, step_index, op_set, sum(end_ps - start_ps) AS busy_ps
    FROM (SELECT profile_id, device_id, step_index, op_set, run, min(start_ps) AS start_ps, max(end_ps) AS end_ps
          FROM runs GROUP BY ALL)
    GROUP BY ALL
),
-- Exposed pageable copy time per step: busy with every op less busy with the others.
exposed AS (
    SELECT s.profile_id, s.device_id, s.device, s.step_index, s.step,
        coalesce(a.busy_ps, 0) - coalesce(o.busy_ps, 0) AS exposed_ps
    FROM gpu_steps AS s
    JOIN unions AS a ON a.profile_id = s.profile_id AND a.device_id = s.device_id AND a.step_index = s.step_index AND a.op_set = 'all'
    LEFT JOIN unions AS o ON o.profile_id = s.profile_id AND o.device_id = s.device_id AND o.step_index = s.step_index AND o.op_set = 'others'
),
-- The pageable copies that start in a complete step, with the op that made each.
copies AS (
    SELECT o.*, s.step_index,
        coalesce(
            (SELECT arg_max(CAST(e.name AS VARCHAR), u.pos) FILTER (WHERE contains(e.name, '::'))
             FROM (SELECT unnest(f.around_op_ids) AS op_id, generate_subscripts(f.around_op_ids, 1) AS pos) AS u
             JOIN events AS e ON e.profile_id = f.profile_id AND e.event_id = u.op_id),
            f.op, o.api, 'unknown call') AS issuer
    FROM gpu_ops AS o
    JOIN gpu_steps AS s
      ON s.profile_id = o.profile_id AND s.device_id = o.device_id
     AND o.start_ps >= s.step_start_ps AND o.start_ps < s.step_end_ps
    LEFT JOIN framework_op_kernels AS f ON f.profile_id = o.profile_id AND f.event_id = o.event_id
    WHERE o.pageable
),
issuers AS (
    SELECT profile_id, issuer, count(*) AS copies, sum(end_ps - start_ps) AS copy_ps, sum(bytes) AS bytes,
        string_agg(DISTINCT kind, '/' ORDER BY kind) AS kinds
    FROM copies GROUP BY ALL
),
named AS (
    SELECT profile_id,
        list(issuer ORDER BY copy_ps DESC, issuer)[1:5] AS subjects,
        string_agg(printf('%s (%d %s copies, %s, %s)', issuer, copies, kinds, xprosql_duration(copy_ps),
                          CASE WHEN bytes IS NULL THEN '? bytes' ELSE printf('%.1f MB', bytes / 1e6) END),
                   '; ' ORDER BY copy_ps DESC, issuer) AS by_op
    FROM issuers GROUP BY profile_id
),
per_profile AS (
    SELECT profile_id, sum(exposed_ps) AS exposed_ps,
        arg_max(device, exposed_ps) AS worst_device, arg_max(step, exposed_ps) AS worst_step
    FROM exposed GROUP BY profile_id
),
copy_totals AS (
    SELECT profile_id, count(*) AS copies, sum(end_ps - start_ps) AS copy_ps, sum(bytes) AS bytes,
        count(*) FILTER (WHERE kind = 'HtoD') AS htod, count(*) FILTER (WHERE kind = 'DtoH') AS dtoh
    FROM copies GROUP BY profile_id
),
found AS (
    SELECT p.*, c.copies, c.copy_ps, c.bytes, c.htod, c.dtoh, s.device_step_ps, s.step_ps, s.devices,
        least(p.exposed_ps / nullif(s.device_step_ps, 0), 1.0) AS share
    FROM per_profile AS p
    JOIN copy_totals AS c USING (profile_id)
    JOIN profile_steps AS s USING (profile_id)
    WHERE p.exposed_ps / nullif(s.device_step_ps, 0) >= CAST($min_share AS DOUBLE)
)
SELECT
    f.profile_id,
    CAST(NULL AS VARCHAR) AS job,
    CAST(NULL AS BIGINT) AS rank,
    f.worst_device AS device,
    f.worst_step AS step,
    'pageable_memcpy' AS rule,
    xprosql_severity(f.share) AS severity,
    printf('pageable memory copies: %d copies to or from unpinned host memory hold the GPU %.1f%% of step time', f.copies, 100 * f.share) AS title,
    printf('%d async copies from or to pageable host memory in complete steps (%d host-to-device, %d device-to-host, %s) take %s '
        || 'of GPU time; %s per device, %.1f%% of %s step time, runs with no other op beside it (exposed); by op: %s',
        f.copies, f.htod, f.dtoh, CASE WHEN f.bytes IS NULL THEN 'bytes unknown' ELSE printf('%.1f MB', f.bytes / 1e6) END,
        xprosql_duration(f.copy_ps), xprosql_duration(f.exposed_ps / f.devices), 100 * f.share, xprosql_duration(f.step_ps),
        n.by_op) AS evidence,
    MAP {'exposed_copy_ps': CAST(f.exposed_ps AS DOUBLE), 'exposed_copy_share': f.share, 'copy_ps': CAST(f.copy_ps AS DOUBLE),
         'copies_count': CAST(f.copies AS DOUBLE), 'copy_bytes': CAST(f.bytes AS DOUBLE),
         'htod_count': CAST(f.htod AS DOUBLE), 'dtoh_count': CAST(f.dtoh AS DOUBLE)} AS measures,
    coalesce(n.subjects, CAST([] AS VARCHAR[])) AS subjects,
    CAST(f.share * f.step_ps AS BIGINT) AS expected_saving_ps,
    f.share AS expected_saving_share,
    'the time pageable copies run with no other op on the GPU (busy time of every op less that of the others, inside complete '
        || 'steps): what an asynchronous copy from pinned memory, issued ahead, overlaps with compute' AS saving_method,
    'Pin the host memory and copy asynchronously: DataLoader(pin_memory=True) (or tensor.pin_memory()) and '
        || 'tensor.to(device, non_blocking=True), issued a batch ahead (the DataLoader''s prefetching, or a copy on a side '
        || 'torch.cuda.Stream with wait_stream before use); keep device-to-host reads out of the step or copy into a pinned buffer '
        || '(torch.empty(..., pin_memory=True).copy_(t, non_blocking=True))' AS fix,
    'Nsight Systems expert system rule cuda_memcpy_async (async memcpy with pageable memory; nsys analyze); CUDA C++ Best Practices '
        || 'Guide, "Pinned Memory" and "Asynchronous and Overlapping Transfers with Computation"; PyTorch "Performance Tuning Guide"' AS reference
FROM found AS f
LEFT JOIN named AS n USING (profile_id)
ORDER BY expected_saving_ps DESC, f.profile_id
