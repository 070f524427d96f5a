-- critical_path._rank_graph: each rank's step graph for replay: HTA's graph (critical_path._edges) made
-- time-faithful, with the host's collective calls (gloo) as nodes and a start and an end node per window,
-- so that propagating times over it (each node at the latest of its predecessors' times plus the edge's
-- weight) gives back the measured times, and a change (an op faster, a rank like the median, a sync
-- removed) moves what depends on it. critical_path.job_graph joins the ranks of a job through their
-- collective instances; xprosql.queries.job_critical_path takes paths and replays.
--
-- Edges, from HTA's (critical_path._edges, exact times: no microsecond rounding; every step keeps its
-- GPU ops unless $include_last_step is false):
--   operator, kernel_launch_delay, kernel_kernel_delay  as HTA's (weight: the time between the nodes;
--                      HTA's negative weights count 0). An edge into a blocking call's end weighs 0 as in
--                      HTA where a sync_dependency edge reaches that end (the GPU's work explains the wait).
--                      A blocking call no sync edge reaches (the trace has no cuda_sync events) gets an
--                      inferred one: from the end of the GPU op of its window that ended last before the call
--                      returned, if that op was still running after the call's last node before its end
--                      (weight: from that op's end to the call's return, cpu_bound); where there is none it
--                      keeps its measured time, attributed to it (cpu_bound): its wait is a missing edge.
--                      (Of GPU ops ending at the same time, the lowest node id.)
--   dependency         the end of a top-level CPU op to the start of the next on its thread: HTA weighs it
--                      0 (CPU idle never counts); here its weight is the time between them, bound_by
--                      cpu_untraced (host time without profiled ops: Python, sleeps, data loading, waits the
--                      trace does not record), attributed to the innermost user_annotation or
--                      python_function of that thread that covers at least half of the gap (a sleep in
--                      DDP's forward: DistributedDataParallel.forward), else to none; a gap in which a
--                      collective is waited for is a collective_wait (below).
--   sync_dependency    as HTA's, weighing the time from the source's end to the target (the synchronising
--                      call's return, bound_by cpu_bound; a stream wait's next kernel, gpu_kernel_kernel_overhead).
-- Host collectives (the calls jobs._collective_calls takes from process-group annotations, gloo:all_reduce,
-- gloo:barrier ... on a process group's worker thread, in a profile without collective kernels), a start and
-- an end node each (2 x and 2 x + 1 their event id):
--   collective_issue   from the start of the c10d:: op that issued it on the calling thread (the n-th
--                      c10d:: op of a kind in the window issues the n-th call of that kind: workers take
--                      work in order), its time to start on the worker; bound_by host_communication_bound.
--                      A call no issuing op is found for (issued before the window) has none: it starts
--                      from the window start, at its measured time (missing_edges counts them).
--   operator           the call, start to end (its wait for the other ranks and its transfer), bound_by
--                      host_communication_bound; job_graph replaces it by the collective instance.
--   dependency         consecutive calls of one worker thread, weight 0 (a worker runs its calls in order).
--   collective_wait    the calling thread's wait: of its edges after the issue overlapping the call, the
--                      longest gap (between ops, or between an op's children; never an op's own leaf time),
--                      weight 0: the thread waited there for the call, not for host work. Several calls may
--                      share one wait (DDP's gradient buckets, waited for together).
--   collective_done    the call's end to the end of that wait, weight the time between them (the thread
--                      waking, cpu_untraced). The call's end node is the earlier of its end and the wait's
--                      end: gloo's annotation can close after the waiting thread has already resumed.
--   thread_wait        a gap of a thread (between its top-level ops, or from the window start to its first
--                      op) in whose last tenth another thread of the host ended an op: the thread waited for
--                      that one (the main thread in loss.backward() while the autograd thread runs the
--                      backward; the autograd thread waiting to be started), weight 0;
--   thread_done        from that op's end to the end of the gap, its time (the waking, cpu_untraced). The op
--                      that ended last before the gap's end (of ops ending at the same time: the lowest node id).
-- Window: a start node (node_id -1, at window_start_ps) with a window_start edge to every node without
-- another predecessor, weighing its time from the window start (a CPU node's: cpu_untraced, attributed as
-- a gap; a GPU op's: gpu_kernel_kernel_overhead, the work queued before the window), and an end node
-- (node_id -2, at window_end_ps) with a window_end edge from every node without a successor, weighing 0,
-- except from the nodes of the step annotation's thread (or, for a whole-profile window, the latest
-- nodes), which weigh their time to the window end (cpu_untraced): replayed unchanged, the end node
-- falls at the window's end.
--
-- missing_edges: critical_path._edges's, and what replay cannot propagate here: blocking calls without a
-- sync edge (their measured time stays), host collectives without their issuing op.
--
-- Needs: a Kineto (PyTorch profiler) trace with CPU ops or runtime calls, or an XSpace profile with GPU kernels
--
-- Parameters:
--   $include_last_step  BOOLEAN  keep the GPU ops launched in the last ProfilerStep (HTA's loader drops them; a replay needs them) (default: true)
--
-- Passes: $include_last_step
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   rank  BIGINT  distributed rank (profiles.rank), when the trace says
--   step_index  BIGINT  0-based window of the profile (critical_path._nodes)
--   step  BIGINT  N of ProfilerStep#N; NULL for a whole-profile window
--   step_name  VARCHAR  the window's annotation, or 'profile'
--   window_start_ps  BIGINT  window start, ps
--   window_end_ps  BIGINT  window end, ps
--   device_id  INTEGER  devices.device_id of the edge's line (critical_path._edges); the host of host-collective and window edges
--   track_id  INTEGER  tracks.track_id of that line: the CPU thread (a host collective's: its worker thread), or the GPU op's stream line; NULL for window edges
--   src_node  BIGINT  node the edge leaves: critical_path._nodes node_id, 2 x event_id (+ 1) of a host collective, -1 the window start
--   dst_node  BIGINT  node it enters; -2 the window end
--   src_ts_ps  BIGINT  the source node's time, ps
--   dst_ts_ps  BIGINT  the target node's time, ps
--   edge_kind  VARCHAR  operator, dependency, kernel_launch_delay, kernel_kernel_delay, sync_dependency, collective_issue, collective_wait, collective_done, thread_wait, thread_done, window_start or window_end
--   weight_ps  BIGINT  the edge's weight for replay (see above), ps, >= 0
--   event_id  BIGINT  events.event_id the edge's time is attributed to (a gap: its enclosing annotation); NULL when none
--   name  VARCHAR  that event's name
--   bound_by  VARCHAR  cpu_bound, cpu_untraced, gpu_compute_bound, gpu_communication_bound, host_communication_bound, gpu_kernel_kernel_overhead or gpu_kernel_launch_overhead; NULL for weight-0 edges
--   collective  BOOLEAN  the operator edge of a collective call (a collective kernel, or a host collective): its wait for the other ranks and its transfer
--   missing_edges  VARCHAR[]  what the trace lacks for the graph's edges in this window (see above; empty when nothing), on the window's window_start edges; NULL on the others (one list per window, not per edge)
-- The profiles' events, read once (as critical_path._edges does; its CTEs cannot be read from here).
WITH events AS MATERIALIZED (SELECT * FROM events),
graph AS (
-- @include critical_path._edges unordered
),
windows AS (
    SELECT DISTINCT profile_id, rank, step_index, step, step_name, window_start_ps, window_end_ps FROM graph
),
window_lacks AS (
    SELECT profile_id, step_index, any_value(missing_edges) AS missing_edges FROM graph GROUP BY profile_id, step_index
),
device_kinds AS (
    SELECT d.profile_id, d.device_id, d.kind FROM devices AS d WHERE d.profile_id IN (SELECT profile_id FROM windows)
),
-- Scopes that name a thread's untraced time, and the step annotations (their thread holds the step's end).
scopes AS (
    SELECT e.profile_id, e.device_id, e.track_id, e.event_id, e.name, e.start_ps, e.start_ps + e.dur_ps AS end_ps
    FROM events AS e
    WHERE e.category IN ('user_annotation', 'python_function') AND e.dur_ps > 0 AND e.start_ps IS NOT NULL
      AND e.profile_id IN (SELECT profile_id FROM windows)
),
step_threads AS (
    SELECT DISTINCT w.profile_id, w.step_index, s.device_id, s.track_id
    FROM windows AS w
    JOIN scopes AS s ON s.profile_id = w.profile_id AND s.name = w.step_name AND s.start_ps = w.window_start_ps
),
-- Blocking calls whose end a sync edge reaches: their wait is the GPU's work.
synced_ends AS (
    SELECT DISTINCT profile_id, step_index, dst_node FROM graph WHERE edge_kind = 'sync_dependency'
),
base AS (
    SELECT g.profile_id, g.step_index, g.device_id, g.track_id, g.src_node, g.dst_node, g.src_ts_ps, g.dst_ts_ps,
        g.edge_kind,
        CASE WHEN g.edge_kind IN ('dependency', 'sync_dependency') THEN greatest(g.dst_ts_ps - g.src_ts_ps, 0)
             WHEN g.edge_kind = 'operator' AND g.bound_by = 'cpu_bound' AND g.weight_ps = 0 AND s.dst_node IS NULL
             THEN greatest(g.dst_ts_ps - g.src_ts_ps, 0)
             ELSE greatest(g.weight_ps, 0) END AS weight_ps,
        g.event_id, g.name,
        CASE WHEN g.edge_kind = 'dependency' THEN 'cpu_untraced'
             WHEN g.edge_kind = 'sync_dependency' AND d.kind = 'gpu' THEN 'gpu_kernel_kernel_overhead'
             WHEN g.edge_kind = 'sync_dependency' THEN 'cpu_bound'
             ELSE g.bound_by END AS bound_by,
        g.edge_kind = 'operator' AND g.bound_by = 'cpu_bound' AND g.weight_ps = 0 AND s.dst_node IS NULL
            AND g.dst_ts_ps > g.src_ts_ps AS unsynced_wait
    FROM graph AS g
    LEFT JOIN synced_ends AS s ON s.profile_id = g.profile_id AND s.step_index = g.step_index AND s.dst_node = g.dst_node
    LEFT JOIN device_kinds AS d ON d.profile_id = g.profile_id AND d.device_id = g.device_id
),
-- A blocking call no sync edge reaches waited, as far as the trace says, for the GPU op that ended last before
-- it returned, if that op was still running when the call's last node before its end passed.
gpu_ends AS (  -- ops ending at the same time: the lowest node (the join picks one, always the same)
    SELECT profile_id, step_index, min(dst_node) AS end_node, dst_ts_ps AS end_ps FROM graph
    WHERE edge_kind = 'operator' AND bound_by IN ('gpu_compute_bound', 'gpu_communication_bound')
    GROUP BY profile_id, step_index, dst_ts_ps
),
inferred AS (
    SELECT u.profile_id, u.step_index, u.device_id, u.track_id, u.src_node, u.dst_node, u.src_ts_ps, u.dst_ts_ps,
        u.event_id, g.end_node, g.end_ps
    FROM (SELECT * FROM base WHERE unsynced_wait) AS u
    ASOF JOIN gpu_ends AS g ON g.profile_id = u.profile_id AND g.step_index = u.step_index AND u.dst_ts_ps >= g.end_ps
    WHERE g.end_ps > u.src_ts_ps
),
-- Host collectives of the windows (the process-group annotations jobs._collective_calls takes as calls: in
-- a profile without collective kernels) and the c10d:: ops that issued them (n-th op of a kind, n-th call).
host_annotations AS (
    SELECT s.*, xprosql_collective(s.name, 'user_annotation') AS kind FROM scopes AS s
    WHERE xprosql_process_group_annotation(s.name)
      AND coalesce(xprosql_collective(s.name, 'user_annotation'), 'other') <> 'other'
),
-- The kernels' names classified once each, of the profiles with process-group annotations only: the collective
-- test, several regular expressions, in this projection over the DISTINCT (a filter on it in a reader would be
-- pushed below the DISTINCT and run on every kernel).
kernel_names AS MATERIALIZED (
    SELECT profile_id, xprosql_collective(name, category) AS collective
    FROM (SELECT DISTINCT k.profile_id, e.name, e.category
          FROM kernels AS k JOIN events AS e USING (profile_id, event_id)
          WHERE k.profile_id IN (SELECT profile_id FROM host_annotations))
),
with_collective_kernels AS (
    SELECT DISTINCT profile_id FROM kernel_names WHERE collective IS NOT NULL
),
host_calls AS (
    SELECT s.profile_id, s.event_id, s.name, s.kind, s.start_ps, s.end_ps, s.device_id, s.track_id, w.step_index,
        row_number() OVER (PARTITION BY s.profile_id, w.step_index, s.kind ORDER BY s.start_ps, s.event_id) AS n
    FROM host_annotations AS s
    JOIN windows AS w ON w.profile_id = s.profile_id AND s.start_ps BETWEEN w.window_start_ps AND w.window_end_ps
    WHERE s.profile_id NOT IN (SELECT profile_id FROM with_collective_kernels)
),
issuers AS (
    SELECT e.profile_id, e.event_id, e.device_id, e.track_id, e.start_ps, w.step_index,
        xprosql_collective(e.name, e.category) AS kind,
        row_number() OVER (PARTITION BY e.profile_id, w.step_index, xprosql_collective(e.name, e.category)
                           ORDER BY e.start_ps, e.event_id) AS n
    FROM events AS e
    JOIN windows AS w ON w.profile_id = e.profile_id AND e.start_ps BETWEEN w.window_start_ps AND w.window_end_ps
    WHERE e.category = 'cpu_op' AND e.name LIKE 'c10d::%' AND e.dur_ps > 0
      AND e.profile_id IN (SELECT profile_id FROM host_calls)
      AND coalesce(xprosql_collective(e.name, e.category), 'other') <> 'other'
),
issued AS (
    SELECT h.*, i.event_id AS issuer_id, i.device_id AS issuer_device, i.track_id AS issuer_track, i.start_ps AS issuer_start_ps
    FROM host_calls AS h
    LEFT JOIN issuers AS i
      ON i.profile_id = h.profile_id AND i.step_index = h.step_index AND i.kind = h.kind AND i.n = h.n
     AND i.start_ps <= h.start_ps
),
-- The issuing thread's wait for each call: its longest gap after the issue that overlaps the call.
waits AS (
    SELECT h.profile_id, h.step_index, h.event_id,
        arg_max(t.src_node, (t.dst_ts_ps - t.src_ts_ps, -t.src_ts_ps)) AS wait_src,
        arg_max(t.dst_node, (t.dst_ts_ps - t.src_ts_ps, -t.src_ts_ps)) AS wait_dst,
        arg_max(t.dst_ts_ps, (t.dst_ts_ps - t.src_ts_ps, -t.src_ts_ps)) AS wait_end_ps
    FROM issued AS h
    JOIN base AS t
      ON t.profile_id = h.profile_id AND t.step_index = h.step_index AND t.device_id = h.issuer_device
     AND t.track_id = h.issuer_track AND t.src_ts_ps >= h.issuer_start_ps AND t.src_ts_ps < h.end_ps
     AND t.dst_ts_ps > h.start_ps AND t.dst_ts_ps > t.src_ts_ps
     AND t.edge_kind IN ('operator', 'dependency') AND t.bound_by IN ('cpu_bound', 'cpu_untraced')
     AND NOT (t.src_node % 2 = 0 AND t.dst_node = t.src_node + 1)
    WHERE h.issuer_id IS NOT NULL
    GROUP BY h.profile_id, h.step_index, h.event_id
),
host_nodes AS (
    SELECT i.*, w.wait_src, w.wait_dst, w.wait_end_ps,
        CASE WHEN w.wait_end_ps IS NULL THEN i.end_ps ELSE least(i.end_ps, w.wait_end_ps) END AS done_ps,
        lag(2 * i.event_id + 1) OVER t AS prev_end_node,
        lag(CASE WHEN w.wait_end_ps IS NULL THEN i.end_ps ELSE least(i.end_ps, w.wait_end_ps) END) OVER t AS prev_done_ps
    FROM issued AS i
    LEFT JOIN waits AS w USING (profile_id, step_index, event_id)
    WINDOW t AS (PARTITION BY i.profile_id, i.step_index, i.device_id, i.track_id ORDER BY i.start_ps, i.event_id)
),
wait_edges AS (
    SELECT DISTINCT profile_id, step_index, wait_src, wait_dst FROM host_nodes WHERE wait_src IS NOT NULL
),
host_edges AS (
    SELECT profile_id, step_index, issuer_device AS device_id, issuer_track AS track_id, 2 * issuer_id AS src_node,
        2 * event_id AS dst_node, issuer_start_ps AS src_ts_ps, start_ps AS dst_ts_ps, 'collective_issue' AS edge_kind,
        start_ps - issuer_start_ps AS weight_ps, event_id, name, 'host_communication_bound' AS bound_by
    FROM host_nodes WHERE issuer_id IS NOT NULL
    UNION ALL
    SELECT profile_id, step_index, device_id, track_id, 2 * event_id, 2 * event_id + 1, start_ps, done_ps, 'operator',
        greatest(done_ps - start_ps, 0), event_id, name, 'host_communication_bound'
    FROM host_nodes
    UNION ALL
    SELECT profile_id, step_index, device_id, track_id, prev_end_node, 2 * event_id, prev_done_ps, start_ps, 'dependency',
        0, NULL, NULL, NULL
    FROM host_nodes WHERE prev_end_node IS NOT NULL
    UNION ALL
    SELECT profile_id, step_index, issuer_device, issuer_track, 2 * event_id + 1, wait_dst, done_ps, wait_end_ps,
        'collective_done', greatest(wait_end_ps - done_ps, 0), event_id, name, 'cpu_untraced'
    FROM host_nodes WHERE wait_dst IS NOT NULL
),
first_edges AS (
    SELECT b.profile_id, b.step_index, b.device_id, b.track_id, b.src_node, b.dst_node, b.src_ts_ps, b.dst_ts_ps,
        CASE WHEN w.wait_src IS NULL THEN b.edge_kind ELSE 'collective_wait' END AS edge_kind,
        CASE WHEN w.wait_src IS NOT NULL OR i.end_node IS NOT NULL THEN 0 ELSE b.weight_ps END AS weight_ps,
        b.event_id, b.name, CASE WHEN w.wait_src IS NULL THEN b.bound_by END AS bound_by,
        b.unsynced_wait AND i.end_node IS NULL AS unsynced_wait, i.end_node IS NOT NULL AS inferred_wait
    FROM base AS b
    LEFT JOIN wait_edges AS w
      ON w.profile_id = b.profile_id AND w.step_index = b.step_index AND w.wait_src = b.src_node AND w.wait_dst = b.dst_node
    LEFT JOIN inferred AS i
      ON i.profile_id = b.profile_id AND i.step_index = b.step_index AND i.src_node = b.src_node AND i.dst_node = b.dst_node
    UNION ALL
    SELECT profile_id, step_index, device_id, track_id, end_node, dst_node, end_ps, dst_ts_ps, 'sync_dependency',
        dst_ts_ps - end_ps, event_id, NULL, 'cpu_bound', false, false
    FROM inferred
    UNION ALL
    SELECT profile_id, step_index, device_id, track_id, src_node, dst_node, src_ts_ps, dst_ts_ps, edge_kind, weight_ps,
        event_id, name, bound_by, false, false
    FROM host_edges
),
-- The window's nodes without predecessor, with their event's line.
first_roots AS (
    SELECT r.profile_id, r.step_index, r.node, r.ts_ps, e.device_id, e.track_id, d.kind AS device_kind
    FROM (
        SELECT DISTINCT n.profile_id, n.step_index, n.src_node AS node, n.src_ts_ps AS ts_ps FROM first_edges AS n
        ANTI JOIN first_edges AS x ON x.profile_id = n.profile_id AND x.step_index = n.step_index AND x.dst_node = n.src_node
    ) AS r
    JOIN events AS e ON e.profile_id = r.profile_id AND e.event_id = r.node // 2
    LEFT JOIN device_kinds AS d ON d.profile_id = e.profile_id AND d.device_id = e.device_id
),
-- A thread's gap (between its ops, or from the window start to its first op) that another thread of the host
-- ended an op in, within its last tenth, is a wait for that thread (the main thread in loss.backward() while
-- the autograd thread runs the backward ops; that thread waiting for the main one to start it).
-- Ends at the same time (microsecond traces): the lowest node, so that the join below picks one and always the same.
host_ends AS (
    SELECT e.profile_id, e.step_index, e.device_id, arg_min(e.track_id, e.dst_node) AS track_id, min(e.dst_node) AS node,
        e.dst_ts_ps AS ts_ps
    FROM first_edges AS e JOIN device_kinds AS d ON d.profile_id = e.profile_id AND d.device_id = e.device_id
    WHERE e.edge_kind = 'operator' AND e.dst_node % 2 = 1 AND d.kind <> 'gpu'
    GROUP BY e.profile_id, e.step_index, e.device_id, e.dst_ts_ps
),
thread_gaps AS (
    SELECT profile_id, step_index, device_id, track_id, src_node, dst_node, src_ts_ps, dst_ts_ps FROM first_edges
    WHERE edge_kind = 'dependency' AND bound_by = 'cpu_untraced' AND dst_ts_ps > src_ts_ps
    UNION ALL
    SELECT r.profile_id, r.step_index, r.device_id, r.track_id, -1, r.node, w.window_start_ps, r.ts_ps
    FROM first_roots AS r JOIN windows AS w USING (profile_id, step_index)
    WHERE coalesce(r.device_kind, '') <> 'gpu' AND r.ts_ps > w.window_start_ps
),
thread_waits AS (
    SELECT g.*, x.node AS signal_node, x.ts_ps AS signal_ps
    FROM thread_gaps AS g
    ASOF JOIN host_ends AS x
      ON x.profile_id = g.profile_id AND x.step_index = g.step_index AND x.device_id = g.device_id
     AND g.dst_ts_ps >= x.ts_ps
    WHERE x.ts_ps > g.src_ts_ps AND x.track_id IS DISTINCT FROM g.track_id
      AND 10 * (g.dst_ts_ps - x.ts_ps) <= g.dst_ts_ps - g.src_ts_ps
),
edges AS (
    SELECT e.profile_id, e.step_index, e.device_id, e.track_id, e.src_node, e.dst_node, e.src_ts_ps, e.dst_ts_ps,
        CASE WHEN t.signal_node IS NULL THEN e.edge_kind ELSE 'thread_wait' END AS edge_kind,
        CASE WHEN t.signal_node IS NULL THEN e.weight_ps ELSE 0 END AS weight_ps, e.event_id, e.name,
        CASE WHEN t.signal_node IS NULL THEN e.bound_by END AS bound_by, e.unsynced_wait, e.inferred_wait
    FROM first_edges AS e
    LEFT JOIN thread_waits AS t
      ON t.profile_id = e.profile_id AND t.step_index = e.step_index AND t.src_node = e.src_node AND t.dst_node = e.dst_node
    UNION ALL
    SELECT profile_id, step_index, device_id, track_id, signal_node, dst_node, signal_ps, dst_ts_ps, 'thread_done',
        dst_ts_ps - signal_ps, NULL, NULL, 'cpu_untraced', false, false
    FROM thread_waits
),
roots AS (
    SELECT r.* FROM first_roots AS r
    WHERE NOT EXISTS (SELECT 1 FROM thread_waits AS t WHERE t.profile_id = r.profile_id AND t.step_index = r.step_index
                                                        AND t.dst_node = r.node)
),
sinks AS (
    SELECT n.*, (t.track_id IS NOT NULL) AS on_step_thread,
        max(n.ts_ps) OVER (PARTITION BY n.profile_id, n.step_index) AS latest_ps,
        count(t.track_id) OVER (PARTITION BY n.profile_id, n.step_index) AS step_thread_sinks
    FROM (
        SELECT k.profile_id, k.step_index, k.node, k.ts_ps, e.device_id, e.track_id
        FROM (
            SELECT DISTINCT n.profile_id, n.step_index, n.dst_node AS node, n.dst_ts_ps AS ts_ps FROM edges AS n
            ANTI JOIN edges AS x ON x.profile_id = n.profile_id AND x.step_index = n.step_index AND x.src_node = n.dst_node
        ) AS k
        JOIN events AS e ON e.profile_id = k.profile_id AND e.event_id = k.node // 2
    ) AS n
    LEFT JOIN step_threads AS t
      ON t.profile_id = n.profile_id AND t.step_index = n.step_index AND t.device_id = n.device_id AND t.track_id = n.track_id
),
-- Gaps a thread spent outside profiled ops (dependency edges, and from the window start to a thread's first
-- node), named by the innermost annotation of the thread that covers at least half of the gap.
gaps AS (
    SELECT profile_id, step_index, device_id, track_id, src_node, dst_node, src_ts_ps, dst_ts_ps FROM edges
    WHERE edge_kind = 'dependency' AND bound_by = 'cpu_untraced'
    UNION ALL
    SELECT r.profile_id, r.step_index, r.device_id, r.track_id, -1, r.node, w.window_start_ps, r.ts_ps
    FROM roots AS r JOIN windows AS w USING (profile_id, step_index)
    WHERE coalesce(r.device_kind, '') <> 'gpu'
),
gap_scopes AS (
    SELECT g.profile_id, g.step_index, g.src_node, g.dst_node,
        arg_max(s.event_id, (s.start_ps, -s.end_ps)) AS scope_id, arg_max(s.name, (s.start_ps, -s.end_ps)) AS scope_name
    FROM gaps AS g
    JOIN scopes AS s
      ON s.profile_id = g.profile_id AND s.device_id = g.device_id AND s.track_id = g.track_id
     AND s.start_ps < g.dst_ts_ps AND s.end_ps > g.src_ts_ps
     AND 2 * (least(s.end_ps, g.dst_ts_ps) - greatest(s.start_ps, g.src_ts_ps)) >= g.dst_ts_ps - g.src_ts_ps
    GROUP BY g.profile_id, g.step_index, g.src_node, g.dst_node
),
window_edges AS (
    SELECT r.profile_id, r.step_index, r.device_id, CAST(NULL AS INTEGER) AS track_id, -1 AS src_node, r.node AS dst_node,
        w.window_start_ps AS src_ts_ps, r.ts_ps AS dst_ts_ps, 'window_start' AS edge_kind,
        greatest(r.ts_ps - w.window_start_ps, 0) AS weight_ps,
        CASE WHEN r.device_kind = 'gpu' THEN 'gpu_kernel_kernel_overhead' ELSE 'cpu_untraced' END AS bound_by
    FROM roots AS r JOIN windows AS w USING (profile_id, step_index)
    UNION ALL
    SELECT s.profile_id, s.step_index, s.device_id, NULL, s.node, -2, s.ts_ps, w.window_end_ps, 'window_end',
        CASE WHEN s.on_step_thread OR (s.step_thread_sinks = 0 AND s.ts_ps = s.latest_ps)
             THEN greatest(w.window_end_ps - s.ts_ps, 0) ELSE 0 END,
        'cpu_untraced'
    FROM sinks AS s JOIN windows AS w USING (profile_id, step_index)
),
all_edges AS (
    SELECT e.profile_id, e.step_index, e.device_id, e.track_id, e.src_node, e.dst_node, e.src_ts_ps, e.dst_ts_ps, e.edge_kind,
        e.weight_ps, coalesce(g.scope_id, e.event_id) AS event_id, coalesce(g.scope_name, e.name) AS name, e.bound_by,
        e.unsynced_wait
    FROM edges AS e
    LEFT JOIN gap_scopes AS g
      ON e.edge_kind = 'dependency' AND g.profile_id = e.profile_id AND g.step_index = e.step_index
     AND g.src_node = e.src_node AND g.dst_node = e.dst_node
    UNION ALL
    SELECT x.profile_id, x.step_index, x.device_id, x.track_id, x.src_node, x.dst_node, x.src_ts_ps, x.dst_ts_ps, x.edge_kind,
        x.weight_ps, g.scope_id, g.scope_name, x.bound_by, false
    FROM window_edges AS x
    LEFT JOIN gap_scopes AS g
      ON x.edge_kind = 'window_start' AND g.profile_id = x.profile_id AND g.step_index = x.step_index
     AND g.src_node = -1 AND g.dst_node = x.dst_node
),
notes AS (
    SELECT w.profile_id, w.step_index,
        list_filter([
            (SELECT CASE WHEN count(*) > 0 THEN printf('replay: %d blocking calls without a sync edge wait for the GPU op that ended last before they returned (inferred)', count(*)) END
             FROM edges AS e WHERE e.profile_id = w.profile_id AND e.step_index = w.step_index AND e.inferred_wait),
            (SELECT CASE WHEN count(*) > 0 THEN printf('replay: %d blocking calls without a sync edge keep their measured time', count(*)) END
             FROM edges AS e WHERE e.profile_id = w.profile_id AND e.step_index = w.step_index AND e.unsynced_wait),
            (SELECT CASE WHEN count(*) > 0 THEN printf('collective_issue: %d host collectives without their issuing c10d:: op start at their measured time', count(*)) END
             FROM host_nodes AS h WHERE h.profile_id = w.profile_id AND h.step_index = w.step_index AND h.issuer_id IS NULL)
        ], lambda x: x IS NOT NULL) AS replay_notes
    FROM windows AS w
)
SELECT w.profile_id, w.rank, w.step_index, w.step, w.step_name, w.window_start_ps, w.window_end_ps,
    e.device_id, e.track_id, e.src_node, e.dst_node, e.src_ts_ps, e.dst_ts_ps, e.edge_kind,
    CAST(e.weight_ps AS BIGINT) AS weight_ps, e.event_id,
    e.name,
    CASE WHEN e.weight_ps > 0 THEN e.bound_by END AS bound_by,
    (e.edge_kind = 'operator' AND e.bound_by IN ('gpu_communication_bound', 'host_communication_bound')
     AND e.src_node = 2 * e.event_id AND e.dst_node = 2 * e.event_id + 1) AS collective,
    CASE WHEN e.src_node = -1 THEN list_concat(l.missing_edges, n.replay_notes) END AS missing_edges
FROM all_edges AS e
JOIN windows AS w USING (profile_id, step_index)
JOIN notes AS n USING (profile_id, step_index)
JOIN window_lacks AS l USING (profile_id, step_index)
