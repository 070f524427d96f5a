-- memory.memory_leaks: allocations never freed by the end of the profile, grouped by the op
-- (and shape) that allocated them, with each allocator's growth of bytes in use per step.
--
-- Built on the memory_events table (memory._memory_events). A block is unfreed when its
-- allocation is the last event at its address. The op: XSpace's tf_op; for Kineto the
-- innermost op (cpu_op) around the [memory] event on its thread, and the outermost one too
-- (top_op: what the program called; memory._allocation_ops). Growth per step: the bytes in use
-- after the last event of each step less those before its start (after the last event
-- before it, else before its first event), averaged over the profile's steps (steps.steps,
-- its first device's steps); NULL without steps.
--
-- Needs: allocator events: XSpace MemoryAllocation / MemoryDeallocation, or Kineto [memory] (profile_memory=True)
--
-- Show: profile_id, device_id, allocator, op, shape, unfreed, unfreed_bytes, steps, growth_per_step_bytes
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
    SELECT * FROM blocks WHERE kind = 'allocation' AND next_kind IS NULL
),
allocations AS (
    SELECT profile_id, event_id FROM unfreed
),
around AS (
-- @include memory._allocation_ops
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
    u.profile_id, u.device_id, u.allocator, a.op, a.top_op, u.shape,
    count(*) AS unfreed,
    CAST(sum(u.bytes) AS BIGINT) AS unfreed_bytes,
    min(u.start_ps) AS first_ps,
    max(u.start_ps) AS last_ps,
    any_value(g.steps) AS steps,
    any_value(g.growth_per_step_bytes) AS growth_per_step_bytes
FROM unfreed AS u
LEFT JOIN around AS a USING (profile_id, event_id)
LEFT JOIN growth AS g USING (profile_id, device_id, allocator)
GROUP BY u.profile_id, u.device_id, u.allocator, a.op, a.top_op, u.shape
ORDER BY u.profile_id, unfreed_bytes DESC, op
