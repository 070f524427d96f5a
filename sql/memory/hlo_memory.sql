-- memory.hlo_memory: per HLO module and memory space, what XProf's memory viewer shows of the
-- compiler's buffer assignment: the peak heap, where in the program it comes, the buffers
-- live then by size, and the parameter / output / temporary totals.
--
-- Built on the memory_buffers table (the HloProto buffer assignment, stored at ingest). As
-- XProf does: the heap is simulated along one heap simulator trace (that of the module's
-- temporary allocation in the memory space, else the trace with the most events of it); a
-- buffer's memory is live from the ALLOC or SHARE_WITH that takes its canonical buffer from no
-- users to one, to the FREE that leaves it none. Allocations whose buffers live the whole
-- program (parameters, outputs, constants: XProf's indefinite lifetimes) add
-- their size to every point, and their largest logical buffer is live at the peak. The peak
-- is the first point of the simulation at its highest. Buffers under 16 KiB are summed, not
-- listed (XProf's small buffers). Thread-local allocations (per-thread scratch) are neither
-- in the heap nor in the totals but non_reusable_bytes, as XProf counts them.
--
-- Deliberate difference from XProf: where a memory space has more than one temporary
-- allocation with a trace, XProf takes the first of a hash map; we take the lowest index.
-- peak_instruction names the instruction that defines the buffer whose event makes the peak
-- (XProf: the instruction the simulator was processing, the same one for an ALLOC).
--
-- Needs: a buffer assignment: XSpace HLO protos (/host:metadata) with their buffer assignment (memory_buffers; a profile ingested by an xprosql older than that table: ingest it again)
--
-- Parameters:
--   $color  BIGINT  memory space (XLA's memory color); NULL: every memory space [range: 0..] (default: 0)
--   $top  BIGINT  buffers listed in top_buffers; NULL: every one [range: 1..] (default: 10)
--
-- Show: profile_id, module, color, peak_heap_bytes, peak_position, peak_instruction, temp_peak_bytes, entry_parameters_bytes, maybe_live_out_bytes, total_allocation_bytes
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   program_id  UBIGINT  hlo_modules.program_id
--   module  VARCHAR  HLO module name
--   color  BIGINT  memory space: 0 is device memory (HBM)
--   heap_trace  BIGINT  the heap simulator trace simulated (memory_buffers.heap_trace); NULL when the module has none for the space
--   peak_heap_bytes  BIGINT  XProf's peak heap: the simulated peak plus the whole-program allocations, bytes
--   peak_unpadded_heap_bytes  BIGINT  the same without layout padding (XProf's peak unpadded heap: whole-program allocations at their size), bytes
--   peak_position  BIGINT  program order: the heap simulator event of the peak (XProf's peakHeapSizePosition)
--   peak_instruction  VARCHAR  the instruction that defines the buffer allocated at the peak
--   temp_peak_bytes  BIGINT  the simulated peak alone: temporaries live at once, bytes
--   whole_program_bytes  BIGINT  allocations live the whole program that hold a buffer (added to every point), bytes
--   buffers_at_peak  BIGINT  logical buffers live at the peak (temporaries and the largest buffer of each whole-program allocation)
--   small_buffers_bytes  BIGINT  those under 16 KiB, summed (XProf's "small" heap object), bytes
--   top_buffers  STRUCT(logical_buffer_id BIGINT, instruction VARCHAR, shape VARCHAR, size_bytes BIGINT, unpadded_bytes BIGINT, kind VARCHAR, op_name VARCHAR)[]  the $top largest buffers live at the peak, largest first (instruction with its shape index as XProf writes it, e.g. copy-start{0})
--   entry_parameters_bytes  BIGINT  allocations of entry computation parameters, bytes
--   maybe_live_out_bytes  BIGINT  allocations that may be live out (outputs), bytes
--   temp_allocation_bytes  BIGINT  temporary allocations (the heap the simulation packs), bytes
--   non_reusable_bytes  BIGINT  thread-local and tuple allocations, bytes
--   indefinite_allocation_bytes  BIGINT  every allocation live the whole program, bytes
--   total_allocation_bytes  BIGINT  every allocation of the memory space but thread-local ones (per-thread scratch, outside the heap), bytes
WITH params AS (
    SELECT CAST($color AS BIGINT) AS color, CAST($top AS BIGINT) AS top, 16 * 1024 AS small_bytes
),
buffers AS (
    SELECT b.*
    FROM memory_buffers AS b, params AS x
    WHERE x.color IS NULL OR b.color = x.color
),
-- Each allocation once (memory_buffers repeats it on every buffer packed into it).
allocations AS (
    SELECT profile_id, program_id, module, allocation_index,
        any_value(color) AS color, any_value(kind) AS kind, any_value(allocation_bytes) AS bytes,
        bool_or(is_parameter) AS is_parameter, bool_or(maybe_live_out) AS maybe_live_out,
        bool_or(is_thread_local) AS is_thread_local, bool_or(is_thread_local OR is_tuple) AS non_reusable,
        bool_or(is_parameter OR maybe_live_out OR is_constant) AS whole_program,
        -- XProf's indefinite buffer: the allocation's largest logical buffer, if it has one.
        arg_max(logical_buffer_id, (size_bytes, -logical_buffer_id)) FILTER (WHERE size_bytes > 0) AS largest_buffer_id
    FROM buffers
    GROUP BY ALL
),
-- The allocation of each trace: that of its first event's buffer (a later trace overrides).
allocation_traces AS (
    SELECT profile_id, program_id, allocation_index, max(heap_trace) AS heap_trace
    FROM memory_buffers
    WHERE alloc_position = 0
    GROUP BY ALL
),
by_allocation AS (
    SELECT a.profile_id, a.program_id, a.color, min_by(t.heap_trace, a.allocation_index) AS heap_trace
    FROM allocations AS a
    JOIN allocation_traces AS t USING (profile_id, program_id, allocation_index)
    WHERE NOT a.whole_program AND NOT a.is_thread_local
    GROUP BY ALL
),
by_events AS (
    SELECT profile_id, program_id, color, arg_max(heap_trace, (events, -heap_trace)) AS heap_trace
    FROM (
        SELECT profile_id, program_id, color, heap_trace, count(*) + count(free_position) AS events
        FROM buffers
        WHERE heap_trace IS NOT NULL
        GROUP BY ALL
    )
    GROUP BY ALL
),
spaces AS (
    SELECT s.profile_id, s.program_id, s.module, s.color, coalesce(a.heap_trace, e.heap_trace) AS heap_trace
    FROM (SELECT DISTINCT profile_id, program_id, module, color FROM allocations) AS s
    LEFT JOIN by_allocation AS a USING (profile_id, program_id, color)
    LEFT JOIN by_events AS e USING (profile_id, program_id, color)
),
-- Users of each canonical buffer: +1 when a buffer takes its memory, -1 when it frees it.
uses AS (
    SELECT s.profile_id, s.program_id, s.color, b.canonical_buffer_id, u.position, u.delta
    FROM spaces AS s
    JOIN memory_buffers AS b ON b.profile_id = s.profile_id AND b.program_id = s.program_id AND b.heap_trace = s.heap_trace
    CROSS JOIN LATERAL (VALUES (b.alloc_position, 1), (b.free_position, -1)) AS u(position, delta)
    WHERE u.position IS NOT NULL
),
counted AS (
    SELECT *, sum(delta) OVER (PARTITION BY profile_id, program_id, color, canonical_buffer_id
                               ORDER BY position ROWS UNBOUNDED PRECEDING) AS users
    FROM uses
),
changes AS (
    SELECT c.profile_id, c.program_id, c.color, c.canonical_buffer_id, c.position, c.users,
        CASE WHEN c.delta = 1 AND c.users = 1 THEN 1 WHEN c.delta = -1 AND c.users = 0 THEN -1 ELSE 0 END AS sign,
        k.size_bytes, k.unpadded_bytes
    FROM counted AS c
    JOIN memory_buffers AS k ON k.profile_id = c.profile_id AND k.program_id = c.program_id
                            AND k.logical_buffer_id = c.canonical_buffer_id
),
heap AS (
    SELECT profile_id, program_id, color, position,
        sum(sign * size_bytes) OVER w AS heap_bytes,
        sum(sign * unpadded_bytes) OVER w AS unpadded_heap_bytes
    FROM changes
    WINDOW w AS (PARTITION BY profile_id, program_id, color ORDER BY position ROWS UNBOUNDED PRECEDING)
),
peaks AS (
    SELECT profile_id, program_id, color,
        arg_min(position, (-heap_bytes, position)) AS peak_position,
        CAST(max(heap_bytes) AS BIGINT) AS temp_peak_bytes,
        CAST(arg_min(unpadded_heap_bytes, (-heap_bytes, position)) AS BIGINT) AS temp_peak_unpadded_bytes
    FROM heap
    GROUP BY ALL
),
-- Canonical buffers with users after the peak's event.
live_temporaries AS (
    SELECT c.profile_id, c.program_id, c.color, c.canonical_buffer_id AS logical_buffer_id
    FROM changes AS c
    JOIN peaks AS p USING (profile_id, program_id, color)
    WHERE c.position <= p.peak_position
    QUALIFY row_number() OVER (PARTITION BY c.profile_id, c.program_id, c.color, c.canonical_buffer_id ORDER BY c.position DESC) = 1
        AND c.users > 0
),
whole_program AS (
    SELECT profile_id, program_id, color, largest_buffer_id AS logical_buffer_id, bytes
    FROM allocations
    WHERE whole_program AND largest_buffer_id IS NOT NULL
),
at_peak AS (
    SELECT l.profile_id, l.program_id, l.color, b.logical_buffer_id,
        b.instruction || CASE WHEN len(b.shape_index) > 0 THEN '{' || array_to_string(b.shape_index, ',') || '}' ELSE '' END AS instruction,
        b.shape, b.size_bytes, b.unpadded_bytes, b.kind, b.op_name
    FROM (SELECT profile_id, program_id, color, logical_buffer_id FROM live_temporaries
          UNION ALL SELECT profile_id, program_id, color, logical_buffer_id FROM whole_program) AS l
    JOIN memory_buffers AS b USING (profile_id, program_id, logical_buffer_id)
),
peak_contents AS (
    SELECT a.profile_id, a.program_id, a.color,
        count(*) AS buffers_at_peak,
        CAST(coalesce(sum(a.size_bytes) FILTER (WHERE a.size_bytes < x.small_bytes), 0) AS BIGINT) AS small_buffers_bytes,
        list({'logical_buffer_id': a.logical_buffer_id, 'instruction': a.instruction, 'shape': a.shape,
              'size_bytes': a.size_bytes, 'unpadded_bytes': a.unpadded_bytes, 'kind': CAST(a.kind AS VARCHAR),
              'op_name': a.op_name}
             ORDER BY a.size_bytes DESC, a.logical_buffer_id) FILTER (WHERE a.size_bytes >= x.small_bytes) AS listed
    FROM at_peak AS a, params AS x
    GROUP BY ALL
),
totals AS (
    SELECT profile_id, program_id, color,
        CAST(coalesce(sum(bytes) FILTER (WHERE whole_program AND largest_buffer_id IS NOT NULL), 0) AS BIGINT) AS whole_program_bytes,
        CAST(coalesce(sum(bytes) FILTER (WHERE is_parameter), 0) AS BIGINT) AS entry_parameters_bytes,
        CAST(coalesce(sum(bytes) FILTER (WHERE maybe_live_out), 0) AS BIGINT) AS maybe_live_out_bytes,
        CAST(coalesce(sum(bytes) FILTER (WHERE kind = 'temp'), 0) AS BIGINT) AS temp_allocation_bytes,
        CAST(coalesce(sum(bytes) FILTER (WHERE non_reusable), 0) AS BIGINT) AS non_reusable_bytes,
        CAST(coalesce(sum(bytes) FILTER (WHERE whole_program), 0) AS BIGINT) AS indefinite_allocation_bytes,
        CAST(coalesce(sum(bytes) FILTER (WHERE NOT is_thread_local), 0) AS BIGINT) AS total_allocation_bytes
    FROM allocations
    GROUP BY ALL
)
SELECT
    s.profile_id, s.program_id, s.module, s.color, s.heap_trace,
    coalesce(p.temp_peak_bytes, 0) + t.whole_program_bytes AS peak_heap_bytes,
    coalesce(p.temp_peak_unpadded_bytes, 0) + t.whole_program_bytes AS peak_unpadded_heap_bytes,
    coalesce(p.peak_position, 0) AS peak_position,
    e.instruction AS peak_instruction,
    coalesce(p.temp_peak_bytes, 0) AS temp_peak_bytes,
    t.whole_program_bytes,
    coalesce(c.buffers_at_peak, 0) AS buffers_at_peak,
    coalesce(c.small_buffers_bytes, 0) AS small_buffers_bytes,
    coalesce(c.listed[1:coalesce(x.top, len(c.listed))], []) AS top_buffers,
    t.entry_parameters_bytes, t.maybe_live_out_bytes, t.temp_allocation_bytes, t.non_reusable_bytes,
    t.indefinite_allocation_bytes, t.total_allocation_bytes
FROM spaces AS s
CROSS JOIN (SELECT top FROM params) AS x
JOIN totals AS t USING (profile_id, program_id, color)
LEFT JOIN peaks AS p USING (profile_id, program_id, color)
LEFT JOIN peak_contents AS c USING (profile_id, program_id, color)
LEFT JOIN memory_buffers AS e ON e.profile_id = s.profile_id AND e.program_id = s.program_id
                             AND e.heap_trace = s.heap_trace AND e.alloc_position = p.peak_position
ORDER BY s.profile_id, peak_heap_bytes DESC, s.module, s.color
