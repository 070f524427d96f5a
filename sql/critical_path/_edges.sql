-- critical_path._edges: the edges of Holistic Trace Analysis's critical-path graph (HTA 0.5,
-- hta/analyzers/critical_path_analysis.py; docs/reference.md, Critical path) of every step
-- window of a Kineto trace, over the nodes of critical_path._nodes, with HTA's edge kinds,
-- weights and bound_by categories. xprosql.queries.critical_path takes the longest path.
--
-- CPU (per thread, the call stack of the window's ops and runtime / driver calls, depth first:
-- the nodes in time order, HTA's call-stack tie rules: ends before starts, a longer event
-- opens first and closes last): inside a top-level event each node links to the next,
-- operator, weight = the time between them, 0 into the end of a blocking call; the end of a
-- top-level event links to the start of the next with a weight-0 dependency edge (CPU idle
-- between top-level ops never counts). HTA walks its own call stack, which pops the newest
-- event at any end: where events on a thread overlap without nesting (a profiler artefact)
-- HTA's order differs, and past 1 us of overlap HTA refuses the graph (negative weight);
-- here the nodes keep time order.
--
-- GPU (per GPU op): operator start -> end, its duration. Then, as HTA: kernel_launch_delay
-- from the launching call's start to the op's start when the stream's queue was empty at the
-- launch (launches minus starts, per stream over the whole profile, launches being the calls
-- hta.queue_length counts, or with $launch_calls hta HTA's exact list) and the op ran first
-- after it (queue 0 at its start), the previous op of the stream in the window had ended before the call started, and so had a
-- cross-stream wait's source; otherwise kernel_kernel_delay from the previous op of the
-- stream in the window (its end) to this op's start, the gap; an op with neither (the queue
-- held another step's work and the window has no earlier op on the stream) has no incoming
-- GPU edge, as in HTA. Weights may be negative here (rounded or overlapping times); the
-- longest path counts them as 0, as HTA does.
--
-- Synchronisation (cuda_sync events; weight 0, sync_dependency): Context Sync links the
-- last op of every stream of its GPU (HTA: every stream of every GPU) started before the
-- sync ended to the end of its CPU call (cudaDeviceSynchronize ...); Stream Sync the last
-- op of its stream; Event Sync the op launched last on the recorded stream before the
-- matching cudaEventRecord (by wait_on_cuda_event_record_corr_id); Stream Wait Event links
-- that op's end to the start of the next op launched on the waiting stream from the calling
-- thread. A wait whose source and destination share a stream is left out (HTA refuses the
-- whole graph). Streams are keyed by GPU and stream here; HTA keys them by stream number
-- alone.
--
-- bound_by (HTA's): operator edges of CPU events cpu_bound, of GPU ops
-- gpu_communication_bound for collective kernels (hta._gpu_ops kernel_type COMMUNICATION:
-- HTA's ^nccl.*Kernel, also RCCL / HCCL), else gpu_compute_bound; kernel_kernel_delay
-- gpu_kernel_kernel_overhead; kernel_launch_delay gpu_kernel_launch_overhead; dependency and
-- sync edges none (weight 0). event_id names the event an edge's time belongs to, by HTA's
-- attribution (an operator edge: its source when that is a start, else its target when that
-- is an end, else the op enclosing both; a kernel-kernel gap: the previous op); a launch
-- delay names the launching call, a sync edge the synchronising call.
--
-- XSpace GPU profiles (critical_path._nodes): the launches are the host events CUPTI correlates with a GPU
-- op, counted in the stream queue; there are no cuda_sync events, so no sync_dependency edges.
--
-- missing_edges says, per window, which edges the trace cannot give: no cuda_sync events
-- (PyTorch records them with experimental_config=_ExperimentalConfig(enable_cuda_sync_events=
-- True)): no sync_dependency edges, a blocking call's wait then counts as 0 and the path
-- runs through the GPU only where a launch edge reaches it; GPU ops without their launching
-- call (left out); event waits without their cudaEventRecord; graph launches
-- (cudaGraphLaunch, hipGraphLaunch): every kernel of the graph links to the one launch call
-- (HTA links one); the queue does not count cudaGraphLaunch, so its kernels get no launch
-- delay, only kernel-kernel gaps; a trace without GPU ops (CPU edges only).
--
-- Needs: a Kineto (PyTorch profiler) trace with CPU ops or runtime calls, or an XSpace profile with GPU kernels
--
-- Parameters:
--   $launch_calls  VARCHAR  which calls count as launches in the stream queue: all (hta.queue_length's: every cu*/cuda*LaunchKernel*, runFunction and xprosql_launch_kind's CUDA and HIP calls) or hta (HTA 0.5's exact names, which miss cuLaunchKernelEx, as cuBLAS uses on Blackwell, and most HIP launches: their ops then get kernel-kernel gaps instead of launch delays) [choices: all, hta] (default: 'all')
--
-- Passes: $include_last_step $us_rounding (to its includes, with their defaults and meaning)
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   rank  BIGINT  distributed rank (profiles.rank), when the trace says
--   step_index  BIGINT  0-based window of the profile (critical_path._nodes)
--   step  BIGINT  N of ProfilerStep#N; NULL for a whole-profile window
--   step_name  VARCHAR  the window's annotation, or 'profile'
--   window_start_ps  BIGINT  window start, ps
--   window_end_ps  BIGINT  window end, ps
--   device_id  INTEGER  devices.device_id of the edge's line: the host of a CPU edge (a sync edge: the synchronising call's), the GPU of a GPU edge
--   track_id  INTEGER  tracks.track_id of that line: the CPU thread, or the GPU op's stream line
--   src_node  BIGINT  critical_path._nodes node_id the edge leaves
--   dst_node  BIGINT  node_id it enters
--   src_ts_ps  BIGINT  the source node's time, ps
--   dst_ts_ps  BIGINT  the target node's time, ps
--   edge_kind  VARCHAR  operator, dependency, kernel_launch_delay, kernel_kernel_delay or sync_dependency (HTA's critical_path_* edge types)
--   weight_ps  BIGINT  HTA's weight: dst_ts_ps - src_ts_ps for operator and delay edges (0 into a blocking call's end), 0 for dependency and sync edges, ps
--   event_id  BIGINT  events.event_id the edge's time is attributed to; NULL for dependency edges
--   name  VARCHAR  that event's name
--   bound_by  VARCHAR  cpu_bound, gpu_compute_bound, gpu_communication_bound, gpu_kernel_kernel_overhead or gpu_kernel_launch_overhead; NULL for weight-0 dependency and sync edges
--   missing_edges  VARCHAR[]  what the trace lacks for HTA's edges in this window (see above); empty when nothing
-- The profiles' events, read once: the CTEs below and their includes read them a dozen times, and a packed
-- warehouse's files hold other profiles' events beside them (every scan decodes those too).
WITH events AS MATERIALIZED (SELECT * FROM events),
critical_path_nodes AS (
-- @include critical_path._nodes unordered
),
hta_gpu_ops AS (
-- @include hta._gpu_ops unordered
),
params AS (SELECT CAST($us_rounding AS BOOLEAN) AS us_rounding),
chosen_profiles AS (
    SELECT p.profile_id, p.start_ns, p.format FROM profiles AS p
    WHERE p.profile_id IN (SELECT DISTINCT profile_id FROM critical_path_nodes)
),
windows AS (
    SELECT DISTINCT profile_id, rank, step_index, step, step_name, window_start_ps, window_end_ps FROM critical_path_nodes
),
-- CPU: each thread's nodes in depth-first order, with the open depth after each.
cpu_ordered AS (
    SELECT n.*,
        row_number() OVER w AS seq,
        sum(CASE WHEN n.is_start THEN 1 ELSE -1 END) OVER (w ROWS UNBOUNDED PRECEDING) AS depth_after,
        lag(n.node_id) OVER w AS prev_node,
        lag(n.ts_ps) OVER w AS prev_ts,
        lag(n.event_id) OVER w AS prev_event,
        lag(n.is_start) OVER w AS prev_is_start
    FROM critical_path_nodes AS n
    WHERE n.node_kind = 'cpu'
    WINDOW w AS (PARTITION BY n.profile_id, n.step_index, n.device_id, n.track_id
                 ORDER BY n.ts_ps, n.is_start,
                          CASE WHEN n.is_start THEN -n.event_dur_ps ELSE n.event_dur_ps END,
                          CASE WHEN n.is_start THEN n.event_id ELSE -n.event_id END)
),
cpu_steps AS (
    SELECT c.*, c.depth_after - CASE WHEN c.is_start THEN 1 ELSE -1 END AS depth_before
    FROM cpu_ordered AS c
    WHERE c.prev_node IS NOT NULL
),
openers AS (
    SELECT profile_id, step_index, device_id, track_id, seq, depth_after AS level, event_id
    FROM cpu_ordered WHERE is_start
),
cpu_edges AS (
    SELECT c.profile_id, c.step_index, c.device_id, c.track_id, c.prev_node AS src_node, c.node_id AS dst_node, c.prev_ts AS src_ts_ps,
        c.ts_ps AS dst_ts_ps,
        CASE WHEN c.is_start AND c.depth_before = 0 THEN 'dependency' ELSE 'operator' END AS edge_kind,
        CASE WHEN c.is_start AND c.depth_before = 0 THEN 0
             WHEN NOT c.is_start AND c.blocking THEN 0
             ELSE c.ts_ps - c.prev_ts END AS weight_ps,
        CASE WHEN c.is_start AND c.depth_before = 0 THEN NULL
             WHEN c.prev_is_start THEN c.prev_event
             WHEN NOT c.is_start THEN c.event_id
             ELSE c.opener_id END AS event_id,
        CASE WHEN c.is_start AND c.depth_before = 0 THEN NULL ELSE 'cpu_bound' END AS bound_by
    FROM (
        SELECT s.*, CAST(NULL AS BIGINT) AS opener_id FROM cpu_steps AS s
        WHERE NOT (s.is_start AND s.depth_before <> 0 AND NOT s.prev_is_start)
        UNION ALL
        -- From an end to a start inside an op: the op open at that depth encloses both (the join for these only).
        SELECT s.*, o.event_id FROM cpu_steps AS s
        ASOF LEFT JOIN openers AS o
          ON o.profile_id = s.profile_id AND o.step_index = s.step_index AND o.device_id = s.device_id
         AND o.track_id = s.track_id AND o.level = s.depth_before AND s.seq > o.seq
        WHERE s.is_start AND s.depth_before <> 0 AND NOT s.prev_is_start
    ) AS c
),
-- GPU ops of each window, with the previous op of their stream in the window.
gpu AS (
    SELECT n.*, n.event_start_ps + n.event_dur_ps AS end_ps,
        lag(n.event_id) OVER s AS prev_event,
        lag(n.event_start_ps + n.event_dur_ps) OVER s AS prev_end_ps
    FROM critical_path_nodes AS n
    WHERE n.node_kind = 'gpu' AND n.is_start
    WINDOW s AS (PARTITION BY n.profile_id, n.step_index, n.device_id, n.stream_id ORDER BY n.event_start_ps, n.event_id)
),
-- HTA's queue length per stream over the whole profile (hta.queue_length's launches).
queued AS (
    SELECT g.*, a.track_id AS launch_track_id, a.device_id AS launch_device_id
    FROM hta_gpu_ops AS g
    JOIN chosen_profiles USING (profile_id)
    JOIN events AS a ON a.profile_id = g.profile_id AND a.event_id = g.launch_event_id
    WHERE CASE WHEN $launch_calls = 'hta'
               THEN g.launch_name IN ('cudaLaunchKernel', 'cudaLaunchKernelExC', 'cuLaunchKernel', 'cudaMemcpyAsync',
                                      'cudaMemsetAsync', 'runFunction - job_prep_and_submit_for_execution',
                                      'hipLaunchKernel', 'hipExtModuleLaunchKernel', 'hipMemsetAsync', 'hipMemcpyAsync',
                                      'hipMemcpyWithStream')
               ELSE regexp_matches(g.launch_name, '(cuda.*LaunchKernel)|(cuLaunchKernel)|(^runFunction)')
                    OR xprosql_launch_kind(g.launch_name) IS NOT NULL END
          OR g.launch_api = 'launch'
),
queue_changes AS (
    SELECT profile_id, device_id, stream_id, event_id, launch_start_ps AS ts_ps, 1 AS delta FROM queued
    UNION ALL
    SELECT profile_id, device_id, stream_id, event_id, start_ps, -1 FROM queued
),
queue_series AS (
    SELECT profile_id, event_id, delta,
        sum(delta) OVER (PARTITION BY profile_id, device_id, stream_id ORDER BY ts_ps, delta DESC, event_id
                         ROWS UNBOUNDED PRECEDING) AS queue_length
    FROM queue_changes
),
queue_at AS (
    SELECT profile_id, event_id,
        max(CASE WHEN delta = 1 THEN queue_length END) AS queue_at_launch,
        max(CASE WHEN delta = -1 THEN queue_length END) AS queue_at_start
    FROM queue_series
    GROUP BY profile_id, event_id
),
-- cuda_sync events with their call, stream and the cudaEventRecord they wait on.
sync_raw AS (
    SELECT e.profile_id, e.event_id, e.name AS sync_kind, e.device_id, e.correlation_id, t.stream_id AS track_stream,
        CASE WHEN x.us_rounding THEN ((p.start_ns + (e.start_ps + e.dur_ps) // 1000) // 1000 * 1000 - p.start_ns) * 1000
             ELSE e.start_ps + e.dur_ps END AS sync_end_ps
    FROM events AS e
    JOIN chosen_profiles AS p USING (profile_id)
    JOIN tracks AS t USING (profile_id, device_id, track_id)
    CROSS JOIN params AS x
    WHERE e.category = 'cuda_sync' AND e.start_ps IS NOT NULL
),
sync_events AS (
    SELECT r.profile_id, r.event_id, r.sync_kind, r.device_id, r.correlation_id, r.sync_end_ps,
        coalesce(any_value(CASE WHEN s.stat = 'stream' AND s.int_value >= 0 AND s.int_value < 4294967295 THEN s.int_value END),
                 any_value(r.track_stream)) AS stream_id,
        any_value(CASE WHEN s.stat = 'wait_on_cuda_event_record_corr_id' THEN s.int_value END) AS record_corr,
        any_value(CASE WHEN s.stat = 'wait_on_stream' THEN s.int_value END) AS record_stream
    FROM sync_raw AS r
    LEFT JOIN event_stats AS s
      ON s.profile_id = r.profile_id AND s.event_id = r.event_id
     AND s.stat IN ('stream', 'wait_on_cuda_event_record_corr_id', 'wait_on_stream')
    GROUP BY r.profile_id, r.event_id, r.sync_kind, r.device_id, r.correlation_id, r.sync_end_ps
),
-- The synchronising CPU call of each sync event, as a node of a window (its end node).
sync_calls AS (
    SELECT s.*, n.step_index, n.node_id AS call_end_node, n.ts_ps AS call_end_ps, n.event_id AS call_event_id,
        n.name AS call_name, n.device_id AS call_device_id, n.track_id AS call_track_id,
        n.event_start_ps AS call_start_ps
    FROM sync_events AS s
    JOIN api_calls AS a ON a.profile_id = s.profile_id AND a.correlation_id = s.correlation_id
    JOIN critical_path_nodes AS n
      ON n.profile_id = a.profile_id AND n.event_id = a.event_id AND NOT n.is_start AND n.node_kind = 'cpu'
),
-- Each waited-on cudaEventRecord: its stream (from the waits that name it), its call and the op
-- launched last on that stream before it (HTA: the previous launch on the GPU and stream).
records AS (
    SELECT DISTINCT profile_id, device_id, record_corr, record_stream FROM sync_events
    WHERE record_stream > -1 AND record_corr > 0
),
record_calls AS (
    SELECT r.profile_id, r.device_id, r.record_corr, r.record_stream, min(a.start_ps) AS record_start_ps
    FROM records AS r
    JOIN api_calls AS a ON a.profile_id = r.profile_id AND a.correlation_id = r.record_corr
    GROUP BY ALL
),
record_sources AS (
    SELECT r.profile_id, r.record_corr, q.event_id AS src_event_id, q.stream_id AS src_stream_id
    FROM record_calls AS r
    ASOF JOIN queued AS q
      ON q.profile_id = r.profile_id AND q.device_id = r.device_id AND q.stream_id = r.record_stream
     AND r.record_start_ps >= q.launch_start_ps
),
context_sync_edges AS (
    SELECT c.profile_id, c.step_index, c.call_device_id, c.call_track_id, 2 * g.event_id + 1 AS src_node,
        c.call_end_node AS dst_node, g.end_ps AS src_ts_ps, c.call_end_ps AS dst_ts_ps, c.call_event_id AS event_id
    FROM sync_calls AS c
    JOIN (SELECT DISTINCT profile_id, step_index, device_id, stream_id FROM gpu) AS st
      ON st.profile_id = c.profile_id AND st.step_index = c.step_index AND st.device_id = c.device_id
    ASOF JOIN gpu AS g
      ON g.profile_id = st.profile_id AND g.step_index = st.step_index AND g.device_id = st.device_id
     AND g.stream_id = st.stream_id AND c.sync_end_ps >= g.event_start_ps
    WHERE c.sync_kind = 'Context Sync'
),
stream_sync_edges AS (
    SELECT c.profile_id, c.step_index, c.call_device_id, c.call_track_id, 2 * g.event_id + 1 AS src_node,
        c.call_end_node AS dst_node, g.end_ps AS src_ts_ps, c.call_end_ps AS dst_ts_ps, c.call_event_id AS event_id
    FROM sync_calls AS c
    ASOF JOIN gpu AS g
      ON g.profile_id = c.profile_id AND g.step_index = c.step_index AND g.device_id = c.device_id
     AND g.stream_id = c.stream_id AND c.sync_end_ps >= g.event_start_ps
    WHERE c.sync_kind = 'Stream Sync'
),
event_sync_edges AS (
    SELECT c.profile_id, c.step_index, c.call_device_id, c.call_track_id, 2 * g.event_id + 1 AS src_node,
        c.call_end_node AS dst_node, g.end_ps AS src_ts_ps, c.call_end_ps AS dst_ts_ps, c.call_event_id AS event_id
    FROM sync_calls AS c
    JOIN record_sources AS r ON r.profile_id = c.profile_id AND r.record_corr = c.record_corr
    JOIN gpu AS g ON g.profile_id = c.profile_id AND g.step_index = c.step_index AND g.event_id = r.src_event_id
    WHERE c.sync_kind = 'Event Sync'
),
-- Stream Wait Event: the next op launched on the waiting stream from the waiting thread waits for
-- the recorded op (the latest wait per destination, as HTA's map keeps the last).
stream_waits AS (
    SELECT c.profile_id, c.step_index, c.sync_end_ps, c.call_event_id, r.src_event_id, r.src_stream_id, q.event_id AS dst_event_id,
        q.stream_id AS dst_stream_id
    FROM sync_calls AS c
    JOIN record_sources AS r ON r.profile_id = c.profile_id AND r.record_corr = c.record_corr
    ASOF JOIN queued AS q
      ON q.profile_id = c.profile_id AND q.launch_device_id = c.call_device_id AND q.launch_track_id = c.call_track_id
     AND q.stream_id = c.stream_id AND q.launch_start_ps >= c.call_start_ps
    WHERE c.sync_kind = 'Stream Wait Event'
),
waits AS (
    SELECT w.profile_id, w.step_index, w.dst_event_id, w.src_event_id, w.call_event_id, s.end_ps AS src_end_ps
    FROM stream_waits AS w
    JOIN gpu AS s ON s.profile_id = w.profile_id AND s.step_index = w.step_index AND s.event_id = w.src_event_id
    WHERE w.src_stream_id <> w.dst_stream_id
    QUALIFY row_number() OVER (PARTITION BY w.profile_id, w.step_index, w.dst_event_id ORDER BY w.sync_end_ps DESC) = 1
),
gpu_classified AS (
    SELECT g.*, q.queue_at_launch, q.queue_at_start, w.src_event_id AS wait_src_event_id, w.src_end_ps AS wait_src_end_ps,
        w.call_event_id AS wait_call_event_id,
        coalesce(q.queue_at_launch = 1 AND q.queue_at_start = 0, false)
          AND (g.prev_end_ps IS NULL OR g.prev_end_ps < g.launch_start_ps)
          AND (w.src_end_ps IS NULL OR w.src_end_ps < g.launch_start_ps) AS launch_delay,
        g.prev_event IS NOT NULL AND (w.src_end_ps IS NULL OR w.src_end_ps < g.prev_end_ps) AS kernel_kernel
    FROM gpu AS g
    LEFT JOIN queue_at AS q USING (profile_id, event_id)
    LEFT JOIN waits AS w ON w.profile_id = g.profile_id AND w.step_index = g.step_index AND w.dst_event_id = g.event_id
),
gpu_edges AS (
    SELECT profile_id, step_index, device_id, track_id, node_id AS src_node, node_id + 1 AS dst_node, event_start_ps AS src_ts_ps,
        end_ps AS dst_ts_ps, 'operator' AS edge_kind, event_dur_ps AS weight_ps, event_id,
        CASE WHEN kernel_type = 'COMMUNICATION' THEN 'gpu_communication_bound' ELSE 'gpu_compute_bound' END AS bound_by
    FROM gpu_classified
    UNION ALL
    SELECT profile_id, step_index, device_id, track_id, 2 * launch_event_id, node_id, launch_start_ps, event_start_ps, 'kernel_launch_delay',
        event_start_ps - launch_start_ps, launch_event_id, 'gpu_kernel_launch_overhead'
    FROM gpu_classified WHERE launch_delay
    UNION ALL
    SELECT profile_id, step_index, device_id, track_id, 2 * prev_event + 1, node_id, prev_end_ps, event_start_ps, 'kernel_kernel_delay',
        event_start_ps - prev_end_ps, prev_event, 'gpu_kernel_kernel_overhead'
    FROM gpu_classified WHERE NOT launch_delay AND kernel_kernel
    UNION ALL
    SELECT profile_id, step_index, device_id, track_id, 2 * wait_src_event_id + 1, node_id, wait_src_end_ps, event_start_ps, 'sync_dependency',
        0, wait_call_event_id, NULL
    FROM gpu_classified WHERE wait_src_event_id IS NOT NULL
    UNION ALL
    SELECT profile_id, step_index, call_device_id, call_track_id, src_node, dst_node, src_ts_ps, dst_ts_ps,
        'sync_dependency', 0, event_id, NULL
    FROM (SELECT * FROM context_sync_edges UNION SELECT * FROM stream_sync_edges UNION SELECT * FROM event_sync_edges)
),
all_edges AS (
    SELECT profile_id, step_index, device_id, track_id, src_node, dst_node, src_ts_ps, dst_ts_ps, edge_kind, weight_ps,
        event_id, bound_by
    FROM cpu_edges
    UNION ALL
    SELECT * FROM gpu_edges
),
-- What the trace lacks for HTA's edges, per profile.
lacks AS (
    SELECT p.profile_id,
        list_filter([
            CASE WHEN (SELECT count(*) FROM hta_gpu_ops AS g WHERE g.profile_id = p.profile_id) = 0
                 THEN 'no GPU ops: CPU edges only' END,
            CASE WHEN (SELECT count(*) FROM hta_gpu_ops AS g WHERE g.profile_id = p.profile_id) > 0
                  AND (SELECT count(*) FROM sync_events AS s WHERE s.profile_id = p.profile_id) = 0
                 THEN 'sync_dependency: the trace has no cuda_sync events (enable_cuda_sync_events): blocking calls wait for nothing' END,
            (SELECT CASE WHEN count(*) > 0 THEN printf('kernel_launch_delay: %d GPU ops without their launching call (left out)', count(*)) END
             FROM hta_gpu_ops AS g WHERE g.profile_id = p.profile_id AND g.launch_event_id IS NULL),
            (SELECT CASE WHEN count(*) > 0 THEN printf('sync_dependency: %d event waits without their cudaEventRecord', count(*)) END
             FROM sync_events AS s WHERE s.profile_id = p.profile_id AND s.sync_kind IN ('Event Sync', 'Stream Wait Event')
               AND NOT EXISTS (SELECT 1 FROM record_sources AS r WHERE r.profile_id = s.profile_id AND r.record_corr = s.record_corr)),
            (SELECT CASE WHEN count(*) > 0 THEN printf('kernel_launch_delay: %d ops of graph launches link to their one launch call, without launch delays', count(*)) END
             FROM hta_gpu_ops AS g WHERE g.profile_id = p.profile_id AND g.launch_name IN ('cudaGraphLaunch', 'hipGraphLaunch')),
            CASE WHEN p.format = 'xspace'
                 THEN 'XSpace: launches are the host events CUPTI correlates with a GPU op (no CUDA runtime calls by name): no call is known to block, and a launch delay is from that event' END
        ], lambda x: x IS NOT NULL) AS missing_edges
    FROM chosen_profiles AS p
)
SELECT w.profile_id, w.rank, w.step_index, w.step, w.step_name, w.window_start_ps, w.window_end_ps,
    e.device_id, e.track_id, e.src_node, e.dst_node, e.src_ts_ps, e.dst_ts_ps, e.edge_kind, CAST(e.weight_ps AS BIGINT) AS weight_ps, e.event_id,
    ev.name, e.bound_by, l.missing_edges
FROM all_edges AS e
JOIN windows AS w USING (profile_id, step_index)
JOIN lacks AS l USING (profile_id)
LEFT JOIN events AS ev ON ev.profile_id = e.profile_id AND ev.event_id = e.event_id
ORDER BY w.profile_id, w.step_index, e.src_ts_ps, e.src_node, e.dst_node
