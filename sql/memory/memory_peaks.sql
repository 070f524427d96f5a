-- memory.memory_peaks: per profile and device allocator (and step, with $by_step), the peak of
-- bytes in use, when it came, what was live then (the largest blocks by op and shape), what
-- was reserved and how fragmented the allocator was then, the allocations and frees, and the
-- peak's share of the device's memory.
--
-- Built on the memory_events table (memory._memory_events). The peak is the highest in-use
-- total an event of the profile records (the first event at it gives the time); an XSpace
-- allocator also says its own peak so far (allocator_peak_bytes, which can predate the
-- profile). Unfreed: allocations whose address no later free of the allocator releases.
-- Live at the peak: blocks allocated by the peak's event and freed after it or never, summed by
-- the op that asked for them (memory._allocation_ops) and shape; what the profile holds no
-- allocation for (allocated before it began) is unattributed_at_peak_bytes (XProf's
-- preallocated or unmapped special allocations). Steps: the profile's steps (steps.steps, its
-- first device's), an event in the step whose span holds it; events outside every step have
-- their own row, step_index NULL.
--
-- Deliberate difference from XProf's memory_profile: peak_ps is when the profile first reaches
-- its peak, on the profile's clock. XProf walks the events line by line and keeps the last
-- one at the peak (stack + heap >= the peak so far), reporting its offset on its own line:
-- that is xprof_peak_offset_ps (XSpace, whole-profile rows), for comparison. XProf lists as
-- live at its peak only the allocations of the peak's step; we list every block live then.
--
-- Needs: allocator events: XSpace MemoryAllocation / MemoryDeallocation, or Kineto [memory] (profile_memory=True)
--
-- Parameters:
--   $by_step  BOOLEAN  a row per step of the profile instead of one for the whole profile (default: false)
--   $top  BIGINT  (op, shape) groups listed in live_at_peak, largest first; NULL: every one [range: 1..] (default: 5)
--
-- Show: profile_id, device_id, allocator, step, peak_in_use_bytes, peak_ps, reserved_at_peak_bytes, fragmentation_at_peak, unfreed_bytes, capacity_bytes, peak_capacity_share
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   device_id  INTEGER  devices.device_id of the plane or process that recorded the events
--   allocator  VARCHAR  memory_events.allocator (GPU_0_bfc, cuda:0, hip:0, cpu, ...)
--   step_index  BIGINT  with $by_step: steps.step_index of the step (NULL: events outside every step); NULL otherwise
--   step  BIGINT  with $by_step: the step number as recorded (steps.step)
--   peak_in_use_bytes  BIGINT  the highest in-use total of the profile's events, bytes
--   peak_ps  BIGINT  when it was first reached, ps
--   xprof_peak_offset_ps  BIGINT  XProf's peakStatsTimePs: the last event at the peak in the file's line order, as an offset on its line (XSpace, whole-profile rows), ps
--   reserved_at_peak_bytes  BIGINT  bytes the allocator held then (memory._memory_events.reserved_bytes), at least peak_in_use_bytes, bytes
--   fragmentation_at_peak  DOUBLE  the allocator's fragmentation then (XSpace), 0..1
--   allocator_peak_bytes  BIGINT  the allocator's own peak so far, at the profile's end (XSpace), bytes
--   live_at_peak  STRUCT(op VARCHAR, shape VARCHAR, blocks BIGINT, bytes BIGINT)[]  the blocks live at the peak, summed by the op that allocated them and shape, the $top largest first (bytes: bytes)
--   unattributed_at_peak_bytes  BIGINT  bytes in use at the peak that no allocation of the profile accounts for (allocated before it began), bytes
--   allocations  BIGINT  allocations in the row's span
--   frees  BIGINT  frees in the row's span
--   unfreed  BIGINT  allocations of the row's span whose block is not freed later in the profile
--   unfreed_bytes  BIGINT  their bytes, bytes
--   capacity_bytes  BIGINT  the device's memory (devices.memory_bytes of the GPU the allocator names), bytes
--   peak_capacity_share  DOUBLE  peak_in_use_bytes / capacity_bytes, 0..1
WITH params AS (
    SELECT CAST($by_step AS BOOLEAN) AS by_step, CAST($top AS BIGINT) AS top
),
every_step AS (
-- @include steps.steps
),
step_windows AS (
    SELECT s.profile_id, s.step_index, s.step, s.start_ps, s.end_ps
    FROM every_step AS s
    WHERE s.device_id = (SELECT min(x.device_id) FROM every_step AS x WHERE x.profile_id = s.profile_id)
      AND (SELECT by_step FROM params)
),
-- Each event with its step (with $by_step) and, for allocations, when the block is freed.
placed AS MATERIALIZED (
    SELECT m.*,
        CASE WHEN m.start_ps < w.end_ps THEN w.step_index END AS step_index,
        CASE WHEN m.start_ps < w.end_ps THEN w.step END AS step,
        lead(m.kind) OVER block AS next_kind,
        lead(m.start_ps) OVER block AS next_ps,
        lead(m.event_id) OVER block AS next_event_id
    FROM memory_events AS m
    ASOF LEFT JOIN step_windows AS w ON w.profile_id = m.profile_id AND w.start_ps <= m.start_ps
    WINDOW block AS (PARTITION BY m.profile_id, m.device_id, m.allocator, m.address ORDER BY m.start_ps, m.event_id)
),
-- The XSpace allocator events' lines (a filtered scan first: joined before the filter, events is scanned whole).
allocator_events AS MATERIALIZED (
    SELECT profile_id, event_id, track_id
    FROM events
    WHERE name IN ('MemoryAllocation', 'MemoryDeallocation') AND NOT (SELECT by_step FROM params)
),
xprof_order AS (
    -- XProf's walk: lines in file order, events in line order; its peak counts the stack and the heap in use,
    -- which is what an XSpace allocator holds (memory._memory_events.reserved_bytes).
    SELECT m.profile_id, m.device_id, m.allocator,
        arg_max(m.start_ps - (t.timestamp_ns - p.start_ns) * 1000, (coalesce(m.reserved_bytes, m.in_use_bytes), m.event_id))
            AS xprof_peak_offset_ps
    FROM memory_events AS m
    JOIN allocator_events AS e USING (profile_id, event_id)
    JOIN tracks AS t USING (profile_id, track_id)
    JOIN profiles AS p USING (profile_id)
    GROUP BY ALL
),
ranked AS (
    SELECT *,
        row_number() OVER (PARTITION BY profile_id, device_id, allocator, step_index
                           ORDER BY in_use_bytes DESC NULLS LAST, start_ps, event_id) AS at_peak
    FROM placed
),
peaks AS (
    SELECT * FROM ranked WHERE at_peak = 1
),
-- Blocks allocated by the peak's event and not freed by then.
live AS (
    SELECT k.profile_id, k.device_id, k.allocator, k.step_index, b.event_id, b.bytes, b.shape
    FROM peaks AS k
    JOIN placed AS b ON b.profile_id = k.profile_id AND b.device_id = k.device_id AND b.allocator = k.allocator
    WHERE b.kind = 'allocation' AND b.address IS NOT NULL
      AND (b.start_ps, b.event_id) <= (k.start_ps, k.event_id)
      AND (b.next_kind IS NULL OR (b.next_ps, b.next_event_id) > (k.start_ps, k.event_id))
),
allocations AS (
    SELECT DISTINCT profile_id, event_id FROM live
),
allocation_ops AS (
-- @include memory._allocation_ops
),
live_groups AS (
    SELECT l.profile_id, l.device_id, l.allocator, l.step_index, o.op, l.shape,
        count(*) AS blocks, CAST(sum(l.bytes) AS BIGINT) AS bytes
    FROM live AS l
    LEFT JOIN allocation_ops AS o USING (profile_id, event_id)
    GROUP BY ALL
),
live_at_peak AS (
    SELECT profile_id, device_id, allocator, step_index,
        list({'op': op, 'shape': shape, 'blocks': blocks, 'bytes': bytes} ORDER BY bytes DESC, op, shape) AS groups,
        sum(bytes) AS live_bytes
    FROM live_groups
    GROUP BY ALL
),
summary AS (
    SELECT profile_id, device_id, allocator, step_index,
        count(*) FILTER (WHERE kind = 'allocation') AS allocations,
        count(*) FILTER (WHERE kind = 'free') AS frees,
        -- A block is unfreed when its allocation is the last event at its address.
        count(*) FILTER (WHERE kind = 'allocation' AND address IS NOT NULL AND next_kind IS NULL) AS unfreed,
        CAST(coalesce(sum(bytes) FILTER (WHERE kind = 'allocation' AND address IS NOT NULL AND next_kind IS NULL), 0) AS BIGINT)
            AS unfreed_bytes,
        max(allocator_peak_bytes) AS allocator_peak_bytes,
        -- The GPU an allocator serves: GPU_0_bfc, cuda:0, hip:0.
        TRY_CAST(coalesce(nullif(regexp_extract(allocator, '^GPU_([0-9]+)_', 1), ''),
                          nullif(regexp_extract(allocator, '^(?:cuda|hip):([0-9]+)$', 1), '')) AS INTEGER) AS gpu
    FROM placed
    GROUP BY ALL
),
capacities AS (
    SELECT profile_id, ordinal AS gpu, max(memory_bytes) AS capacity_bytes
    FROM devices
    WHERE kind = 'gpu'
    GROUP BY ALL
)
SELECT
    r.profile_id, r.device_id, r.allocator, r.step_index, r.step,
    r.in_use_bytes AS peak_in_use_bytes, r.start_ps AS peak_ps, x.xprof_peak_offset_ps,
    r.reserved_bytes AS reserved_at_peak_bytes, r.fragmentation AS fragmentation_at_peak, s.allocator_peak_bytes,
    coalesce(l.groups[1:coalesce(q.top, len(l.groups))], []) AS live_at_peak,
    CAST(r.in_use_bytes - coalesce(l.live_bytes, 0) AS BIGINT) AS unattributed_at_peak_bytes,
    s.allocations, s.frees, s.unfreed, s.unfreed_bytes,
    c.capacity_bytes,
    r.in_use_bytes / nullif(c.capacity_bytes, 0) AS peak_capacity_share
FROM peaks AS r
CROSS JOIN (SELECT top FROM params) AS q
JOIN summary AS s ON s.profile_id = r.profile_id AND s.device_id = r.device_id AND s.allocator = r.allocator
                 AND s.step_index IS NOT DISTINCT FROM r.step_index
LEFT JOIN live_at_peak AS l ON l.profile_id = r.profile_id AND l.device_id = r.device_id AND l.allocator = r.allocator
                           AND l.step_index IS NOT DISTINCT FROM r.step_index
LEFT JOIN xprof_order AS x ON x.profile_id = r.profile_id AND x.device_id = r.device_id AND x.allocator = r.allocator
LEFT JOIN capacities AS c ON c.profile_id = r.profile_id AND c.gpu = s.gpu
ORDER BY r.profile_id, r.allocator, r.step_index NULLS FIRST
