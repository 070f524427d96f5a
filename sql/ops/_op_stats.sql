-- ops._op_stats: every op of a profile summed per device: the part of the roofline
-- that reads events. xprosql stores it per profile at ingest (table op_stats),
-- so the roofline of thousands of profiles reads a few rows of each.
--
-- Ops are the events of TPU `XLA Ops` lines, of GPU stream lines (Kineto
-- annotations, stream waits and host events excepted), and, in profiles without accelerators
-- (JAX on CPU), the host events XLA tags with an HLO op. Times use the device
-- clock where an event records it (TPU device_offset_ps / device_duration_ps),
-- as XProf does. Self time is an op's time minus the time of the ops nested in
-- it on the same line (nesting by timespan).
--
-- Cost data: an op's flops / bytes_accessed stats (TPU and XLA GPU profiles),
-- else the costs xprosql derives from the embedded HLO (hlo_ops.derived_*, with
-- hlo_ops.derived_cost_source: XLA's rules, or for custom calls and Triton GEMM
-- fusions a kernel's declared cost_estimate, 2*M*N*K, a library formula, or operand
-- bytes only), else none (cost_source NULL). On a GPU one HLO op can launch several
-- kernels (a fused-attention custom call's, a cuDNN convolution's im2col and GEMM):
-- its derived costs count once per execution, with the first kernel of each run of
-- consecutive kernels of the op on its stream.
--
-- PyTorch (Kineto) traces: each GPU kernel, copy and memset counts for the PyTorch op
-- it belongs to (framework_op_kernels: the nearest op around its launch with costs of
-- its own, else the innermost), one row per (op, input shapes, dtypes), so the time is
-- the op's GPU time and the costs are its calls' (counted once per call). Activities
-- without a launch in the trace stay rows of their own, by kernel name, without cost
-- data. A PyTorch trace without GPU activity has a row per costed op on its CPU, timed
-- by its CPU time (framework_op_stats). HBM / VMEM / CMEM bytes come from the
-- memory_access_breakdown stat, decoded by the SQL function
-- xprosql_memory_access(BLOB) that xprosql registers.
--
-- A host plane can run several XLA devices (JAX on CPU with
-- --xla_force_host_platform_device_count): its ops carry a device_ordinal stat,
-- and each XLA device counts as a device of its own in xla_devices and
-- device_time_ps, so per-device shares stay within the device's time.
--
-- The bytes of an async pair (`<base>-start[.N]` .. `<base>-done[.N]`, e.g.
-- copy-start / copy-done; send and recv start without a suffix) move during the
-- window from the start op's start to the done op's end (async_window_ps).
--
-- One op across runs (op_key, what the fleet analyses join on): an HLO op is its module's fingerprint
-- (a hash of the module's instructions: the same program compiled again has the same one) and its
-- instruction name, else (no HLO proto) its module and instruction name; a PyTorch op is its name,
-- input shapes, dtypes and the nn.Module path around its call; any other GPU activity is its name
-- normalised by xprosql_kernel_name (parameter list, addresses, a Triton or XLA fusion's instance
-- number dropped) and its grid. Rows are per key, so a PyTorch op called in two modules, or a kernel
-- launched with two grids, has a row for each.
--
-- Parameters:
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   device_id  INTEGER  devices.device_id the op ran on
--   device_kind  VARCHAR  tpu, gpu or cpu (host planes running XLA:CPU programs)
--   program_id  UBIGINT  XLA program id; NULL for ops without one
--   op  VARCHAR  HLO op (events.hlo_op); Kineto: the PyTorch op of framework_op_kernels; else the event name (a GPU kernel)
--   input_shapes  VARCHAR  a PyTorch op's Input Dims (JSON); NULL for other ops
--   input_dtypes  VARCHAR  a PyTorch op's Input type (JSON)
--   precision  VARCHAR  a PyTorch op's dtype class (fp8, bf16, fp16, fp32, ...): which FLOP/s roof applies
--   module  VARCHAR  HLO module name, when known
--   category  VARCHAR  HLO category from the profile, else the HLO opcode; Kineto: cpu_op for PyTorch ops, else the event's cat (kernel, gpu_memcpy, ...)
--   cost_source  VARCHAR  where flops and bytes came from: profile (op stats); derived from the HLO (hlo_ops.derived_cost_source): hlo, declared, triton_gemm, library, operand_bytes; PyTorch (torch._op_tree): declared, trace, shapes, operand_bytes; or NULL (none)
--   occurrences  BIGINT  executions
--   total_time_ps  BIGINT  time including nested ops, ps
--   self_time_ps  BIGINT  total_time_ps minus nested ops' time, ps
--   async_window_ps  BIGINT  async pairs: start-to-done windows of the occurrences, summed, ps; NULL otherwise
--   bandwidth_time_ps  BIGINT  the time bytes move in: async windows, else the ops' time, ps
--   flops  DOUBLE  FLOPs, summed over occurrences
--   bytes_accessed  DOUBLE  bytes read and written, summed over occurrences
--   has_breakdown  BOOLEAN  some occurrence has a memory_access_breakdown
--   breakdown_hbm_bytes  DOUBLE  HBM bytes of the breakdowns (memory space 1); 0 without one
--   vmem_read_bytes  DOUBLE  VMEM bytes read (breakdown memory space 3, operation 1); 0 without a breakdown
--   vmem_write_bytes  DOUBLE  VMEM bytes written (memory space 3, operation 2)
--   cmem_read_bytes  DOUBLE  CMEM bytes read (memory space 2, operation 1)
--   cmem_write_bytes  DOUBLE  CMEM bytes written (memory space 2, operation 2)
--   xla_devices  BIGINT  XLA devices of this plane the op ran on: 1, or on a host plane running several, the device_ordinal values of its events
--   device_start_ps  BIGINT  the device's first op start (the same on every row of the device), ps
--   device_end_ps  BIGINT  the device's last op end, ps
--   device_time_ps  BIGINT  the device's time: first op start to last op end of each of its XLA devices, summed (the same on every row of the device), ps
--   op_key  VARCHAR  the op's identity across runs (xprosql_op_key: 16 hex digits of the MD5 of op_key_source, the op, its shapes and dtypes, op_key_context); one op can have several rows per device (its calls in other modules, other grids)
--   op_key_source  VARCHAR  what the key is made of: hlo (HLO module fingerprint + instruction name), hlo_name (module name + instruction name: no HLO proto in the profile), torch (op, input shapes, dtypes, nn.Module path), kernel (kernel name normalised, grid)
--   op_key_context  VARCHAR  the key's part beyond the op's name, shapes and dtypes: the HLO module fingerprint (16 hex digits of the MD5 of its instructions), the module name (hlo_name), the nn.Module path of a PyTorch op (NULL without with_modules), or a kernel's grid x,y,z (NULL for copies and memsets)
WITH accelerated AS (
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
    WHERE (
            (d.kind = 'tpu' AND t.name = 'XLA Ops')
         OR (d.kind = 'gpu' AND t.stream_id IS NOT NULL)
         OR (d.kind IN ('host', 'cpu') AND t.profile_id NOT IN (SELECT profile_id FROM accelerated))
      )
),
-- The XLA device of each op on a host plane (ops of accelerators have none).
-- Read for host op lines alone (profiles without accelerators; the others' op rows never use it), and materialized: a
-- join with the events estimated it larger than the op events, and hashed a million of those for a few ordinals.
ordinals AS MATERIALIZED (
    SELECT profile_id, event_id, coalesce(int_value, CAST(uint_value AS BIGINT)) AS xla_device
    FROM event_stats
    WHERE stat = 'device_ordinal' AND profile_id NOT IN (SELECT profile_id FROM accelerated)
),
-- PyTorch (Kineto) GPU activities belong to the op that launched them (framework_op_kernels, stored
-- at ingest before this): the op's costs come with its first activity.
torch_kernels AS (
    SELECT profile_id, event_id, op_event_id, op, input_shapes, input_dtypes, precision, cost_source, first_of_call, flops,
        bytes_accessed
    FROM framework_op_kernels
),
-- The op's identity across runs (op_key): the nn.Module path around a PyTorch op's call on its thread
-- (with_modules=True), e.g. Model_0/Block_1/Linear_0 ...
module_events AS (
    SELECT profile_id, track_id, event_id, start_ps, dur_ps, substr(name, length('nn.Module: ') + 1) AS module
    FROM events
    WHERE category = 'python_function' AND starts_with(name, 'nn.Module: ') AND start_ps IS NOT NULL
),
op_module_paths AS (
    SELECT o.profile_id, o.event_id AS op_event_id,
        string_agg(m.module, '/' ORDER BY m.start_ps, m.dur_ps DESC, m.event_id) AS module_path
    FROM (SELECT DISTINCT profile_id, op_event_id AS event_id FROM torch_kernels
          WHERE profile_id IN (SELECT profile_id FROM module_events)) AS d
    JOIN events AS o USING (profile_id, event_id)
    JOIN module_events AS m ON m.profile_id = o.profile_id AND m.track_id = o.track_id
     AND m.start_ps <= o.start_ps AND o.start_ps < m.start_ps + m.dur_ps
    GROUP BY ALL
),
-- ... and the fingerprint of an HLO module: its instructions (computation, name, opcode, shape, operands), hashed.
fingerprints AS (
    SELECT profile_id, program_id,
        substr(md5(string_agg(concat_ws(chr(31), computation, hlo_op, opcode, shape, array_to_string(operand_names, ',')),
                              chr(30) ORDER BY computation, hlo_op, instruction_id)), 1, 16) AS fingerprint
    FROM hlo_ops
    GROUP BY ALL
),
-- PyTorch profiles without GPU activity: each costed op (on CPU), by its CPU time.
torch_cpu_ops AS (
    SELECT f.profile_id, f.device_id, f.op, f.input_shapes, f.input_dtypes, f.precision, f.cost_source,
        f.occurrences, f.cpu_total_time_ps, f.flops, f.bytes_accessed
    FROM framework_op_stats AS f
    WHERE f.cost_source IN ('declared', 'trace', 'shapes', 'operand_bytes')
      AND f.profile_id NOT IN (SELECT profile_id FROM framework_op_kernels)
      AND f.profile_id NOT IN (SELECT profile_id FROM accelerated)
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
        coalesce(e.hlo_op, k.op, e.name) AS op,
        k.input_shapes,
        k.input_dtypes,
        k.precision,
        e.hlo_module,
        CASE WHEN k.event_id IS NULL THEN e.category ELSE 'cpu_op' END AS category,
        CASE WHEN k.event_id IS NULL THEN coalesce(e.num_occurrences, 1) WHEN k.first_of_call THEN 1 ELSE 0 END AS occurrences,
        coalesce(e.device_offset_ps, e.start_ps) AS start_ps,
        coalesce(e.device_duration_ps, e.dur_ps) AS dur_ps,
        coalesce(e.flops, k.flops) AS flops,
        coalesce(e.bytes_accessed, k.bytes_accessed) AS bytes_accessed,
        k.cost_source AS torch_cost_source,
        CASE WHEN l.kind NOT IN ('tpu', 'gpu') THEN x.xla_device END AS xla_device,
        CASE WHEN e.hlo_op IS NOT NULL THEN 'hlo' WHEN k.event_id IS NOT NULL THEN 'torch' ELSE 'kernel' END AS key_source,
        CASE WHEN e.hlo_op IS NOT NULL THEN NULL
             WHEN k.event_id IS NOT NULL THEN mp.module_path
             WHEN kg.grid_x IS NOT NULL THEN concat_ws(',', kg.grid_x, kg.grid_y, kg.grid_z) END AS key_context
    FROM events AS e
    JOIN op_lines AS l USING (profile_id, device_id, track_id)
    LEFT JOIN ordinals AS x USING (profile_id, event_id)
    LEFT JOIN torch_kernels AS k USING (profile_id, event_id)
    LEFT JOIN op_module_paths AS mp ON mp.profile_id = k.profile_id AND mp.op_event_id = k.op_event_id
    LEFT JOIN kernels AS kg ON kg.profile_id = e.profile_id AND kg.event_id = e.event_id
    WHERE CASE l.kind
              WHEN 'tpu' THEN true
              -- Kineto: annotations, stream waits, host events sharing the GPU's pid and CUPTI counter
              -- ranges are no GPU work (counters.gpu_flops reads the ranges).
              WHEN 'gpu' THEN xprosql_gpu_work(e.category)
              ELSE e.hlo_op IS NOT NULL
          END
),
-- The first kernel of each execution of an HLO op on a GPU: a kernel whose predecessor on its stream
-- belongs to another op (or program) starts one.
executions AS (
    SELECT profile_id, event_id, first_of_execution
    FROM (
        SELECT profile_id, event_id, hlo_op,
            lag(hlo_op) OVER w IS DISTINCT FROM hlo_op OR lag(program_id) OVER w IS DISTINCT FROM program_id
                AS first_of_execution
        FROM op_events
        WHERE device_kind = 'gpu' AND start_ps IS NOT NULL
        WINDOW w AS (PARTITION BY profile_id, device_id, track_id ORDER BY start_ps, event_id)
    )
    WHERE hlo_op IS NOT NULL
),
-- Self time: an op's time less that of the ops nested in it on its line.
nesting_events AS (
    SELECT profile_id, track_id, event_id, start_ps, dur_ps FROM op_events
),
nesting AS MATERIALIZED (
-- @include ops._nesting
),
children AS (
    SELECT n.profile_id, n.parent_id, sum(o.dur_ps) AS children_ps
    FROM nesting AS n
    JOIN op_events AS o USING (profile_id, event_id)
    WHERE n.parent_id IS NOT NULL
    GROUP BY ALL
),
-- Async pairs on the same line: each done with the latest matching start before it. Each distinct op is classified
-- once, into a column: a filter there would be pushed below the DISTINCT, a regular expression per event. The pair's
-- base name (copy.3 of copy-start.3 and copy-done.3) is numbered: the pairing window sorts on an integer, not a string.
async_names AS MATERIALIZED (
    SELECT op, dense_rank() OVER (ORDER BY regexp_replace(op, '-(start|done)(\.[0-9]+)?$', '\2')) AS pair_base,
        regexp_matches(op, '-done(\.[0-9]+)?$') AS is_done,
        regexp_matches(op, '-(start|done)(\.[0-9]+)?$') OR regexp_matches(op, '^(send|recv)(\.[0-9]+)?$') AS paired
    FROM (SELECT DISTINCT op FROM op_events)
),
async_events AS MATERIALIZED (
    SELECT o.profile_id, o.track_id, o.program_id, a.pair_base, a.is_done, o.event_id, o.start_ps, o.start_ps + o.dur_ps AS end_ps
    FROM op_events AS o
    JOIN async_names AS a USING (op)
    WHERE o.start_ps IS NOT NULL AND a.paired
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
-- Memory access breakdowns, per breakdown: bytes by memory space (1 HBM, 2 CMEM,
-- 3 VMEM) and direction (1 read, 2 write). Summed here, on the few breakdowns,
-- rather than on each occurrence of their ops.
breakdowns AS (
    SELECT
        owner, profile_id, device_id, metadata_id, event_id,
        len(accesses) > 0 AS has_breakdown,
        coalesce(list_sum(list_transform(list_filter(accesses, lambda a: a.memory_space = 1), lambda a: a.bytes)), 0) AS hbm_each,
        coalesce(list_sum(list_transform(list_filter(accesses, lambda a: a.memory_space = 3 AND a.operation_type = 1), lambda a: a.bytes)), 0) AS vmem_read_each,
        coalesce(list_sum(list_transform(list_filter(accesses, lambda a: a.memory_space = 3 AND a.operation_type = 2), lambda a: a.bytes)), 0) AS vmem_write_each,
        coalesce(list_sum(list_transform(list_filter(accesses, lambda a: a.memory_space = 2 AND a.operation_type = 1), lambda a: a.bytes)), 0) AS cmem_read_each,
        coalesce(list_sum(list_transform(list_filter(accesses, lambda a: a.memory_space = 2 AND a.operation_type = 2), lambda a: a.bytes)), 0) AS cmem_write_each
    FROM (
        SELECT 'metadata' AS owner, m.profile_id, m.device_id, m.metadata_id, NULL::BIGINT AS event_id,
               xprosql_memory_access(m.bytes_value) AS accesses
        FROM metadata_stats AS m
        WHERE m.stat = 'memory_access_breakdown' AND m.bytes_value IS NOT NULL
        QUALIFY row_number() OVER (PARTITION BY m.profile_id, m.device_id, m.metadata_id) = 1
        UNION ALL
        SELECT 'event', s.profile_id, NULL, NULL, s.event_id, xprosql_memory_access(s.bytes_value)
        FROM event_stats AS s
        WHERE s.stat = 'memory_access_breakdown' AND s.bytes_value IS NOT NULL
        QUALIFY row_number() OVER (PARTITION BY s.profile_id, s.event_id) = 1
    )
    -- A breakdown that does not decode (NULL) counts as none, as an absent one does.
    WHERE accesses IS NOT NULL
),
metadata_breakdowns AS (SELECT * FROM breakdowns WHERE owner = 'metadata'),
event_breakdowns AS (SELECT * FROM breakdowns WHERE owner = 'event'),
hlo AS (
    SELECT
        h.profile_id, h.program_id, h.hlo_op,
        any_value(h.opcode) AS opcode,
        any_value(h.derived_flops) AS derived_flops,
        any_value(h.derived_bytes_accessed) AS derived_bytes_accessed,
        -- Files written before derived_cost_source: XLA's rules.
        coalesce(any_value(h.derived_cost_source), 'hlo') AS derived_cost_source
    FROM hlo_ops AS h
    GROUP BY ALL
),
costed AS (
    SELECT
        o.*,
        greatest(o.dur_ps - coalesce(c.children_ps, 0), 0) AS self_ps,
        -- Derived costs are per execution: the other kernels of a GPU execution carry none (0).
        coalesce(o.flops, h.derived_flops * CASE WHEN coalesce(x.first_of_execution, true) THEN 1 ELSE 0 END) AS flops_each,
        coalesce(o.bytes_accessed,
                 h.derived_bytes_accessed * CASE WHEN coalesce(x.first_of_execution, true) THEN 1 ELSE 0 END) AS bytes_each,
        CASE
            WHEN o.torch_cost_source IS NOT NULL THEN o.torch_cost_source
            WHEN o.flops IS NOT NULL OR o.bytes_accessed IS NOT NULL THEN 'profile'
            WHEN h.derived_flops IS NOT NULL OR h.derived_bytes_accessed IS NOT NULL THEN h.derived_cost_source
        END AS cost_source,
        h.opcode,
        -- An event's own breakdown, else its metadata's: per occurrence.
        coalesce(eb.has_breakdown, mb.has_breakdown, false) AS has_breakdown,
        coalesce(eb.hbm_each, mb.hbm_each, 0) AS hbm_each,
        coalesce(eb.vmem_read_each, mb.vmem_read_each, 0) AS vmem_read_each,
        coalesce(eb.vmem_write_each, mb.vmem_write_each, 0) AS vmem_write_each,
        coalesce(eb.cmem_read_each, mb.cmem_read_each, 0) AS cmem_read_each,
        coalesce(eb.cmem_write_each, mb.cmem_write_each, 0) AS cmem_write_each,
        w.window_ps
    FROM op_events AS o
    LEFT JOIN children AS c ON c.profile_id = o.profile_id AND c.parent_id = o.event_id
    LEFT JOIN hlo AS h ON h.profile_id = o.profile_id AND h.program_id = o.program_id AND h.hlo_op = o.hlo_op
    LEFT JOIN executions AS x ON x.profile_id = o.profile_id AND x.event_id = o.event_id
    LEFT JOIN event_breakdowns AS eb ON eb.profile_id = o.profile_id AND eb.event_id = o.event_id
    LEFT JOIN metadata_breakdowns AS mb
      ON mb.profile_id = o.profile_id AND mb.device_id = o.device_id AND mb.metadata_id = o.metadata_id
    LEFT JOIN async_windows AS w ON w.profile_id = o.profile_id AND w.event_id = o.event_id
),
per_device AS (
    SELECT
        profile_id, device_id, device_kind, program_id, op, input_shapes, input_dtypes,
        any_value(precision) AS precision,
        any_value(hlo_module) AS module,
        coalesce(any_value(category), any_value(opcode)) AS category,
        -- The best source of the op's occurrences (ops.roofline's order).
        CASE WHEN bool_or(cost_source = 'profile') THEN 'profile' WHEN bool_or(cost_source = 'declared') THEN 'declared'
             WHEN bool_or(cost_source = 'triton_gemm') THEN 'triton_gemm' WHEN bool_or(cost_source = 'library') THEN 'library'
             WHEN bool_or(cost_source = 'hlo') THEN 'hlo' WHEN bool_or(cost_source = 'trace') THEN 'trace'
             WHEN bool_or(cost_source = 'shapes') THEN 'shapes' WHEN bool_or(cost_source = 'operand_bytes') THEN 'operand_bytes'
        END AS cost_source,
        CAST(sum(occurrences) AS BIGINT) AS occurrences,
        CAST(sum(dur_ps) AS BIGINT) AS total_time_ps,
        CAST(sum(self_ps) AS BIGINT) AS self_time_ps,
        CAST(sum(window_ps) AS BIGINT) AS async_window_ps,
        CAST(sum(coalesce(window_ps, dur_ps)) AS BIGINT) AS bandwidth_time_ps,
        CAST(sum(flops_each * occurrences) AS DOUBLE) AS flops,
        CAST(sum(bytes_each * occurrences) AS DOUBLE) AS bytes_accessed,
        bool_or(has_breakdown) AS has_breakdown,
        CAST(sum(hbm_each * occurrences) AS DOUBLE) AS breakdown_hbm_bytes,
        CAST(sum(vmem_read_each * occurrences) AS DOUBLE) AS vmem_read_bytes,
        CAST(sum(vmem_write_each * occurrences) AS DOUBLE) AS vmem_write_bytes,
        CAST(sum(cmem_read_each * occurrences) AS DOUBLE) AS cmem_read_bytes,
        CAST(sum(cmem_write_each * occurrences) AS DOUBLE) AS cmem_write_bytes,
        -- (a list, not count(DISTINCT ...): a distinct aggregate made DuckDB split the whole aggregation, about a quarter of the query)
        CAST(greatest(len(list_distinct(list(xla_device) FILTER (WHERE xla_device IS NOT NULL))), 1) AS BIGINT) AS xla_devices,
        key_source, key_context
    FROM costed
    GROUP BY profile_id, device_id, device_kind, program_id, op, input_shapes, input_dtypes, key_source, key_context
    UNION ALL
    SELECT
        profile_id, device_id, 'cpu', NULL, op, input_shapes, input_dtypes, precision, NULL, 'cpu_op', cost_source,
        occurrences, cpu_total_time_ps, cpu_total_time_ps, NULL, cpu_total_time_ps, flops, bytes_accessed,
        false, 0, 0, 0, 0, 0, 1, 'torch', NULL
    FROM torch_cpu_ops
),
xla_device_spans AS (
    SELECT profile_id, device_id, xla_device, min(start_ps) AS start_ps, max(start_ps + dur_ps) AS end_ps
    FROM op_events
    WHERE start_ps IS NOT NULL
    GROUP BY ALL
    UNION ALL
    -- A CPU running PyTorch ops: its first op start to its last op end.
    SELECT e.profile_id, e.device_id, NULL, min(e.start_ps), max(e.start_ps + e.dur_ps)
    FROM events AS e
    WHERE e.category = 'cpu_op' AND e.start_ps IS NOT NULL
      AND e.profile_id IN (SELECT profile_id FROM torch_cpu_ops)
    GROUP BY ALL
),
device_spans AS (
    SELECT
        profile_id, device_id, min(start_ps) AS device_start_ps, max(end_ps) AS device_end_ps,
        CAST(sum(end_ps - start_ps) AS BIGINT) AS device_time_ps
    FROM xla_device_spans
    GROUP BY ALL
),
keyed AS (
    SELECT o.*,
        CASE WHEN o.key_source = 'hlo' AND f.fingerprint IS NULL THEN 'hlo_name' ELSE o.key_source END AS op_key_source,
        CASE WHEN o.key_source = 'hlo' THEN coalesce(f.fingerprint, o.module) ELSE o.key_context END AS op_key_context
    FROM per_device AS o
    LEFT JOIN fingerprints AS f USING (profile_id, program_id)
)
SELECT o.* EXCLUDE (key_source, key_context, op_key_source, op_key_context),
    s.device_start_ps, s.device_end_ps, s.device_time_ps,
    xprosql_op_key(o.op_key_source, o.op, o.input_shapes, o.input_dtypes, o.op_key_context) AS op_key,
    o.op_key_source, o.op_key_context
FROM keyed AS o
LEFT JOIN device_spans AS s USING (profile_id, device_id)
ORDER BY profile_id, device_id, self_time_ps DESC, program_id, op, input_shapes, input_dtypes
