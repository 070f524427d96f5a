-- names._calls: every call of a user's name in a PyTorch (Kineto) trace, in the tree of names of
-- its thread, with the CPU time, the ops, the GPU work and the costs inside it.
--
-- Names: `user_annotation` events (record_function, ProfilerStep#N, Optimizer.step#SGD.step)
-- and the `python_function` events PyTorch writes for nn.Module forwards ("nn.Module: Linear_0",
-- with_modules=True; they need the Python tracer, i.e. with_stack=True), and the NVTX ranges of an
-- xprosql.cupti recording (category nvtx: a range on the thread that opened it). A module's path
-- component is its name without "nn.Module: "; ProfilerStep#N is the component ProfilerStep
-- and gives the step of everything inside it. Names nest by timespan on their thread
-- (ops._nesting, among names only: a name's parent is the nearest name around it); the path
-- joins the components from the root down with '/', e.g. ProfilerStep/forward/Model_0/Block_1/Attn_1.
--
-- What lies inside a call: each op (cpu_op) and API call belongs to the innermost name open on
-- its thread when it starts. An op counts for that name when no op around it belongs to the
-- same name: the outermost ops inside a name are its op time, and their FLOPs and bytes those of
-- torch._op_tree (an op's own costs, else those of the first costed ops down its subtree), so no
-- op call is counted twice. A GPU kernel, copy or memset belongs to the name of the API call
-- that launched it (same correlation id; the launch nearest before it should a trace repeat an
-- id, as torch._framework_op_kernels), whether or not an op is around that call (a Triton or
-- graph launch; in a profile without ops, an xprosql.cupti recording, every API call on the name's
-- thread). Inclusive values sum a call's own and those of the calls inside it.
-- A gpu_user_annotation is the GPU-side extent of the record_function of the same External id.
-- Limits: names on one thread explain only that thread's work (backward ops on autograd's
-- threads belong to no module); a name opened inside an op (a module run inside a custom
-- autograd function) leaves that op's work to the name around the op.
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   event_id  BIGINT  events.event_id of the name's call
--   device_id  INTEGER  devices.device_id of the host process
--   track_id  INTEGER  tracks.track_id of the thread
--   parent_id  BIGINT  events.event_id of the call of the name around it; NULL for a root
--   ancestor_ids  BIGINT[]  the calls from the root down to this one, itself last
--   source  VARCHAR  step (ProfilerStep#N), annotation (record_function), module (nn.Module) or nvtx (an NVTX range)
--   name  VARCHAR  the event's name as recorded
--   component  VARCHAR  its path component: the module name without "nn.Module: ", ProfilerStep for ProfilerStep#N
--   path  VARCHAR  components from the root down, joined with '/'
--   depth  BIGINT  names around it (0: a root)
--   step  BIGINT  N of the ProfilerStep#N around it (or its own); NULL outside steps
--   start_ps  BIGINT  start, ps
--   dur_ps  BIGINT  CPU time of the call including the names inside it, ps
--   cpu_self_ps  BIGINT  dur_ps less the calls of names directly inside it, ps
--   op_ps  BIGINT  CPU time of the outermost ops inside the call (and the names inside it), ps
--   self_op_ps  BIGINT  op_ps of the ops directly in this call, not in a name inside it, ps
--   ops  BIGINT  outermost ops inside the call, inclusive
--   costed_ops  BIGINT  those with cost data (own or nested)
--   flops  DOUBLE  FLOPs of the outermost ops inside, FLOP
--   bytes_accessed  DOUBLE  bytes of the outermost ops inside, bytes
--   gpu_activities  BIGINT  GPU kernels, copies and memsets launched inside, inclusive
--   gpu_ps  BIGINT  their durations summed, ps
--   gpu_busy_ps  BIGINT  the union of their intervals, ps
--   self_gpu_ps  BIGINT  durations of those launched directly in this call, not in a name inside it, ps
--   gpu_annotation_ps  BIGINT  duration of the call's gpu_user_annotation events, ps; NULL without one
WITH name_events AS MATERIALIZED (
    SELECT
        e.profile_id, e.event_id, e.device_id, e.track_id, e.start_ps, e.dur_ps,
        CAST(e.name AS VARCHAR) AS name,
        CASE WHEN e.category = 'python_function' THEN 'module'
             WHEN e.category = 'nvtx' THEN 'nvtx'
             WHEN regexp_matches(e.name, '^ProfilerStep#[0-9]+$') THEN 'step'
             ELSE 'annotation' END AS source,
        CASE WHEN e.category = 'python_function' THEN substr(e.name, length('nn.Module: ') + 1)
             WHEN regexp_matches(e.name, '^ProfilerStep#[0-9]+$') THEN 'ProfilerStep'
             ELSE CAST(e.name AS VARCHAR) END AS component,
        CASE WHEN regexp_matches(e.name, '^ProfilerStep#[0-9]+$')
             THEN TRY_CAST(regexp_extract(e.name, '#([0-9]+)$', 1) AS BIGINT) END AS own_step
    FROM events AS e
    WHERE e.start_ps IS NOT NULL AND e.dur_ps IS NOT NULL
      AND (e.category IN ('user_annotation', 'nvtx') OR (e.category = 'python_function' AND starts_with(e.name, 'nn.Module: ')))
),
nesting_events AS (
    SELECT profile_id, track_id, event_id, start_ps, dur_ps FROM name_events
),
nesting AS MATERIALIZED (
-- @include ops._nesting
),
parents AS MATERIALIZED (
    SELECT ne.*, n.parent_id
    FROM name_events AS ne
    LEFT JOIN nesting AS n USING (profile_id, event_id)
),
paths AS MATERIALIZED (
    WITH RECURSIVE down(profile_id, event_id, path, depth, step, ancestor_ids) AS (
        SELECT profile_id, event_id, component, 0::BIGINT, own_step, [event_id]
        FROM parents WHERE parent_id IS NULL
        UNION ALL
        SELECT p.profile_id, p.event_id, d.path || '/' || p.component, d.depth + 1, coalesce(p.own_step, d.step),
            list_append(d.ancestor_ids, p.event_id)
        FROM down AS d JOIN parents AS p ON p.profile_id = d.profile_id AND p.parent_id = d.event_id
    )
    SELECT * FROM down
),
-- Where each name's span opens and closes on its thread; at its end its parent is innermost again
-- (a child ending after its parent by clock rounding closes with it).
bounds AS (
    SELECT c.profile_id, c.track_id, c.start_ps AS at_ps, 1 AS kind, pa.depth AS depth, c.event_id AS label
    FROM parents AS c JOIN paths AS pa USING (profile_id, event_id)
    UNION ALL
    SELECT c.profile_id, c.track_id,
        least(c.start_ps + c.dur_ps, coalesce(p.start_ps + p.dur_ps, c.start_ps + c.dur_ps)), 0, pa.depth,
        coalesce(c.parent_id, -1)
    FROM parents AS c
    JOIN paths AS pa USING (profile_id, event_id)
    LEFT JOIN parents AS p ON p.profile_id = c.profile_id AND p.event_id = c.parent_id
),
tree AS MATERIALIZED (
-- @include torch._op_tree
),
-- Ops and API calls on the threads that hold names.
items AS (
    SELECT t.profile_id, t.track_id, t.event_id, t.node, t.parent_id AS op_parent_id, t.start_ps, t.dur_ps,
        t.flops, t.bytes_accessed
    FROM tree AS t
    SEMI JOIN (SELECT DISTINCT profile_id, track_id FROM name_events) AS n USING (profile_id, track_id)
    UNION ALL
    -- A profile without ops (an xprosql.cupti recording): its API calls, which the op tree leaves out.
    SELECT a.profile_id, a.track_id, a.event_id, 'api_call', NULL, a.start_ps, a.dur_ps, NULL, NULL
    FROM api_calls AS a
    SEMI JOIN (SELECT DISTINCT profile_id, track_id FROM name_events) AS n USING (profile_id, track_id)
    WHERE a.start_ps IS NOT NULL AND a.profile_id NOT IN (SELECT profile_id FROM tree)
),
-- The innermost name open when each item starts: ends before starts at one instant (deeper ends
-- first), starts outer first, items last.
labelled AS MATERIALIZED (
    SELECT profile_id, event_id, node, op_parent_id, dur_ps, flops, bytes_accessed,
        nullif(name_id, -1) AS name_id
    FROM (
        SELECT profile_id, track_id, event_id, node, op_parent_id, dur_ps, flops, bytes_accessed, is_item,
            last_value(label IGNORE NULLS) OVER (
                PARTITION BY profile_id, track_id
                ORDER BY at_ps, kind, CASE WHEN kind = 0 THEN -depth ELSE depth END, event_id
                ROWS UNBOUNDED PRECEDING) AS name_id
        FROM (
            SELECT profile_id, track_id, at_ps, kind, depth, label, NULL::BIGINT AS event_id, NULL AS node,
                NULL::BIGINT AS op_parent_id, NULL::BIGINT AS dur_ps, NULL::DOUBLE AS flops,
                NULL::DOUBLE AS bytes_accessed, false AS is_item
            FROM bounds
            UNION ALL
            SELECT profile_id, track_id, start_ps, 2, 0, NULL, event_id, node, op_parent_id, dur_ps, flops,
                bytes_accessed, true
            FROM items
        )
    )
    WHERE is_item AND name_id IS NOT NULL AND name_id <> -1
),
-- An op counts for its name when the op around it (if any) lies outside that name.
counted_ops AS (
    SELECT o.profile_id, o.name_id, o.event_id, o.dur_ps, o.flops, o.bytes_accessed
    FROM labelled AS o
    LEFT JOIN labelled AS p ON p.profile_id = o.profile_id AND p.event_id = o.op_parent_id
    WHERE o.node = 'op' AND (p.name_id IS NULL OR p.name_id <> o.name_id)
),
activities AS (
    SELECT profile_id, event_id, start_ps, dur_ps, correlation_id
    FROM kernels
    WHERE correlation_id IS NOT NULL AND profile_id IN (SELECT profile_id FROM name_events)
    UNION ALL
    SELECT profile_id, event_id, start_ps, dur_ps, correlation_id
    FROM memcpys
    WHERE correlation_id IS NOT NULL AND profile_id IN (SELECT profile_id FROM name_events)
),
launched AS (
    SELECT g.profile_id, g.event_id, g.start_ps, g.dur_ps, l.name_id
    FROM activities AS g
    JOIN api_calls AS a ON a.profile_id = g.profile_id AND a.correlation_id = g.correlation_id
    JOIN labelled AS l ON l.profile_id = a.profile_id AND l.event_id = a.event_id
    QUALIFY row_number() OVER (PARTITION BY g.profile_id, g.event_id
                               ORDER BY (a.start_ps <= g.start_ps) DESC, g.start_ps - a.start_ps, a.event_id) = 1
),
self_ops AS (
    SELECT profile_id, name_id AS event_id,
        sum(dur_ps) AS op_ps, count(*) AS ops, count(flops) AS costed_ops,
        sum(flops) AS flops, sum(bytes_accessed) AS bytes_accessed
    FROM counted_ops
    GROUP BY ALL
),
self_gpu AS (
    SELECT profile_id, name_id AS event_id, sum(dur_ps) AS gpu_ps, count(*) AS gpu_activities
    FROM launched
    GROUP BY ALL
),
-- Each call's own values go to every call from the root down to it.
up AS (
    SELECT s.profile_id, unnest(pa.ancestor_ids) AS event_id, s.op_ps, s.ops, s.costed_ops, s.flops, s.bytes_accessed,
        NULL::BIGINT AS gpu_ps, NULL::BIGINT AS gpu_activities
    FROM self_ops AS s JOIN paths AS pa USING (profile_id, event_id)
    UNION ALL
    SELECT s.profile_id, unnest(pa.ancestor_ids), NULL, NULL, NULL, NULL, NULL, s.gpu_ps, s.gpu_activities
    FROM self_gpu AS s JOIN paths AS pa USING (profile_id, event_id)
),
inclusive AS (
    SELECT profile_id, event_id,
        sum(op_ps) AS op_ps, sum(ops) AS ops, sum(costed_ops) AS costed_ops,
        sum(flops) AS flops, sum(bytes_accessed) AS bytes_accessed,
        sum(gpu_ps) AS gpu_ps, sum(gpu_activities) AS gpu_activities
    FROM up
    GROUP BY ALL
),
-- The union of the GPU intervals launched inside each call.
gpu_spans AS (
    SELECT l.profile_id, unnest(pa.ancestor_ids) AS event_id, l.start_ps, l.start_ps + l.dur_ps AS end_ps
    FROM launched AS l JOIN paths AS pa ON pa.profile_id = l.profile_id AND pa.event_id = l.name_id
),
gpu_islands AS (
    SELECT profile_id, event_id, start_ps, end_ps,
        max(end_ps) OVER (PARTITION BY profile_id, event_id ORDER BY start_ps, end_ps
                          ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach_ps
    FROM gpu_spans
),
gpu_busy AS (
    SELECT profile_id, event_id, sum(island_end - island_start) AS gpu_busy_ps
    FROM (
        SELECT profile_id, event_id, island, min(start_ps) AS island_start, max(end_ps) AS island_end
        FROM (
            SELECT *, sum(CASE WHEN reach_ps IS NULL OR start_ps > reach_ps THEN 1 ELSE 0 END) OVER (
                PARTITION BY profile_id, event_id ORDER BY start_ps, end_ps ROWS UNBOUNDED PRECEDING) AS island
            FROM gpu_islands
        )
        GROUP BY ALL
    )
    GROUP BY ALL
),
children AS (
    SELECT profile_id, parent_id AS event_id, sum(dur_ps) AS children_ps
    FROM parents
    WHERE parent_id IS NOT NULL
    GROUP BY ALL
),
external_ids AS (
    SELECT s.profile_id, s.event_id, coalesce(s.int_value, CAST(s.uint_value AS BIGINT)) AS external_id
    FROM event_stats AS s
    WHERE s.stat = 'External id' AND s.profile_id IN (SELECT profile_id FROM name_events)
),
gpu_annotations AS (
    SELECT c.event_id, c.profile_id, sum(g.dur_ps) AS gpu_annotation_ps
    FROM name_events AS c
    JOIN external_ids AS ce USING (profile_id, event_id)
    JOIN external_ids AS ge ON ge.profile_id = ce.profile_id AND ge.external_id = ce.external_id
    JOIN events AS g ON g.profile_id = ge.profile_id AND g.event_id = ge.event_id
    WHERE g.category = 'gpu_user_annotation' AND g.name = c.name AND c.source <> 'module'
    GROUP BY ALL
)
SELECT
    p.profile_id, p.event_id, p.device_id, p.track_id, p.parent_id, pa.ancestor_ids,
    p.source, p.name, p.component, pa.path, pa.depth, pa.step, p.start_ps, p.dur_ps,
    CAST(greatest(p.dur_ps - coalesce(ch.children_ps, 0), 0) AS BIGINT) AS cpu_self_ps,
    CAST(coalesce(i.op_ps, 0) AS BIGINT) AS op_ps,
    CAST(coalesce(so.op_ps, 0) AS BIGINT) AS self_op_ps,
    CAST(coalesce(i.ops, 0) AS BIGINT) AS ops,
    CAST(coalesce(i.costed_ops, 0) AS BIGINT) AS costed_ops,
    i.flops, i.bytes_accessed,
    CAST(coalesce(i.gpu_activities, 0) AS BIGINT) AS gpu_activities,
    CAST(coalesce(i.gpu_ps, 0) AS BIGINT) AS gpu_ps,
    CAST(coalesce(b.gpu_busy_ps, 0) AS BIGINT) AS gpu_busy_ps,
    CAST(coalesce(sg.gpu_ps, 0) AS BIGINT) AS self_gpu_ps,
    CAST(ga.gpu_annotation_ps AS BIGINT) AS gpu_annotation_ps
FROM parents AS p
JOIN paths AS pa USING (profile_id, event_id)
LEFT JOIN children AS ch USING (profile_id, event_id)
LEFT JOIN inclusive AS i USING (profile_id, event_id)
LEFT JOIN self_ops AS so USING (profile_id, event_id)
LEFT JOIN self_gpu AS sg USING (profile_id, event_id)
LEFT JOIN gpu_busy AS b USING (profile_id, event_id)
LEFT JOIN gpu_annotations AS ga USING (profile_id, event_id)
