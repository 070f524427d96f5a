-- roofline: where each op sits under its device's roofs (peak FLOP/s and memory
-- bandwidths), for one profile or thousands, in one query.
--
-- One row per (profile_id, device_kind, program_id, op), plus a total per
-- program and per (profile, device kind) built the way XProf builds its
-- "Program" row: FLOPs and bytes summed over innermost ops only (categories
-- call, conditional, while and megacore fusion hold other ops), HBM bytes from
-- the summed memory breakdown (all bytes count as HBM when no op has one).
--
-- Ops are the events of TPU `XLA Ops` lines, of GPU stream lines (Kineto
-- gpu_user_annotation ranges excepted), and, in profiles without accelerators
-- (JAX on CPU), the host events XLA tags with an HLO op. Times use the device
-- clock where an event records it (TPU device_offset_ps / device_duration_ps),
-- as XProf does. Self time is an op's time minus the time of the ops nested in
-- it on the same line (nesting by timespan).
--
-- Cost data: an op's flops / bytes_accessed stats (TPU and XLA GPU profiles),
-- else the costs xprosql derives from the embedded HLO (hlo_ops.derived_*),
-- else none (cost_source NULL, bound_by 'unknown'). HBM / VMEM / CMEM bytes
-- come from the memory_access_breakdown stat, decoded by the SQL function
-- xprosql_memory_access(BLOB) that every xprosql Run registers; an op without
-- a breakdown counts all its bytes as HBM (XProf's rule).
--
-- Peaks per (profile, device kind): a $peak_* parameter when given (it wins);
-- else the profile's own device stats (devices.peak_*; GPU FLOP/s modelled
-- from SMs x clock at ingest); else the published chip numbers of
-- hardware_models (xprosql.models.hardware), matched on devices.model (and
-- memory_bytes, which tells board variants apart). CPUs
-- have no modelled peak: pass one. VMEM / CMEM peaks come from the profile.
--
-- Deliberate difference from XProf: the bytes of an async pair
-- (`<base>-start[.N]` .. `<base>-done[.N]`, e.g. copy-start / copy-done; send
-- and recv start without a suffix) move during the window from the start op's
-- start to the done op's end. XProf divides them by the few nanoseconds of the
-- start op (hundreds of millions of GiB/s in the TPU sample); here both ops'
-- bandwidths are bytes over their pairs' windows (async_window_ps).
--
-- Parameters:
--   $profiles              VARCHAR[]  profile ids to include; NULL for all (default: NULL)
--   $top                   BIGINT     op rows kept per (profile, device kind), by self time; NULL for all (default: NULL)
--   $peak_flops_per_s      DOUBLE     peak FLOP/s for every device, overriding the profile and the chip table; the CPU roof (default: NULL)
--   $peak_hbm_bytes_per_s  DOUBLE     peak HBM bandwidth (CPU: DRAM) for every device, bytes/s, overriding like $peak_flops_per_s (default: NULL)
--   $peak_source           VARCHAR    what an overridden peak's source column says, e.g. user or measured (default: 'user')
--
-- Columns:
--   row_kind                'op', 'program' (one program's total) or 'profile' (the profile's total on that device kind, XProf's Program row)
--   profile_id              profile (profiles.profile_id)
--   device_kind             tpu, gpu or cpu (host planes running XLA:CPU programs)
--   program_id              XLA program id; NULL on profile rows and for ops without one
--   module                  HLO module name, when known
--   op                      HLO op (events.hlo_op), else the event name (a GPU kernel); NULL on total rows
--   category                HLO category from the profile, else the HLO opcode
--   cost_source             where flops and bytes came from: profile (op stats), hlo (derived from hlo_ops) or NULL (none)
--   devices                 devices of this kind the op ran on
--   occurrences             executions, summed over devices (total rows: over their ops)
--   total_time_ps           time including nested ops, summed over devices, ps; program rows: the program's busy time (its ops' self time); profile rows: device time, as XProf
--   self_time_ps            total_time_ps minus nested ops' time, ps (total rows: summed self time of their ops)
--   device_time_ps          per (profile, device kind): each device's first op start to last op end, summed over devices, ps
--   self_time_share         self_time_ps / device_time_ps (XProf's "Total self time (%)" / 100)
--   async_window_ps         async pairs: start-to-done windows of this op's occurrences, summed, ps; NULL otherwise
--   flops                   FLOPs, summed over occurrences
--   bytes_accessed          bytes read and written, summed over occurrences
--   hbm_bytes               bytes to and from HBM (breakdown memory space 1, else all bytes)
--   vmem_read_bytes         VMEM bytes read (breakdown memory space 3); NULL when the profile has no breakdown
--   vmem_write_bytes        VMEM bytes written
--   cmem_read_bytes         CMEM bytes read (breakdown memory space 2)
--   cmem_write_bytes        CMEM bytes written
--   flop_rate               flops / total time, FLOP/s
--   memory_bandwidth        bytes_accessed / time (async pairs: their windows), bytes/s
--   hbm_bandwidth           hbm_bytes / time (async pairs: their windows), bytes/s
--   operational_intensity   flops / bytes_accessed, FLOP/byte
--   hbm_operational_intensity  flops / hbm_bytes, FLOP/byte
--   peak_flops_per_s        compute roof, FLOP/s
--   peak_hbm_bytes_per_s    HBM roof, bytes/s
--   peak_vmem_read_bytes_per_s   VMEM read roof (profile stat), bytes/s
--   peak_vmem_write_bytes_per_s  VMEM write roof (profile stat), bytes/s
--   peak_cmem_read_bytes_per_s   CMEM read roof (profile stat), bytes/s
--   peak_cmem_write_bytes_per_s  CMEM write roof (profile stat), bytes/s
--   peak_flops_source       profile, hardware_model, $peak_source, or NULL (unknown)
--   peak_hbm_source         profile, hardware_model, $peak_source, or NULL (unknown)
--   device_model            devices.model of the device kind
--   hardware_chip           the hardware_models chip matched on device_model, when one matches
--   ridge_point             peak_flops_per_s / peak_hbm_bytes_per_s, FLOP/byte: ops left of it are HBM-bound
--   flop_utilization        flop_rate / peak_flops_per_s
--   hbm_utilization         hbm_bandwidth / peak_hbm_bytes_per_s
--   vmem_read_utilization   VMEM read bandwidth / its peak, when both are known
--   vmem_write_utilization  VMEM write bandwidth / its peak
--   cmem_read_utilization   CMEM read bandwidth / its peak
--   cmem_write_utilization  CMEM write bandwidth / its peak
--   bound_by                the resource with the highest utilization: compute, HBM, CMEM read, CMEM write, VMEM read, VMEM write; unknown when none is known and above 0 (ties: that order, as XProf)
--   roofline_efficiency     the highest utilization (XProf's roofline efficiency)
WITH params AS (
    SELECT
        CAST($profiles AS VARCHAR[]) AS profiles,
        CAST($top AS BIGINT) AS top_n,
        CAST($peak_flops_per_s AS DOUBLE) AS peak_flops_override,
        CAST($peak_hbm_bytes_per_s AS DOUBLE) AS peak_hbm_override,
        CAST($peak_source AS VARCHAR) AS override_source
),
accelerated AS (
    SELECT DISTINCT profile_id FROM devices WHERE kind IN ('tpu', 'gpu')
),
-- Lines that hold ops: TPU `XLA Ops`, GPU streams, and the host threads of
-- profiles without accelerators (JAX on CPU), where ops are the events XLA
-- tags with an HLO op.
op_lines AS (
    SELECT
        t.profile_id, t.device_id, t.track_id, d.kind,
        CASE WHEN d.kind IN ('tpu', 'gpu') THEN d.kind ELSE 'cpu' END AS device_kind
    FROM tracks AS t
    JOIN devices AS d USING (profile_id, device_id)
    CROSS JOIN params AS p
    WHERE (p.profiles IS NULL OR list_contains(p.profiles, t.profile_id))
      AND (
            (d.kind = 'tpu' AND t.name = 'XLA Ops')
         OR (d.kind = 'gpu' AND t.stream_id IS NOT NULL)
         OR (d.kind IN ('host', 'cpu') AND t.profile_id NOT IN (SELECT profile_id FROM accelerated))
      )
),
op_events AS MATERIALIZED (
    SELECT
        e.profile_id,
        e.device_id,
        e.track_id,
        e.event_id,
        e.metadata_id,
        l.device_kind,
        e.program_id,
        e.hlo_op,
        coalesce(e.hlo_op, e.name) AS op,
        e.hlo_module,
        e.category,
        coalesce(e.num_occurrences, 1) AS occurrences,
        coalesce(e.device_offset_ps, e.start_ps) AS start_ps,
        coalesce(e.device_duration_ps, e.dur_ps) AS dur_ps,
        e.flops,
        e.bytes_accessed
    FROM events AS e
    JOIN op_lines AS l USING (profile_id, device_id, track_id)
    WHERE CASE l.kind
              WHEN 'tpu' THEN true
              WHEN 'gpu' THEN coalesce(e.category, '') <> 'gpu_user_annotation'
              ELSE e.hlo_op IS NOT NULL
          END
),
-- Nesting, per line: order by start (longer first). Only lines where an op
-- starts before an earlier one ends nest at all; there an op's depth is the
-- number of earlier ops still open when it starts, and its parent the latest
-- earlier op one level up.
nesting_lines AS (
    -- Some op starts before an earlier one ends exactly when one starts before its predecessor ends.
    SELECT DISTINCT profile_id, track_id
    FROM (
        SELECT profile_id, track_id, start_ps,
            lag(start_ps + dur_ps) OVER (PARTITION BY profile_id, track_id ORDER BY start_ps) AS previous_end_ps
        FROM op_events
        WHERE start_ps IS NOT NULL
    )
    WHERE previous_end_ps > start_ps
),
ordered AS MATERIALIZED (
    SELECT
        profile_id, track_id, event_id, start_ps, dur_ps,
        row_number() OVER (PARTITION BY profile_id, track_id ORDER BY start_ps, dur_ps DESC, event_id) AS ord
    FROM op_events SEMI JOIN nesting_lines USING (profile_id, track_id)
    WHERE start_ps IS NOT NULL
),
points AS (
    SELECT profile_id, track_id, event_id, ord, dur_ps, start_ps AS at_ps, 0 AS is_end FROM ordered
    UNION ALL
    SELECT profile_id, track_id, event_id, ord, dur_ps, start_ps + dur_ps, 1 FROM ordered
),
depths AS MATERIALIZED (
    SELECT
        profile_id, track_id, event_id, ord, dur_ps,
        ord - 1 - sum(is_end) OVER (
            PARTITION BY profile_id, track_id ORDER BY at_ps, ord, is_end ROWS UNBOUNDED PRECEDING
        ) AS depth,
        is_end
    FROM points
    QUALIFY is_end = 0
),
-- Each op at depth d marks level d; each op below looks up the latest mark at its depth - 1.
levels AS (
    SELECT profile_id, track_id, depth AS level, ord, event_id AS mark_id, NULL AS child_ps FROM depths
    UNION ALL
    SELECT profile_id, track_id, depth - 1, ord, NULL, dur_ps FROM depths WHERE depth > 0
),
children AS (
    SELECT profile_id, parent_id, sum(child_ps) AS children_ps
    FROM (
        SELECT
            profile_id, child_ps,
            last_value(mark_id IGNORE NULLS) OVER (
                PARTITION BY profile_id, track_id, level ORDER BY ord, child_ps NULLS FIRST ROWS UNBOUNDED PRECEDING
            ) AS parent_id
        FROM levels
    )
    WHERE child_ps IS NOT NULL
    GROUP BY ALL
),
-- Async pairs on the same line: each done with the latest matching start before it.
async_names AS (
    SELECT op, regexp_replace(op, '-(start|done)(\.[0-9]+)?$', '\2') AS pair_base, regexp_matches(op, '-done(\.[0-9]+)?$') AS is_done
    FROM (SELECT DISTINCT op FROM op_events)
    WHERE regexp_matches(op, '-(start|done)(\.[0-9]+)?$') OR regexp_matches(op, '^(send|recv)(\.[0-9]+)?$')
),
async_events AS MATERIALIZED (
    SELECT o.profile_id, o.track_id, o.program_id, a.pair_base, a.is_done, o.event_id, o.start_ps, o.start_ps + o.dur_ps AS end_ps
    FROM op_events AS o
    JOIN async_names AS a USING (op)
    WHERE o.start_ps IS NOT NULL
),
async_pairs AS MATERIALIZED (
    -- A start whose next event of its pair is a done: that done's latest start. A
    -- start followed by another start, or a done after a done, has no window.
    SELECT profile_id, event_id AS start_id, next_id AS done_id, next_end_ps - start_ps AS window_ps
    FROM (
        SELECT
            profile_id, event_id, start_ps, is_done,
            lead(event_id) OVER w AS next_id,
            lead(is_done) OVER w AS next_is_done,
            lead(end_ps) OVER w AS next_end_ps
        FROM async_events
        WINDOW w AS (PARTITION BY profile_id, track_id, program_id, pair_base ORDER BY start_ps, is_done, event_id)
    )
    WHERE NOT is_done AND next_is_done
),
async_windows AS (
    SELECT profile_id, start_id AS event_id, window_ps FROM async_pairs
    UNION ALL
    SELECT profile_id, done_id, window_ps FROM async_pairs
),
metadata_breakdowns AS (
    SELECT m.profile_id, m.device_id, m.metadata_id, xprosql_memory_access(m.bytes_value) AS accesses
    FROM metadata_stats AS m CROSS JOIN params AS p
    WHERE m.stat = 'memory_access_breakdown' AND m.bytes_value IS NOT NULL
      AND (p.profiles IS NULL OR list_contains(p.profiles, m.profile_id))
    QUALIFY row_number() OVER (PARTITION BY m.profile_id, m.device_id, m.metadata_id) = 1
),
event_breakdowns AS (
    SELECT s.profile_id, s.event_id, xprosql_memory_access(s.bytes_value) AS accesses
    FROM event_stats AS s CROSS JOIN params AS p
    WHERE s.stat = 'memory_access_breakdown' AND s.bytes_value IS NOT NULL
      AND (p.profiles IS NULL OR list_contains(p.profiles, s.profile_id))
    QUALIFY row_number() OVER (PARTITION BY s.profile_id, s.event_id) = 1
),
hlo AS (
    SELECT
        h.profile_id, h.program_id, h.hlo_op,
        any_value(h.opcode) AS opcode,
        any_value(h.derived_flops) AS derived_flops,
        any_value(h.derived_bytes_accessed) AS derived_bytes_accessed
    FROM hlo_ops AS h CROSS JOIN params AS p
    WHERE p.profiles IS NULL OR list_contains(p.profiles, h.profile_id)
    GROUP BY ALL
),
costed AS (
    SELECT
        o.*,
        greatest(o.dur_ps - coalesce(c.children_ps, 0), 0) AS self_ps,
        coalesce(o.flops, h.derived_flops) AS flops_each,
        coalesce(o.bytes_accessed, h.derived_bytes_accessed) AS bytes_each,
        CASE
            WHEN o.flops IS NOT NULL OR o.bytes_accessed IS NOT NULL THEN 'profile'
            WHEN h.derived_flops IS NOT NULL OR h.derived_bytes_accessed IS NOT NULL THEN 'hlo'
        END AS cost_source,
        h.opcode,
        coalesce(eb.accesses, mb.accesses) AS accesses,
        w.window_ps
    FROM op_events AS o
    LEFT JOIN children AS c ON c.profile_id = o.profile_id AND c.parent_id = o.event_id
    LEFT JOIN hlo AS h ON h.profile_id = o.profile_id AND h.program_id = o.program_id AND h.hlo_op = o.hlo_op
    LEFT JOIN event_breakdowns AS eb ON eb.profile_id = o.profile_id AND eb.event_id = o.event_id
    LEFT JOIN metadata_breakdowns AS mb
      ON mb.profile_id = o.profile_id AND mb.device_id = o.device_id AND mb.metadata_id = o.metadata_id
    LEFT JOIN async_windows AS w ON w.profile_id = o.profile_id AND w.event_id = o.event_id
),
-- Per occurrence: bytes by memory space (1 HBM, 2 CMEM, 3 VMEM) and direction (1 read, 2 write).
spaced AS (
    SELECT
        *,
        coalesce(len(accesses), 0) > 0 AS has_breakdown,
        coalesce(list_sum(list_transform(list_filter(accesses, lambda a: a.memory_space = 1), lambda a: a.bytes)), 0) AS hbm_each,
        coalesce(list_sum(list_transform(list_filter(accesses, lambda a: a.memory_space = 3 AND a.operation_type = 1), lambda a: a.bytes)), 0) AS vmem_read_each,
        coalesce(list_sum(list_transform(list_filter(accesses, lambda a: a.memory_space = 3 AND a.operation_type = 2), lambda a: a.bytes)), 0) AS vmem_write_each,
        coalesce(list_sum(list_transform(list_filter(accesses, lambda a: a.memory_space = 2 AND a.operation_type = 1), lambda a: a.bytes)), 0) AS cmem_read_each,
        coalesce(list_sum(list_transform(list_filter(accesses, lambda a: a.memory_space = 2 AND a.operation_type = 2), lambda a: a.bytes)), 0) AS cmem_write_each
    FROM costed
),
ops AS MATERIALIZED (
    SELECT
        profile_id, device_kind, program_id, op,
        any_value(hlo_module) AS module,
        coalesce(any_value(category), any_value(opcode)) AS category,
        CASE WHEN bool_or(cost_source = 'profile') THEN 'profile' WHEN bool_or(cost_source = 'hlo') THEN 'hlo' END AS cost_source,
        CAST(count(DISTINCT device_id) AS BIGINT) AS devices,
        CAST(sum(occurrences) AS BIGINT) AS occurrences,
        CAST(sum(dur_ps) AS BIGINT) AS total_time_ps,
        CAST(sum(self_ps) AS BIGINT) AS self_time_ps,
        CAST(sum(window_ps) AS BIGINT) AS async_window_ps,
        CAST(sum(coalesce(window_ps, dur_ps)) AS BIGINT) AS bandwidth_time_ps,
        CAST(sum(flops_each * occurrences) AS DOUBLE) AS flops,
        CAST(sum(bytes_each * occurrences) AS DOUBLE) AS bytes_accessed,
        bool_or(has_breakdown) AS has_breakdown,
        CAST(sum(hbm_each * occurrences) AS DOUBLE) AS breakdown_hbm_bytes,
        CAST(CASE WHEN bool_or(has_breakdown) THEN sum(hbm_each * occurrences) ELSE sum(bytes_each * occurrences) END AS DOUBLE) AS hbm_bytes,
        CAST(CASE WHEN bool_or(has_breakdown) THEN sum(vmem_read_each * occurrences) END AS DOUBLE) AS vmem_read_bytes,
        CAST(CASE WHEN bool_or(has_breakdown) THEN sum(vmem_write_each * occurrences) END AS DOUBLE) AS vmem_write_bytes,
        CAST(CASE WHEN bool_or(has_breakdown) THEN sum(cmem_read_each * occurrences) END AS DOUBLE) AS cmem_read_bytes,
        CAST(CASE WHEN bool_or(has_breakdown) THEN sum(cmem_write_each * occurrences) END AS DOUBLE) AS cmem_write_bytes
    FROM spaced
    GROUP BY profile_id, device_kind, program_id, op
),
device_time AS MATERIALIZED (
    SELECT profile_id, device_kind, CAST(sum(span_ps) AS BIGINT) AS device_time_ps
    FROM (
        SELECT profile_id, device_kind, device_id, max(start_ps + dur_ps) - min(start_ps) AS span_ps
        FROM op_events
        WHERE start_ps IS NOT NULL
        GROUP BY ALL
    )
    GROUP BY ALL
),
-- Totals per program and per (profile, device kind): XProf's Program row.
totals AS (
    SELECT
        CASE WHEN grouping(program_id) = 0 THEN 'program' ELSE 'profile' END AS row_kind,
        profile_id, device_kind, program_id,
        CASE WHEN grouping(program_id) = 0 THEN any_value(module) END AS module,
        CASE WHEN bool_or(cost_source = 'profile') THEN 'profile' WHEN bool_or(cost_source = 'hlo') THEN 'hlo' END AS cost_source,
        CAST(max(devices) AS BIGINT) AS devices,
        CAST(sum(occurrences) AS BIGINT) AS occurrences,
        CAST(sum(self_time_ps) AS BIGINT) AS self_time_ps,
        CAST(sum(flops) FILTER (WHERE innermost) AS DOUBLE) AS flops,
        CAST(sum(bytes_accessed) FILTER (WHERE innermost) AS DOUBLE) AS bytes_accessed,
        CAST(CASE WHEN bool_or(has_breakdown) FILTER (WHERE innermost)
                  THEN sum(breakdown_hbm_bytes) FILTER (WHERE innermost)
                  ELSE sum(bytes_accessed) FILTER (WHERE innermost) END AS DOUBLE) AS hbm_bytes,
        CAST(sum(vmem_read_bytes) FILTER (WHERE innermost) AS DOUBLE) AS vmem_read_bytes,
        CAST(sum(vmem_write_bytes) FILTER (WHERE innermost) AS DOUBLE) AS vmem_write_bytes,
        CAST(sum(cmem_read_bytes) FILTER (WHERE innermost) AS DOUBLE) AS cmem_read_bytes,
        CAST(sum(cmem_write_bytes) FILTER (WHERE innermost) AS DOUBLE) AS cmem_write_bytes
    FROM (
        SELECT *, lower(coalesce(category, '')) NOT IN ('call', 'conditional', 'while', 'megacore fusion') AS innermost
        FROM ops
    )
    GROUP BY GROUPING SETS ((profile_id, device_kind, program_id), (profile_id, device_kind))
),
all_rows AS (
    SELECT
        'op' AS row_kind, profile_id, device_kind, program_id, module, op, category, cost_source, devices,
        occurrences, total_time_ps, self_time_ps, async_window_ps, bandwidth_time_ps, flops, bytes_accessed,
        hbm_bytes, vmem_read_bytes, vmem_write_bytes, cmem_read_bytes, cmem_write_bytes
    FROM ops CROSS JOIN params AS p
    QUALIFY p.top_n IS NULL
         OR row_number() OVER (PARTITION BY profile_id, device_kind ORDER BY self_time_ps DESC, program_id, op) <= p.top_n
    UNION ALL
    SELECT
        t.row_kind, t.profile_id, t.device_kind, t.program_id, t.module, NULL, NULL, t.cost_source, t.devices,
        t.occurrences,
        CASE WHEN t.row_kind = 'profile' THEN dt.device_time_ps ELSE t.self_time_ps END,
        t.self_time_ps, NULL,
        CASE WHEN t.row_kind = 'profile' THEN dt.device_time_ps ELSE t.self_time_ps END,
        t.flops, t.bytes_accessed, t.hbm_bytes, t.vmem_read_bytes, t.vmem_write_bytes, t.cmem_read_bytes,
        t.cmem_write_bytes
    FROM totals AS t
    LEFT JOIN device_time AS dt USING (profile_id, device_kind)
),
memory_peaks AS (
    SELECT
        profile_id, device_id,
        max(double_value) FILTER (WHERE stat = 'peak_vmem_rd_bw_gigabytes_per_second') * 1e9 AS peak_vmem_read,
        max(double_value) FILTER (WHERE stat = 'peak_vmem_wr_bw_gigabytes_per_second') * 1e9 AS peak_vmem_write,
        max(double_value) FILTER (WHERE stat = 'peak_cmem_rd_bw_gigabytes_per_second') * 1e9 AS peak_cmem_read,
        max(double_value) FILTER (WHERE stat = 'peak_cmem_wr_bw_gigabytes_per_second') * 1e9 AS peak_cmem_write
    FROM device_stats
    WHERE stat IN ('peak_vmem_rd_bw_gigabytes_per_second', 'peak_vmem_wr_bw_gigabytes_per_second',
                   'peak_cmem_rd_bw_gigabytes_per_second', 'peak_cmem_wr_bw_gigabytes_per_second')
    GROUP BY ALL
),
device_peaks AS (
    SELECT
        d.profile_id,
        CASE WHEN d.kind IN ('tpu', 'gpu') THEN d.kind ELSE 'cpu' END AS device_kind,
        min(d.model) AS device_model,
        min(d.memory_bytes) AS memory_bytes,
        max(d.peak_flops_per_s) AS profile_flops,
        CASE WHEN bool_and(coalesce(d.peak_source, '') = 'profile') THEN 'profile' ELSE 'hardware_model' END AS profile_flops_source,
        max(d.peak_hbm_bytes_per_s) AS profile_hbm,
        -- profile+hardware_model: bandwidth from the profile, FLOP/s modelled at ingest (XSpace GPUs)
        CASE WHEN bool_and(coalesce(d.peak_source, '') IN ('profile', 'profile+hardware_model')) THEN 'profile'
             ELSE 'hardware_model' END AS profile_hbm_source,
        max(m.peak_vmem_read) AS peak_vmem_read,
        max(m.peak_vmem_write) AS peak_vmem_write,
        max(m.peak_cmem_read) AS peak_cmem_read,
        max(m.peak_cmem_write) AS peak_cmem_write
    FROM devices AS d
    JOIN (SELECT DISTINCT profile_id, device_id FROM op_events) USING (profile_id, device_id)
    LEFT JOIN memory_peaks AS m USING (profile_id, device_id)
    GROUP BY ALL
),
chip_peaks AS (
    SELECT dp.profile_id, dp.device_kind, h.chip, h.peak_flops_per_s, h.peak_hbm_bytes_per_s
    FROM device_peaks AS dp
    JOIN hardware_models AS h
      ON h.kind = dp.device_kind
     AND regexp_matches(regexp_replace(lower(dp.device_model), '[^a-z0-9]', '', 'g'), h.model_pattern)
     AND (h.max_memory_bytes IS NULL OR dp.memory_bytes <= h.max_memory_bytes)
    QUALIFY row_number() OVER (PARTITION BY dp.profile_id, dp.device_kind ORDER BY h.priority) = 1
),
peaks AS (
    SELECT
        dp.profile_id, dp.device_kind, dp.device_model, cp.chip AS hardware_chip,
        coalesce(p.peak_flops_override, dp.profile_flops, cp.peak_flops_per_s) AS peak_flops_per_s,
        CASE
            WHEN p.peak_flops_override IS NOT NULL THEN p.override_source
            WHEN dp.profile_flops IS NOT NULL THEN dp.profile_flops_source
            WHEN cp.peak_flops_per_s IS NOT NULL THEN 'hardware_model'
        END AS peak_flops_source,
        coalesce(p.peak_hbm_override, dp.profile_hbm, cp.peak_hbm_bytes_per_s) AS peak_hbm_bytes_per_s,
        CASE
            WHEN p.peak_hbm_override IS NOT NULL THEN p.override_source
            WHEN dp.profile_hbm IS NOT NULL THEN dp.profile_hbm_source
            WHEN cp.peak_hbm_bytes_per_s IS NOT NULL THEN 'hardware_model'
        END AS peak_hbm_source,
        nullif(dp.peak_vmem_read, 0) AS peak_vmem_read_bytes_per_s,
        nullif(dp.peak_vmem_write, 0) AS peak_vmem_write_bytes_per_s,
        nullif(dp.peak_cmem_read, 0) AS peak_cmem_read_bytes_per_s,
        nullif(dp.peak_cmem_write, 0) AS peak_cmem_write_bytes_per_s
    FROM device_peaks AS dp
    LEFT JOIN chip_peaks AS cp USING (profile_id, device_kind)
    CROSS JOIN params AS p
),
rates AS (
    SELECT
        r.*,
        dt.device_time_ps,
        r.flops / (nullif(r.total_time_ps, 0) * 1e-12) AS flop_rate,
        r.bytes_accessed / (nullif(r.bandwidth_time_ps, 0) * 1e-12) AS memory_bandwidth,
        r.hbm_bytes / (nullif(r.bandwidth_time_ps, 0) * 1e-12) AS hbm_bandwidth,
        r.vmem_read_bytes / (nullif(r.bandwidth_time_ps, 0) * 1e-12) AS vmem_read_bandwidth,
        r.vmem_write_bytes / (nullif(r.bandwidth_time_ps, 0) * 1e-12) AS vmem_write_bandwidth,
        r.cmem_read_bytes / (nullif(r.bandwidth_time_ps, 0) * 1e-12) AS cmem_read_bandwidth,
        r.cmem_write_bytes / (nullif(r.bandwidth_time_ps, 0) * 1e-12) AS cmem_write_bandwidth,
        pk.* EXCLUDE (profile_id, device_kind)
    FROM all_rows AS r
    LEFT JOIN device_time AS dt USING (profile_id, device_kind)
    LEFT JOIN peaks AS pk USING (profile_id, device_kind)
),
utilized AS (
    SELECT
        *,
        flop_rate / peak_flops_per_s AS flop_utilization,
        hbm_bandwidth / peak_hbm_bytes_per_s AS hbm_utilization,
        CASE WHEN vmem_read_bytes > 0 THEN vmem_read_bandwidth / peak_vmem_read_bytes_per_s END AS vmem_read_utilization,
        CASE WHEN vmem_write_bytes > 0 THEN vmem_write_bandwidth / peak_vmem_write_bytes_per_s END AS vmem_write_utilization,
        CASE WHEN cmem_read_bytes > 0 THEN cmem_read_bandwidth / peak_cmem_read_bytes_per_s END AS cmem_read_utilization,
        CASE WHEN cmem_write_bytes > 0 THEN cmem_write_bandwidth / peak_cmem_write_bytes_per_s END AS cmem_write_utilization
    FROM rates
),
bounded AS (
    SELECT
        *,
        greatest(
            coalesce(flop_utilization, 0), coalesce(hbm_utilization, 0),
            coalesce(cmem_read_utilization, 0), coalesce(cmem_write_utilization, 0),
            coalesce(vmem_read_utilization, 0), coalesce(vmem_write_utilization, 0)
        ) AS max_utilization
    FROM utilized
)
SELECT
    row_kind, profile_id, device_kind, program_id, module, op, category, cost_source, devices, occurrences,
    total_time_ps, self_time_ps, device_time_ps,
    self_time_ps / nullif(device_time_ps, 0) AS self_time_share,
    async_window_ps,
    flops, bytes_accessed, hbm_bytes, vmem_read_bytes, vmem_write_bytes, cmem_read_bytes, cmem_write_bytes,
    flop_rate, memory_bandwidth, hbm_bandwidth,
    flops / nullif(bytes_accessed, 0) AS operational_intensity,
    flops / nullif(hbm_bytes, 0) AS hbm_operational_intensity,
    peak_flops_per_s, peak_hbm_bytes_per_s,
    peak_vmem_read_bytes_per_s, peak_vmem_write_bytes_per_s, peak_cmem_read_bytes_per_s, peak_cmem_write_bytes_per_s,
    peak_flops_source, peak_hbm_source, device_model, hardware_chip,
    peak_flops_per_s / peak_hbm_bytes_per_s AS ridge_point,
    flop_utilization, hbm_utilization,
    vmem_read_utilization, vmem_write_utilization, cmem_read_utilization, cmem_write_utilization,
    CASE
        WHEN max_utilization <= 0 THEN 'unknown'
        WHEN flop_utilization = max_utilization THEN 'compute'
        WHEN hbm_utilization = max_utilization THEN 'HBM'
        WHEN cmem_read_utilization = max_utilization THEN 'CMEM read'
        WHEN cmem_write_utilization = max_utilization THEN 'CMEM write'
        WHEN vmem_read_utilization = max_utilization THEN 'VMEM read'
        WHEN vmem_write_utilization = max_utilization THEN 'VMEM write'
    END AS bound_by,
    CASE WHEN max_utilization > 0 THEN max_utilization END AS roofline_efficiency
FROM bounded
ORDER BY
    profile_id, device_kind,
    CASE row_kind WHEN 'profile' THEN 0 WHEN 'program' THEN 1 ELSE 2 END,
    self_time_ps DESC, program_id, op
