-- steps.bottlenecks: where each step's time goes on each device, and the one label
-- that names what holds it back; per step and per profile, so thousands of
-- profiles can be ranked by any column in one query.
--
-- Built on bottleneck_steps (included below, with its parameters and its
-- category definitions), which says where each step's time goes; this file adds the
-- per-profile rows, the shares and the labels.
--
-- The primary bottleneck is the category with the largest share of step time among those that
-- qualify: compute_bound, memory_bound and device_compute (other_compute_ps) always do;
-- collective_bound when exposed collectives reach $collective_bound_share; host_offload_bound or
-- data_transfer_bound (whichever of the two is larger, with their summed share) when exposed copies
-- reach $data_transfer_bound_share; input_bound at $input_bound_share; launch_bound at
-- $launch_bound_share; host_bound at $host_bound_share; idle at $idle_share (XProf's thresholds).
-- Nothing qualifies: the largest category.
--
-- Needs: a device that runs ops: TPU XLA Ops, GPU kernels or copies, or on a host without accelerators XLA ops or PyTorch cpu_ops
--
-- Parameters:
--   $collective_bound_share     DOUBLE   exposed collectives share that makes a step collective-bound; XProf [range: 0..1] (default: 0.3)
--   $data_transfer_bound_share  DOUBLE   exposed copy share that makes a step data-transfer-bound; XProf [range: 0..1] (default: 0.3)
--   $input_bound_share          DOUBLE   input wait share that makes a step highly input-bound; XProf [range: 0..1] (default: 0.2)
--   $input_moderate_share       DOUBLE   input wait share of a moderately input-bound step; XProf [range: 0..1] (default: 0.05)
--   $launch_bound_share         DOUBLE   launch overhead share that makes a step launch-bound (high); XProf [range: 0..1] (default: 0.15)
--   $launch_moderate_share      DOUBLE   launch overhead share of moderate launch overhead; XProf [range: 0..1] (default: 0.03)
--   $collective_high_share      DOUBLE   exposed collectives share reported as high; XProf [range: 0..1] (default: 0.15)
--   $collective_moderate_share  DOUBLE   exposed collectives share reported as moderate; XProf [range: 0..1] (default: 0.03)
--   $host_bound_share           DOUBLE   host wait share that makes a step host-bound; XProf [range: 0..1] (default: 0.5)
--   $scope                      VARCHAR  step or profile: only those rows; NULL for both [choices: step, profile] (default: NULL)
--   $idle_share                 DOUBLE   idle share that makes idle the bottleneck; XProf's TensorCore idle [range: 0..1] (default: 0.1)
--
-- Passes: $input_events $prefer_async_line $peak_flops_per_s $peak_hbm_bytes_per_s $peak_source (to its includes, with their defaults and meaning)
--
-- Show: scope, profile_id, device, step_index, step_ps, primary_bottleneck, primary_share, runner_up, runner_up_share, evidence
--
-- Columns:
--   scope  VARCHAR  step (one step on one device) or profile (all steps and devices of the profile)
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   device_id  INTEGER  devices.device_id; NULL on profile rows
--   device  VARCHAR  device name; NULL on profile rows
--   device_kind  VARCHAR  tpu, gpu or host; profile rows: the kinds, joined by +
--   step_index  BIGINT  steps.step_index; NULL on profile rows
--   step  BIGINT  steps.step (the recorded step number)
--   source  VARCHAR  steps.source (profile rows: the sources, joined by +)
--   steps  BIGINT  steps in the row (1 on step rows; profile rows: step rows summed)
--   devices  BIGINT  devices in the row
--   start_ps  BIGINT  step start (profile rows: the earliest), ps
--   end_ps  BIGINT  step end (profile rows: the latest), ps
--   step_ps  BIGINT  wall time (profile rows: summed over steps and devices), ps
--   busy_ps  BIGINT  time some op of the device runs (steps.busy_ps), ps
--   compute_bound_ps  BIGINT  category time (see bottleneck_steps), ps
--   memory_bound_ps  BIGINT  category time (see bottleneck_steps), ps
--   other_compute_ps  BIGINT  category time (see bottleneck_steps), ps
--   exposed_collective_ps  BIGINT  category time (see bottleneck_steps), ps
--   exposed_host_offload_ps  BIGINT  category time (see bottleneck_steps), ps
--   exposed_dma_ps  BIGINT  category time (see bottleneck_steps), ps
--   launch_overhead_ps  BIGINT  category time (see bottleneck_steps), ps
--   input_wait_ps  BIGINT  category time (see bottleneck_steps), ps
--   host_wait_ps  BIGINT  category time (see bottleneck_steps), ps
--   idle_ps  BIGINT  category time (see bottleneck_steps), ps
--   (the ten *_ps columns sum to step_ps)
--   compute_bound_share  DOUBLE  compute_bound_ps / step_ps
--   memory_bound_share  DOUBLE  memory_bound_ps / step_ps
--   other_compute_share  DOUBLE  other_compute_ps / step_ps
--   exposed_collective_share  DOUBLE  exposed_collective_ps / step_ps
--   exposed_host_offload_share  DOUBLE  exposed_host_offload_ps / step_ps
--   exposed_dma_share  DOUBLE  exposed_dma_ps / step_ps
--   launch_overhead_share  DOUBLE  launch_overhead_ps / step_ps
--   input_wait_share  DOUBLE  input_wait_ps / step_ps
--   host_wait_share  DOUBLE  host_wait_ps / step_ps
--   idle_share  DOUBLE  idle_ps / step_ps
--   flops  DOUBLE  FLOPs of the ops starting in the step (events.flops)
--   bytes_accessed  DOUBLE  bytes of the ops starting in the step (events.bytes_accessed)
--   flop_capacity  DOUBLE  peak FLOP/s x step time (ops._peaks: the roofline's roof): the FLOPs the devices could do, FLOP
--   byte_capacity  DOUBLE  peak HBM bytes/s x step time: the bytes the devices could move, bytes
--   step_flop_utilization  DOUBLE  flops / flop_capacity, over step time (ops.roofline's flop_utilization is over the ops' own time); NULL without peaks or FLOPs, 0..1
--   step_hbm_utilization  DOUBLE  bytes_accessed / byte_capacity, over step time, 0..1
--   primary_bottleneck  VARCHAR  compute_bound, memory_bound, device_compute, collective_bound, host_offload_bound,
--                              data_transfer_bound, input_bound, launch_bound, host_bound or idle
--   primary_share  DOUBLE  the primary's share of step_ps (host_offload_bound / data_transfer_bound: both copy shares)
--   primary_ps  BIGINT  the primary's time, ps
--   runner_up  VARCHAR  the next largest category (by the same names), for context
--   runner_up_share  DOUBLE  its share
--   input_level  VARCHAR  high / moderate / low: input_wait_share against $input_bound_share, $input_moderate_share
--   launch_level  VARCHAR  high / moderate / low: launch_overhead_share against $launch_bound_share, $launch_moderate_share
--   collective_level  VARCHAR  high / moderate / low: exposed_collective_share against $collective_high_share, $collective_moderate_share
--   evidence  VARCHAR  one line a person can read: the primary, its share and time, the runner-up
WITH step_rows AS (
-- @include steps._bottleneck_steps
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
    SELECT 'step' AS scope, * FROM step_rows
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
    CAST(l.flop_capacity AS DOUBLE) AS flop_capacity, CAST(l.byte_capacity AS DOUBLE) AS byte_capacity,
    l.flops / nullif(l.flop_capacity, 0) AS step_flop_utilization,
    l.bytes_accessed / nullif(l.byte_capacity, 0) AS step_hbm_utilization,
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
WHERE CAST($scope AS VARCHAR) IS NULL OR l.scope = CAST($scope AS VARCHAR)
ORDER BY l.profile_id, l.scope DESC, l.device_id, l.step_index
