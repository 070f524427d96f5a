-- torch._op_tree: every PyTorch op call of a Kineto trace (cpu_op) in its CPU op tree,
-- with its input shapes and dtypes, its FLOPs and bytes, and its CPU self time; and every
-- CUDA/HIP API call under the op that made it.
--
-- The tree: ops and API calls nest by timespan on their thread (ops._nesting); a node's
-- parent is the nearest op around it (Python functions between them are skipped; a node
-- inside an API call only is a root).
-- CPU self time is an op's time less that of the ops and API calls directly inside it
-- (PyTorch's self CPU time).
--
-- Costs, per call (xprosql_torch_cost, the rules of xprosql.models.torch_costs: TraceLens's
-- formulas for GEMM, convolution and attention, and elementwise, reduction, normalization,
-- softmax and embedding rules): the trace's own `flops` arg (Kineto with_flops=True) wins
-- over the rule's FLOPs; bytes come from the rule. An op with a rule has costs of its own
-- (own_cost), as in TraceLens, except a composite (aten::linear, aten::matmul) above a
-- costed op: that op (aten::addmm) has them. An op without costs of its own carries those
-- of the first ops with costs on each path down its subtree (cost_source nested), so no
-- call is counted twice in it. Ops with no rule and no costed descendant have NULL costs.
--
-- Compiled kernels: the record of a torch.compile / Inductor kernel launch (an op with a
-- kernel_backend arg, e.g. triton_poi_fused_add_0) has the costs its author declared when
-- Inductor wrote them (kernel_flop FLOPs and kernel_num_gb GB = 1e9 bytes, with
-- torch._inductor.config.benchmark_kernel / profile_bandwidth: cost_source declared), else
-- the bytes of its tensor arguments (its Input Dims: each pointer argument once, a lower
-- bound) and unknown FLOPs (cost_source operand_bytes, cost_rule tensor_bytes).
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   node  VARCHAR  op (a cpu_op) or api_call (api_calls; only the tree columns are set)
--   event_id  BIGINT  events.event_id of the op call or API call
--   device_id  INTEGER  devices.device_id of the host process
--   track_id  INTEGER  tracks.track_id of the calling thread
--   parent_id  BIGINT  events.event_id of the op it is called from; NULL for a root
--   ancestor_ids  BIGINT[]  every op around it, nearest first ([] for a root)
--   op  VARCHAR  op name, e.g. aten::mm
--   input_shapes  VARCHAR  the Input Dims arg as recorded (JSON), NULL without record_shapes
--   input_dtypes  VARCHAR  the Input type arg as recorded (JSON)
--   precision  VARCHAR  dtype class of the op's math (fp8, bf16, fp16, fp32, fp64, int8, int), nested: when its costed ops agree
--   start_ps  BIGINT  start, ps
--   dur_ps  BIGINT  CPU time including the ops it calls, ps
--   cpu_self_ps  BIGINT  dur_ps less the ops and API calls directly inside it, ps
--   own_cost  BOOLEAN  the costs are the op's own (see above)
--   cost_rule  VARCHAR  the rule behind the op's own costs (gemm, conv, attention, ...; trace when only the trace's flops arg; inductor: a compiled kernel's declared costs; tensor_bytes: its arguments' bytes)
--   cost_source  VARCHAR  declared (a compiled kernel's kernel_flop / kernel_num_gb), trace (its flops arg), shapes (a rule), operand_bytes (a compiled kernel's tensor arguments: bytes only), nested (the costs of the costed ops inside it), or NULL (none)
--   flops  DOUBLE  FLOPs of the call: its own when own_cost, else those of the first costed ops inside it; NULL when unknown (operand_bytes)
--   bytes_accessed  DOUBLE  bytes read and written by the call, like flops, bytes
WITH op_events AS MATERIALIZED (
    SELECT e.profile_id, e.event_id, e.device_id, e.track_id, CAST(e.name AS VARCHAR) AS op, e.start_ps, e.dur_ps
    FROM events AS e
    WHERE e.category = 'cpu_op' AND e.start_ps IS NOT NULL
),
nesting_events AS (
    SELECT profile_id, track_id, event_id, start_ps, dur_ps FROM op_events
    UNION ALL
    SELECT a.profile_id, a.track_id, a.event_id, a.start_ps, a.dur_ps
    FROM api_calls AS a
    WHERE a.start_ps IS NOT NULL AND a.profile_id IN (SELECT profile_id FROM op_events)
),
nesting AS MATERIALIZED (
-- @include ops._nesting
),
-- The nearest op around each node (a parent that is an API call makes a root).
parents AS MATERIALIZED (
    SELECT ne.profile_id, ne.event_id, o.event_id AS parent_id
    FROM nesting_events AS ne
    LEFT JOIN nesting AS n USING (profile_id, event_id)
    LEFT JOIN op_events AS o ON o.profile_id = n.profile_id AND o.event_id = n.parent_id
),
paths AS MATERIALIZED (
    WITH RECURSIVE down(profile_id, event_id, ancestor_ids) AS (
        SELECT profile_id, event_id, []::BIGINT[] FROM parents WHERE parent_id IS NULL
        UNION ALL
        SELECT p.profile_id, p.event_id, list_prepend(p.parent_id, d.ancestor_ids)
        FROM down AS d JOIN parents AS p ON p.profile_id = d.profile_id AND p.parent_id = d.event_id
    )
    SELECT * FROM down
),
children AS (
    SELECT n.profile_id, n.parent_id AS event_id, sum(ne.dur_ps) AS children_ps
    FROM nesting AS n
    JOIN nesting_events AS ne USING (profile_id, event_id)
    WHERE n.parent_id IS NOT NULL
    GROUP BY ALL
),
args AS (
    SELECT
        s.profile_id, s.event_id,
        any_value(s.str_value) FILTER (WHERE s.stat = 'Input Dims') AS input_shapes,
        any_value(s.str_value) FILTER (WHERE s.stat = 'Input type') AS input_dtypes,
        any_value(s.str_value) FILTER (WHERE s.stat = 'Concrete Inputs') AS concrete_inputs,
        any_value(coalesce(CAST(s.int_value AS DOUBLE), s.double_value, CAST(s.uint_value AS DOUBLE)))
            FILTER (WHERE s.stat = 'flops') AS trace_flops,
        any_value(coalesce(CAST(s.int_value AS DOUBLE), s.double_value, CAST(s.uint_value AS DOUBLE)))
            FILTER (WHERE s.stat = 'kernel_flop') AS kernel_flop,
        -- Inductor's estimate in GB (1e9 bytes); 0 means none, as Inductor's own profile analysis reads it.
        any_value(nullif(coalesce(s.double_value, CAST(s.int_value AS DOUBLE), CAST(s.uint_value AS DOUBLE)), 0) * 1e9)
            FILTER (WHERE s.stat = 'kernel_num_gb') AS kernel_bytes,
        bool_or(s.stat = 'kernel_backend') AS compiled
    FROM event_stats AS s
    SEMI JOIN op_events AS o USING (profile_id, event_id)
    WHERE s.stat IN ('Input Dims', 'Input type', 'Concrete Inputs', 'flops', 'kernel_flop', 'kernel_num_gb', 'kernel_backend')
    GROUP BY ALL
),
calls AS MATERIALIZED (
    SELECT o.*, a.input_shapes, a.input_dtypes, a.concrete_inputs, a.trace_flops,
        a.kernel_flop, a.kernel_bytes, coalesce(a.compiled, false) AS compiled,
        a.kernel_flop IS NOT NULL OR a.kernel_bytes IS NOT NULL AS declared
    FROM op_events AS o
    LEFT JOIN args AS a USING (profile_id, event_id)
),
-- The rules run once per distinct signature, not per call.
signatures AS (
    SELECT op, input_shapes, input_dtypes, concrete_inputs, compiled,
        xprosql_torch_cost(op, input_shapes, input_dtypes, concrete_inputs) AS cost,
        CASE WHEN compiled THEN xprosql_tensor_bytes(input_shapes, input_dtypes) END AS tensor_bytes
    FROM (SELECT DISTINCT op, input_shapes, input_dtypes, concrete_inputs, compiled FROM calls WHERE input_shapes IS NOT NULL)
),
costed AS MATERIALIZED (
    SELECT
        c.profile_id, c.event_id,
        CASE WHEN c.declared THEN c.kernel_flop ELSE coalesce(c.trace_flops, CAST(s.cost.flops AS DOUBLE)) END AS flops,
        CASE WHEN c.declared THEN coalesce(c.kernel_bytes, CAST(s.tensor_bytes AS DOUBLE))
             ELSE CAST(coalesce(s.cost.bytes_accessed, s.tensor_bytes) AS DOUBLE) END AS bytes_accessed,
        CASE WHEN c.declared THEN 'inductor' WHEN s.cost IS NOT NULL THEN s.cost.rule WHEN c.trace_flops IS NOT NULL THEN 'trace'
             ELSE 'tensor_bytes' END AS cost_rule,
        CASE WHEN c.declared THEN 'declared' WHEN c.trace_flops IS NOT NULL THEN 'trace' WHEN s.cost IS NOT NULL THEN 'shapes'
             ELSE 'operand_bytes' END AS cost_source,
        s.cost.precision AS precision,
        NOT c.declared AND c.trace_flops IS NULL AND coalesce(s.cost.composite, false) AS composite
    FROM calls AS c
    LEFT JOIN signatures AS s
      ON s.op = c.op AND s.input_shapes = c.input_shapes
     AND s.input_dtypes IS NOT DISTINCT FROM c.input_dtypes AND s.concrete_inputs IS NOT DISTINCT FROM c.concrete_inputs
     AND s.compiled = c.compiled
    WHERE c.declared OR c.trace_flops IS NOT NULL OR s.cost IS NOT NULL OR s.tensor_bytes IS NOT NULL
),
-- Every op above each costed op, nearest first.
ancestry AS MATERIALIZED (
    SELECT c.profile_id, c.event_id, unnest(p.ancestor_ids) AS ancestor_id, generate_subscripts(p.ancestor_ids, 1) AS position
    FROM costed AS c JOIN paths AS p USING (profile_id, event_id)
),
-- A composite (aten::linear, aten::matmul) is costed only as a leaf: over a costed op it is that op's caller.
own AS MATERIALIZED (
    SELECT c.* FROM costed AS c
    WHERE NOT c.composite
       OR NOT EXISTS (SELECT 1 FROM ancestry AS a WHERE a.profile_id = c.profile_id AND a.ancestor_id = c.event_id)
),
-- An op without costs of its own takes those of the first ops with costs on each path down its subtree.
own_ancestry AS (
    SELECT a.*, o.event_id IS NOT NULL AS ancestor_is_own,
        min(CASE WHEN o.event_id IS NOT NULL THEN a.position END) OVER (PARTITION BY a.profile_id, a.event_id) AS first_own
    FROM ancestry AS a
    SEMI JOIN own AS d ON d.profile_id = a.profile_id AND d.event_id = a.event_id
    LEFT JOIN own AS o ON o.profile_id = a.profile_id AND o.event_id = a.ancestor_id
),
nested_costs AS (
    SELECT a.profile_id, a.ancestor_id AS event_id,
        sum(d.flops) AS flops, sum(d.bytes_accessed) AS bytes_accessed,
        -- One dtype class when the ops inside agree on it.
        CASE WHEN count(DISTINCT d.precision) = 1 THEN any_value(d.precision) END AS precision
    FROM own_ancestry AS a
    JOIN own AS d USING (profile_id, event_id)
    WHERE a.position < coalesce(a.first_own, 9223372036854775807)
    GROUP BY ALL
)
SELECT
    c.profile_id, 'op' AS node, c.event_id, c.device_id, c.track_id, p.parent_id, pa.ancestor_ids,
    c.op, c.input_shapes, c.input_dtypes,
    coalesce(i.precision, n.precision) AS precision,
    c.start_ps, c.dur_ps,
    CAST(greatest(c.dur_ps - coalesce(ch.children_ps, 0), 0) AS BIGINT) AS cpu_self_ps,
    i.event_id IS NOT NULL AS own_cost,
    i.cost_rule,
    CASE WHEN i.event_id IS NOT NULL THEN i.cost_source WHEN n.event_id IS NOT NULL THEN 'nested' END AS cost_source,
    coalesce(i.flops, n.flops) AS flops,
    coalesce(i.bytes_accessed, n.bytes_accessed) AS bytes_accessed
FROM calls AS c
JOIN parents AS p USING (profile_id, event_id)
JOIN paths AS pa USING (profile_id, event_id)
LEFT JOIN children AS ch USING (profile_id, event_id)
LEFT JOIN own AS i USING (profile_id, event_id)
LEFT JOIN nested_costs AS n USING (profile_id, event_id)
UNION ALL
SELECT
    a.profile_id, 'api_call', a.event_id, a.device_id, a.track_id, p.parent_id, pa.ancestor_ids,
    NULL, NULL, NULL, NULL, a.start_ps, a.dur_ps, NULL, NULL, NULL, NULL, NULL, NULL
FROM api_calls AS a
JOIN parents AS p USING (profile_id, event_id)
JOIN paths AS pa USING (profile_id, event_id)
