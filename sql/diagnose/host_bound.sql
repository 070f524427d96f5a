-- diagnose.host_bound: steps whose device idles between its ops, waiting for the host to give it
-- the next one: the host (Python, framework, synchronising calls) is too slow to keep it busy.
--
-- XProf suggests a faster host when steps are host-processing-bound (50% of step time) and flags a
-- TensorCore idle for 10% of the step. The time is steps._bottleneck_steps' host_wait_ps: the device
-- idle, nothing launched to it yet (a launch in flight is launch_overhead_ps, diagnose.launch_bound;
-- an input read is input_wait_ps, diagnose.input_bound), and more of its work follows in the step.
-- The rule fires from $min_share = 10%, XProf's idle threshold: host_wait_ps is device idle time,
-- and a tenth of the step is already a medium saving; the title says host-bound from XProf's 50%.
--
-- Saving: the host wait itself. Whatever holds the host (Python overhead per op, .item() / .cpu()
-- syncs that stop it from running ahead, logging, a CPU op in the step), once the host stays ahead
-- of the device its gaps close: the device then runs back to back. An upper bound: some host work
-- (the first launch after a sync) stays on the critical path.
--
-- Evidence: what the host did meanwhile. The device's idle gaps are recomputed cheaply from its
-- ops (GPU kernels and copies, TPU XLA Ops): from the end of the work before to the start of the
-- next op in the same step (this also holds the launch and input waits counted apart above). The
-- host ops and runtime calls overlapping those gaps, by overlapped time (summed over devices and
-- threads; an op and the ops it calls each count), are the subjects; scopes (Kineto user
-- annotations, Python frames) and events longer than half their step say nothing and are left out.
-- The evidence also counts the synchronising runtime calls (cudaDeviceSynchronize,
-- cudaStreamSynchronize, cudaEventSynchronize, hip...) in the steps. A host that is the device
-- (CPU PyTorch, XLA:CPU) has no separate host: its waits are the framework's own time between ops,
-- and the subjects stay empty.
--
-- One finding per profile whose complete steps wait for the host at least $min_share of their time.
-- Only profiles with step markers (steps.source other than profile): without them the one "step"
-- is the whole capture, whose idle time is start-up, compilation and the end of the capture, not a
-- host falling behind its device (the MI300 and MI355 JAX samples: 81% and 99.8% "host wait").
--
-- Parameters:
--   $min_share  DOUBLE  host wait share of step time from which the rule fires; XProf's device idle threshold (host-processing-bound: 50%) [range: 0..1] (default: 0.1)
--
-- Show: profile_id, rule, severity, expected_saving_share, title
--
-- Columns:
--   profile_id  VARCHAR  profile
--   job  VARCHAR  NULL (a finding about one profile)
--   rank  BIGINT  NULL
--   device  VARCHAR  the device with the largest host wait share in a step
--   step  BIGINT  that step
--   rule  VARCHAR  host_bound
--   severity  VARCHAR  high, medium or low (xprosql_severity of expected_saving_share)
--   title  VARCHAR  one line a person reads
--   evidence  VARCHAR  the numbers as a sentence
--   measures  MAP(VARCHAR, DOUBLE)  host_wait_ps, host_wait_share, worst_step_host_wait_share, steps_count, idle_gaps_count, idle_gap_ps, sync_calls_count, sync_call_ps
--   subjects  VARCHAR[]  the host events overlapping the device's idle gaps most, most first
--   expected_saving_ps  BIGINT  the host wait per device over the complete steps, ps
--   expected_saving_share  DOUBLE  host wait share of step time, 0..1
--   saving_method  VARCHAR  how the saving is estimated
--   fix  VARCHAR  what to change
--   reference  VARCHAR  where the rule comes from
WITH step_rows AS (
-- @include steps._bottleneck_steps
),
per_profile AS (
    SELECT
        profile_id,
        sum(host_wait_ps) AS wait_ps,
        sum(step_ps) AS device_step_ps,
        count(DISTINCT device_id) AS devices,
        count(*) AS step_rows,
        arg_max(device, host_wait_ps / nullif(step_ps, 0)) AS worst_device,
        arg_max(step, host_wait_ps / nullif(step_ps, 0)) AS worst_step,
        max(host_wait_ps / nullif(step_ps, 0)) AS worst_share,
        bool_or(source NOT IN ('profile', 'unmarked')) AS marked
    FROM step_rows
    GROUP BY profile_id
),
found AS (
    SELECT p.*, p.wait_ps / nullif(p.device_step_ps, 0) AS share
    FROM per_profile AS p
    WHERE p.wait_ps / nullif(p.device_step_ps, 0) >= CAST($min_share AS DOUBLE) AND p.marked
),
-- step_key numbers each (profile, device, step): the as-of joins below match on it alone, not on four columns.
found_steps AS (
    SELECT s.profile_id, s.device_id, s.device_kind, s.start_ps, s.end_ps,
        dense_rank() OVER (ORDER BY s.profile_id, s.device_id, s.start_ps, s.end_ps) AS step_key
    FROM step_rows AS s SEMI JOIN found USING (profile_id)
),
found_devices AS (
    SELECT DISTINCT profile_id, device_id, device_kind FROM found_steps WHERE device_kind IN ('gpu', 'tpu')
),
-- The ops of the accelerators found: GPU kernels and copies, TPU XLA Ops.
device_ops AS (
    SELECT k.profile_id, k.device_id, k.start_ps, k.start_ps + k.dur_ps AS end_ps
    FROM kernels AS k SEMI JOIN found_devices AS d USING (profile_id, device_id)
    WHERE k.start_ps IS NOT NULL
    UNION ALL
    SELECT m.profile_id, m.device_id, m.start_ps, m.start_ps + m.dur_ps
    FROM memcpys AS m SEMI JOIN found_devices AS d USING (profile_id, device_id)
    WHERE m.start_ps IS NOT NULL
    UNION ALL
    SELECT e.profile_id, e.device_id, e.start_ps, e.start_ps + e.dur_ps
    FROM events AS e
    JOIN found_devices AS d USING (profile_id, device_id)
    JOIN tracks AS t USING (profile_id, device_id, track_id)
    WHERE d.device_kind = 'tpu' AND t.name = 'XLA Ops' AND e.start_ps IS NOT NULL
),
-- A gap: from the end of all earlier work to the start of an op that starts after it.
ordered AS (
    SELECT profile_id, device_id, start_ps,
        max(end_ps) OVER (PARTITION BY profile_id, device_id ORDER BY start_ps, end_ps
                          ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS previous_end_ps
    FROM device_ops
),
gaps AS (
    SELECT o.profile_id, o.device_id, s.step_key,
        greatest(coalesce(o.previous_end_ps, s.start_ps), s.start_ps) AS start_ps, o.start_ps AS end_ps
    FROM ordered AS o
    JOIN found_steps AS s
      ON s.profile_id = o.profile_id AND s.device_id = o.device_id AND o.start_ps > s.start_ps AND o.start_ps <= s.end_ps
    WHERE o.previous_end_ps IS NULL OR o.previous_end_ps < o.start_ps
),
-- A step's gaps on a device are disjoint (each starts after all earlier work ends): the gap time before each.
gap_runs AS (
    SELECT *, coalesce(sum(end_ps - start_ps) OVER (PARTITION BY step_key ORDER BY start_ps
                                                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before_ps
    FROM gaps
),
gap_stats AS (
    SELECT profile_id, count(*) AS n, sum(end_ps - start_ps) AS ps FROM gaps WHERE end_ps > start_ps GROUP BY profile_id
),
host_events AS (
    SELECT e.profile_id, e.name, e.start_ps, e.start_ps + e.dur_ps AS end_ps, e.dur_ps
    FROM events AS e
    JOIN devices AS d USING (profile_id, device_id)
    WHERE d.kind IN ('host', 'cpu') AND e.start_ps IS NOT NULL AND e.dur_ps > 0
      AND e.profile_id IN (SELECT profile_id FROM found_devices)
      -- ops and runtime calls, not the scopes around them (Kineto's annotations, Python frames, the trace)
      AND coalesce(e.category, '') NOT IN ('user_annotation', 'gpu_user_annotation', 'python_function', 'Trace')
),
-- Each host event within each step of a device found, shorter than half the step.
host_in_steps AS (
    SELECT h.profile_id, h.name, s.device_id, s.step_key,
        greatest(h.start_ps, s.start_ps) AS from_ps, least(h.end_ps, s.end_ps) AS to_ps
    FROM host_events AS h
    JOIN found_steps AS s ON s.profile_id = h.profile_id AND h.start_ps < s.end_ps AND h.end_ps > s.start_ps
    WHERE s.device_kind IN ('gpu', 'tpu') AND h.dur_ps * 2 < s.end_ps - s.start_ps
),
-- Its overlap with the step's gaps on the device: the gap time before its end less that before its start (each
-- the gap time before the last gap starting by then, plus that gap's part up to then), by two as-of joins where
-- pairing every event with every gap grows as their product.
gap_overlaps AS (
    SELECT h.profile_id, h.name,
        coalesce(e.before_ps + least(h.to_ps, e.end_ps) - e.start_ps, 0)
            - coalesce(b.before_ps + least(h.from_ps, b.end_ps) - b.start_ps, 0) AS ps
    FROM host_in_steps AS h
    ASOF LEFT JOIN gap_runs AS e ON e.step_key = h.step_key AND h.to_ps >= e.start_ps
    ASOF LEFT JOIN gap_runs AS b ON b.step_key = h.step_key AND h.from_ps >= b.start_ps
),
by_name AS (
    SELECT profile_id, name, sum(ps) AS ps FROM gap_overlaps GROUP BY profile_id, name
),
named AS (
    SELECT profile_id, list(name ORDER BY ps DESC, name)[1:5] AS subjects,
        list(printf('%s (%s)', left(name, 80), xprosql_duration(ps)) ORDER BY ps DESC, name)[1:3] AS top
    FROM by_name WHERE ps > 0 GROUP BY profile_id
),
-- Synchronising runtime calls in the steps of the accelerators found.
syncs AS (
    SELECT a.profile_id, count(*) AS n, sum(a.dur_ps) AS ps
    FROM api_calls AS a
    WHERE a.profile_id IN (SELECT profile_id FROM found_devices)
      AND regexp_matches(a.name, '^(cuda|hip)(Device|Stream|Event)Synchronize$|^cuStreamSynchronize$|^cuCtxSynchronize$')
      AND EXISTS (SELECT 1 FROM found_steps AS s
                  WHERE s.profile_id = a.profile_id AND a.start_ps >= s.start_ps AND a.start_ps < s.end_ps)
    GROUP BY a.profile_id
)
SELECT
    f.profile_id,
    CAST(NULL AS VARCHAR) AS job,
    CAST(NULL AS BIGINT) AS rank,
    f.worst_device AS device,
    f.worst_step AS step,
    'host_bound' AS rule,
    xprosql_severity(f.share) AS severity,
    printf('%s: the device waits for the host %.1f%% of step time',
        CASE WHEN f.share >= 0.5 THEN 'host-bound' ELSE 'host waits' END, 100 * f.share) AS title,
    printf('%s of %s step time per device the device idles with more of its work to come in the step (%.1f%%); '
           || 'worst step %s %.1f%%%s%s',
        xprosql_duration(f.wait_ps / f.devices), xprosql_duration(f.device_step_ps / f.devices), 100 * f.share,
        coalesce(CAST(f.worst_step AS VARCHAR), '-'), 100 * f.worst_share,
        CASE WHEN n.top IS NULL THEN
                 CASE WHEN EXISTS (SELECT 1 FROM found_devices AS d WHERE d.profile_id = f.profile_id) THEN ''
                      ELSE '; the device is the host: the waits are framework time between its ops' END
             ELSE printf('; in %d idle gaps (%s per device) the host ran: %s', g.n, xprosql_duration(g.ps / f.devices),
                         array_to_string(n.top, ', ')) END,
        CASE WHEN coalesce(y.n, 0) = 0 THEN ''
             ELSE printf('; %d synchronising calls (%s) in the steps', y.n, xprosql_duration(y.ps)) END) AS evidence,
    MAP {'host_wait_ps': CAST(f.wait_ps AS DOUBLE), 'host_wait_share': f.share, 'worst_step_host_wait_share': f.worst_share,
         'steps_count': CAST(f.step_rows AS DOUBLE) / f.devices,
         'idle_gaps_count': CAST(coalesce(g.n, 0) AS DOUBLE), 'idle_gap_ps': CAST(coalesce(g.ps, 0) AS DOUBLE),
         'sync_calls_count': CAST(coalesce(y.n, 0) AS DOUBLE), 'sync_call_ps': CAST(coalesce(y.ps, 0) AS DOUBLE)} AS measures,
    coalesce(n.subjects, CAST([] AS VARCHAR[])) AS subjects,
    CAST(f.wait_ps / f.devices AS BIGINT) AS expected_saving_ps,
    f.share AS expected_saving_share,
    'the device idle time with more of its work to come in the step (steps._bottleneck_steps host_wait_ps): '
        || 'what a host that stays ahead of the device removes; an upper bound' AS saving_method,
    'Keep the host ahead of the device: drop synchronising calls inside the step (.item(), .cpu(), .tolist(), '
        || 'print of device tensors, torch.cuda.synchronize(); torch.cuda.set_sync_debug_mode("warn") finds them); cut '
        || 'Python overhead per op (torch.compile, CUDA graphs: torch.compile(mode="reduce-overhead"); JAX: jit the whole '
        || 'step, dispatch several steps before jax.block_until_ready); move CPU work (metrics, logging, '
        || 'checkpointing) off the step or to another thread; a larger batch gives each launch more device work' AS fix,
    'XProf overview page: host-processing-bound (50%) and device idle (10%) suggestions; '
        || 'Nsight Systems expert system rules cuda_api_sync and gpu_gaps; PyTorch "Performance Tuning Guide" '
        || '(avoid unnecessary CPU-GPU synchronization)' AS reference
FROM found AS f
LEFT JOIN named AS n USING (profile_id)
LEFT JOIN gap_stats AS g USING (profile_id)
LEFT JOIN syncs AS y USING (profile_id)
ORDER BY expected_saving_ps DESC, f.profile_id
