-- async.async_ops: every asynchronous operation (DMA copy, host offload, collective)
-- with its window, bytes, bandwidth over the window, and how much of the
-- window other work on the same device hides.
--
-- Sources:
--   async_line   TPU `Async XLA Ops` line: one event per async op from its
--                *-start to its *-done (hlo_op names the done op, the event
--                name is the start op's HLO text)
--   op_line      TPU devices without that line (or $prefer_async_line false):
--                each `<base>-start[.N]` on the `XLA Ops` line paired with the
--                first `<base>-done[.N]` of the same program after it; send /
--                recv start without a suffix (send.1 .. send-done.1). A start
--                with no done stays, unpaired, with a NULL window.
--   memcpy       GPU copies and memsets (table memcpys): the copy is its window
--   nccl_kernel  GPU NCCL kernels (names starting nccl): the kernel is its window
--
-- Kind: the start op's base name (copy, all-reduce, all-gather, reduce-scatter,
-- collective-permute, all-to-all, send, recv, async); a copy whose shape text
-- has memory space 5 (`S(5)`, host memory) is host_offload. Shape text comes
-- from hlo_ops (result shape and operand shapes), else the metadata stat
-- shape_with_layout, else the event's HLO text. GPU: memcpy_HtoD,
-- memcpy_DtoH, memcpy_DtoD, memcpy_PtoP, memset, nccl_<collective>.
--
-- Bytes: the size of the start op's operands from their shapes (element size
-- x element count); else the start op's bytes_accessed stat; GPU copies their
-- bytes; NCCL kernels `In msg nelems` x dtype size (Kineto args). Bandwidth is
-- bytes over the whole window, not over the few ns of the start op as XProf
-- reports it.
--
-- Coverage: the share of the window during which other ops of the same device
-- run, start and done ops excluded (TPU: other `XLA Ops` events; GPU: non-NCCL
-- kernels on any stream; a stream runs one op at a time, so these are the
-- other streams). Several covering ops at once count once.
--
-- Clocks: TPU op events also carry the device's own clock (device_offset_ps,
-- device_duration_ps), which XProf prefers. Where every op of a device has it,
-- pairs, window lengths and coverage use it (column clock = device): the host
-- clock places events right over the profile but now and then squeezes a few
-- ops together (in the TPU sample one copy window shrinks from 202 ms to
-- 0.14 ms on the host clock). start_ps / end_ps stay on the host clock, the
-- timeline every other table uses.
--
-- Needs: async operations: TPU copy, host-offload or collective start / done pairs, GPU copies, collective kernels
--
-- Parameters:
--   $hidden_coverage    DOUBLE     coverage at or above which an async op is hidden; XProf's threshold [range: 0..1] (default: 0.9)
--   $kinds  VARCHAR[]  keep only these kinds (host_offload, copy, memcpy_HtoD, nccl_all_reduce, ...); NULL for all (default: NULL)
--   $exposed_coverage   DOUBLE     coverage at or below which an async op is exposed; XProf's threshold [range: 0..1] (default: 0.1)
--   $prefer_async_line  BOOLEAN    TPU: take windows from the `Async XLA Ops` line where a device has one; false pairs ops on the op line everywhere (default: true)
--
-- Show: profile_id, device, kind, direction, start_op, bytes, window_ps, bandwidth_bytes_per_s, coverage, status
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   device_id  INTEGER  devices.device_id
--   device  VARCHAR  device name, e.g. /device:TPU:0
--   device_kind  VARCHAR  tpu or gpu
--   source  VARCHAR  async_line, op_line, memcpy or nccl_kernel (see above)
--   kind  VARCHAR  copy, host_offload, all-reduce, ..., memcpy_HtoD, memset, nccl_all_reduce, ...
--   direction  VARCHAR  host_offload: to_host (result in host memory) or from_host (operand in host memory); GPU copies: HtoD, DtoH, ...
--   program_id  UBIGINT  XLA program of the start op (TPU)
--   module  VARCHAR  HLO module of the start op (TPU)
--   start_op  VARCHAR  start op (TPU hlo_op), or the GPU copy / kernel name
--   done_op  VARCHAR  done op (TPU); NULL on GPU rows and for unpaired starts
--   stream_id  BIGINT  GPU stream
--   start_event_id  BIGINT  events.event_id of the start op (GPU: of the copy or kernel)
--   done_event_id  BIGINT  events.event_id of the done op
--   start_ps  BIGINT  window start: the start op's start, ps
--   end_ps  BIGINT  window end: the done op's end, ps; NULL when unpaired
--   window_ps  BIGINT  window length on the clock below (device clock: done end - start start in device time), ps
--   clock  VARCHAR  device or host: the clock window_ps and coverage are measured on
--   paired  BOOLEAN  the window is closed (a done was found; always true on GPU)
--   bytes  BIGINT  bytes moved
--   bytes_source  VARCHAR  shape, bytes_accessed, memcpy or nccl_args
--   bandwidth_bytes_per_s  DOUBLE  bytes / window, bytes/s
--   peak_hbm_bytes_per_s  DOUBLE  the device's peak HBM bandwidth (devices), bytes/s
--   bandwidth_vs_peak  DOUBLE  bandwidth_bytes_per_s / peak_hbm_bytes_per_s
--   covered_ps  BIGINT  time of the window other ops of the device cover, ps
--   exposed_ps  BIGINT  window_ps - covered_ps: time the async op is not hidden, ps
--   coverage  DOUBLE  covered_ps / window_ps; NULL for an empty or open window
--   status  VARCHAR  hidden, partial, exposed (thresholds above), unpaired; an empty window is hidden
--   dma_stall_ps  BIGINT  dma_stall_duration_ps recorded on the start, done or line event; NULL when the profile has none
WITH params AS (
    SELECT
        CAST($hidden_coverage AS DOUBLE) AS hidden_at,
        CAST($exposed_coverage AS DOUBLE) AS exposed_at,
        CAST($prefer_async_line AS BOOLEAN) AS prefer_line
),
chosen_profiles AS (
    SELECT p.profile_id FROM profiles AS p
),
-- TPU ops, with their part in an async pair when they have one.
tpu_ops AS (
    SELECT
        e.profile_id, e.device_id, e.event_id, e.metadata_id, e.program_id, e.hlo_module,
        coalesce(e.hlo_op, nullif(e.display_name, ''), e.name) AS op,
        e.name AS op_text, e.start_ps, e.start_ps + e.dur_ps AS end_ps, e.bytes_accessed,
        e.device_offset_ps, e.device_duration_ps,
        count(*) OVER device_ops = count(e.device_offset_ps + e.device_duration_ps) OVER device_ops AS device_clock
    FROM events AS e
    JOIN chosen_profiles USING (profile_id)
    JOIN devices AS d USING (profile_id, device_id)
    JOIN tracks AS t USING (profile_id, device_id, track_id)
    WHERE d.kind = 'tpu' AND t.name = 'XLA Ops' AND e.start_ps IS NOT NULL
    WINDOW device_ops AS (PARTITION BY e.profile_id, e.device_id)
),
-- t_start / t_end: the op on the clock its device is measured on.
op_events AS (
    SELECT *,
        CASE WHEN device_clock THEN 'device' ELSE 'host' END AS clock,
        CASE WHEN device_clock THEN device_offset_ps ELSE start_ps END AS t_start,
        CASE WHEN device_clock THEN device_offset_ps + device_duration_ps ELSE end_ps END AS t_end
    FROM tpu_ops
),
op_roles AS (
    SELECT *,
        CASE
            WHEN regexp_matches(op, '-done(\.[0-9]+)?$') THEN 'done'
            WHEN regexp_matches(op, '-start(\.[0-9]+)?$') OR regexp_matches(op, '^(send|recv)(\.[0-9]+)?$') THEN 'start'
        END AS role,
        coalesce(CAST(program_id AS VARCHAR), '') || ':' || regexp_replace(op, '-(start|done)(\.[0-9]+)?$', '\2') AS pair_key
    FROM op_events
),
starts AS (SELECT * FROM op_roles WHERE role = 'start'),
dones AS (SELECT * FROM op_roles WHERE role = 'done'),
-- Each start with the first done of the same name after it.
op_pairs AS (
    SELECT
        s.profile_id, s.device_id, 'op_line' AS source, s.program_id, s.hlo_module AS module,
        s.op AS start_op, d.op AS done_op, s.event_id AS start_event_id, d.event_id AS done_event_id,
        s.metadata_id AS text_metadata_id, s.op_text AS start_text, s.bytes_accessed,
        s.start_ps, d.end_ps, s.clock, s.t_start, d.t_end
    FROM starts AS s
    ASOF LEFT JOIN dones AS d
      ON s.profile_id = d.profile_id AND s.device_id = d.device_id AND s.pair_key = d.pair_key
     AND d.t_start >= s.t_start
),
line_events AS (
    SELECT
        e.profile_id, e.device_id, e.event_id, e.metadata_id, e.program_id, e.hlo_module, e.name,
        nullif(regexp_extract(e.name, '^%?([^ =]+) = ', 1), '') AS start_op, e.hlo_op AS done_op,
        e.start_ps, e.start_ps + e.dur_ps AS end_ps, e.bytes_accessed
    FROM events AS e
    JOIN chosen_profiles USING (profile_id)
    JOIN devices AS d USING (profile_id, device_id)
    JOIN tracks AS t USING (profile_id, device_id, track_id)
    CROSS JOIN params AS x
    WHERE x.prefer_line AND d.kind = 'tpu' AND t.name = 'Async XLA Ops' AND e.start_ps IS NOT NULL
),
line_devices AS (SELECT DISTINCT profile_id, device_id FROM line_events),
-- Line windows take the op-line events they start and end at, when there.
line_pairs AS (
    SELECT
        l.profile_id, l.device_id, 'async_line' AS source, coalesce(l.program_id, p.program_id) AS program_id,
        coalesce(l.hlo_module, p.module) AS module,
        coalesce(l.start_op, p.start_op) AS start_op, l.done_op,
        p.start_event_id, p.done_event_id, l.metadata_id AS text_metadata_id, l.name AS start_text,
        coalesce(l.bytes_accessed, p.bytes_accessed) AS bytes_accessed, l.start_ps, l.end_ps,
        l.event_id AS line_event_id,
        -- the line has no device clock: the matching op-line pair lends it
        CASE WHEN p.done_op = l.done_op THEN p.clock ELSE 'host' END AS clock,
        CASE WHEN p.done_op = l.done_op THEN p.t_start ELSE l.start_ps END AS t_start,
        CASE WHEN p.done_op = l.done_op THEN p.t_end ELSE l.end_ps END AS t_end
    FROM line_events AS l
    LEFT JOIN op_pairs AS p
      ON p.profile_id = l.profile_id AND p.device_id = l.device_id AND p.start_op = l.start_op AND p.start_ps = l.start_ps
),
tpu_async AS (
    SELECT * FROM line_pairs
    UNION ALL BY NAME
    SELECT p.*, CAST(NULL AS BIGINT) AS line_event_id
    FROM op_pairs AS p
    WHERE NOT EXISTS (
        SELECT 1 FROM line_devices AS ld WHERE ld.profile_id = p.profile_id AND ld.device_id = p.device_id
    )
),
-- Shape text of each start op: HLO result and operand shapes, else the
-- metadata's shape_with_layout, else the HLO text of the event name. The text is parsed and the shapes' bytes
-- summed once per distinct value: row by row, the regular expressions were a third of the module's time.
text_shapes AS MATERIALIZED (
    SELECT
        start_text,
        regexp_extract(start_text, '= (.*?) [a-z][a-z0-9-]*\(', 1) AS result_text,
        regexp_extract(start_text, '= .*? ([a-z][a-z0-9-]*)\((.*)$', 2) AS operand_text,
        nullif(regexp_extract_all(operand_text, '[a-z]+[0-9]*\[[0-9,]*\](\{[^}]*\})?'), []) AS operand_shapes
    FROM (SELECT DISTINCT start_text FROM tpu_async)
),
tpu_shaped AS MATERIALIZED (
    SELECT
        a.*,
        coalesce(h.shape, ms.str_value, x.result_text) AS result_text,
        coalesce(array_to_string(h.operand_shapes, ' '), x.operand_text) AS operand_text,
        coalesce(h.operand_shapes, x.operand_shapes) AS operand_shapes
    FROM tpu_async AS a
    LEFT JOIN text_shapes AS x ON x.start_text = a.start_text
    LEFT JOIN hlo_ops AS h
      ON h.profile_id = a.profile_id AND h.program_id = a.program_id AND h.hlo_op = a.start_op
    LEFT JOIN metadata_stats AS ms
      ON ms.profile_id = a.profile_id AND ms.device_id = a.device_id AND ms.metadata_id = a.text_metadata_id
     AND ms.stat = 'shape_with_layout'
),
-- element size x element count of every array operand, from shapes like f32[8,128]{1,0}
shape_bytes AS MATERIALIZED (
    SELECT
        operand_shapes,
        CAST(list_sum(list_transform(operand_shapes, lambda shape: (
            CASE regexp_extract(shape, '^([a-z]+[0-9]*)\[', 1)
                WHEN 'pred' THEN 1 WHEN 's8' THEN 1 WHEN 'u8' THEN 1
                WHEN 'f8e4m3fn' THEN 1 WHEN 'f8e5m2' THEN 1 WHEN 'f8e4m3' THEN 1 WHEN 'f8e4m3fnuz' THEN 1 WHEN 'f8e5m2fnuz' THEN 1
                WHEN 'bf16' THEN 2 WHEN 'f16' THEN 2 WHEN 's16' THEN 2 WHEN 'u16' THEN 2
                WHEN 'f32' THEN 4 WHEN 's32' THEN 4 WHEN 'u32' THEN 4
                WHEN 'f64' THEN 8 WHEN 's64' THEN 8 WHEN 'u64' THEN 8 WHEN 'c64' THEN 8
                WHEN 'c128' THEN 16
            END
            * coalesce(list_product(list_transform(
                list_filter(string_split(regexp_extract(shape, '^[a-z]+[0-9]*\[([0-9,]*)\]', 1), ','), lambda d: d <> ''),
                lambda d: CAST(d AS BIGINT))), 1)
        ))) AS BIGINT) AS operand_bytes
    FROM (SELECT DISTINCT operand_shapes FROM tpu_shaped WHERE operand_shapes IS NOT NULL)
),
tpu_rows AS (
    SELECT
        s.profile_id, s.device_id, s.source,
        CASE
            WHEN base = 'copy' AND (contains(coalesce(result_text, ''), 'S(5)') OR contains(coalesce(operand_text, ''), 'S(5)'))
                THEN 'host_offload'
            ELSE base
        END AS kind,
        CASE
            WHEN base <> 'copy' THEN NULL
            WHEN contains(coalesce(operand_text, ''), 'S(5)') THEN 'from_host'
            WHEN contains(coalesce(result_text, ''), 'S(5)') THEN 'to_host'
        END AS direction,
        s.program_id, s.module, s.start_op, s.done_op, CAST(NULL AS BIGINT) AS stream_id,
        s.start_event_id, s.done_event_id, s.line_event_id, s.start_ps, s.end_ps, s.clock, s.t_start, s.t_end,
        coalesce(b.operand_bytes, s.bytes_accessed) AS bytes,
        CASE WHEN b.operand_bytes IS NOT NULL THEN 'shape' WHEN s.bytes_accessed IS NOT NULL THEN 'bytes_accessed' END AS bytes_source
    FROM (
        SELECT *,
            regexp_replace(regexp_replace(start_op, '(-start)?(\.[0-9]+)?$', ''), '-done$', '') AS base
        FROM tpu_shaped
    ) AS s
    LEFT JOIN shape_bytes AS b ON b.operand_shapes = s.operand_shapes
),
nccl_args AS (
    SELECT
        s.profile_id, s.event_id,
        any_value(s.str_value) FILTER (WHERE s.stat = 'Collective name') AS collective,
        any_value(coalesce(s.int_value, TRY_CAST(s.str_value AS BIGINT))) FILTER (WHERE s.stat = 'In msg nelems') AS nelems,
        any_value(s.str_value) FILTER (WHERE s.stat = 'dtype') AS dtype
    FROM event_stats AS s
    JOIN kernels AS k USING (profile_id, event_id)
    JOIN chosen_profiles USING (profile_id)
    WHERE k.name LIKE 'nccl%' AND s.stat IN ('Collective name', 'In msg nelems', 'dtype')
    GROUP BY ALL
),
gpu_rows AS (
    SELECT
        m.profile_id, m.device_id, 'memcpy' AS source,
        CASE WHEN m.kind = 'memset' THEN 'memset' ELSE 'memcpy_' || coalesce(m.kind, 'unknown') END AS kind,
        m.kind AS direction, CAST(NULL AS UBIGINT) AS program_id, CAST(NULL AS VARCHAR) AS module,
        e.name AS start_op, CAST(NULL AS VARCHAR) AS done_op, m.stream_id,
        m.event_id AS start_event_id, CAST(NULL AS BIGINT) AS done_event_id, CAST(NULL AS BIGINT) AS line_event_id,
        m.start_ps, m.start_ps + m.dur_ps AS end_ps, 'host' AS clock, m.start_ps AS t_start, m.start_ps + m.dur_ps AS t_end,
        m.bytes,
        CASE WHEN m.bytes IS NOT NULL THEN 'memcpy' END AS bytes_source
    FROM memcpys AS m
    JOIN chosen_profiles USING (profile_id)
    JOIN events AS e USING (profile_id, event_id)
    WHERE m.start_ps IS NOT NULL
    UNION ALL
    SELECT
        k.profile_id, k.device_id, 'nccl_kernel',
        'nccl_' || CASE lower(replace(coalesce(a.collective, regexp_extract(k.name, '^nccl(Dev)?Kernel_([A-Za-z]+)', 2), 'unknown'), '_', ''))
            WHEN 'allreduce' THEN 'all_reduce' WHEN 'allgather' THEN 'all_gather'
            WHEN 'reducescatter' THEN 'reduce_scatter' WHEN 'alltoall' THEN 'all_to_all'
            WHEN 'sendrecv' THEN 'send_recv' WHEN '' THEN 'unknown'
            ELSE lower(coalesce(a.collective, regexp_extract(k.name, '^nccl(Dev)?Kernel_([A-Za-z]+)', 2)))
        END,
        NULL, NULL, NULL, k.name, NULL, k.stream_id, k.event_id, NULL, NULL,
        k.start_ps, k.start_ps + k.dur_ps, 'host', k.start_ps, k.start_ps + k.dur_ps,
        a.nelems * CASE lower(a.dtype)
            WHEN 'float' THEN 4 WHEN 'int' THEN 4 WHEN 'half' THEN 2 WHEN 'bfloat16' THEN 2 WHEN 'short' THEN 2
            WHEN 'double' THEN 8 WHEN 'long' THEN 8 WHEN 'byte' THEN 1 WHEN 'char' THEN 1 WHEN 'bool' THEN 1
        END,
        CASE WHEN a.nelems IS NOT NULL AND a.dtype IS NOT NULL THEN 'nccl_args' END
    FROM kernels AS k
    JOIN chosen_profiles USING (profile_id)
    LEFT JOIN nccl_args AS a USING (profile_id, event_id)
    WHERE k.name LIKE 'nccl%' AND k.start_ps IS NOT NULL
),
async_rows AS (
    SELECT * FROM tpu_rows
    UNION ALL BY NAME
    SELECT * FROM gpu_rows
),
-- What can hide an async op: other ops of its device.
cover AS (
    SELECT profile_id, device_id, clock, t_start AS start_ps, t_end AS end_ps FROM op_roles WHERE role IS NULL
    UNION ALL
    SELECT k.profile_id, k.device_id, 'host', k.start_ps, k.start_ps + k.dur_ps
    FROM kernels AS k JOIN chosen_profiles USING (profile_id)
    WHERE k.name NOT LIKE 'nccl%' AND k.start_ps IS NOT NULL
),
-- Cover merged per device, with the covered time before each merged run:
-- covered time up to any instant is then one ASOF lookup.
cover_ordered AS (
    SELECT *, max(end_ps) OVER (PARTITION BY profile_id, device_id, clock ORDER BY start_ps, end_ps
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach_ps
    FROM cover
),
cover_runs AS (
    SELECT *, sum(CASE WHEN reach_ps IS NULL OR start_ps > reach_ps THEN 1 ELSE 0 END)
        OVER (PARTITION BY profile_id, device_id, clock ORDER BY start_ps, end_ps ROWS UNBOUNDED PRECEDING) AS run
    FROM cover_ordered
),
cover_merged AS (
    SELECT profile_id, device_id, clock, min(start_ps) AS m_start_ps, max(end_ps) AS m_end_ps
    FROM cover_runs GROUP BY profile_id, device_id, clock, run
),
cover_cumulative AS (
    SELECT *, CAST(coalesce(sum(m_end_ps - m_start_ps) OVER (
        PARTITION BY profile_id, device_id, clock ORDER BY m_start_ps ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0
    ) AS BIGINT) AS before_ps
    FROM cover_merged
),
covered_start AS (
    SELECT r.*, coalesce(c.before_ps + least(greatest(r.t_start - c.m_start_ps, 0), c.m_end_ps - c.m_start_ps), 0) AS cover_at_start
    FROM async_rows AS r
    ASOF LEFT JOIN cover_cumulative AS c
      ON r.profile_id = c.profile_id AND r.device_id = c.device_id AND r.clock = c.clock AND r.t_start >= c.m_start_ps
),
covered AS (
    SELECT r.*, CASE WHEN r.t_end IS NOT NULL THEN
        CAST(coalesce(c.before_ps + least(greatest(r.t_end - c.m_start_ps, 0), c.m_end_ps - c.m_start_ps), 0) - r.cover_at_start AS BIGINT)
    END AS covered_ps
    FROM covered_start AS r
    ASOF LEFT JOIN cover_cumulative AS c
      ON r.profile_id = c.profile_id AND r.device_id = c.device_id AND r.clock = c.clock AND r.t_end >= c.m_start_ps
),
-- dma_stall_duration_ps on an event or on its metadata.
stall_events AS (
    SELECT s.profile_id, s.event_id, sum(coalesce(s.int_value, CAST(s.uint_value AS BIGINT), CAST(s.double_value AS BIGINT))) AS stall_ps
    FROM event_stats AS s JOIN chosen_profiles USING (profile_id)
    WHERE s.stat = 'dma_stall_duration_ps'
    GROUP BY ALL
),
stall_metadata AS (
    SELECT s.profile_id, s.device_id, s.metadata_id,
        sum(coalesce(s.int_value, CAST(s.uint_value AS BIGINT), CAST(s.double_value AS BIGINT))) AS stall_ps
    FROM metadata_stats AS s JOIN chosen_profiles USING (profile_id)
    WHERE s.stat = 'dma_stall_duration_ps'
    GROUP BY ALL
),
stalls AS (
    SELECT e.profile_id, e.event_id, coalesce(se.stall_ps, sm.stall_ps) AS stall_ps
    FROM events AS e
    LEFT JOIN stall_events AS se USING (profile_id, event_id)
    LEFT JOIN stall_metadata AS sm USING (profile_id, device_id, metadata_id)
    WHERE se.stall_ps IS NOT NULL OR sm.stall_ps IS NOT NULL
)
SELECT
    r.profile_id, r.device_id, d.name AS device, d.kind AS device_kind, r.source, r.kind, r.direction,
    r.program_id, r.module, r.start_op, r.done_op, r.stream_id, r.start_event_id, r.done_event_id,
    r.start_ps, r.end_ps, r.t_end - r.t_start AS window_ps, r.clock, r.end_ps IS NOT NULL AS paired,
    r.bytes, r.bytes_source,
    r.bytes / ((r.t_end - r.t_start) / 1e12) AS bandwidth_bytes_per_s,
    d.peak_hbm_bytes_per_s,
    r.bytes / ((r.t_end - r.t_start) / 1e12) / d.peak_hbm_bytes_per_s AS bandwidth_vs_peak,
    r.covered_ps,
    r.t_end - r.t_start - r.covered_ps AS exposed_ps,
    r.covered_ps / nullif(r.t_end - r.t_start, 0) AS coverage,
    CASE
        WHEN r.t_end IS NULL THEN 'unpaired'
        WHEN r.t_end <= r.t_start THEN 'hidden'
        WHEN r.covered_ps / (r.t_end - r.t_start) >= x.hidden_at THEN 'hidden'
        WHEN r.covered_ps / (r.t_end - r.t_start) <= x.exposed_at THEN 'exposed'
        ELSE 'partial'
    END AS status,
    CASE WHEN coalesce(ss.stall_ps, sd.stall_ps, sl.stall_ps) IS NOT NULL
        THEN coalesce(ss.stall_ps, 0) + coalesce(sd.stall_ps, 0) + coalesce(sl.stall_ps, 0) END AS dma_stall_ps
FROM covered AS r
CROSS JOIN params AS x
JOIN devices AS d USING (profile_id, device_id)
LEFT JOIN stalls AS ss ON ss.profile_id = r.profile_id AND ss.event_id = r.start_event_id
LEFT JOIN stalls AS sd ON sd.profile_id = r.profile_id AND sd.event_id = r.done_event_id
LEFT JOIN stalls AS sl ON sl.profile_id = r.profile_id AND sl.event_id = r.line_event_id
WHERE CAST($kinds AS VARCHAR[]) IS NULL OR list_contains(CAST($kinds AS VARCHAR[]), r.kind)
ORDER BY r.profile_id, r.device_id, r.start_ps, r.start_op
