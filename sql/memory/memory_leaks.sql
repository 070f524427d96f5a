-- memory.memory_leaks: allocations never freed by the end of the profile, grouped by the op
-- (and shape) that allocated them, with each allocator's growth of bytes in use per step.
--
-- Built on the memory_events table (memory._memory_events). A block is unfreed when its
-- allocation is the last event at its address. The op: XSpace's tf_op; for Kineto the
-- innermost op (cpu_op) around the [memory] event on its thread (ops._nesting), and the
-- outermost one too (top_op: what the program called). Growth per step: the bytes in use
-- after the last event of each step less those before its start (after the last event
-- before it, else before its first event), averaged over the profile's steps (steps.steps,
-- its first device's steps); NULL without steps.
--
-- Needs: allocator events: XSpace MemoryAllocation / MemoryDeallocation, or Kineto [memory] (profile_memory=True)
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   device_id  INTEGER  devices.device_id of the plane or process that recorded the events
--   allocator  VARCHAR  memory_events.allocator (GPU_0_bfc, cuda:0, hip:0, cpu, ...)
--   op  VARCHAR  the op that allocated: XSpace tf_op, Kineto the innermost cpu_op around the allocation
--   top_op  VARCHAR  Kineto: the outermost cpu_op around it; NULL for XSpace
--   shape  VARCHAR  XSpace shape of the tensor
--   unfreed  BIGINT  allocations not freed by the profile's end
--   unfreed_bytes  BIGINT  their bytes, bytes
--   first_ps  BIGINT  the first of them, ps
--   last_ps  BIGINT  the last of them, ps
--   steps  BIGINT  steps of the profile the growth is over
--   growth_per_step_bytes  DOUBLE  the allocator's bytes in use gained per step, on average, bytes
WITH every_step AS (
-- @include steps.steps
),
step_windows AS (
    SELECT s.profile_id, s.step_index, s.start_ps, s.end_ps
    FROM every_step AS s
    WHERE s.device_id = (SELECT min(x.device_id) FROM every_step AS x WHERE x.profile_id = s.profile_id)
),
blocks AS (
    SELECT *,
        lead(kind) OVER (PARTITION BY profile_id, device_id, allocator, address ORDER BY start_ps, event_id) AS next_kind
    FROM memory_events
    WHERE address IS NOT NULL
),
unfreed AS (
    SELECT b.*, e.track_id
    FROM blocks AS b
    JOIN events AS e USING (profile_id, event_id)
    WHERE b.kind = 'allocation' AND b.next_kind IS NULL
),
-- Kineto: the ops around each unfreed allocation on its thread.
nesting_events AS (
    SELECT e.profile_id, e.track_id, e.event_id, e.start_ps, e.dur_ps
    FROM events AS e
    WHERE e.category = 'cpu_op' AND e.start_ps IS NOT NULL
      AND (e.profile_id, e.track_id) IN (SELECT profile_id, track_id FROM unfreed)
    UNION ALL
    SELECT profile_id, track_id, event_id, start_ps, 0 FROM unfreed
),
nesting AS MATERIALIZED (
-- @include ops._nesting
),
-- Each allocation's innermost op (its parent) and outermost (the root op around it: the latest root to start
-- before it, when it has not ended by then).
roots AS (
    SELECT n.profile_id, n.track_id, e.start_ps, e.start_ps + e.dur_ps AS end_ps, CAST(e.name AS VARCHAR) AS name
    FROM nesting AS n
    JOIN events AS e USING (profile_id, event_id)
    WHERE n.depth = 0 AND e.category = 'cpu_op'
),
around AS (
    SELECT u.profile_id, u.event_id, CAST(p.name AS VARCHAR) AS op,
        CASE WHEN r.end_ps >= u.start_ps THEN r.name END AS top_op
    FROM unfreed AS u
    JOIN nesting AS n ON n.profile_id = u.profile_id AND n.event_id = u.event_id
    LEFT JOIN events AS p ON p.profile_id = n.profile_id AND p.event_id = n.parent_id
    ASOF LEFT JOIN roots AS r ON r.profile_id = u.profile_id AND r.track_id = u.track_id AND r.start_ps <= u.start_ps
),
-- In use after the last event of each step (and before the first), per allocator.
step_ends AS (
    SELECT w.profile_id, m.device_id, m.allocator, w.step_index,
        arg_max(m.in_use_bytes, (m.start_ps, m.event_id)) FILTER (WHERE m.start_ps <= w.end_ps) AS at_end,
        coalesce(
            arg_max(m.in_use_bytes, (m.start_ps, m.event_id)) FILTER (WHERE m.start_ps < w.start_ps),
            -- no event before the step: what was in use before its first one
            arg_min(m.in_use_bytes - CASE m.kind WHEN 'allocation' THEN m.bytes ELSE -m.bytes END, (m.start_ps, m.event_id))
                FILTER (WHERE m.start_ps >= w.start_ps)) AS at_start
    FROM step_windows AS w
    JOIN memory_events AS m USING (profile_id)
    GROUP BY ALL
),
growth AS (
    SELECT profile_id, device_id, allocator, count(*) AS steps, avg(at_end - at_start) AS growth_per_step_bytes
    FROM step_ends
    WHERE at_end IS NOT NULL
    GROUP BY ALL
)
SELECT
    u.profile_id, u.device_id, u.allocator,
    coalesce(u.op, a.op) AS op,
    CASE WHEN u.op IS NULL THEN a.top_op END AS top_op,
    u.shape,
    count(*) AS unfreed,
    CAST(sum(u.bytes) AS BIGINT) AS unfreed_bytes,
    min(u.start_ps) AS first_ps,
    max(u.start_ps) AS last_ps,
    any_value(g.steps) AS steps,
    any_value(g.growth_per_step_bytes) AS growth_per_step_bytes
FROM unfreed AS u
LEFT JOIN around AS a USING (profile_id, event_id)
LEFT JOIN growth AS g USING (profile_id, device_id, allocator)
GROUP BY u.profile_id, u.device_id, u.allocator, coalesce(u.op, a.op), CASE WHEN u.op IS NULL THEN a.top_op END, u.shape
ORDER BY u.profile_id, unfreed_bytes DESC, op
