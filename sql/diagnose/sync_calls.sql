-- diagnose.sync_calls: host calls that wait for the GPU inside steps (cudaDeviceSynchronize,
-- cudaStreamSynchronize, synchronous copies behind .item() / .cpu()): the GPU idle time
-- they cause.
--
-- Nsight Systems' expert-system rules cuda_api_sync (cudaDeviceSynchronize,
-- cudaStreamSynchronize), cuda_memcpy_sync (synchronous cudaMemcpy) and cuda_memset_sync
-- (synchronous cudaMemset) list these calls; this rule finds the same calls in the CUDA/HIP
-- API calls of a trace (table api_calls) and adds what nsys leaves to the reader, the time
-- they cost. A call synchronises when it is:
--   synchronize  (cuda|hip)(Device|Stream|Event|Ctx|Thread)Synchronize, the driver's
--                cu(Ctx|Stream|Event)Synchronize; cudaEventSynchronize too, which nsys leaves out
--                (it suggests it as the lighter wait): it blocks the host all the same, and an
--                event wait that waits for little costs little below
--   sync_copy    a copy or memset call without Async in its name (cudaMemcpy, hipMemcpy,
--                hipMemcpyWithStream, cudaMemset, cuMemcpyDtoH): nsys cuda_memcpy_sync / cuda_memset_sync
--   pageable_dtoh  an async copy (cudaMemcpyAsync) from the device to pageable host memory: CUDA
--                returns from it only once the copy is done (CUDA Runtime API manual, "API
--                synchronization behavior"); this is how Tensor.item(), .cpu(), .tolist() and
--                printing a CUDA tensor block (aten::_local_scalar_dense, aten::copy_), also in
--                traces whose cudaStreamSynchronize was not kept
-- Only calls starting inside a complete step (steps.steps complete IS NOT false) count.
--
-- Saving. While the host waits it launches nothing: once the GPU drains what was queued, it
-- sits idle until the host returns and its next op reaches the GPU. A call's window runs from
-- its start to the start of the first GPU op (kernel, copy or memset) launched after it
-- returns, on the GPUs its thread launches work on (every GPU of the profile when the thread
-- launches none), cut at the next sync call's start (windows never overlap) and at the step's
-- end; after a call past which the step launches nothing more (torch.cuda.synchronize() before
-- the profiler stops) nothing waits to start sooner, and its window is the call itself. The
-- window idle is the GPU's idle time in the window (diagnose._gpu_idle: steps.steps' idle time).
-- Without the call the host would reach its next launch the call's duration earlier, so the
-- idle shrinks by that much at most: a call saves min(window idle, call duration). A 10 us
-- cudaDeviceSynchronize followed by seconds of unrelated host work does not claim those seconds
-- (that idle is the host's, which gpu_gaps reports), while a loss.item() that waits for the
-- whole backward pass saves all the idle that follows it. Summed over calls and GPUs, over
-- diagnose._profile_steps' device step time. The idle a call saves may lie in a gap gpu_gaps
-- also reports: the two explain the same idle time, they do not add up. Where the host truly
-- needs the value (a data-dependent branch), the saving needs the read moved a step later.
--
-- One finding per profile whose sync calls would save at least $min_share of its step time.
--
-- Parameters:
--   $min_share  DOUBLE  saving share of step time from which the rule fires; nsys lists every sync call, 1% leaves out those whose cost is noise [range: 0..1] (default: 0.01)
--
-- Show: profile_id, rule, severity, expected_saving_share, title
--
-- Columns:
--   profile_id  VARCHAR  profile
--   job  VARCHAR  NULL (a finding about one profile)
--   rank  BIGINT  NULL
--   device  VARCHAR  the GPU with the largest saving
--   step  BIGINT  the step with the largest saving
--   rule  VARCHAR  sync_calls
--   severity  VARCHAR  high, medium or low (xprosql_severity of expected_saving_share)
--   title  VARCHAR  one line a person reads
--   evidence  VARCHAR  the numbers as a sentence, naming the calls and the ops that made them
--   measures  MAP(VARCHAR, DOUBLE)  sync_saving_ps (summed over GPUs), sync_saving_share, window_idle_ps (GPU idle from the calls to the next op, uncapped), sync_calls_count, sync_call_ps (host time in the calls), synchronize_count, sync_copy_count, pageable_dtoh_count
--   subjects  VARCHAR[]  the ops that made the calls (the outermost namespaced PyTorch op around each call, e.g. aten::item; the API name where no op encloses it), largest saving first
--   expected_saving_ps  BIGINT  the saving per device: the share times one device's step time, ps
--   expected_saving_share  DOUBLE  sync_saving_ps over the device step time, 0..1
--   saving_method  VARCHAR  how the saving is estimated
--   fix  VARCHAR  what to change
--   reference  VARCHAR  where the rule comes from
WITH gpu_idle AS MATERIALIZED (
-- @include diagnose._gpu_idle
),
profile_steps AS (
-- @include diagnose._profile_steps
),
gpu_steps AS (
    SELECT DISTINCT profile_id, device_id, device, step_index, step, step_start_ps, step_end_ps FROM gpu_idle
),
gpu_ops AS MATERIALIZED (
    SELECT profile_id, device_id, correlation_id, start_ps, event_id, NULL AS kind, NULL AS dst_kind
    FROM kernels WHERE start_ps IS NOT NULL AND profile_id IN (SELECT profile_id FROM gpu_steps)
    UNION ALL
    SELECT profile_id, device_id, correlation_id, start_ps, event_id, kind, dst_kind
    FROM memcpys WHERE start_ps IS NOT NULL AND profile_id IN (SELECT profile_id FROM gpu_steps)
),
calls AS MATERIALIZED (
    SELECT a.profile_id, a.event_id, a.track_id, CAST(a.name AS VARCHAR) AS api, a.start_ps, a.dur_ps, a.correlation_id
    FROM api_calls AS a
    WHERE a.start_ps IS NOT NULL AND a.profile_id IN (SELECT profile_id FROM gpu_steps)
),
-- The GPU op each launching call made (the first of a correlation id), with the call's start.
launches AS MATERIALIZED (
    SELECT o.profile_id, o.device_id, o.start_ps AS op_start_ps, c.track_id, c.start_ps AS launch_start_ps
    FROM gpu_ops AS o
    JOIN (SELECT * FROM calls WHERE correlation_id IS NOT NULL
          QUALIFY row_number() OVER (PARTITION BY profile_id, correlation_id ORDER BY start_ps, event_id) = 1) AS c
      USING (profile_id, correlation_id)
),
-- The calls that block the host until the GPU is done.
sync_calls AS MATERIALIZED (
    SELECT c.*,
        CASE WHEN regexp_matches(c.api, '^(cuda|hip)(Device|Stream|Event|Ctx|Thread)Synchronize|^cu(Ctx|Stream|Event)Synchronize')
                 THEN 'synchronize'
             WHEN regexp_matches(c.api, '^(cuda|hip|cu)Mem(cpy|set)') AND NOT contains(c.api, 'Async') THEN 'sync_copy'
             ELSE 'pageable_dtoh' END AS sync_kind
    FROM calls AS c
    WHERE regexp_matches(c.api, '^(cuda|hip)(Device|Stream|Event|Ctx|Thread)Synchronize|^cu(Ctx|Stream|Event)Synchronize')
       OR (regexp_matches(c.api, '^(cuda|hip|cu)Mem(cpy|set)') AND NOT contains(c.api, 'Async'))
       OR (regexp_matches(c.api, '^(cuda|hip|cu)Memcpy') AND EXISTS (
              SELECT 1 FROM gpu_ops AS o
              WHERE o.profile_id = c.profile_id AND o.correlation_id = c.correlation_id
                AND o.kind IN ('DtoH', 'HtoH') AND o.dst_kind = 'Pageable'))
),
-- The GPUs a call waits on: those its thread launches work on, else every GPU of the profile.
thread_gpus AS (
    SELECT DISTINCT profile_id, track_id, device_id FROM launches
),
call_gpus AS (
    SELECT s.*, t.device_id FROM sync_calls AS s JOIN thread_gpus AS t USING (profile_id, track_id)
    UNION ALL
    SELECT s.*, g.device_id
    FROM sync_calls AS s
    JOIN (SELECT DISTINCT profile_id, device_id FROM gpu_steps) AS g USING (profile_id)
    WHERE NOT EXISTS (SELECT 1 FROM thread_gpus AS t WHERE t.profile_id = s.profile_id AND t.track_id = s.track_id)
),
-- The sync calls in complete steps, each with the step holding its start.
in_steps AS (
    SELECT c.*, s.device, s.step_index, s.step, s.step_start_ps, s.step_end_ps
    FROM call_gpus AS c
    JOIN gpu_steps AS s
      ON s.profile_id = c.profile_id AND s.device_id = c.device_id
     AND c.start_ps >= s.step_start_ps AND c.start_ps < s.step_end_ps
),
-- The earliest start of a GPU op launched at or after each instant: suffix minimum by launch time.
next_ops AS (
    SELECT profile_id, device_id, launch_start_ps,
        min(op_start_ps) OVER (PARTITION BY profile_id, device_id ORDER BY launch_start_ps DESC
                               ROWS UNBOUNDED PRECEDING) AS next_op_start_ps
    FROM launches
),
with_next AS (
    SELECT i.*, n.next_op_start_ps
    FROM in_steps AS i
    ASOF LEFT JOIN next_ops AS n
      ON n.profile_id = i.profile_id AND n.device_id = i.device_id AND n.launch_start_ps >= i.start_ps + i.dur_ps
),
windows AS (
    SELECT *,
        -- no op of the step launched after the call: nothing waits to start sooner, the window is the call
        least(CASE WHEN next_op_start_ps IS NULL OR next_op_start_ps >= step_end_ps THEN least(start_ps + dur_ps, step_end_ps)
                   ELSE greatest(next_op_start_ps, start_ps + dur_ps) END,
              coalesce(lead(start_ps) OVER (PARTITION BY profile_id, device_id ORDER BY start_ps, event_id), step_end_ps))
            AS window_end_ps
    FROM with_next
),
-- The GPU's idle time inside each window.
window_idle AS (
    SELECT w.profile_id, w.device_id, w.event_id,
        -- (least and greatest skip NULLs: a window without gaps must not count itself)
        coalesce(sum(least(g.end_ps, w.window_end_ps) - greatest(g.start_ps, w.start_ps)) FILTER (WHERE g.gap_ps IS NOT NULL), 0) AS idle_ps
    FROM windows AS w
    LEFT JOIN gpu_idle AS g
      ON g.profile_id = w.profile_id AND g.device_id = w.device_id AND g.step_index = w.step_index
     AND g.start_ps < w.window_end_ps AND g.end_ps > w.start_ps
    GROUP BY ALL
),
-- Each call's saving: its window's idle time, at most its duration.
call_savings AS (
    SELECT w.*, i.idle_ps AS window_idle_ps, least(i.idle_ps, w.dur_ps) AS saving_ps
    FROM windows AS w
    JOIN window_idle AS i USING (profile_id, device_id, event_id)
),
per_profile AS (
    SELECT profile_id, sum(saving_ps) AS saving_ps, sum(window_idle_ps) AS window_idle_ps
    FROM call_savings GROUP BY profile_id
),
-- The profiles whose calls save enough to report.
firing AS (
    SELECT p.profile_id
    FROM per_profile AS p
    JOIN profile_steps AS s USING (profile_id)
    WHERE p.saving_ps / nullif(s.device_step_ps, 0) >= CAST($min_share AS DOUBLE)
),
-- The PyTorch ops around each call: its parent chain among the cpu_ops of its thread. Only the threads of the calls
-- in steps of the profiles that report: nesting every thread that makes a sync call was most of this module's time.
call_threads AS (
    SELECT DISTINCT profile_id, track_id FROM windows WHERE profile_id IN (SELECT profile_id FROM firing)
),
nesting_events AS (
    SELECT e.profile_id, e.track_id, e.event_id, e.start_ps, e.dur_ps
    FROM events AS e SEMI JOIN call_threads USING (profile_id, track_id)
    WHERE e.category = 'cpu_op' AND e.start_ps IS NOT NULL
    UNION ALL
    SELECT s.profile_id, s.track_id, s.event_id, s.start_ps, s.dur_ps
    FROM sync_calls AS s SEMI JOIN call_threads USING (profile_id, track_id)
),
nesting AS MATERIALIZED (
-- @include ops._nesting
),
chain AS (
    WITH RECURSIVE up(profile_id, event_id, ancestor_id, hops) AS (
        SELECT s.profile_id, s.event_id, n.parent_id, 1
        FROM sync_calls AS s JOIN nesting AS n USING (profile_id, event_id)
        WHERE n.parent_id IS NOT NULL
        UNION ALL
        SELECT u.profile_id, u.event_id, n.parent_id, u.hops + 1
        FROM up AS u JOIN nesting AS n ON n.profile_id = u.profile_id AND n.event_id = u.ancestor_id
        WHERE n.parent_id IS NOT NULL
    )
    SELECT * FROM up
),
-- The op named for a call: the outermost namespaced op around it (aten::item, not the
-- record_function range "forward" above it), else the innermost op.
issuers AS (
    SELECT c.profile_id, c.event_id,
        coalesce(arg_max(CAST(e.name AS VARCHAR), c.hops) FILTER (WHERE contains(e.name, '::')),
                 arg_min(CAST(e.name AS VARCHAR), c.hops)) AS outer_op,
        arg_min(CAST(e.name AS VARCHAR), c.hops) AS inner_op
    FROM chain AS c JOIN events AS e ON e.profile_id = c.profile_id AND e.event_id = c.ancestor_id
    GROUP BY ALL
),
per_call AS (
    SELECT c.*, o.outer_op, o.inner_op,
        coalesce(o.outer_op, c.api) AS issuer,
        coalesce(o.outer_op || CASE WHEN o.inner_op <> o.outer_op THEN ' > ' || o.inner_op ELSE '' END || ': ', '') || c.api AS call_path
    FROM call_savings AS c
    SEMI JOIN firing USING (profile_id)
    LEFT JOIN issuers AS o USING (profile_id, event_id)
),
paths AS (
    SELECT profile_id, call_path, count(*) AS calls, sum(saving_ps) AS saving_ps, sum(dur_ps) AS call_ps
    FROM per_call GROUP BY ALL
),
path_text AS (
    SELECT profile_id,
        string_agg(printf('%s (%d calls, %s blocked, %s saved)', call_path, calls, xprosql_duration(call_ps), xprosql_duration(saving_ps)),
                   '; ' ORDER BY saving_ps DESC, calls DESC, call_path) FILTER (WHERE rn <= 3) AS paths
    FROM (SELECT *, row_number() OVER (PARTITION BY profile_id ORDER BY saving_ps DESC, calls DESC, call_path) AS rn FROM paths)
    GROUP BY profile_id
),
subjects AS (
    SELECT profile_id, list(issuer ORDER BY saving_ps DESC, calls DESC, issuer)[1:5] AS subjects
    FROM (SELECT profile_id, issuer, sum(saving_ps) AS saving_ps, count(*) AS calls FROM per_call GROUP BY ALL)
    GROUP BY profile_id
),
per_step AS (
    SELECT profile_id, device, step, sum(saving_ps) AS saving_ps FROM per_call GROUP BY ALL
),
-- Host time in the calls: each call once, whatever the number of GPUs it waits on.
call_time AS (
    SELECT profile_id, sum(dur_ps) AS call_ps, count(*) AS calls,
        count(*) FILTER (WHERE sync_kind = 'synchronize') AS synchronize_calls,
        count(*) FILTER (WHERE sync_kind = 'sync_copy') AS sync_copy_calls,
        count(*) FILTER (WHERE sync_kind = 'pageable_dtoh') AS pageable_dtoh_calls,
        string_agg(DISTINCT api, ', ' ORDER BY api) AS apis
    FROM sync_calls SEMI JOIN per_call USING (profile_id, event_id)
    GROUP BY profile_id
),
found AS (
    SELECT p.*, c.call_ps, c.calls, c.synchronize_calls, c.sync_copy_calls, c.pageable_dtoh_calls, c.apis,
        s.device_step_ps, s.step_ps, s.devices,
        least(p.saving_ps / nullif(s.device_step_ps, 0), 1.0) AS share,
        (SELECT arg_max(x.device, x.saving_ps) FROM per_step AS x WHERE x.profile_id = p.profile_id) AS worst_device,
        (SELECT arg_max(x.step, x.saving_ps) FROM per_step AS x WHERE x.profile_id = p.profile_id) AS worst_step
    FROM per_profile AS p
    SEMI JOIN firing USING (profile_id)
    JOIN call_time AS c USING (profile_id)
    JOIN profile_steps AS s USING (profile_id)
)
SELECT
    f.profile_id,
    CAST(NULL AS VARCHAR) AS job,
    CAST(NULL AS BIGINT) AS rank,
    f.worst_device AS device,
    f.worst_step AS step,
    'sync_calls' AS rule,
    xprosql_severity(f.share) AS severity,
    printf('sync calls: the host waits for the GPU in %s, idling it %.1f%% of step time', f.apis, 100 * f.share) AS title,
    printf('%d synchronising calls in complete steps (%d synchronize, %d synchronous copy/memset, %d copies to pageable host memory) '
        || 'blocked the host %s; the GPU idled %s from their starts to its next op (window idle), of which %s per device, %.1f%% of '
        || '%s step time, is the saving (each call: its window idle, at most its duration); by call: %s',
        f.calls, f.synchronize_calls, f.sync_copy_calls, f.pageable_dtoh_calls, xprosql_duration(f.call_ps),
        xprosql_duration(f.window_idle_ps / f.devices), xprosql_duration(f.saving_ps / f.devices), 100 * f.share,
        xprosql_duration(f.step_ps), t.paths) AS evidence,
    MAP {'sync_saving_ps': CAST(f.saving_ps AS DOUBLE), 'sync_saving_share': f.share,
         'window_idle_ps': CAST(f.window_idle_ps AS DOUBLE), 'sync_calls_count': CAST(f.calls AS DOUBLE),
         'sync_call_ps': CAST(f.call_ps AS DOUBLE), 'synchronize_count': CAST(f.synchronize_calls AS DOUBLE),
         'sync_copy_count': CAST(f.sync_copy_calls AS DOUBLE), 'pageable_dtoh_count': CAST(f.pageable_dtoh_calls AS DOUBLE)} AS measures,
    coalesce(s.subjects, CAST([] AS VARCHAR[])) AS subjects,
    CAST(f.share * f.step_ps AS BIGINT) AS expected_saving_ps,
    f.share AS expected_saving_share,
    'per sync call in a complete step, the GPU idle time from its start to the start of the first GPU op launched after it '
        || 'returns (diagnose._gpu_idle), at most the call''s duration (how much earlier the host would launch without it); '
        || 'summed over calls and GPUs' AS saving_method,
    'Take the host-device syncs out of the step: keep losses and metrics on the GPU and read them (.item(), .cpu(), .tolist(), '
        || 'print) every N steps or one step late; copy device-to-host with tensor.to("cpu", non_blocking=True) into pinned memory '
        || 'and wait on a CUDA event (torch.cuda.Event().record(); event.synchronize() later) instead of torch.cuda.synchronize(); '
        || 'avoid data-dependent shapes (torch.nonzero, boolean masks) that sync; find every sync with '
        || 'torch.cuda.set_sync_debug_mode("warn")' AS fix,
    'Nsight Systems expert system rules cuda_api_sync, cuda_memcpy_sync and cuda_memset_sync (nsys analyze); CUDA Runtime API '
        || '"API synchronization behavior"; PyTorch "Performance Tuning Guide": avoid unnecessary CPU-GPU synchronization' AS reference
FROM found AS f
LEFT JOIN subjects AS s USING (profile_id)
LEFT JOIN path_text AS t USING (profile_id)
ORDER BY expected_saving_ps DESC, f.profile_id
