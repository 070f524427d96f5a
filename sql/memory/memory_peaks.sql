-- memory.memory_peaks: per profile and device allocator, the peak of bytes in use, when it
-- came, what was reserved and how fragmented the allocator was then, the allocations and
-- frees, and the peak's share of the device's memory.
--
-- Built on the memory_events table (memory._memory_events). The peak is the highest in-use
-- total an event of the profile records (the first event at it gives the time); an XSpace
-- allocator also says its own peak so far (allocator_peak_bytes, which can predate the
-- profile). Unfreed: allocations whose address no later free of the allocator releases.
--
-- Deliberate difference from XProf's memory_profile: peak_ps is when the profile first reaches
-- its peak, on the profile's clock. XProf walks the events line by line and keeps the last
-- one at the peak (stack + heap >= the peak so far), reporting its offset on its own line:
-- that is xprof_peak_offset_ps (XSpace), for comparison.
--
-- Needs: allocator events: XSpace MemoryAllocation / MemoryDeallocation, or Kineto [memory] (profile_memory=True)
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   device_id  INTEGER  devices.device_id of the plane or process that recorded the events
--   allocator  VARCHAR  memory_events.allocator (GPU_0_bfc, cuda:0, hip:0, cpu, ...)
--   peak_in_use_bytes  BIGINT  the highest in-use total of the profile's events, bytes
--   peak_ps  BIGINT  when it was first reached, ps
--   xprof_peak_offset_ps  BIGINT  XProf's peakStatsTimePs: the last event at the peak in the file's line order, as an offset on its line (XSpace), ps
--   reserved_at_peak_bytes  BIGINT  bytes reserved then, bytes
--   fragmentation_at_peak  DOUBLE  the allocator's fragmentation then (XSpace), 0..1
--   allocator_peak_bytes  BIGINT  the allocator's own peak so far, at the profile's end (XSpace), bytes
--   allocations  BIGINT  allocations
--   frees  BIGINT  frees
--   unfreed  BIGINT  allocations whose block is not freed later in the profile
--   unfreed_bytes  BIGINT  their bytes, bytes
--   capacity_bytes  BIGINT  the device's memory (devices.memory_bytes of the GPU the allocator names), bytes
--   peak_capacity_share  DOUBLE  peak_in_use_bytes / capacity_bytes, 0..1
WITH xprof_order AS (
    -- XProf's walk: lines in file order, events in line order; its peak counts reserved (stack) and in use (heap).
    SELECT m.profile_id, m.device_id, m.allocator,
        arg_max(m.start_ps - (t.timestamp_ns - p.start_ns) * 1000, (coalesce(m.reserved_bytes, 0) + m.in_use_bytes, m.event_id))
            AS xprof_peak_offset_ps
    FROM memory_events AS m
    JOIN events AS e USING (profile_id, event_id)
    JOIN tracks AS t USING (profile_id, track_id)
    JOIN profiles AS p USING (profile_id)
    WHERE e.name IN ('MemoryAllocation', 'MemoryDeallocation')
    GROUP BY ALL
),
ranked AS (
    SELECT *,
        row_number() OVER (PARTITION BY profile_id, device_id, allocator ORDER BY in_use_bytes DESC NULLS LAST, start_ps, event_id) AS at_peak
    FROM memory_events
),
-- A block is unfreed when its allocation is the last event at its address.
blocks AS (
    SELECT profile_id, device_id, allocator, kind, bytes,
        lead(kind) OVER (PARTITION BY profile_id, device_id, allocator, address ORDER BY start_ps, event_id) AS next_kind
    FROM memory_events
    WHERE address IS NOT NULL
),
unfreed AS (
    SELECT profile_id, device_id, allocator, count(*) AS unfreed, CAST(sum(bytes) AS BIGINT) AS unfreed_bytes
    FROM blocks
    WHERE kind = 'allocation' AND next_kind IS NULL
    GROUP BY ALL
),
summary AS (
    SELECT profile_id, device_id, allocator,
        count(*) FILTER (WHERE kind = 'allocation') AS allocations,
        count(*) FILTER (WHERE kind = 'free') AS frees,
        max(allocator_peak_bytes) AS allocator_peak_bytes,
        -- The GPU an allocator serves: GPU_0_bfc, cuda:0, hip:0.
        TRY_CAST(coalesce(nullif(regexp_extract(allocator, '^GPU_([0-9]+)_', 1), ''),
                          nullif(regexp_extract(allocator, '^(?:cuda|hip):([0-9]+)$', 1), '')) AS INTEGER) AS gpu
    FROM memory_events
    GROUP BY ALL
),
capacities AS (
    SELECT profile_id, ordinal AS gpu, max(memory_bytes) AS capacity_bytes
    FROM devices
    WHERE kind = 'gpu'
    GROUP BY ALL
)
SELECT
    r.profile_id, r.device_id, r.allocator,
    r.in_use_bytes AS peak_in_use_bytes, r.start_ps AS peak_ps, x.xprof_peak_offset_ps,
    r.reserved_bytes AS reserved_at_peak_bytes, r.fragmentation AS fragmentation_at_peak,
    s.allocator_peak_bytes, s.allocations, s.frees,
    coalesce(u.unfreed, 0) AS unfreed, coalesce(u.unfreed_bytes, 0) AS unfreed_bytes,
    c.capacity_bytes,
    r.in_use_bytes / nullif(c.capacity_bytes, 0) AS peak_capacity_share
FROM ranked AS r
JOIN summary AS s USING (profile_id, device_id, allocator)
LEFT JOIN unfreed AS u USING (profile_id, device_id, allocator)
LEFT JOIN xprof_order AS x USING (profile_id, device_id, allocator)
LEFT JOIN capacities AS c ON c.profile_id = r.profile_id AND c.gpu = s.gpu
WHERE r.at_peak = 1
ORDER BY r.profile_id, r.allocator
