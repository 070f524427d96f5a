-- bottlenecks: where each step's time goes on each device, and the one label
-- that names what holds it back; per step and per profile, so thousands of
-- profiles can be ranked by any column in one query.
--
-- Every instant of a step on a device gets exactly one category, the first of
-- these that applies (so the categories sum to the step's wall time):
--   compute_bound_ps         an op runs that the roofline calls compute-bound
--   memory_bound_ps          an op runs that the roofline calls memory-bound (HBM, VMEM, CMEM)
--   other_compute_ps         an op runs that has no cost data or no known peaks (most GPU kernels of PyTorch traces)
--   exposed_collective_ps    no compute runs, a collective does: a synchronous collective op,
--                            an async collective window (TPU), an NCCL kernel (GPU)
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
-- The primary bottleneck is the category with the largest share of step time among those that
-- qualify: compute_bound, memory_bound and device_compute (other_compute_ps) always do;
-- collective_bound when exposed collectives reach $collective_bound_share; host_offload_bound or
-- data_transfer_bound (whichever of the two is larger, with their summed share) when exposed copies
-- reach $data_transfer_bound_share; input_bound at $input_bound_share; launch_bound at
-- $launch_bound_share; host_bound at $host_bound_share; idle at $idle_share (XProf's thresholds).
-- Nothing qualifies: the largest category.
--
-- Parameters:
--   $input_events               VARCHAR  regex on host event names that read input (default: '(IteratorGetNext|^Iterator::|InfeedEnqueue|TransferToInfeed|enumerate\(DataLoader\)|DataLoaderIter)')
--   $collective_bound_share     DOUBLE   exposed collectives share that makes a step collective-bound; XProf (default: 0.3)
--   $data_transfer_bound_share  DOUBLE   exposed copy share that makes a step data-transfer-bound; XProf (default: 0.3)
--   $input_bound_share          DOUBLE   input wait share that makes a step highly input-bound; XProf (default: 0.2)
--   $input_moderate_share       DOUBLE   input wait share of a moderately input-bound step; XProf (default: 0.05)
--   $launch_bound_share         DOUBLE   launch overhead share that makes a step launch-bound (high); XProf (default: 0.15)
--   $launch_moderate_share      DOUBLE   launch overhead share of moderate launch overhead; XProf (default: 0.03)
--   $collective_high_share      DOUBLE   exposed collectives share reported as high; XProf (default: 0.15)
--   $collective_moderate_share  DOUBLE   exposed collectives share reported as moderate; XProf (default: 0.03)
--   $host_bound_share           DOUBLE   host wait share that makes a step host-bound; XProf (default: 0.5)
--   $idle_share                 DOUBLE   idle share that makes idle the bottleneck; XProf's TensorCore idle (default: 0.1)
--
-- Columns:
--   scope                      step (one step on one device) or profile (all steps and devices of the profile)
--   profile_id                 profile (profiles.profile_id)
--   device_id                  devices.device_id; NULL on profile rows
--   device                     device name; NULL on profile rows
--   device_kind                tpu, gpu or host; profile rows: the kinds, joined by +
--   step_index                 steps.step_index; NULL on profile rows
--   step                       steps.step (the recorded step number)
--   source                     steps.source (profile rows: the sources, joined by +)
--   steps                      steps in the row (1 on step rows; profile rows: step rows summed)
--   devices                    devices in the row
--   start_ps                   step start (profile rows: the earliest), ps
--   end_ps                     step end (profile rows: the latest), ps
--   step_ps                    wall time (profile rows: summed over steps and devices), ps
--   busy_ps                    time some op of the device runs (steps.busy_ps), ps
--   compute_bound_ps             category time (see above), ps
--   memory_bound_ps              category time (see above), ps
--   other_compute_ps             category time (see above), ps
--   exposed_collective_ps        category time (see above), ps
--   exposed_host_offload_ps      category time (see above), ps
--   exposed_dma_ps               category time (see above), ps
--   launch_overhead_ps           category time (see above), ps
--   input_wait_ps                category time (see above), ps
--   host_wait_ps                 category time (see above), ps
--   idle_ps                      category time (see above), ps
--   (the ten *_ps columns sum to step_ps)
--   compute_bound_share          compute_bound_ps / step_ps
--   memory_bound_share           memory_bound_ps / step_ps
--   other_compute_share          other_compute_ps / step_ps
--   exposed_collective_share     exposed_collective_ps / step_ps
--   exposed_host_offload_share   exposed_host_offload_ps / step_ps
--   exposed_dma_share            exposed_dma_ps / step_ps
--   launch_overhead_share        launch_overhead_ps / step_ps
--   input_wait_share             input_wait_ps / step_ps
--   host_wait_share              host_wait_ps / step_ps
--   idle_share                   idle_ps / step_ps
--   flops                      FLOPs of the ops starting in the step (events.flops)
--   bytes_accessed             bytes of the ops starting in the step (events.bytes_accessed)
--   flop_utilization           flops / (device peak FLOP/s x step time); NULL without peaks or FLOPs
--   hbm_utilization            bytes_accessed / (device peak HBM bytes/s x step time)
--   primary_bottleneck         compute_bound, memory_bound, device_compute, collective_bound, host_offload_bound,
--                              data_transfer_bound, input_bound, launch_bound, host_bound or idle
--   primary_share              the primary's share of step_ps (host_offload_bound / data_transfer_bound: both copy shares)
--   primary_ps                 the primary's time, ps
--   runner_up                  the next largest category (by the same names), for context
--   runner_up_share            its share
--   input_level                high / moderate / low: input_wait_share against $input_bound_share, $input_moderate_share
--   launch_level               high / moderate / low: launch_overhead_share against $launch_bound_share, $launch_moderate_share
--   collective_level           high / moderate / low: exposed_collective_share against $collective_high_share, $collective_moderate_share
--   evidence                   one line a person can read: the primary, its share and time, the runner-up
WITH steps AS MATERIALIZED (
-- @include steps
),
async_ops AS MATERIALIZED (
-- @include async_ops
),
memory_bound AS MATERIALIZED (
-- @include memory_bound
),
params AS (
    SELECT
        CAST($collective_bound_share AS DOUBLE) AS collective_bound,
        CAST($data_transfer_bound_share AS DOUBLE) AS transfer_bound,
        CAST($input_bound_share AS DOUBLE) AS input_high,
        CAST($input_moderate_share AS DOUBLE) AS input_moderate,
        CAST($launch_bound_share AS DOUBLE) AS launch_high,
        CAST($launch_moderate_share AS DOUBLE) AS launch_moderate,
        CAST($collective_high_share AS DOUBLE) AS collective_high,
        CAST($collective_moderate_share AS DOUBLE) AS collective_moderate,
        CAST($host_bound_share AS DOUBLE) AS host_bound,
        CAST($idle_share AS DOUBLE) AS idle_bound
),
step_devices AS (
    SELECT DISTINCT profile_id, device_id, device_kind FROM steps
),
op_class AS (
    SELECT profile_id, device_kind, program_id, op,
        CASE classification WHEN 'compute-bound' THEN 'compute_bound' WHEN 'memory-bound' THEN 'memory_bound' END AS cat
    FROM memory_bound
    WHERE row_kind = 'op' AND classification IN ('compute-bound', 'memory-bound')
),
-- The ops that keep each device busy (as in steps), with what they are.
device_ops AS (
    SELECT e.profile_id, e.device_id, 'tpu' AS device_kind, e.program_id, coalesce(e.hlo_op, e.name) AS op,
        e.category, e.start_ps, e.start_ps + e.dur_ps AS end_ps, e.flops, e.bytes_accessed
    FROM events AS e
    JOIN step_devices AS sd USING (profile_id, device_id)
    JOIN tracks AS t USING (profile_id, device_id, track_id)
    WHERE sd.device_kind = 'tpu' AND t.name = 'XLA Ops' AND e.start_ps IS NOT NULL
    UNION ALL
    SELECT k.profile_id, k.device_id, 'gpu', e.program_id, coalesce(e.hlo_op, e.name),
        CASE WHEN k.name LIKE 'nccl%' THEN 'nccl' ELSE 'kernel' END,
        k.start_ps, k.start_ps + k.dur_ps, e.flops, e.bytes_accessed
    FROM kernels AS k
    JOIN step_devices AS sd USING (profile_id, device_id)
    JOIN events AS e USING (profile_id, event_id)
    WHERE k.start_ps IS NOT NULL
    UNION ALL
    SELECT m.profile_id, m.device_id, 'gpu', NULL, NULL, 'memcpy', m.start_ps, m.start_ps + m.dur_ps, NULL, NULL
    FROM memcpys AS m
    JOIN step_devices AS sd USING (profile_id, device_id)
    WHERE m.start_ps IS NOT NULL
    UNION ALL
    SELECT e.profile_id, e.device_id, 'cpu', e.program_id, coalesce(e.hlo_op, e.name), e.category,
        e.start_ps, e.start_ps + e.dur_ps, e.flops, e.bytes_accessed
    FROM events AS e
    JOIN step_devices AS sd USING (profile_id, device_id)
    WHERE sd.device_kind = 'host' AND e.start_ps IS NOT NULL
      AND (e.hlo_op IS NOT NULL OR (e.category = 'cpu_op' AND NOT EXISTS (
            SELECT 1 FROM events AS h WHERE h.profile_id = e.profile_id AND h.device_id = e.device_id AND h.hlo_op IS NOT NULL)))
),
op_intervals AS (
    SELECT o.profile_id, o.device_id, o.start_ps, o.end_ps,
        CASE
            -- async start / done ops: their windows below say what they wait for
            WHEN o.device_kind = 'tpu' AND (regexp_matches(o.op, '-(start|done)(\.[0-9]+)?$')
                 OR regexp_matches(o.op, '^(send|recv)(\.[0-9]+)?$')) THEN NULL
            WHEN o.category IN ('nccl') THEN 'collective'
            WHEN o.category = 'memcpy' THEN 'dma'
            WHEN o.device_kind = 'tpu' AND (o.category IN ('infeed', 'outfeed') OR regexp_matches(o.op, '^(infeed|outfeed)')) THEN 'input'
            WHEN o.device_kind = 'tpu' AND (
                 regexp_replace(o.op, '\.[0-9]+$', '') IN ('all-reduce', 'all-gather', 'reduce-scatter', 'collective-permute',
                                                           'all-to-all', 'collective-broadcast', 'ragged-all-to-all')
                 OR o.category IN ('all-reduce', 'all-gather', 'reduce-scatter', 'collective-permute', 'all-to-all')) THEN 'collective'
            ELSE coalesce(c.cat, 'other_compute')
        END AS cat
    FROM device_ops AS o
    LEFT JOIN op_class AS c
      ON c.profile_id = o.profile_id AND c.device_kind = o.device_kind
     AND c.program_id IS NOT DISTINCT FROM o.program_id AND c.op = o.op
),
-- The regex runs once per distinct name, not once per event.
input_names AS (
    SELECT name FROM (SELECT DISTINCT name FROM events WHERE profile_id IN (SELECT profile_id FROM step_devices))
    WHERE regexp_matches(name, $input_events)
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
-- Open counts of seven categories travel packed in one HUGEINT, 16 bits each (ops
-- and windows open at once on one device stay far below 2^15), so one running sum
-- carries them all; launches, which can queue by the thousand, count on their own.
deltas AS (
    SELECT profile_id, device_id, t,
        sum(delta * (CAST(1 AS HUGEINT) << (16 * CASE cat
            WHEN 'compute_bound' THEN 0 WHEN 'memory_bound' THEN 1 WHEN 'other_compute' THEN 2
            WHEN 'collective' THEN 3 WHEN 'host_offload' THEN 4 WHEN 'dma' THEN 5 WHEN 'input' THEN 6 END)))
            FILTER (WHERE cat IS NOT NULL AND cat <> 'launch') AS packed_delta,
        sum(delta) FILTER (WHERE cat = 'launch') AS launch_delta
    FROM points
    GROUP BY profile_id, device_id, t
),
running AS (
    SELECT profile_id, device_id, t AS seg_start,
        lead(t) OVER run_order AS seg_end,
        sum(coalesce(packed_delta, 0)) OVER run_order_rows AS open_packed,
        sum(coalesce(launch_delta, 0)) OVER run_order_rows AS open_launches
    FROM deltas
    WINDOW run_order AS (PARTITION BY profile_id, device_id ORDER BY t),
           run_order_rows AS (PARTITION BY profile_id, device_id ORDER BY t ROWS UNBOUNDED PRECEDING)
),
segments AS (
    SELECT profile_id, device_id, seg_start, seg_end,
        -- the first open category, in priority order
        CASE
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
        -- is there device work later in this step? then an idle gap is a wait for the host
        max(CASE WHEN s.cat IS NOT NULL AND s.cat NOT IN ('launch_overhead', 'input_wait') THEN 1 ELSE 0 END) OVER (
            PARTITION BY s.profile_id, s.device_id, w.step_index ORDER BY s.seg_start
            ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS work_follows
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
        'step' AS scope, w.profile_id, w.device_id, w.device, w.device_kind, w.step_index, w.step, w.source,
        1 AS steps, 1 AS devices, w.start_ps, w.end_ps, w.wall_ps AS step_ps, w.busy_ps,
        coalesce(t.compute_bound_ps, 0) AS compute_bound_ps,
        coalesce(t.memory_bound_ps, 0) AS memory_bound_ps,
        coalesce(t.other_compute_ps, 0) AS other_compute_ps,
        coalesce(t.exposed_collective_ps, 0) AS exposed_collective_ps,
        coalesce(t.exposed_host_offload_ps, 0) AS exposed_host_offload_ps,
        coalesce(t.exposed_dma_ps, 0) AS exposed_dma_ps,
        coalesce(t.launch_overhead_ps, 0) AS launch_overhead_ps,
        coalesce(t.input_wait_ps, 0) AS input_wait_ps,
        coalesce(t.host_wait_ps, 0) AS host_wait_ps,
        coalesce(t.idle_ps, 0) AS idle_ps,
        c.flops, c.bytes_accessed,
        d.peak_flops_per_s * w.wall_ps / 1e12 AS flop_capacity,
        d.peak_hbm_bytes_per_s * w.wall_ps / 1e12 AS byte_capacity
    FROM steps AS w
    JOIN devices AS d USING (profile_id, device_id)
    LEFT JOIN step_totals AS t USING (profile_id, device_id, step_index)
    LEFT JOIN step_costs AS c USING (profile_id, device_id, step_index)
),
profile_rows AS (
    SELECT
        'profile' AS scope, profile_id, CAST(NULL AS INTEGER) AS device_id, CAST(NULL AS VARCHAR) AS device,
        string_agg(DISTINCT device_kind, '+' ORDER BY device_kind) AS device_kind,
        CAST(NULL AS BIGINT) AS step_index, CAST(NULL AS BIGINT) AS step,
        string_agg(DISTINCT source, '+' ORDER BY source) AS source,
        sum(steps) AS steps, count(DISTINCT device_id) AS devices, min(start_ps) AS start_ps, max(end_ps) AS end_ps,
        sum(step_ps), sum(busy_ps),
        sum(compute_bound_ps), sum(memory_bound_ps), sum(other_compute_ps), sum(exposed_collective_ps),
        sum(exposed_host_offload_ps), sum(exposed_dma_ps), sum(launch_overhead_ps), sum(input_wait_ps),
        sum(host_wait_ps), sum(idle_ps),
        sum(flops), sum(bytes_accessed), sum(flop_capacity), sum(byte_capacity)
    FROM step_rows
    GROUP BY profile_id
),
all_rows AS (
    SELECT * FROM step_rows
    UNION ALL
    SELECT * FROM profile_rows
),
shares AS (
    SELECT
        r.*,
        r.compute_bound_ps / nullif(r.step_ps, 0) AS compute_bound_share,
        r.memory_bound_ps / nullif(r.step_ps, 0) AS memory_bound_share,
        r.other_compute_ps / nullif(r.step_ps, 0) AS other_compute_share,
        r.exposed_collective_ps / nullif(r.step_ps, 0) AS exposed_collective_share,
        r.exposed_host_offload_ps / nullif(r.step_ps, 0) AS exposed_host_offload_share,
        r.exposed_dma_ps / nullif(r.step_ps, 0) AS exposed_dma_share,
        r.launch_overhead_ps / nullif(r.step_ps, 0) AS launch_overhead_share,
        r.input_wait_ps / nullif(r.step_ps, 0) AS input_wait_share,
        r.host_wait_ps / nullif(r.step_ps, 0) AS host_wait_share,
        r.idle_ps / nullif(r.step_ps, 0) AS idle_share
    FROM all_rows AS r
),
candidates AS (
    SELECT
        s.*,
        [
            {'share': coalesce(compute_bound_share, 0), 'label': 'compute_bound', 'ps': compute_bound_ps, 'ok': true},
            {'share': coalesce(memory_bound_share, 0), 'label': 'memory_bound', 'ps': memory_bound_ps, 'ok': true},
            {'share': coalesce(other_compute_share, 0), 'label': 'device_compute', 'ps': other_compute_ps, 'ok': true},
            {'share': coalesce(exposed_collective_share, 0), 'label': 'collective_bound', 'ps': exposed_collective_ps,
             'ok': coalesce(exposed_collective_share, 0) >= x.collective_bound},
            {'share': coalesce(exposed_host_offload_share + exposed_dma_share, 0),
             'label': CASE WHEN exposed_host_offload_ps >= exposed_dma_ps THEN 'host_offload_bound' ELSE 'data_transfer_bound' END,
             'ps': exposed_host_offload_ps + exposed_dma_ps,
             'ok': coalesce(exposed_host_offload_share + exposed_dma_share, 0) >= x.transfer_bound},
            {'share': coalesce(input_wait_share, 0), 'label': 'input_bound', 'ps': input_wait_ps,
             'ok': coalesce(input_wait_share, 0) >= x.input_high},
            {'share': coalesce(launch_overhead_share, 0), 'label': 'launch_bound', 'ps': launch_overhead_ps,
             'ok': coalesce(launch_overhead_share, 0) >= x.launch_high},
            {'share': coalesce(host_wait_share, 0), 'label': 'host_bound', 'ps': host_wait_ps,
             'ok': coalesce(host_wait_share, 0) >= x.host_bound},
            {'share': coalesce(idle_share, 0), 'label': 'idle', 'ps': idle_ps,
             'ok': coalesce(idle_share, 0) >= x.idle_bound}
        ] AS ranked
    FROM shares AS s
    CROSS JOIN params AS x
),
picked AS (
    SELECT
        c.* EXCLUDE (ranked),
        coalesce(
            list_reverse_sort(list_filter(ranked, lambda r: r.ok))[1],
            list_reverse_sort(ranked)[1]
        ) AS top,
        list_reverse_sort(ranked) AS ordered
    FROM candidates AS c
),
labelled AS (
    SELECT
        p.* EXCLUDE (top, ordered),
        p.top.label AS primary_bottleneck,
        p.top.share AS primary_share,
        CAST(p.top.ps AS BIGINT) AS primary_ps,
        list_filter(p.ordered, lambda r: r.label <> p.top.label)[1] AS second
    FROM picked AS p
)
SELECT
    l.scope, l.profile_id, l.device_id, l.device, l.device_kind, l.step_index, l.step, l.source,
    CAST(l.steps AS BIGINT) AS steps, CAST(l.devices AS BIGINT) AS devices, l.start_ps, l.end_ps,
    CAST(l.step_ps AS BIGINT) AS step_ps, CAST(l.busy_ps AS BIGINT) AS busy_ps,
    CAST(l.compute_bound_ps AS BIGINT) AS compute_bound_ps,
    CAST(l.memory_bound_ps AS BIGINT) AS memory_bound_ps,
    CAST(l.other_compute_ps AS BIGINT) AS other_compute_ps,
    CAST(l.exposed_collective_ps AS BIGINT) AS exposed_collective_ps,
    CAST(l.exposed_host_offload_ps AS BIGINT) AS exposed_host_offload_ps,
    CAST(l.exposed_dma_ps AS BIGINT) AS exposed_dma_ps,
    CAST(l.launch_overhead_ps AS BIGINT) AS launch_overhead_ps,
    CAST(l.input_wait_ps AS BIGINT) AS input_wait_ps,
    CAST(l.host_wait_ps AS BIGINT) AS host_wait_ps,
    CAST(l.idle_ps AS BIGINT) AS idle_ps,
    l.compute_bound_share, l.memory_bound_share, l.other_compute_share, l.exposed_collective_share,
    l.exposed_host_offload_share, l.exposed_dma_share, l.launch_overhead_share, l.input_wait_share,
    l.host_wait_share, l.idle_share,
    CAST(l.flops AS DOUBLE) AS flops, CAST(l.bytes_accessed AS DOUBLE) AS bytes_accessed,
    l.flops / nullif(l.flop_capacity, 0) AS flop_utilization,
    l.bytes_accessed / nullif(l.byte_capacity, 0) AS hbm_utilization,
    l.primary_bottleneck, l.primary_share, l.primary_ps,
    l.second.label AS runner_up, l.second.share AS runner_up_share,
    CASE WHEN l.input_wait_share >= x.input_high THEN 'high' WHEN l.input_wait_share >= x.input_moderate THEN 'moderate' ELSE 'low' END AS input_level,
    CASE WHEN l.launch_overhead_share >= x.launch_high THEN 'high' WHEN l.launch_overhead_share >= x.launch_moderate THEN 'moderate' ELSE 'low' END AS launch_level,
    CASE WHEN l.exposed_collective_share >= x.collective_high THEN 'high' WHEN l.exposed_collective_share >= x.collective_moderate THEN 'moderate' ELSE 'low' END AS collective_level,
    printf('%s: %.1f%% of %s time (%s of %s); next %s %.1f%%',
        l.primary_bottleneck, 100 * coalesce(l.primary_share, 0),
        CASE WHEN l.scope = 'step' THEN 'step' ELSE 'device' END,
        -- seconds from 1 s on, else milliseconds
        CASE WHEN l.step_ps >= 1e12 THEN printf('%.3f s', coalesce(l.primary_ps, 0) / 1e12) ELSE printf('%.3f ms', coalesce(l.primary_ps, 0) / 1e9) END,
        CASE WHEN l.step_ps >= 1e12 THEN printf('%.3f s', l.step_ps / 1e12) ELSE printf('%.3f ms', l.step_ps / 1e9) END,
        coalesce(l.second.label, '-'), 100 * coalesce(l.second.share, 0)) AS evidence
FROM labelled AS l
CROSS JOIN params AS x
ORDER BY l.profile_id, l.scope DESC, l.device_id, l.step_index
