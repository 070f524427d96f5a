-- critical_path._tpu_edges: the critical-path graph an XSpace TPU profile's stats allow, as the rows of
-- critical_path._edges (the same columns, HTA's edge kinds and bound_by categories), so the longest path and
-- its breakdown come the same way (xprosql.queries.critical_path).
--
-- What the TPU graph expresses:
--   device ops        each XLA op of a TPU core's XLA Ops line, start -> end (operator: gpu_communication_bound
--                     for a collective, by xprosql_collective of its HLO op and category, else
--                     gpu_compute_bound: HTA's names, here for the TPU core);
--   order on a core   a core runs its ops one after another: the previous op's end -> the next op's start
--                     (kernel_kernel_delay, the gap: gpu_kernel_kernel_overhead);
--   launches          the host event that enqueues a program (XProf's producer / consumer stats, _p / _pt on
--                     the host event, _c / _ct on the device's XLA Modules event, type 12, e.g. DoEnqueueProgram)
--                     launches the first op of the program's run. Where the core had finished its previous op
--                     before the enqueue started (HTA's rule: nothing queued), the core waited for the host: the
--                     gap from the previous op is a kernel_launch_delay (gpu_kernel_launch_overhead, attributed
--                     to the enqueue) instead of a kernel-kernel gap. HTA's launch edge leaves the launching
--                     call, which its CPU call stack reaches; here no host edge reaches the enqueue, so the
--                     core's own timeline carries the path. The first op of a core in a window starts from its
--                     enqueue (a CPU node: operator, cpu_bound; kernel_launch_delay from its start) when it has
--                     one;
--   async pairs       an async op's -start to its -done (the Async XLA Ops line's window, else the names
--                     paired on the op line): sync_dependency from the start op's end to the done op's start,
--                     weight 0.
-- What it cannot express (missing_edges, every window): the host's call stacks (only the enqueue events
-- are nodes: host work that delays an enqueue is not seen); the host's waits for the device (no
-- synchronisation events); an async transfer's own time (only its start..done window: the -done op's time
-- is its wait); cores and chips waiting for each other (a collective is one op per core: its wait and its
-- transfer, not joined across cores here); program runs whose enqueue is not in the profile.
--
-- Windows: the profile's steps (steps.steps on its TPU cores, from a Steps line, group_id or a step
-- annotation: a step over every core that marks it, first start to last end), else the whole profile
-- (step NULL). Ops start in a window; an enqueue belongs to the window of the run it launches.
--
-- Needs: an XSpace profile with TPU XLA ops
--
-- Parameters:
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   rank  BIGINT  distributed rank (profiles.rank), when the profile says
--   step_index  BIGINT  0-based window of the profile, by start
--   step  BIGINT  the step number; NULL for a whole-profile window
--   step_name  VARCHAR  the step's name, or 'profile'
--   window_start_ps  BIGINT  window start, ps
--   window_end_ps  BIGINT  window end, ps
--   device_id  INTEGER  devices.device_id of the edge's line: the TPU core, or the host of an enqueue
--   track_id  INTEGER  tracks.track_id of that line: the core's XLA Ops line, or the enqueue's thread
--   src_node  BIGINT  node the edge leaves: 2 x events.event_id for an event's start, + 1 for its end
--   dst_node  BIGINT  node it enters
--   src_ts_ps  BIGINT  the source node's time, ps
--   dst_ts_ps  BIGINT  the target node's time, ps
--   edge_kind  VARCHAR  operator, kernel_launch_delay, kernel_kernel_delay or sync_dependency (HTA's kinds)
--   weight_ps  BIGINT  the time between the nodes (0 for sync_dependency), ps
--   event_id  BIGINT  events.event_id the edge's time belongs to (an op; a kernel-kernel gap: the previous op; a launch delay: the enqueue)
--   name  VARCHAR  that event's name (an XLA op: its HLO op)
--   bound_by  VARCHAR  cpu_bound, gpu_compute_bound, gpu_communication_bound, gpu_kernel_kernel_overhead or gpu_kernel_launch_overhead; NULL for sync_dependency
--   missing_edges  VARCHAR[]  what the TPU profile cannot give the graph (see above)
WITH steps_steps AS (
-- @include steps.steps
),
tpu_profiles AS (
    SELECT p.profile_id, p.rank, p.duration_ps FROM profiles AS p
    WHERE p.format = 'xspace' AND p.profile_id IN (SELECT profile_id FROM devices WHERE kind = 'tpu')
),
ops AS (
    SELECT e.profile_id, e.event_id, e.device_id, e.track_id, coalesce(e.hlo_op, e.name) AS name, e.start_ps,
        e.start_ps + e.dur_ps AS end_ps,
        coalesce(xprosql_collective(coalesce(e.hlo_op, e.name), e.category), 'other') <> 'other' AS collective
    FROM events AS e
    JOIN devices AS d USING (profile_id, device_id)
    JOIN tracks AS t USING (profile_id, device_id, track_id)
    WHERE d.kind = 'tpu' AND t.name = 'XLA Ops' AND e.start_ps IS NOT NULL AND e.dur_ps > 0
      AND e.profile_id IN (SELECT profile_id FROM tpu_profiles)
),
marked AS (
    SELECT s.profile_id, s.step, any_value(s.step_name) AS step_name, min(s.start_ps) AS start_ps, max(s.end_ps) AS end_ps
    FROM steps_steps AS s JOIN tpu_profiles USING (profile_id)
    WHERE s.device_kind = 'tpu' AND s.source IN ('steps_line', 'group_id', 'step_annotation') AND s.step IS NOT NULL
    GROUP BY s.profile_id, s.step
),
windows AS (
    SELECT m.profile_id, p.rank, row_number() OVER (PARTITION BY m.profile_id ORDER BY m.start_ps, m.step) - 1 AS step_index,
        m.step, m.step_name, m.start_ps AS window_start_ps, m.end_ps AS window_end_ps
    FROM marked AS m JOIN tpu_profiles AS p USING (profile_id)
    UNION ALL
    SELECT p.profile_id, p.rank, 0, NULL, 'profile', 0, p.duration_ps
    FROM tpu_profiles AS p WHERE p.profile_id NOT IN (SELECT profile_id FROM marked)
),
windowed AS (
    SELECT o.*, w.step_index,
        lag(o.event_id) OVER line AS prev_id, lag(o.end_ps) OVER line AS prev_end_ps
    FROM ops AS o
    JOIN windows AS w ON w.profile_id = o.profile_id AND o.start_ps >= w.window_start_ps AND o.start_ps < w.window_end_ps
    WINDOW line AS (PARTITION BY o.profile_id, w.step_index, o.device_id ORDER BY o.start_ps, o.event_id)
),
-- Program runs on the cores (XLA Modules events) and the host events that enqueued them (producer / consumer
-- stats of type 12).
flow_stats AS (
    SELECT s.profile_id, s.event_id,
        max(s.int_value) FILTER (WHERE s.stat = '_c') AS consumer, max(s.int_value) FILTER (WHERE s.stat = '_ct') AS consumer_type,
        max(s.int_value) FILTER (WHERE s.stat = '_p') AS producer, max(s.int_value) FILTER (WHERE s.stat = '_pt') AS producer_type
    FROM event_stats AS s
    WHERE s.stat IN ('_c', '_ct', '_p', '_pt') AND s.profile_id IN (SELECT profile_id FROM tpu_profiles)
    GROUP BY s.profile_id, s.event_id
),
runs AS (
    SELECT e.profile_id, e.event_id, e.device_id, e.start_ps, e.start_ps + e.dur_ps AS end_ps, f.consumer
    FROM events AS e
    JOIN devices AS d USING (profile_id, device_id)
    JOIN tracks AS t USING (profile_id, device_id, track_id)
    LEFT JOIN flow_stats AS f ON f.profile_id = e.profile_id AND f.event_id = e.event_id AND f.consumer_type = 12
    WHERE d.kind = 'tpu' AND t.name = 'XLA Modules' AND e.profile_id IN (SELECT profile_id FROM tpu_profiles)
),
enqueues AS (
    SELECT e.profile_id, e.event_id, e.device_id, e.track_id, e.name, e.start_ps, e.start_ps + e.dur_ps AS end_ps, f.producer
    FROM flow_stats AS f JOIN events AS e USING (profile_id, event_id)
    WHERE f.producer_type = 12 AND e.dur_ps > 0
),
-- The first op of each run, with the enqueue that launched the run.
first_ops AS (
    SELECT r.profile_id, r.event_id AS run_id, arg_min(o.event_id, o.start_ps) AS op_id
    FROM runs AS r
    JOIN windowed AS o ON o.profile_id = r.profile_id AND o.device_id = r.device_id
     AND o.start_ps >= r.start_ps AND o.start_ps < r.end_ps
    GROUP BY r.profile_id, r.event_id
),
launched AS (
    SELECT f.profile_id, f.op_id, q.event_id AS enqueue_id, q.device_id AS enqueue_device, q.track_id AS enqueue_track,
        q.name AS enqueue_name, q.start_ps AS enqueue_start_ps, q.end_ps AS enqueue_end_ps
    FROM first_ops AS f
    JOIN runs AS r ON r.profile_id = f.profile_id AND r.event_id = f.run_id
    JOIN enqueues AS q ON q.profile_id = r.profile_id AND q.producer = r.consumer
    QUALIFY row_number() OVER (PARTITION BY f.profile_id, f.op_id ORDER BY q.start_ps DESC) = 1
),
classified AS (
    SELECT o.*, l.enqueue_id, l.enqueue_device, l.enqueue_track, l.enqueue_name, l.enqueue_start_ps, l.enqueue_end_ps,
        l.enqueue_id IS NOT NULL AND (o.prev_end_ps IS NULL OR o.prev_end_ps < l.enqueue_start_ps) AS launch_delay
    FROM windowed AS o LEFT JOIN launched AS l ON l.profile_id = o.profile_id AND l.op_id = o.event_id
),
-- Async pairs: each -done op with the latest -start op of its base name before it on its core.
async_ops AS (
    SELECT *, regexp_extract(name, '^(.*)-(start|done)(\.[0-9]+)?$', 1)
              || coalesce(regexp_extract(name, '-(start|done)(\.[0-9]+)$', 2), '') AS base,
        regexp_matches(name, '-start(\.[0-9]+)?$') AS is_start
    FROM windowed
    WHERE regexp_matches(name, '-(start|done)(\.[0-9]+)?$')
),
async_pairs AS (
    SELECT d.profile_id, d.step_index, d.device_id, d.track_id, s.event_id AS start_id, s.end_ps AS start_end_ps,
        d.event_id AS done_id, d.start_ps AS done_start_ps
    FROM (SELECT * FROM async_ops WHERE NOT is_start) AS d
    ASOF JOIN (SELECT * FROM async_ops WHERE is_start) AS s
      ON s.profile_id = d.profile_id AND s.step_index = d.step_index AND s.device_id = d.device_id AND s.base = d.base
     AND d.start_ps >= s.end_ps
),
edges AS (
    SELECT profile_id, step_index, device_id, track_id, 2 * event_id AS src_node, 2 * event_id + 1 AS dst_node,
        start_ps AS src_ts_ps, end_ps AS dst_ts_ps, 'operator' AS edge_kind, end_ps - start_ps AS weight_ps, event_id, name,
        CASE WHEN collective THEN 'gpu_communication_bound' ELSE 'gpu_compute_bound' END AS bound_by
    FROM classified
    UNION ALL
    SELECT DISTINCT profile_id, step_index, enqueue_device, enqueue_track, 2 * enqueue_id, 2 * enqueue_id + 1,
        enqueue_start_ps, enqueue_end_ps, 'operator', enqueue_end_ps - enqueue_start_ps, enqueue_id, enqueue_name, 'cpu_bound'
    FROM classified WHERE launch_delay AND prev_id IS NULL
    UNION ALL
    SELECT profile_id, step_index, device_id, track_id, 2 * enqueue_id, 2 * event_id, enqueue_start_ps, start_ps,
        'kernel_launch_delay', start_ps - enqueue_start_ps, enqueue_id, enqueue_name, 'gpu_kernel_launch_overhead'
    FROM classified WHERE launch_delay AND prev_id IS NULL
    UNION ALL
    SELECT c.profile_id, c.step_index, c.device_id, c.track_id, 2 * c.prev_id + 1, 2 * c.event_id, c.prev_end_ps, c.start_ps,
        CASE WHEN c.launch_delay THEN 'kernel_launch_delay' ELSE 'kernel_kernel_delay' END, c.start_ps - c.prev_end_ps,
        CASE WHEN c.launch_delay THEN c.enqueue_id ELSE c.prev_id END,
        CASE WHEN c.launch_delay THEN c.enqueue_name ELSE p.name END,
        CASE WHEN c.launch_delay THEN 'gpu_kernel_launch_overhead' ELSE 'gpu_kernel_kernel_overhead' END
    FROM classified AS c JOIN ops AS p ON p.profile_id = c.profile_id AND p.event_id = c.prev_id
    WHERE c.prev_id IS NOT NULL
    UNION ALL
    SELECT profile_id, step_index, device_id, track_id, 2 * start_id + 1, 2 * done_id, start_end_ps, done_start_ps,
        'sync_dependency', 0, done_id, NULL, NULL
    FROM async_pairs
),
lacks AS (
    SELECT p.profile_id,
        list_filter([
            'TPU: the host''s call stacks are not in the graph: only the events that enqueue programs (XProf producer/consumer stats), so host work that delays an enqueue is not seen',
            'TPU: no synchronisation events: the host''s waits for the device are not recorded',
            'TPU: an async op''s transfer time is not recorded: only its -start -> -done edge, the -done op being its wait',
            'TPU: cores and chips wait for each other only inside collectives, one op per core (its wait and its transfer), not joined across cores',
            (SELECT CASE WHEN count(*) > 0 THEN printf('kernel_launch_delay: %d program runs without their enqueue event in the profile', count(*)) END
             FROM runs AS r WHERE r.profile_id = p.profile_id
               AND NOT EXISTS (SELECT 1 FROM enqueues AS q WHERE q.profile_id = r.profile_id AND q.producer = r.consumer))
        ], lambda x: x IS NOT NULL) AS missing_edges
    FROM tpu_profiles AS p
)
SELECT w.profile_id, w.rank, w.step_index, w.step, w.step_name, w.window_start_ps, w.window_end_ps,
    e.device_id, e.track_id, e.src_node, e.dst_node, e.src_ts_ps, e.dst_ts_ps, e.edge_kind,
    CAST(e.weight_ps AS BIGINT) AS weight_ps, e.event_id, coalesce(e.name, ev.name) AS name, e.bound_by, l.missing_edges
FROM edges AS e
JOIN windows AS w USING (profile_id, step_index)
JOIN lacks AS l USING (profile_id)
LEFT JOIN events AS ev ON ev.profile_id = e.profile_id AND ev.event_id = e.event_id
ORDER BY w.profile_id, w.step_index, e.src_ts_ps, e.src_node, e.dst_node
