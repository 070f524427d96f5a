-- torch._framework_op_stats: every PyTorch op of a Kineto trace summed per device and
-- input signature: the part of framework_ops that reads events. xprosql stores it per
-- profile at ingest (table framework_op_stats).
--
-- An op's GPU work is that of its subtree in the CPU op tree: the kernels, copies and
-- memsets launched inside it, by it or by the ops it calls (torch._framework_op_kernels).
-- kernel_time_ps is, per call, the union of those activities' intervals (TraceLens's op
-- kernel time), summed over calls; self_kernel_time_ps counts each activity once, at the
-- innermost op around its launch, so it sums to the attributed GPU time of the device.
-- The activities come from the table framework_op_kernels (torch._framework_op_kernels,
-- stored at ingest before this).
-- An op whose subtree ran on a GPU has a row on that GPU (each GPU, when several); the
-- others a row on the host. FLOPs and bytes are those of torch._op_tree.
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   device_id  INTEGER  devices.device_id of the GPU its subtree's activities ran on, else of the host
--   op  VARCHAR  op name, e.g. aten::mm
--   input_shapes  VARCHAR  Input Dims as recorded (JSON); NULL without record_shapes
--   input_dtypes  VARCHAR  Input type as recorded (JSON)
--   precision  VARCHAR  dtype class of the op's math (fp8, bf16, fp16, fp32, fp64, int8, int)
--   cost_source  VARCHAR  declared (a compiled kernel's kernel_flop / kernel_num_gb), trace (the trace's flops arg), shapes (a rule), operand_bytes (a compiled kernel's tensor arguments: bytes only), nested (costed ops inside it) or NULL (none)
--   cost_rule  VARCHAR  the rule of an op costed by its own shapes (gemm, conv, attention, unary, ...)
--   occurrences  BIGINT  calls
--   costed_occurrences  BIGINT  calls with cost data (FLOPs or bytes)
--   cpu_total_time_ps  BIGINT  CPU time of the calls, including the ops they call, ps
--   cpu_self_time_ps  BIGINT  CPU time less that of the ops and API calls directly inside, ps
--   kernel_time_ps  BIGINT  per call, the union of its subtree's GPU activities, summed over calls, ps
--   costed_kernel_time_ps  BIGINT  kernel_time_ps of the calls with cost data, ps
--   self_kernel_time_ps  BIGINT  GPU activities whose launch's innermost op is this op, ps
--   kernels  BIGINT  GPU activities (kernels, copies, memsets) in the calls' subtrees
--   flops  DOUBLE  FLOPs of the calls with cost data
--   bytes_accessed  DOUBLE  bytes of the calls with cost data, bytes
WITH tree AS MATERIALIZED (
-- @include torch._op_tree
),
activities AS MATERIALIZED (
    SELECT * FROM framework_op_kernels
),
-- Each activity in every op around its launch.
pairs AS (
    SELECT profile_id, unnest(around_op_ids) AS call_id, device_id, event_id, start_ps, start_ps + dur_ps AS end_ps
    FROM activities
),
islands AS (
    SELECT *, sum(CASE WHEN previous_end_ps IS NULL OR start_ps > previous_end_ps THEN 1 ELSE 0 END) OVER (
            PARTITION BY profile_id, call_id, device_id ORDER BY start_ps, event_id ROWS UNBOUNDED PRECEDING) AS island
    FROM (
        SELECT *, max(end_ps) OVER (
                PARTITION BY profile_id, call_id, device_id ORDER BY start_ps, event_id
                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS previous_end_ps
        FROM pairs
    )
),
call_gpu AS (
    SELECT profile_id, call_id, device_id, sum(span_ps) AS kernel_time_ps, sum(n) AS kernels
    FROM (
        SELECT profile_id, call_id, device_id, island, max(end_ps) - min(start_ps) AS span_ps, count(*) AS n
        FROM islands
        GROUP BY ALL
    )
    GROUP BY ALL
),
call_self_gpu AS (
    SELECT profile_id, innermost_op_id AS call_id, device_id, sum(dur_ps) AS self_kernel_time_ps
    FROM activities
    GROUP BY ALL
),
calls AS (
    SELECT
        t.profile_id, coalesce(g.device_id, t.device_id) AS device_id, t.op, t.input_shapes, t.input_dtypes,
        t.precision, t.cost_source, t.cost_rule, t.dur_ps, t.cpu_self_ps, t.flops, t.bytes_accessed,
        coalesce(g.kernel_time_ps, 0) AS kernel_time_ps, coalesce(g.kernels, 0) AS kernels,
        coalesce(s.self_kernel_time_ps, 0) AS self_kernel_time_ps
    FROM tree AS t
    LEFT JOIN call_gpu AS g ON g.profile_id = t.profile_id AND g.call_id = t.event_id
    LEFT JOIN call_self_gpu AS s ON s.profile_id = t.profile_id AND s.call_id = t.event_id AND s.device_id = g.device_id
    WHERE t.node = 'op'
)
SELECT
    profile_id, device_id, op, input_shapes, input_dtypes,
    any_value(precision) AS precision,
    CASE WHEN bool_or(cost_source = 'declared') THEN 'declared' WHEN bool_or(cost_source = 'trace') THEN 'trace'
         WHEN bool_or(cost_source = 'shapes') THEN 'shapes' WHEN bool_or(cost_source = 'operand_bytes') THEN 'operand_bytes'
         WHEN bool_or(cost_source = 'nested') THEN 'nested' END AS cost_source,
    any_value(cost_rule) AS cost_rule,
    count(*) AS occurrences,
    count(coalesce(flops, bytes_accessed)) AS costed_occurrences,
    CAST(sum(dur_ps) AS BIGINT) AS cpu_total_time_ps,
    CAST(sum(cpu_self_ps) AS BIGINT) AS cpu_self_time_ps,
    CAST(sum(kernel_time_ps) AS BIGINT) AS kernel_time_ps,
    CAST(coalesce(sum(kernel_time_ps) FILTER (WHERE flops IS NOT NULL OR bytes_accessed IS NOT NULL), 0) AS BIGINT) AS costed_kernel_time_ps,
    CAST(sum(self_kernel_time_ps) AS BIGINT) AS self_kernel_time_ps,
    CAST(sum(kernels) AS BIGINT) AS kernels,
    sum(flops) AS flops,
    sum(bytes_accessed) AS bytes_accessed
FROM calls
GROUP BY profile_id, device_id, op, input_shapes, input_dtypes
ORDER BY profile_id, device_id, self_kernel_time_ps DESC, cpu_self_time_ps DESC, op, input_shapes, input_dtypes
