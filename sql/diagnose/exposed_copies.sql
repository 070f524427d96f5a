-- diagnose.exposed_copies: steps in which the device waits on copies with nothing else running:
-- host offload and DMA transfers (TPU), memcpy / memset (GPU) that overlapping or avoiding them would hide.
--
-- XProf's overview page calls a step data-transfer-bound when exposed data transfers reach 30% of its
-- time and suggests overlapping them with compute. The time is steps._bottleneck_steps'
-- exposed_host_offload_ps + exposed_dma_ps: no compute and no collective runs while a host-offload
-- copy window (S(5) shapes on TPU), another async copy window, or a GPU memcpy / memset is open.
--
-- Threshold: XProf has one level for data transfers, 30% (data-transfer-bound, in the title here);
-- the rule fires from $min_share = 5%, XProf's moderate level for input waits and the level from which
-- xprosql_severity calls a saving medium, so that exposed copies worth a tenth of the step are not
-- left out. Pass min_share=0.3 for XProf's level.
--
-- Saving: the exposed copy time itself. Unlike a collective, a copy can often be avoided rather
-- than only overlapped (keep a tensor on the device, offload less, copy once), and an asynchronous
-- copy from pinned memory runs beside compute; either takes the exposed time off the step. An
-- upper bound: a copy that feeds the next op can only be prefetched as far as the data is ready.
--
-- Subjects: the copies with the most exposed time in the complete steps, by async.async_ops'
-- exposed_ps (the part of the copy's window no other op covers): GPU copies by their kind
-- (Memcpy HtoD (Pageable -> Device), ...), TPU copies by their start op, kind and direction. The
-- evidence counts the GPU copies from or to pageable host memory, which CUDA cannot run
-- asynchronously (Nsight Systems rule cuda_memcpy_async).
--
-- One finding per profile whose complete steps wait on copies at least $min_share of their time.
--
-- Parameters:
--   $min_share  DOUBLE  exposed copy share of step time from which the rule fires; 5% (XProf's data-transfer-bound level is 30%: see above) [range: 0..1] (default: 0.05)
--
-- Show: profile_id, rule, severity, expected_saving_share, title
--
-- Columns:
--   profile_id  VARCHAR  profile
--   job  VARCHAR  NULL (a finding about one profile)
--   rank  BIGINT  NULL
--   device  VARCHAR  the device with the largest exposed copy share in a step
--   step  BIGINT  that step
--   rule  VARCHAR  exposed_copies
--   severity  VARCHAR  high, medium or low (xprosql_severity of expected_saving_share)
--   title  VARCHAR  one line a person reads
--   evidence  VARCHAR  the numbers as a sentence
--   measures  MAP(VARCHAR, DOUBLE)  exposed_host_offload_ps, exposed_dma_ps, exposed_copy_share, worst_step_exposed_copy_share, steps_count, copies_count, copy_bytes, pageable_copies_count
--   subjects  VARCHAR[]  the copies with the most exposed time, most first
--   expected_saving_ps  BIGINT  the exposed copy time per device over the complete steps, ps
--   expected_saving_share  DOUBLE  exposed copy share of step time, 0..1
--   saving_method  VARCHAR  how the saving is estimated
--   fix  VARCHAR  what to change
--   reference  VARCHAR  where the rule comes from
WITH step_rows AS (
-- @include steps._bottleneck_steps
),
per_profile AS (
    SELECT
        profile_id,
        sum(exposed_host_offload_ps) AS offload_ps,
        sum(exposed_dma_ps) AS dma_ps,
        sum(exposed_host_offload_ps + exposed_dma_ps) AS copy_ps,
        sum(step_ps) AS device_step_ps,
        count(DISTINCT device_id) AS devices,
        count(*) AS step_rows,
        arg_max(device, (exposed_host_offload_ps + exposed_dma_ps) / nullif(step_ps, 0)) AS worst_device,
        arg_max(step, (exposed_host_offload_ps + exposed_dma_ps) / nullif(step_ps, 0)) AS worst_step,
        max((exposed_host_offload_ps + exposed_dma_ps) / nullif(step_ps, 0)) AS worst_share
    FROM step_rows
    GROUP BY profile_id
),
found AS (
    SELECT p.*, p.copy_ps / nullif(p.device_step_ps, 0) AS share
    FROM per_profile AS p
    WHERE p.copy_ps / nullif(p.device_step_ps, 0) >= CAST($min_share AS DOUBLE)
),
found_steps AS (
    SELECT s.profile_id, s.device_id, s.start_ps, s.end_ps
    FROM step_rows AS s SEMI JOIN found USING (profile_id)
),
async_ops AS (
-- @include async.async_ops
),
-- The copies that start in the complete steps, with the part of their window nothing else covers.
step_copies AS (
    SELECT a.profile_id, a.device_kind, a.kind, a.direction, a.start_op, a.start_event_id, a.bytes, a.exposed_ps,
        CASE WHEN a.device_kind = 'gpu' THEN a.start_op
             ELSE printf('%s (%s%s)', a.start_op, a.kind, coalesce(' ' || a.direction, '')) END AS name
    FROM async_ops AS a
    JOIN found_steps AS s
      ON s.profile_id = a.profile_id AND s.device_id = a.device_id AND a.start_ps >= s.start_ps AND a.start_ps < s.end_ps
    WHERE a.paired AND (a.kind IN ('copy', 'host_offload', 'memset') OR starts_with(a.kind, 'memcpy_'))
),
pageable AS (
    SELECT c.profile_id, count(*) AS n
    FROM step_copies AS c
    JOIN memcpys AS m ON m.profile_id = c.profile_id AND m.event_id = c.start_event_id
    WHERE c.device_kind = 'gpu' AND 'Pageable' IN (m.src_kind, m.dst_kind)
    GROUP BY c.profile_id
),
copy_stats AS (
    SELECT profile_id, count(*) AS n, sum(bytes) AS bytes FROM step_copies GROUP BY profile_id
),
by_name AS (
    SELECT profile_id, name, sum(exposed_ps) AS ps, count(*) AS n
    FROM step_copies GROUP BY profile_id, name
),
named AS (
    SELECT profile_id, list(name ORDER BY ps DESC, name)[1:5] AS subjects,
        arg_max(name, ps) AS top_name, arg_max(n, ps) AS top_n
    FROM by_name WHERE ps > 0 GROUP BY profile_id
)
SELECT
    f.profile_id,
    CAST(NULL AS VARCHAR) AS job,
    CAST(NULL AS BIGINT) AS rank,
    f.worst_device AS device,
    f.worst_step AS step,
    'exposed_copies' AS rule,
    xprosql_severity(f.share) AS severity,
    printf('%s: the device waits on %s %.1f%% of step time',
        CASE WHEN f.share >= 0.3 THEN 'data-transfer-bound' ELSE 'exposed copies' END,
        CASE WHEN f.offload_ps >= f.dma_ps THEN 'host-offload copies' ELSE 'copies' END, 100 * f.share) AS title,
    printf('%s of %s step time per device waits on copies with no compute or collective running (%.1f%%: host offload %s, '
           || 'other DMA / memcpy / memset %s); worst step %s %.1f%%; %d copies in the steps (%s bytes)%s%s',
        xprosql_duration(f.copy_ps / f.devices), xprosql_duration(f.device_step_ps / f.devices), 100 * f.share,
        xprosql_duration(f.offload_ps / f.devices), xprosql_duration(f.dma_ps / f.devices),
        coalesce(CAST(f.worst_step AS VARCHAR), '-'), 100 * f.worst_share,
        coalesce(c.n, 0), coalesce(format('{:,}', c.bytes), 'unknown'),
        CASE WHEN n.top_name IS NULL THEN '' ELSE printf('; most exposed: %s (%d copies)', left(n.top_name, 120), n.top_n) END,
        CASE WHEN coalesce(pg.n, 0) = 0 THEN ''
             ELSE printf('; %d GPU copies from or to pageable host memory (not asynchronous)', pg.n) END) AS evidence,
    MAP {'exposed_host_offload_ps': CAST(f.offload_ps AS DOUBLE), 'exposed_dma_ps': CAST(f.dma_ps AS DOUBLE),
         'exposed_copy_share': f.share, 'worst_step_exposed_copy_share': f.worst_share,
         'steps_count': CAST(f.step_rows AS DOUBLE) / f.devices, 'copies_count': CAST(coalesce(c.n, 0) AS DOUBLE),
         'copy_bytes': CAST(c.bytes AS DOUBLE), 'pageable_copies_count': CAST(coalesce(pg.n, 0) AS DOUBLE)} AS measures,
    coalesce(n.subjects, CAST([] AS VARCHAR[])) AS subjects,
    CAST(f.copy_ps / f.devices AS BIGINT) AS expected_saving_ps,
    f.share AS expected_saving_share,
    'the device time waiting on copies with no compute or collective running (steps._bottleneck_steps '
        || 'exposed_host_offload_ps + exposed_dma_ps): what overlapping or avoiding the copies removes; an upper bound' AS saving_method,
    'Overlap or avoid the copies: PyTorch: pin host memory (DataLoader(pin_memory=True), tensor.pin_memory()) and copy '
        || 'with tensor.to(device, non_blocking=True), prefetch the next batch on a side torch.cuda.Stream, keep tensors on '
        || 'the device instead of moving them back and forth (.cpu(), .item(), .numpy() in the step); JAX / XLA host '
        || 'offload: offload fewer activations (jax.checkpoint policy save_and_offload_only_these_names / '
        || 'offload_dot_with_no_batch_dims), or let the scheduler start the copies earlier so compute hides them '
        || '(TPU: --xla_tpu_enable_latency_hiding_scheduler=true); jax.device_put the next batch while this step runs' AS fix,
    'XProf overview page, data-transfer-bound step (30%); Nsight Systems expert system rule cuda_memcpy_async '
        || '(pageable copies); CUDA C++ Best Practices Guide, "Asynchronous and Overlapping Transfers with Computation"' AS reference
FROM found AS f
LEFT JOIN copy_stats AS c USING (profile_id)
LEFT JOIN pageable AS pg USING (profile_id)
LEFT JOIN named AS n USING (profile_id)
ORDER BY expected_saving_ps DESC, f.profile_id
