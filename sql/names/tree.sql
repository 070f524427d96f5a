-- names.tree: time by the user's own names in PyTorch traces: the tree of record_function
-- annotations and nn.Module calls per profile, with each node's CPU time, the ops and GPU work
-- inside it, their FLOPs and bytes, and the rates and roofline position they give.
--
-- Nodes are paths of names (names._calls): ProfilerStep/forward/Model_0/Block_1/Attn_1/attn_core;
-- ProfilerStep#N is the path's ProfilerStep and gives the step. Sources: `user_annotation` events
-- (record_function, source annotation; ProfilerStep#N, source step) and the `python_function`
-- events "nn.Module: <Class>_<i>" of with_modules=True (source module; PyTorch writes them with
-- the Python tracer, with_stack=True), and the NVTX ranges of xprosql.cupti recordings (source nvtx),
-- nested by time on their thread; a `gpu_user_annotation`
-- adds its GPU-side extent to the record_function of the same External id. With $by_step one row
-- per (node, step), else one per node summed over its steps. Inclusive values hold the names
-- inside; self values what is not in a name inside.
--
-- Ops inside a node: the outermost ops (cpu_op) that start in it, its op time; each GPU kernel,
-- copy and memset counts at the name of the API call that launched it (correlation id), with or
-- without an op around the launch. FLOPs and bytes are those of the outermost ops
-- (torch._op_tree, as framework_ops: the op's own, else the first costed ops down its subtree).
-- Rates divide them by the GPU busy time (the union of the node's GPU work) where it launched
-- some, else by its op time (a CPU trace). The roofline position uses ops._peaks of the device
-- kind that time was spent on (gpu, else cpu: give $peak_flops_per_s and $peak_hbm_bytes_per_s
-- for a CPU).
--
-- Needs: PyTorch (Kineto) traces with user_annotation or nn.Module python_function events, or xprosql.cupti recordings with NVTX ranges
--
-- Parameters:
--   $by_step  BOOLEAN  one row per (node, step); false: one row per node, summed over the steps (default: false)
--
-- Passes: $peak_flops_per_s $peak_hbm_bytes_per_s $peak_source (to ops._peaks, with its defaults and meaning)
--
-- Show: profile_id, path, source, step, calls, cpu_time_ps, cpu_self_ps, op_time_ps, gpu_time_ps, flops, flop_rate, bound_by
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   path  VARCHAR  the node: its names from the root down joined with '/', e.g. ProfilerStep/forward/Model_0/Block_0
--   name  VARCHAR  the node's own name (the path's last component)
--   parent_path  VARCHAR  the path of the node around it; NULL for a root
--   source  VARCHAR  step (ProfilerStep#N), annotation (record_function), module (nn.Module) or nvtx (an NVTX range of a CUPTI recording)
--   depth  BIGINT  names around it (0: a root)
--   step  BIGINT  the step (N of ProfilerStep#N); NULL outside steps and on rows summed over steps
--   steps  BIGINT  steps the row's calls ran in
--   calls  BIGINT  calls of the node
--   cpu_time_ps  BIGINT  CPU time of the calls, including the names inside, ps
--   cpu_time_per_step_ps  BIGINT  cpu_time_ps / steps (the calls outside steps: cpu_time_ps), ps
--   cpu_self_ps  BIGINT  cpu_time_ps less the names directly inside, ps
--   op_time_ps  BIGINT  CPU time of the outermost ops inside, ps
--   self_op_time_ps  BIGINT  op_time_ps of the ops not inside a name inside, ps
--   ops  BIGINT  outermost op calls inside
--   costed_ops  BIGINT  those with cost data
--   gpu_activities  BIGINT  GPU kernels, copies and memsets launched inside
--   gpu_time_ps  BIGINT  their durations summed, ps
--   gpu_busy_ps  BIGINT  per call the union of their intervals, summed over calls, ps
--   self_gpu_time_ps  BIGINT  gpu_time_ps of those not launched in a name inside, ps
--   gpu_annotation_ps  BIGINT  the calls' gpu_user_annotation extent on the GPU, ps; NULL without one
--   flops  DOUBLE  FLOPs of the costed ops inside, FLOP
--   bytes_accessed  DOUBLE  their bytes read and written, bytes
--   rate_time_ps  BIGINT  the time rates divide by: gpu_busy_ps where the node launched GPU work, else op_time_ps, ps
--   flop_rate  DOUBLE  flops / rate_time_ps, FLOP/s
--   memory_bandwidth  DOUBLE  bytes_accessed / rate_time_ps, bytes/s
--   operational_intensity  DOUBLE  flops / bytes_accessed, FLOP/byte
--   device_kind  VARCHAR  the roofline's device kind: gpu where the profile launched GPU work, else cpu
--   peak_flops_per_s  DOUBLE  compute roof (ops._peaks), FLOP/s
--   peak_hbm_bytes_per_s  DOUBLE  memory roof (ops._peaks), bytes/s
--   ridge_point  DOUBLE  peak_flops_per_s / peak_hbm_bytes_per_s, FLOP/byte
--   flop_utilization  DOUBLE  flop_rate / peak_flops_per_s
--   hbm_utilization  DOUBLE  memory_bandwidth / peak_hbm_bytes_per_s
--   bound_by  VARCHAR  compute or HBM: the higher utilization; unknown without costs or peaks
--   roofline_efficiency  DOUBLE  the higher utilization
--   above_roof  BOOLEAN  a utilization above 1: the rate's time misses work the FLOPs or bytes come from
--   above_roof_reason  VARCHAR  why, where above_roof: e.g. kernels replayed from a CUDA graph, which no launch of the node's ops names, so gpu_busy_ps holds too little time
WITH params AS (
    SELECT CAST($by_step AS BOOLEAN) AS by_step
),
calls AS MATERIALIZED (
-- @include names._calls
),
paths AS (
    SELECT c.*, p.path AS parent_path
    FROM calls AS c
    LEFT JOIN calls AS p ON p.profile_id = c.profile_id AND p.event_id = c.parent_id
),
grouped AS (
    SELECT
        c.profile_id, c.path,
        any_value(c.component) AS name,
        any_value(c.parent_path) AS parent_path,
        any_value(c.source) AS source,
        any_value(c.depth) AS depth,
        CASE WHEN pr.by_step THEN c.step END AS step,
        CAST(count(DISTINCT c.step) AS BIGINT) AS steps,
        CAST(count(*) AS BIGINT) AS calls,
        CAST(sum(c.dur_ps) AS BIGINT) AS cpu_time_ps,
        CAST(sum(c.cpu_self_ps) AS BIGINT) AS cpu_self_ps,
        CAST(sum(c.op_ps) AS BIGINT) AS op_time_ps,
        CAST(sum(c.self_op_ps) AS BIGINT) AS self_op_time_ps,
        CAST(sum(c.ops) AS BIGINT) AS ops,
        CAST(sum(c.costed_ops) AS BIGINT) AS costed_ops,
        CAST(sum(c.gpu_activities) AS BIGINT) AS gpu_activities,
        CAST(sum(c.gpu_ps) AS BIGINT) AS gpu_time_ps,
        CAST(sum(c.gpu_busy_ps) AS BIGINT) AS gpu_busy_ps,
        CAST(sum(c.self_gpu_ps) AS BIGINT) AS self_gpu_time_ps,
        CAST(sum(c.gpu_annotation_ps) AS BIGINT) AS gpu_annotation_ps,
        sum(c.flops) AS flops,
        sum(c.bytes_accessed) AS bytes_accessed,
        min(c.start_ps) AS first_start_ps
    FROM paths AS c
    CROSS JOIN params AS pr
    GROUP BY c.profile_id, c.path, CASE WHEN pr.by_step THEN c.step END
),
gpu_profiles AS (
    SELECT profile_id, bool_or(gpu_activities > 0) AS has_gpu FROM calls GROUP BY ALL
),
peaks AS (
-- @include ops._peaks
),
rated AS (
    SELECT
        g.*,
        CASE WHEN gp.has_gpu THEN 'gpu' ELSE 'cpu' END AS device_kind,
        CAST(CASE WHEN g.gpu_busy_ps > 0 THEN g.gpu_busy_ps ELSE g.op_time_ps END AS BIGINT) AS rate_time_ps
    FROM grouped AS g
    JOIN gpu_profiles AS gp USING (profile_id)
),
utilized AS (
    SELECT
        r.*,
        r.flops / (nullif(r.rate_time_ps, 0) * 1e-12) AS flop_rate,
        r.bytes_accessed / (nullif(r.rate_time_ps, 0) * 1e-12) AS memory_bandwidth,
        pk.peak_flops_per_s, pk.peak_hbm_bytes_per_s
    FROM rated AS r
    LEFT JOIN peaks AS pk USING (profile_id, device_kind)
),
bounded AS (
    SELECT
        *,
        flop_rate / peak_flops_per_s AS flop_utilization,
        memory_bandwidth / peak_hbm_bytes_per_s AS hbm_utilization
    FROM utilized
)
SELECT
    profile_id, path, name, parent_path, source, depth, step, steps, calls,
    cpu_time_ps,
    CAST(cpu_time_ps / greatest(steps, 1) AS BIGINT) AS cpu_time_per_step_ps,
    cpu_self_ps, op_time_ps, self_op_time_ps, ops, costed_ops,
    gpu_activities, gpu_time_ps, gpu_busy_ps, self_gpu_time_ps, gpu_annotation_ps,
    flops, bytes_accessed, rate_time_ps, flop_rate, memory_bandwidth,
    flops / nullif(bytes_accessed, 0) AS operational_intensity,
    device_kind, peak_flops_per_s, peak_hbm_bytes_per_s,
    peak_flops_per_s / peak_hbm_bytes_per_s AS ridge_point,
    flop_utilization, hbm_utilization,
    CASE
        WHEN greatest(coalesce(flop_utilization, 0), coalesce(hbm_utilization, 0)) <= 0 THEN 'unknown'
        WHEN flop_utilization >= coalesce(hbm_utilization, 0) THEN 'compute'
        ELSE 'HBM'
    END AS bound_by,
    nullif(greatest(coalesce(flop_utilization, 0), coalesce(hbm_utilization, 0)), 0) AS roofline_efficiency,
    greatest(coalesce(flop_utilization, 0), coalesce(hbm_utilization, 0)) > 1 AS above_roof,
    CASE WHEN greatest(coalesce(flop_utilization, 0), coalesce(hbm_utilization, 0)) > 1 THEN
        CASE WHEN gpu_busy_ps > 0
            THEN 'the GPU time of the kernels launched inside (gpu_busy_ps) misses kernels its ops ran: kernels replayed '
                 || 'from a CUDA graph or launched on another thread name no op here, so the rate divides all the FLOPs '
                 || 'by too little time'
            ELSE 'the ops'' CPU time is shorter than their FLOPs at the CPU roof: the peaks are too low for this CPU '
                 || '(xprosql roofline --measure-cpu-peaks)'
        END
    END AS above_roof_reason
FROM bounded
ORDER BY profile_id, step NULLS FIRST, first_start_ps, path
