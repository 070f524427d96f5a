-- torch._framework_op_kernels: the PyTorch op each GPU kernel, copy and memset of a Kineto
-- trace belongs to, for the roofline, the bottleneck breakdown and framework_ops.
--
-- A GPU activity joins the API call that launched it on the correlation id; that call
-- sits in the CPU op tree (torch._op_tree). Its op is the nearest op around the launch
-- that has costs of its own (torch._op_tree: aten::addmm under aten::linear,
-- aten::_scaled_dot_product_flash_attention over the aten::_flash_attention_forward that
-- launches the kernel), else the innermost op around the launch (the op without cost
-- data). Each activity belongs to one op call; the call's FLOPs and bytes go with its
-- first activity on the device (by start), so sums over activities count each call once.
-- Activities whose launch has no op around it have no row.
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   event_id  BIGINT  events.event_id of the kernel, copy or memset
--   device_id  INTEGER  devices.device_id of the GPU
--   activity  VARCHAR  kernel, memcpy or memset
--   start_ps  BIGINT  the activity's start, ps
--   dur_ps  BIGINT  its duration, ps
--   launch_id  BIGINT  events.event_id of the API call that launched it
--   innermost_op_id  BIGINT  events.event_id of the innermost op around the launch
--   around_op_ids  BIGINT[]  every op around the launch, innermost first
--   op_event_id  BIGINT  events.event_id of the op call it belongs to
--   op  VARCHAR  that op's name
--   input_shapes  VARCHAR  its Input Dims (JSON)
--   input_dtypes  VARCHAR  its Input type (JSON)
--   precision  VARCHAR  dtype class of its math (fp8, bf16, fp16, fp32, ...)
--   cost_source  VARCHAR  declared, trace, shapes, operand_bytes (torch._op_tree), or NULL (the op has no cost data)
--   first_of_call  BOOLEAN  the call's first activity on this device
--   flops  DOUBLE  the call's FLOPs on its first activity, 0 on the others, NULL without cost data
--   bytes_accessed  DOUBLE  the call's bytes like flops, bytes
WITH tree AS MATERIALIZED (
-- @include torch._op_tree
),
activities AS (
    SELECT profile_id, event_id, device_id, 'kernel' AS activity, start_ps, dur_ps, correlation_id
    FROM kernels
    WHERE correlation_id IS NOT NULL AND profile_id IN (SELECT profile_id FROM tree)
    UNION ALL
    SELECT profile_id, event_id, device_id, CASE WHEN kind = 'memset' THEN 'memset' ELSE 'memcpy' END,
        start_ps, dur_ps, correlation_id
    FROM memcpys
    WHERE correlation_id IS NOT NULL AND profile_id IN (SELECT profile_id FROM tree)
),
launched AS MATERIALIZED (
    SELECT g.*, a.event_id AS launch_id, t.parent_id AS innermost_op_id, t.ancestor_ids AS around_ids
    FROM activities AS g
    JOIN api_calls AS a ON a.profile_id = g.profile_id AND a.correlation_id = g.correlation_id
    JOIN tree AS t ON t.profile_id = a.profile_id AND t.event_id = a.event_id
    WHERE t.parent_id IS NOT NULL
    -- A correlation id names one launch; should a trace repeat one, the launch nearest before the activity.
    QUALIFY row_number() OVER (PARTITION BY g.profile_id, g.event_id
                               ORDER BY (a.start_ps <= g.start_ps) DESC, g.start_ps - a.start_ps, a.event_id) = 1
),
-- The nearest op around the launch with costs of its own.
costed_owner AS (
    SELECT l.profile_id, l.event_id, arg_min(t.event_id, u.position) AS owner_id
    FROM (SELECT profile_id, event_id, unnest(around_ids) AS op_id, generate_subscripts(around_ids, 1) AS position
          FROM launched) AS u
    JOIN launched AS l USING (profile_id, event_id)
    JOIN tree AS t ON t.profile_id = u.profile_id AND t.event_id = u.op_id
    WHERE t.own_cost
    GROUP BY ALL
),
owned AS (
    SELECT l.*, coalesce(c.owner_id, l.innermost_op_id) AS op_event_id
    FROM launched AS l
    LEFT JOIN costed_owner AS c USING (profile_id, event_id)
),
ranked AS (
    SELECT o.*, t.op, t.input_shapes, t.input_dtypes, t.precision,
        CASE WHEN t.own_cost THEN t.cost_source END AS cost_source,
        CASE WHEN t.own_cost THEN t.flops END AS call_flops,
        CASE WHEN t.own_cost THEN t.bytes_accessed END AS call_bytes,
        row_number() OVER (PARTITION BY o.profile_id, o.op_event_id, o.device_id ORDER BY o.start_ps, o.event_id) = 1
            AS first_of_call
    FROM owned AS o
    JOIN tree AS t ON t.profile_id = o.profile_id AND t.event_id = o.op_event_id
)
SELECT
    profile_id, event_id, device_id, activity, start_ps, dur_ps, launch_id, innermost_op_id,
    around_ids AS around_op_ids,
    op_event_id, op, input_shapes, input_dtypes, precision, cost_source, first_of_call,
    CASE WHEN first_of_call THEN call_flops ELSE call_flops * 0 END AS flops,
    CASE WHEN first_of_call THEN call_bytes ELSE call_bytes * 0 END AS bytes_accessed
FROM ranked
