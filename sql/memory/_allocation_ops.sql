-- memory._allocation_ops: the op that asked for each of a set of allocations. XSpace: the
-- tf_op the allocator recorded. Kineto: the innermost op (cpu_op) around the [memory] event
-- on its thread (ops._nesting), and the outermost one (top_op: the latest root op to start
-- before it, when it has not ended by then: what the program called).
--
-- Reads `allocations` (profile_id, event_id of memory_events rows), which the including
-- module defines before the include.
--
-- Input: allocations AS SELECT profile_id, event_id FROM memory_events WHERE kind = 'allocation'
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   event_id  BIGINT  memory_events.event_id of the allocation
--   op  VARCHAR  XSpace tf_op, Kineto the innermost cpu_op around the allocation
--   top_op  VARCHAR  Kineto: the outermost cpu_op around it; NULL for XSpace
WITH _allocated AS (
    SELECT a.profile_id, a.event_id, e.track_id, e.start_ps, m.op, e.name = '[memory]' AS nests
    FROM allocations AS a
    JOIN memory_events AS m USING (profile_id, event_id)
    JOIN events AS e USING (profile_id, event_id)
),
-- Only Kineto [memory] events sit inside ops on their thread.
nesting_events AS (
    SELECT e.profile_id, e.track_id, e.event_id, e.start_ps, e.dur_ps
    FROM events AS e
    WHERE e.category = 'cpu_op' AND e.start_ps IS NOT NULL
      AND (e.profile_id, e.track_id) IN (SELECT profile_id, track_id FROM _allocated WHERE op IS NULL AND nests)
    UNION ALL
    SELECT profile_id, track_id, event_id, start_ps, 0 FROM _allocated WHERE op IS NULL AND nests
),
_nested AS MATERIALIZED (
-- @include ops._nesting
),
_roots AS (
    SELECT n.profile_id, n.track_id, e.start_ps, e.start_ps + e.dur_ps AS end_ps, CAST(e.name AS VARCHAR) AS name
    FROM _nested AS n
    JOIN events AS e USING (profile_id, event_id)
    WHERE n.depth = 0 AND e.category = 'cpu_op'
)
SELECT a.profile_id, a.event_id,
    coalesce(a.op, CAST(p.name AS VARCHAR)) AS op,
    CASE WHEN a.op IS NULL AND r.end_ps >= a.start_ps THEN r.name END AS top_op
FROM _allocated AS a
LEFT JOIN _nested AS n ON n.profile_id = a.profile_id AND n.event_id = a.event_id
LEFT JOIN events AS p ON p.profile_id = n.profile_id AND p.event_id = n.parent_id
ASOF LEFT JOIN _roots AS r ON r.profile_id = a.profile_id AND r.track_id = a.track_id AND r.start_ps <= a.start_ps
