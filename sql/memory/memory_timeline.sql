-- memory.memory_timeline: bytes in use and reserved per device allocator over time, ready to
-- plot: after every allocation and free, or the highest of each of $buckets equal spans of
-- the profile.
--
-- Built on the memory_events table (memory._memory_events, stored per profile at ingest):
-- XSpace allocator events and Kineto [memory] events. In use and reserved are the
-- allocator's own totals after each event, as it records them.
--
-- Needs: allocator events: XSpace MemoryAllocation / MemoryDeallocation, or Kineto [memory] (profile_memory=True)
--
-- Parameters:
--   $buckets  BIGINT  equal spans of the profile per allocator, each with its highest values; NULL: a row per event [range: 1..] (default: NULL)
--
-- Show: profile_id, device_id, allocator, bucket, start_ps, end_ps, in_use_bytes, reserved_bytes, events
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   device_id  INTEGER  devices.device_id of the plane or process that recorded the events
--   allocator  VARCHAR  memory_events.allocator (GPU_0_bfc, cuda:0, hip:0, cpu, ...)
--   bucket  BIGINT  the span's index (0 .. $buckets - 1); NULL when a row is an event
--   start_ps  BIGINT  the event's time, or the span's start, ps
--   end_ps  BIGINT  the event's time, or the span's end, ps
--   in_use_bytes  BIGINT  bytes in use after the event, or the span's highest, bytes
--   reserved_bytes  BIGINT  bytes reserved after the event, or the span's highest, bytes
--   events  BIGINT  allocations and frees in the row
--   allocated_bytes  BIGINT  bytes allocated in the row, bytes
--   freed_bytes  BIGINT  bytes freed in the row, bytes
WITH params AS (
    SELECT CAST($buckets AS BIGINT) AS buckets
),
events AS (
    SELECT m.*, x.buckets, p.duration_ps
    FROM memory_events AS m
    JOIN profiles AS p USING (profile_id)
    CROSS JOIN params AS x
),
placed AS (
    SELECT *,
        CASE WHEN buckets IS NOT NULL
             THEN least(CAST(floor(start_ps * buckets / greatest(duration_ps, 1)) AS BIGINT), buckets - 1) END AS bucket
    FROM events
)
SELECT
    profile_id, device_id, allocator, bucket,
    CASE WHEN bucket IS NULL THEN min(start_ps) ELSE CAST(any_value(bucket) * any_value(duration_ps) / any_value(buckets) AS BIGINT) END AS start_ps,
    CASE WHEN bucket IS NULL THEN max(start_ps) ELSE CAST((any_value(bucket) + 1) * any_value(duration_ps) / any_value(buckets) AS BIGINT) END AS end_ps,
    max(in_use_bytes) AS in_use_bytes,
    max(reserved_bytes) AS reserved_bytes,
    count(*) AS events,
    CAST(coalesce(sum(bytes) FILTER (WHERE kind = 'allocation'), 0) AS BIGINT) AS allocated_bytes,
    CAST(coalesce(sum(bytes) FILTER (WHERE kind = 'free'), 0) AS BIGINT) AS freed_bytes
FROM placed
GROUP BY profile_id, device_id, allocator, bucket, CASE WHEN bucket IS NULL THEN event_id END
ORDER BY profile_id, allocator, start_ps
