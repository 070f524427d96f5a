-- steps._bottleneck_steps: where each step's time goes on each device, in categories
-- that sum to the step's wall time: the heavy part of the bottleneck analysis.
-- A compaction stores its rows for the profiles it packs (table
-- bottleneck_steps), computed with the default parameters below and those of
-- the analyses it includes; xprosql reads them instead when a query uses the same.
--
-- Every instant of a step on a device gets exactly one category, the first of
-- these that applies (so the categories sum to the step's wall time):
--   compute_bound_ps         an op runs that the roofline calls compute-bound
--   memory_bound_ps          an op runs that the roofline calls memory-bound (HBM, VMEM, CMEM)
--   other_compute_ps         an op runs that has no cost data or no known peaks (most GPU kernels of PyTorch traces)
--   exposed_collective_ps    no compute runs, a collective does: a synchronous collective op,
--                            an async collective window (TPU), an NCCL / RCCL kernel (GPU), a process-group
--                            collective on a host (gloo:all_reduce on its worker thread, c10d:: ops); an
--                            XLA:CPU collective op first of all: its device's thread waits for its peers,
--                            whatever else the host runs meanwhile (xprosql_collective says what a
--                            collective is, on every backend)
--   exposed_host_offload_ps  no compute, no collective; a host-offload copy window is open (S(5) shapes)
--   exposed_dma_ps           no compute, no collective; another async copy window is open, or a GPU memcpy/memset runs
--   launch_overhead_ps       the device is idle while a kernel or copy it will run has been launched (GPU: from
--                            the CUDA call's start to the op's start)
--   input_wait_ps            the device is idle while the host reads input ($input_events), or an infeed op runs
--   host_wait_ps             the device is idle and more of its work follows in the step: it waits for the host
--   idle_ps                  the device is idle and nothing more runs in the step
-- The issue's "exposed DMA / host offload" is exposed_host_offload_ps + exposed_dma_ps; its "host / input wait"
-- is input_wait_ps + host_wait_ps. TPU start / done ops count through their windows (async_ops), since the
-- done op is the core waiting for the transfer.
--
-- Steps, devices and busy time come from the steps analysis, async windows from async_ops, and the
-- compute / memory-bound call for each op from memory_bound (the roofline), all included below.
--
-- Parameters:
--   $input_events               VARCHAR  regex on host event names that read input (default: '(IteratorGetNext|^Iterator::|InfeedEnqueue|TransferToInfeed|enumerate\(DataLoader\)|DataLoaderIter)')
--
-- Passes: $prefer_async_line $peak_flops_per_s $peak_hbm_bytes_per_s $peak_source (to its includes, with their defaults and meaning)
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   device_id  INTEGER  devices.device_id
--   device  VARCHAR  device name
--   device_kind  VARCHAR  tpu, gpu or host
--   step_index  BIGINT  steps.step_index
--   step  BIGINT  steps.step (the recorded step number)
--   source  VARCHAR  steps.source
--   steps  INTEGER  steps in the row (1)
--   devices  INTEGER  devices in the row
--   start_ps  BIGINT  step start, ps
--   end_ps  BIGINT  step end, ps
--   step_ps  BIGINT  wall time, ps
--   busy_ps  BIGINT  time some op of the device runs (steps.busy_ps), ps
--   compute_bound_ps  BIGINT  category time (see above), ps
--   memory_bound_ps  BIGINT  category time (see above), ps
--   other_compute_ps  BIGINT  category time (see above), ps
--   exposed_collective_ps  BIGINT  category time (see above), ps
--   exposed_host_offload_ps  BIGINT  category time (see above), ps
--   exposed_dma_ps  BIGINT  category time (see above), ps
--   launch_overhead_ps  BIGINT  category time (see above), ps
--   input_wait_ps  BIGINT  category time (see above), ps
--   host_wait_ps  BIGINT  category time (see above), ps
--   idle_ps  BIGINT  category time (see above), ps
--   flops  DOUBLE  FLOPs of the ops starting in the step (events.flops)
--   bytes_accessed  DOUBLE  bytes of the ops starting in the step (events.bytes_accessed)
--   (the ten *_ps category columns sum to step_ps)
--   flop_capacity  DOUBLE  peak FLOP/s x step time: the FLOPs the device could do, with the roofline's peak (ops._peaks), FLOP
--   byte_capacity  DOUBLE  peak HBM bytes/s x step time: the HBM bytes it could move (ops._peaks), bytes
WITH every_step AS (
-- @include steps.steps
),
-- XProf leaves the incomplete first and last steps of a long trace out (steps.complete);
-- so do we. NULL: a step stored by an older xprosql, kept.
steps AS MATERIALIZED (
    SELECT * FROM every_step WHERE complete IS NOT false
),
async_ops AS MATERIALIZED (
-- @include async.async_ops
),
memory_bound AS MATERIALIZED (
-- @include ops.memory_bound
),
-- The roofs the roofline uses (one definition of each peak).
peaks AS (
-- @include ops._peaks
),
step_devices AS (
    SELECT DISTINCT profile_id, device_id, device_kind FROM steps
),
-- Host events that are collectives without being XLA ops (gloo:all_reduce annotations, c10d:: ops).
-- Every distinct event name of the profiles with steps, read once: the regexes below run per name, not per event.
-- Each distinct name classified once, here: a filter on xprosql_collective in a reader would be pushed below the
-- DISTINCT and run its regular expressions on every event (3.4 s of 7 over 100 TPU profiles).
event_names AS MATERIALIZED (
    SELECT name, category, xprosql_collective(name, category) AS collective
    FROM (SELECT DISTINCT name, category FROM events WHERE profile_id IN (SELECT profile_id FROM step_devices))
),
host_collectives AS (
    SELECT DISTINCT name FROM event_names WHERE collective IS NOT NULL
),
op_class AS (
    SELECT profile_id, device_kind, program_id, op, input_shapes, input_dtypes,
        CASE classification WHEN 'compute-bound' THEN 'compute_bound' WHEN 'memory-bound' THEN 'memory_bound' END AS cat
    FROM memory_bound
    WHERE row_kind = 'op' AND classification IN ('compute-bound', 'memory-bound')
),
-- The ops that keep each device busy (as in steps), with what they are.
device_ops AS (
    SELECT e.profile_id, e.device_id, 'tpu' AS device_kind, e.program_id, coalesce(e.hlo_op, e.name) AS op,
        NULL AS input_shapes, NULL AS input_dtypes, e.category, NULL AS kernel, false AS blocking, e.start_ps, e.start_ps + e.dur_ps AS end_ps, e.flops, e.bytes_accessed
    FROM events AS e
    JOIN step_devices AS sd USING (profile_id, device_id)
    JOIN tracks AS t USING (profile_id, device_id, track_id)
    WHERE sd.device_kind = 'tpu' AND t.name = 'XLA Ops' AND e.start_ps IS NOT NULL
    UNION ALL
    -- A PyTorch kernel counts as the op that launched it (framework_op_kernels, as in the roofline).
    SELECT k.profile_id, k.device_id, 'gpu', e.program_id, coalesce(e.hlo_op, f.op, e.name), f.input_shapes, f.input_dtypes,
        'kernel', k.name, false,
        k.start_ps, k.start_ps + k.dur_ps, coalesce(e.flops, f.flops), coalesce(e.bytes_accessed, f.bytes_accessed)
    FROM kernels AS k
    JOIN step_devices AS sd USING (profile_id, device_id)
    JOIN events AS e USING (profile_id, event_id)
    LEFT JOIN framework_op_kernels AS f USING (profile_id, event_id)
    WHERE k.start_ps IS NOT NULL
    UNION ALL
    SELECT m.profile_id, m.device_id, 'gpu', NULL, NULL, NULL, NULL, 'memcpy', NULL, false, m.start_ps, m.start_ps + m.dur_ps, NULL, NULL
    FROM memcpys AS m
    JOIN step_devices AS sd USING (profile_id, device_id)
    WHERE m.start_ps IS NOT NULL
    UNION ALL
    -- An XLA:CPU op runs on its device's thread: a collective there blocks it until its peers arrive.
    SELECT e.profile_id, e.device_id, 'cpu', e.program_id, coalesce(e.hlo_op, e.name), NULL, NULL, e.category, NULL,
        e.hlo_op IS NOT NULL,
        e.start_ps, e.start_ps + e.dur_ps, e.flops, e.bytes_accessed
    FROM events AS e
    JOIN step_devices AS sd USING (profile_id, device_id)
    WHERE sd.device_kind = 'host' AND e.start_ps IS NOT NULL
      AND (e.hlo_op IS NOT NULL
           OR e.name IN (SELECT name FROM host_collectives)
           OR (e.category = 'cpu_op' AND NOT EXISTS (
            SELECT 1 FROM events AS h WHERE h.profile_id = e.profile_id AND h.device_id = e.device_id AND h.hlo_op IS NOT NULL)))
),
-- What kind of collective each distinct op is (XLA ops by their category or HLO opcode), once per name.
op_kinds AS (
    SELECT profile_id, program_id, op, category, kernel,
        xprosql_collective(coalesce(kernel, op), coalesce(category, opcode)) AS collective
    FROM (
        SELECT DISTINCT o.profile_id, o.program_id, o.op, o.category, o.kernel, h.opcode
        FROM device_ops AS o
        LEFT JOIN (SELECT DISTINCT profile_id, program_id, hlo_op, opcode FROM hlo_ops) AS h
          ON h.profile_id = o.profile_id AND h.program_id = o.program_id AND h.hlo_op = o.op
    )
),
op_intervals AS (
    SELECT o.profile_id, o.device_id, o.start_ps, o.end_ps,
        CASE
            -- async start / done ops: their windows below say what they wait for
            WHEN o.device_kind = 'tpu' AND (regexp_matches(o.op, '-(start|done)(\.[0-9]+)?$')
                 OR regexp_matches(o.op, '^(send|recv)(\.[0-9]+)?$')) THEN NULL
            WHEN k.collective IS NOT NULL AND o.blocking THEN 'blocking_collective'
            WHEN k.collective IS NOT NULL THEN 'collective'
            WHEN o.category = 'memcpy' THEN 'dma'
            WHEN o.device_kind = 'tpu' AND (o.category IN ('infeed', 'outfeed') OR regexp_matches(o.op, '^(infeed|outfeed)')) THEN 'input'
            ELSE coalesce(c.cat, 'other_compute')
        END AS cat
    FROM device_ops AS o
    LEFT JOIN op_kinds AS k
      ON k.profile_id = o.profile_id AND k.program_id IS NOT DISTINCT FROM o.program_id
     AND k.op IS NOT DISTINCT FROM o.op AND k.category IS NOT DISTINCT FROM o.category
     AND k.kernel IS NOT DISTINCT FROM o.kernel
    LEFT JOIN op_class AS c
      ON c.profile_id = o.profile_id AND c.device_kind = o.device_kind
     AND c.program_id IS NOT DISTINCT FROM o.program_id AND c.op = o.op
     AND c.input_shapes IS NOT DISTINCT FROM o.input_shapes AND c.input_dtypes IS NOT DISTINCT FROM o.input_dtypes
),
input_names AS (
    SELECT DISTINCT name FROM event_names WHERE regexp_matches(name, $input_events)
),
input_events AS (
    SELECT DISTINCT e.profile_id, e.start_ps, e.start_ps + e.dur_ps AS end_ps
    FROM events AS e
    JOIN devices AS d USING (profile_id, device_id)
    WHERE d.kind IN ('host', 'cpu') AND e.start_ps IS NOT NULL AND e.dur_ps > 0
      AND e.profile_id IN (SELECT profile_id FROM step_devices)
      AND e.name IN (SELECT name FROM input_names)
),
intervals AS (
    SELECT profile_id, device_id, cat, start_ps, end_ps FROM op_intervals WHERE cat IS NOT NULL
    UNION ALL
    -- TPU async windows (GPU copies and NCCL kernels are ops above)
    SELECT profile_id, device_id,
        CASE kind WHEN 'host_offload' THEN 'host_offload' WHEN 'copy' THEN 'dma' ELSE 'collective' END,
        start_ps, end_ps
    FROM async_ops
    WHERE device_kind = 'tpu' AND paired
    UNION ALL
    -- GPU: from the launching call's start to the op's start
    SELECT g.profile_id, g.device_id, 'launch', a.start_ps, g.start_ps
    FROM (
        SELECT profile_id, device_id, correlation_id, start_ps FROM kernels
        UNION ALL
        SELECT profile_id, device_id, correlation_id, start_ps FROM memcpys
    ) AS g
    JOIN step_devices USING (profile_id, device_id)
    JOIN api_calls AS a USING (profile_id, correlation_id)
    WHERE a.start_ps < g.start_ps
    UNION ALL
    -- host input reading, for every busy device of the profile
    SELECT sd.profile_id, sd.device_id, 'input', i.start_ps, i.end_ps
    FROM input_events AS i
    JOIN step_devices AS sd USING (profile_id)
),
-- Sweep: every interval edge and step edge is a point; between two points the
-- set of open categories is constant, and the first open one names the segment.
points AS (
    SELECT profile_id, device_id, start_ps AS t, cat, 1 AS delta FROM intervals WHERE end_ps > start_ps
    UNION ALL
    SELECT profile_id, device_id, end_ps, cat, -1 FROM intervals WHERE end_ps > start_ps
    UNION ALL
    SELECT profile_id, device_id, start_ps, NULL, 0 FROM steps
    UNION ALL
    SELECT profile_id, device_id, end_ps, NULL, 0 FROM steps
),
-- Open counts of eight categories travel packed in one HUGEINT, 16 bits each (ops
-- and windows open at once on one device stay far below 2^15), so one running sum
-- carries them all; launches, which can queue by the thousand, count on their own.
deltas AS (
    SELECT profile_id, device_id, t,
        sum(delta * (CAST(1 AS HUGEINT) << (16 * CASE cat
            WHEN 'compute_bound' THEN 0 WHEN 'memory_bound' THEN 1 WHEN 'other_compute' THEN 2
            WHEN 'collective' THEN 3 WHEN 'host_offload' THEN 4 WHEN 'dma' THEN 5 WHEN 'input' THEN 6
            WHEN 'blocking_collective' THEN 7 END)))
            FILTER (WHERE cat IS NOT NULL AND cat <> 'launch') AS packed_delta,
        sum(delta) FILTER (WHERE cat = 'launch') AS launch_delta
    FROM points
    GROUP BY profile_id, device_id, t
),
running AS (
    SELECT profile_id, device_id, t AS seg_start,
        lead(t) OVER run_order AS seg_end,
        sum(coalesce(packed_delta, 0)) OVER run_order AS open_packed,
        sum(coalesce(launch_delta, 0)) OVER run_order AS open_launches
    FROM deltas
    WINDOW run_order AS (PARTITION BY profile_id, device_id ORDER BY t ROWS UNBOUNDED PRECEDING)
),
segments AS (
    SELECT profile_id, device_id, seg_start, seg_end,
        -- the first open category, in priority order
        CASE
            WHEN (open_packed >> 112) & 65535 > 0 THEN 'exposed_collective'
            WHEN (open_packed >> 0) & 65535 > 0 THEN 'compute_bound'
            WHEN (open_packed >> 16) & 65535 > 0 THEN 'memory_bound'
            WHEN (open_packed >> 32) & 65535 > 0 THEN 'other_compute'
            WHEN (open_packed >> 48) & 65535 > 0 THEN 'exposed_collective'
            WHEN (open_packed >> 64) & 65535 > 0 THEN 'exposed_host_offload'
            WHEN (open_packed >> 80) & 65535 > 0 THEN 'exposed_dma'
            WHEN open_launches > 0 THEN 'launch_overhead'
            WHEN (open_packed >> 96) & 65535 > 0 THEN 'input_wait'
        END AS cat
    FROM running
    WHERE seg_end > seg_start
),
step_segments AS (
    SELECT s.*, w.step_index,
        -- is there device work later in this step? then an idle gap is a wait for the host (a device's segments
        -- start at distinct times: later is after the start of the step's last work)
        CASE WHEN s.seg_start < max(CASE WHEN s.cat IS NOT NULL AND s.cat NOT IN ('launch_overhead', 'input_wait')
                                         THEN s.seg_start END) OVER (PARTITION BY s.profile_id, s.device_id, w.step_index)
             THEN 1 ELSE 0 END AS work_follows
    FROM segments AS s
    ASOF JOIN steps AS w
      ON s.profile_id = w.profile_id AND s.device_id = w.device_id AND s.seg_start >= w.start_ps
    WHERE s.seg_start < w.end_ps
),
step_totals AS (
    SELECT profile_id, device_id, step_index,
        sum(seg_end - seg_start) FILTER (WHERE cat = 'compute_bound') AS compute_bound_ps,
        sum(seg_end - seg_start) FILTER (WHERE cat = 'memory_bound') AS memory_bound_ps,
        sum(seg_end - seg_start) FILTER (WHERE cat = 'other_compute') AS other_compute_ps,
        sum(seg_end - seg_start) FILTER (WHERE cat = 'exposed_collective') AS exposed_collective_ps,
        sum(seg_end - seg_start) FILTER (WHERE cat = 'exposed_host_offload') AS exposed_host_offload_ps,
        sum(seg_end - seg_start) FILTER (WHERE cat = 'exposed_dma') AS exposed_dma_ps,
        sum(seg_end - seg_start) FILTER (WHERE cat = 'launch_overhead') AS launch_overhead_ps,
        sum(seg_end - seg_start) FILTER (WHERE cat = 'input_wait') AS input_wait_ps,
        sum(seg_end - seg_start) FILTER (WHERE cat IS NULL AND work_follows = 1) AS host_wait_ps,
        sum(seg_end - seg_start) FILTER (WHERE cat IS NULL AND coalesce(work_follows, 0) = 0) AS idle_ps
    FROM step_segments
    GROUP BY ALL
),
step_costs AS (
    SELECT o.profile_id, o.device_id, w.step_index, sum(o.flops) AS flops, sum(o.bytes_accessed) AS bytes_accessed
    FROM device_ops AS o
    ASOF JOIN steps AS w
      ON o.profile_id = w.profile_id AND o.device_id = w.device_id AND o.start_ps >= w.start_ps
    WHERE o.start_ps < w.end_ps AND (o.flops IS NOT NULL OR o.bytes_accessed IS NOT NULL)
    GROUP BY ALL
),
step_rows AS (
    SELECT
        w.profile_id, w.device_id, w.device, w.device_kind, w.step_index, w.step, w.source,
        1 AS steps, 1 AS devices, w.start_ps, w.end_ps, w.wall_ps AS step_ps, w.busy_ps,
        CAST(coalesce(t.compute_bound_ps, 0) AS BIGINT) AS compute_bound_ps,
        CAST(coalesce(t.memory_bound_ps, 0) AS BIGINT) AS memory_bound_ps,
        CAST(coalesce(t.other_compute_ps, 0) AS BIGINT) AS other_compute_ps,
        CAST(coalesce(t.exposed_collective_ps, 0) AS BIGINT) AS exposed_collective_ps,
        CAST(coalesce(t.exposed_host_offload_ps, 0) AS BIGINT) AS exposed_host_offload_ps,
        CAST(coalesce(t.exposed_dma_ps, 0) AS BIGINT) AS exposed_dma_ps,
        CAST(coalesce(t.launch_overhead_ps, 0) AS BIGINT) AS launch_overhead_ps,
        CAST(coalesce(t.input_wait_ps, 0) AS BIGINT) AS input_wait_ps,
        CAST(coalesce(t.host_wait_ps, 0) AS BIGINT) AS host_wait_ps,
        CAST(coalesce(t.idle_ps, 0) AS BIGINT) AS idle_ps,
        CAST(c.flops AS DOUBLE) AS flops, CAST(c.bytes_accessed AS DOUBLE) AS bytes_accessed,
        pk.peak_flops_per_s * w.wall_ps / 1e12 AS flop_capacity,
        pk.peak_hbm_bytes_per_s * w.wall_ps / 1e12 AS byte_capacity
    FROM steps AS w
    LEFT JOIN (SELECT profile_id, CASE WHEN device_kind = 'cpu' THEN 'host' ELSE device_kind END AS device_kind,
                      peak_flops_per_s, peak_hbm_bytes_per_s FROM peaks) AS pk USING (profile_id, device_kind)
    LEFT JOIN step_totals AS t USING (profile_id, device_id, step_index)
    LEFT JOIN step_costs AS c USING (profile_id, device_id, step_index)
)
SELECT * FROM step_rows
ORDER BY profile_id, device_id, step_index
