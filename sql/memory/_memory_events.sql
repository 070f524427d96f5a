-- memory._memory_events: every allocation and free a profile records, on every source, with
-- the allocator's in-use and reserved totals after it. xprosql stores it per profile at
-- ingest (table memory_events).
--
-- Sources: XSpace host-plane MemoryAllocation / MemoryDeallocation events (XProf's memory
-- profile; stats bytes_allocated = in use after the event, bytes_reserved,
-- peak_bytes_in_use, allocation_bytes, requested_bytes, addr, allocator_name, tf_op,
-- region_type, data_type, shape, fragmentation) and Kineto `[memory]` instant events
-- (profile_memory=True; args Bytes, negative for a free, Addr, Device Type 0 CPU / 1 CUDA,
-- Device Id, Total Allocated, Total Reserved). A Kineto allocator is named after its
-- device (c10's device types): cpu, cuda:N, hip:N (ROCm), else device_type_T:N; an XSpace one
-- without allocator_name (TPU) after the device it serves, index_on_host=N.
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   event_id  BIGINT  events.event_id of the allocation or free
--   device_id  INTEGER  devices.device_id of the plane or process that recorded it
--   allocator  VARCHAR  the allocator: XSpace allocator_name (GPU_0_bfc), else index_on_host=N; Kineto cpu, cuda:N, hip:N
--   kind  VARCHAR  allocation or free
--   start_ps  BIGINT  when, ps
--   bytes  BIGINT  bytes allocated or freed (positive), bytes
--   requested_bytes  BIGINT  bytes asked for (XSpace), bytes
--   address  BIGINT  the block's address
--   in_use_bytes  BIGINT  the allocator's bytes in use after the event, bytes
--   reserved_bytes  BIGINT  the bytes the allocator holds after the event, at least in_use_bytes: Kineto Total Reserved (NULL where 0: the CPU caches nothing); XSpace bytes_allocated + bytes_reserved (heap in use and XProf's stack reservation), bytes
--   allocator_peak_bytes  BIGINT  the allocator's peak in use so far, as it says (XSpace peak_bytes_in_use), bytes
--   fragmentation  DOUBLE  the allocator's fragmentation after the event (XSpace), 0..1
--   op  VARCHAR  the op that asked for it (XSpace tf_op)
--   region_type  VARCHAR  XSpace region_type (persist, dynamic, ...)
--   data_type  VARCHAR  XSpace data_type
--   shape  VARCHAR  XSpace shape of the tensor
WITH memory AS (
    SELECT e.profile_id, e.event_id, e.device_id, CAST(e.name AS VARCHAR) AS name, e.start_ps
    FROM events AS e
    WHERE e.name IN ('MemoryAllocation', 'MemoryDeallocation', '[memory]') AND e.start_ps IS NOT NULL
),
-- Each stat as a number (of whichever value column holds it) and as text.
values AS (
    SELECT s.profile_id, s.event_id, s.stat, s.str_value AS text,
        coalesce(s.int_value, CAST(s.uint_value AS BIGINT), CAST(s.double_value AS BIGINT)) AS number,
        coalesce(s.double_value, CAST(s.int_value AS DOUBLE)) AS real
    FROM event_stats AS s
    SEMI JOIN memory AS m USING (profile_id, event_id)
),
stats AS (
    SELECT
        profile_id, event_id,
        any_value(number) FILTER (WHERE stat IN ('bytes_allocated', 'Total Allocated')) AS in_use,
        any_value(number) FILTER (WHERE stat IN ('bytes_reserved', 'Total Reserved')) AS reserved,
        any_value(number) FILTER (WHERE stat IN ('allocation_bytes', 'Bytes')) AS bytes,
        any_value(number) FILTER (WHERE stat = 'requested_bytes') AS requested,
        any_value(number) FILTER (WHERE stat IN ('addr', 'Addr', 'address')) AS address,
        any_value(number) FILTER (WHERE stat = 'peak_bytes_in_use') AS allocator_peak,
        any_value(real) FILTER (WHERE stat = 'fragmentation') AS fragmentation,
        any_value(text) FILTER (WHERE stat = 'allocator_name') AS allocator_name,
        any_value(number) FILTER (WHERE stat = 'index_on_host') AS index_on_host,
        any_value(number) FILTER (WHERE stat = 'Device Type') AS device_type,
        any_value(number) FILTER (WHERE stat = 'Device Id') AS memory_device,
        any_value(text) FILTER (WHERE stat IN ('tf_op', 'tf_op_name')) AS op,
        any_value(text) FILTER (WHERE stat = 'region_type') AS region_type,
        any_value(coalesce(text, CAST(number AS VARCHAR))) FILTER (WHERE stat = 'data_type') AS data_type,
        any_value(text) FILTER (WHERE stat IN ('shape', 'tensor_shape')) AS shape
    FROM values
    GROUP BY ALL
)
SELECT
    m.profile_id, m.event_id, m.device_id,
    CASE WHEN m.name = '[memory]' THEN CASE s.device_type WHEN 0 THEN 'cpu' WHEN 1 THEN 'cuda:' || s.memory_device
                                                   WHEN 6 THEN 'hip:' || s.memory_device
                                                   ELSE 'device_type_' || s.device_type || ':' || s.memory_device END
         ELSE coalesce(s.allocator_name, 'index_on_host=' || s.index_on_host) END AS allocator,
    CASE WHEN m.name = 'MemoryDeallocation' OR (m.name = '[memory]' AND s.bytes < 0) THEN 'free' ELSE 'allocation' END AS kind,
    m.start_ps,
    CAST(abs(s.bytes) AS BIGINT) AS bytes,
    CAST(s.requested AS BIGINT) AS requested_bytes,
    CAST(s.address AS BIGINT) AS address,
    CAST(s.in_use AS BIGINT) AS in_use_bytes,
    -- What the allocator holds, on every source: Kineto's Total Reserved (the caching allocator's segments; 0 on
    -- the CPU, whose allocator caches nothing: not recorded); XSpace's bytes_reserved is only the stack XProf
    -- draws on top of the heap (stack_reserved_bytes), so its allocators hold the heap in use plus that.
    CAST(CASE WHEN m.name = '[memory]' THEN nullif(s.reserved, 0) ELSE s.in_use + coalesce(s.reserved, 0) END AS BIGINT)
        AS reserved_bytes,
    CAST(s.allocator_peak AS BIGINT) AS allocator_peak_bytes,
    CAST(s.fragmentation AS DOUBLE) AS fragmentation,
    s.op, s.region_type, s.data_type, s.shape
FROM memory AS m
JOIN stats AS s USING (profile_id, event_id)
ORDER BY m.profile_id, allocator, m.start_ps, m.event_id
