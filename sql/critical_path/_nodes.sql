-- critical_path._nodes: the nodes of Holistic Trace Analysis's critical-path graph (HTA 0.5,
-- hta/analyzers/critical_path_analysis.py; docs/reference.md, Critical path) of every step of
-- a Kineto trace: a start and an end node per CPU op, runtime / driver call and GPU kernel,
-- copy and memset of the step window.
--
-- XSpace GPU profiles (JAX, TensorFlow: GPU planes with kernels on streams) get the same graph from what
-- their stats allow: CPU nodes are the host's events (every event of a host thread line, each thread a
-- call stack; category host_event), the launches are the host events CUPTI correlates with a kernel or
-- copy (api_calls launch, the correlation_id stat), and windows are their steps (steps.steps from a Steps
-- line, group_id or step annotations: a step over every device, from its first start to its last end).
-- XSpace has no CUDA runtime calls by name: no call is known to block (no blocking nodes) and there are
-- no cuda_sync events (critical_path._edges says so in missing_edges).
--
-- Windows: each ProfilerStep#N instance as steps.steps gives it (source profiler_step; its
-- step_index, step and step_name), else the whole profile as one window (step NULL). HTA's
-- clipping: CPU events (cpu_op, cuda_runtime, cuda_driver on the host) whose start lies in
-- [window start, window end] and whose duration is above 0; GPU ops (hta._gpu_ops: kernels,
-- copies, memsets with a stream and a correlation id) whose launching call (the correlation
-- id, not the ac2g flows) starts in the window and lasts more than 0. user_annotation and
-- python_function events shape HTA's call stack only; they have no nodes here either.
--
-- Blocking calls (the edge into their end weighs 0, the wait being the GPU's time): HTA's
-- cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventQuery, cudaEventSynchronize,
-- cudaMemcpy, cudaMemcpyAsync, and, beyond HTA (which knows CUDA names only, and so on AMD
-- counts a hipDeviceSynchronize as CPU time), their HIP counterparts hipDeviceSynchronize,
-- hipStreamSynchronize, hipEventQuery, hipEventSynchronize, hipMemcpy, hipMemcpyAsync,
-- hipMemcpyWithStream.
--
-- Times: ps from profiles.start_ns; with $us_rounding every event is rounded to whole
-- microseconds as HTA's loader does (start up, end down, hta._gpu_ops's rule), for
-- like-for-like comparisons. With $include_last_step false, GPU ops launched in the last
-- ProfilerStep are left out, as HTA's loader drops them (its graph then has no last step).
-- Node ids: 2 x events.event_id for a start, + 1 for an end (unique in a profile).
--
-- Needs: a Kineto (PyTorch profiler) trace with CPU ops or runtime calls, or an XSpace profile with GPU kernels
--
-- Parameters:
--
-- Passes: $include_last_step $us_rounding (to its includes, with their defaults and meaning)
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   rank  BIGINT  distributed rank (profiles.rank), when the trace says
--   step_index  BIGINT  0-based window of the profile, by start (steps.steps step_index; 0 for a whole-profile window)
--   step  BIGINT  N of ProfilerStep#N; NULL for a whole-profile window
--   step_name  VARCHAR  the window's annotation (ProfilerStep#N), or 'profile'
--   window_start_ps  BIGINT  window start, ps
--   window_end_ps  BIGINT  window end, ps
--   node_id  BIGINT  2 x event_id for the start node, 2 x event_id + 1 for the end node
--   event_id  BIGINT  events.event_id of the op, call or GPU op
--   is_start  BOOLEAN  start node (else end node)
--   ts_ps  BIGINT  the node's time: the event's start or end, ps
--   event_start_ps  BIGINT  the event's start, ps
--   event_dur_ps  BIGINT  the event's duration, ps (rounded with $us_rounding)
--   node_kind  VARCHAR  cpu (op or runtime/driver call) or gpu (kernel, copy, memset)
--   category  VARCHAR  cpu_op, cuda_runtime, cuda_driver (Kineto's cat), host_event (an XSpace host event), kernel, memcpy or memset
--   name  VARCHAR  event name
--   device_id  INTEGER  devices.device_id: the host of a CPU event, the GPU of a GPU op
--   track_id  INTEGER  tracks.track_id: the thread of a CPU event, the stream line of a GPU op
--   stream_id  BIGINT  CUDA/HIP stream of a GPU op; NULL for CPU nodes
--   correlation_id  BIGINT  correlation id of a runtime call or GPU op
--   launch_event_id  BIGINT  GPU op: events.event_id of its launching call
--   launch_name  VARCHAR  GPU op: name of its launching call
--   launch_start_ps  BIGINT  GPU op: the launching call's start, ps
--   kernel_type  VARCHAR  GPU op: COMMUNICATION, MEMORY, COMPUTATION or OTHER (hta._gpu_ops)
--   blocking  BOOLEAN  a blocking synchronisation or copy call: the edge into its end weighs 0
WITH hta_gpu_ops AS (
-- @include hta._gpu_ops unordered
),
steps_steps AS (
-- @include steps.steps unordered
),
params AS (SELECT CAST($us_rounding AS BOOLEAN) AS us_rounding),
chosen_profiles AS (
    SELECT p.profile_id, p.rank, p.start_ns, p.duration_ps, p.format FROM profiles AS p
    WHERE p.format = 'kineto'
       OR (p.format = 'xspace' AND p.profile_id IN (SELECT profile_id FROM hta_gpu_ops WHERE launch_api = 'launch'))
),
-- Whole microseconds since the epoch, as HTA has them, back to ps (hta._gpu_ops's rule).
cpu_events AS (
    SELECT e.profile_id, e.event_id, e.device_id, e.track_id, e.name,
        CASE WHEN p.format = 'kineto' THEN e.category ELSE 'host_event' END AS category, e.correlation_id,
        CASE WHEN x.us_rounding THEN ((p.start_ns + e.start_ps // 1000 + 999) // 1000 * 1000 - p.start_ns) * 1000
             ELSE e.start_ps END AS s_ps,
        CASE WHEN x.us_rounding THEN ((p.start_ns + (e.start_ps + e.dur_ps) // 1000) // 1000 * 1000 - p.start_ns) * 1000
             ELSE e.start_ps + e.dur_ps END AS e_ps
    FROM events AS e
    JOIN chosen_profiles AS p USING (profile_id)
    JOIN devices AS d USING (profile_id, device_id)
    CROSS JOIN params AS x
    WHERE CASE WHEN p.format = 'kineto' THEN d.kind <> 'gpu' AND e.category IN ('cpu_op', 'cuda_runtime', 'cuda_driver')
               ELSE d.kind = 'host' END
      AND e.start_ps IS NOT NULL AND e.dur_ps IS NOT NULL
),
step_windows AS (
    SELECT DISTINCT s.profile_id, s.step_index, s.step, s.step_name, s.start_ps, s.end_ps
    FROM steps_steps AS s JOIN chosen_profiles AS p USING (profile_id)
    WHERE s.source = 'profiler_step' AND p.format = 'kineto'
    UNION ALL
    -- XSpace: a step over every device that marks it.
    SELECT profile_id, row_number() OVER (PARTITION BY profile_id ORDER BY start_ps, step) - 1, step, step_name, start_ps,
        end_ps
    FROM (
        SELECT s.profile_id, s.step, any_value(s.step_name) AS step_name, min(s.start_ps) AS start_ps, max(s.end_ps) AS end_ps
        FROM steps_steps AS s JOIN chosen_profiles AS p USING (profile_id)
        WHERE p.format = 'xspace' AND s.source IN ('steps_line', 'group_id', 'step_annotation') AND s.step IS NOT NULL
        GROUP BY s.profile_id, s.step
    )
),
raw_windows AS (
    SELECT profile_id, step_index, step, step_name, start_ps, end_ps FROM step_windows
    UNION ALL
    SELECT p.profile_id, 0, NULL, 'profile', 0, p.duration_ps
    FROM chosen_profiles AS p
    WHERE p.profile_id NOT IN (SELECT profile_id FROM step_windows)
),
windows AS (
    SELECT w.profile_id, p.rank, w.step_index, w.step, w.step_name,
        CASE WHEN x.us_rounding THEN ((p.start_ns + w.start_ps // 1000 + 999) // 1000 * 1000 - p.start_ns) * 1000
             ELSE w.start_ps END AS window_start_ps,
        CASE WHEN x.us_rounding THEN ((p.start_ns + w.end_ps // 1000) // 1000 * 1000 - p.start_ns) * 1000
             ELSE w.end_ps END AS window_end_ps
    FROM raw_windows AS w JOIN chosen_profiles AS p USING (profile_id) CROSS JOIN params AS x
),
cpu_kept AS (
    SELECT w.profile_id, w.rank, w.step_index, w.step, w.step_name, w.window_start_ps, w.window_end_ps,
        c.event_id, c.s_ps AS event_start_ps, c.e_ps - c.s_ps AS event_dur_ps, 'cpu' AS node_kind, c.category, c.name,
        c.device_id, c.track_id, CAST(NULL AS BIGINT) AS stream_id, c.correlation_id,
        CAST(NULL AS BIGINT) AS launch_event_id, CAST(NULL AS VARCHAR) AS launch_name,
        CAST(NULL AS BIGINT) AS launch_start_ps, CAST(NULL AS VARCHAR) AS kernel_type,
        c.name IN ('cudaDeviceSynchronize', 'cudaStreamSynchronize', 'cudaEventQuery', 'cudaEventSynchronize',
                   'cudaMemcpy', 'cudaMemcpyAsync', 'hipDeviceSynchronize', 'hipStreamSynchronize', 'hipEventQuery',
                   'hipEventSynchronize', 'hipMemcpy', 'hipMemcpyAsync', 'hipMemcpyWithStream') AS blocking
    FROM cpu_events AS c
    JOIN windows AS w ON w.profile_id = c.profile_id AND c.s_ps BETWEEN w.window_start_ps AND w.window_end_ps
    WHERE c.e_ps > c.s_ps
),
gpu_kept AS (
    SELECT l.profile_id, l.rank, l.step_index, l.step, l.step_name, l.window_start_ps, l.window_end_ps,
        g.event_id, g.start_ps, g.dur_ps, 'gpu', g.op_kind, g.name, g.device_id, k.track_id, g.stream_id, g.correlation_id,
        g.launch_event_id, g.launch_name, l.event_start_ps, g.kernel_type, false
    FROM hta_gpu_ops AS g
    JOIN cpu_kept AS l ON l.profile_id = g.profile_id AND l.event_id = g.launch_event_id
    JOIN events AS k ON k.profile_id = g.profile_id AND k.event_id = g.event_id
),
kept AS (
    SELECT * FROM cpu_kept
    UNION ALL
    SELECT * FROM gpu_kept
)
SELECT profile_id, rank, step_index, step, step_name, window_start_ps, window_end_ps,
    2 * event_id + CASE WHEN b.is_start THEN 0 ELSE 1 END AS node_id, event_id, b.is_start,
    CASE WHEN b.is_start THEN event_start_ps ELSE event_start_ps + event_dur_ps END AS ts_ps,
    event_start_ps, event_dur_ps, node_kind, category, name, device_id, track_id, stream_id, correlation_id,
    launch_event_id, launch_name, launch_start_ps, kernel_type, blocking
FROM kept CROSS JOIN (VALUES (true), (false)) AS b(is_start)
ORDER BY profile_id, step_index, ts_ps, node_id
