-- torch.framework_ops: PyTorch op statistics per profile and device: calls, CPU time,
-- the GPU time of the kernels each op launched, FLOPs and bytes from its input shapes,
-- and the rates they give, for one trace or thousands (PyTorch's key_averages, with
-- GPU attribution through the CPU op tree and TraceLens's cost model).
--
-- Built on the framework_op_stats table (torch._framework_op_stats, stored per profile
-- at ingest): an op's GPU work is everything launched inside it, by it or the ops it
-- calls (kernel_time_ps: per call the union of those intervals, as TraceLens's op
-- kernel time); self_kernel_time_ps counts each kernel, copy and memset once, at the
-- innermost op around its launch, and gpu_time_share divides it by the device's GPU
-- activity time, so shares over a device's ops sum to at most 1 (the rest: activities
-- no op in the trace launched). FLOPs and bytes come from the op's input shapes
-- (xprosql.models.torch_costs: TraceLens's formulas for GEMM, convolution, attention;
-- the trace's flops arg wins); an op without a rule of its own carries the costs of the
-- first costed ops down its subtree (cost_source nested: aten::linear those of its
-- aten::addmm). Rates divide them by the GPU time of the calls with cost data, on a
-- CPU (no GPU activity) by their CPU time.
--
-- Needs: PyTorch (Kineto) ops: cpu_op events
--
-- Parameters:
--   $by_shapes  BOOLEAN  one row per (op, input shapes, input dtypes); false: one per op (default: true)
--
-- Show: profile_id, device_kind, op, input_shapes, occurrences, cpu_self_time_ps, kernel_time_ps, self_kernel_time_ps, gpu_time_share, flops, flop_rate, cost_source
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   device_id  INTEGER  devices.device_id: the GPU the op's subtree ran on, else the host
--   device_kind  VARCHAR  gpu, or host for ops without GPU activity
--   op  VARCHAR  op name, e.g. aten::mm
--   input_shapes  VARCHAR  Input Dims as recorded (JSON); NULL when $by_shapes is false or without record_shapes
--   input_dtypes  VARCHAR  Input type as recorded (JSON); NULL like input_shapes
--   occurrences  BIGINT  calls
--   cpu_total_time_ps  BIGINT  CPU time of the calls including the ops they call, ps
--   cpu_self_time_ps  BIGINT  CPU time less the ops and API calls directly inside, ps
--   kernel_time_ps  BIGINT  per call the union of the GPU activities launched inside it, summed, ps
--   self_kernel_time_ps  BIGINT  GPU activities whose launch's innermost op is this op, ps
--   kernels  BIGINT  GPU activities (kernels, copies, memsets) launched inside the calls
--   gpu_time_share  DOUBLE  self_kernel_time_ps / the device's GPU activity time (kernels, copies, memsets), 0..1
--   flops  DOUBLE  FLOPs of the calls with cost data
--   bytes_accessed  DOUBLE  bytes of the calls with cost data, bytes
--   flops_per_call  DOUBLE  flops / calls with cost data
--   flop_rate  DOUBLE  flops / the GPU time (CPU time on a CPU) of the calls with cost data, FLOP/s
--   memory_bandwidth  DOUBLE  bytes_accessed / that time, bytes/s
--   precision  VARCHAR  dtype class of the op's math: fp8, bf16, fp16, fp32, fp64, int8, int
--   cost_source  VARCHAR  declared (a compiled kernel's kernel_flop / kernel_num_gb), trace (the trace's flops arg), shapes (a rule), operand_bytes (a compiled kernel's tensor arguments: bytes only, FLOPs unknown), nested (the costed ops inside it) or NULL (no cost data)
--   cost_rule  VARCHAR  the rule of an op costed by its own shapes: gemm, scaled_gemm, conv, attention, unary, binary, ...
WITH params AS (
    SELECT CAST($by_shapes AS BOOLEAN) AS by_shapes
),
stats AS (
    SELECT f.*, d.kind AS device_kind
    FROM framework_op_stats AS f
    JOIN devices AS d USING (profile_id, device_id)
),
gpu_time AS (
    SELECT profile_id, device_id, sum(dur_ps) AS activity_ps
    FROM (SELECT profile_id, device_id, dur_ps FROM kernels UNION ALL SELECT profile_id, device_id, dur_ps FROM memcpys)
    WHERE profile_id IN (SELECT profile_id FROM framework_op_stats)
    GROUP BY ALL
),
grouped AS (
    SELECT
        s.profile_id, s.device_id, s.device_kind, s.op,
        CASE WHEN p.by_shapes THEN s.input_shapes END AS input_shapes,
        CASE WHEN p.by_shapes THEN s.input_dtypes END AS input_dtypes,
        CAST(sum(s.occurrences) AS BIGINT) AS occurrences,
        CAST(sum(s.costed_occurrences) AS BIGINT) AS costed_occurrences,
        CAST(sum(s.cpu_total_time_ps) AS BIGINT) AS cpu_total_time_ps,
        CAST(sum(s.cpu_self_time_ps) AS BIGINT) AS cpu_self_time_ps,
        CAST(sum(s.kernel_time_ps) AS BIGINT) AS kernel_time_ps,
        CAST(sum(s.self_kernel_time_ps) AS BIGINT) AS self_kernel_time_ps,
        CAST(sum(s.kernels) AS BIGINT) AS kernels,
        sum(s.flops) AS flops,
        sum(s.bytes_accessed) AS bytes_accessed,
        -- The time the costs were spent in: GPU time where the calls launched work, else CPU time.
        sum(CASE WHEN s.kernels > 0 THEN s.costed_kernel_time_ps
                 WHEN s.costed_occurrences > 0 THEN s.cpu_total_time_ps END) AS costed_time_ps,
        CASE WHEN count(DISTINCT s.precision) = 1 THEN any_value(s.precision) END AS precision,
        CASE WHEN bool_or(s.cost_source = 'declared') THEN 'declared' WHEN bool_or(s.cost_source = 'trace') THEN 'trace'
             WHEN bool_or(s.cost_source = 'shapes') THEN 'shapes'
             WHEN bool_or(s.cost_source = 'operand_bytes') THEN 'operand_bytes'
             WHEN bool_or(s.cost_source = 'nested') THEN 'nested' END AS cost_source,
        CASE WHEN count(DISTINCT s.cost_rule) = 1 THEN any_value(s.cost_rule) END AS cost_rule
    FROM stats AS s
    CROSS JOIN params AS p
    GROUP BY ALL
)
SELECT
    g.profile_id, g.device_id, g.device_kind, g.op, g.input_shapes, g.input_dtypes, g.occurrences,
    g.cpu_total_time_ps, g.cpu_self_time_ps, g.kernel_time_ps, g.self_kernel_time_ps, g.kernels,
    g.self_kernel_time_ps / nullif(t.activity_ps, 0) AS gpu_time_share,
    g.flops, g.bytes_accessed,
    g.flops / nullif(g.costed_occurrences, 0) AS flops_per_call,
    g.flops / (nullif(g.costed_time_ps, 0) * 1e-12) AS flop_rate,
    g.bytes_accessed / (nullif(g.costed_time_ps, 0) * 1e-12) AS memory_bandwidth,
    g.precision, g.cost_source, g.cost_rule
FROM grouped AS g
LEFT JOIN gpu_time AS t USING (profile_id, device_id)
ORDER BY g.profile_id, g.device_id, g.self_kernel_time_ps DESC, g.cpu_self_time_ps DESC, g.op, g.input_shapes, g.input_dtypes
