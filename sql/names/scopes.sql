-- names.scopes: time by the user's own names in XLA programs: JAX/XLA name scopes (the op_name
-- metadata of HLO instructions, jit(step)/encoder/layer_0/attn/dot_general) on TPU, GPU and CPU,
-- and TensorFlow name scopes of GPU kernels, with the op time, FLOPs, bytes and roofline
-- position of every scope.
--
-- Each op of the op_stats table (ops._op_stats: which events are ops, their time on the device
-- clock, self time, costs from the profile or derived from the HLO) takes the op_name of its HLO
-- instruction (hlo_ops, same program and name: for a fusion, the fusion instruction's own
-- op_name, as XLA writes it: its root's). Its time counts for every scope its op_name lies under:
-- jit(step), jit(step)/encoder, ..., and the full op_name itself (the primitive, dot_general).
-- XSpace GPU kernels without an HLO op (TensorFlow) take the name of their framework op
-- (kernels.framework_op without its ':Type#...' suffix: replica_0/bert/encoder/layer_0/.../MatMul).
-- The op_name is split at every '/' (a '/' inside a component's brackets splits it too).
-- One row per (profile, device kind, scope), and per (profile, device kind) a row (scope NULL,
-- row_kind unscoped) for the ops without an op_name.
--
-- Rates divide the FLOPs and bytes of the innermost ops under a scope (categories call,
-- conditional and while hold other ops: XProf's rule) by the scope's self time (the ops' time
-- less the ops nested in them on their line); the roofs are those of ops._peaks for the
-- device kind (give $peak_flops_per_s and $peak_hbm_bytes_per_s for a CPU).
--
-- Needs: XLA ops whose HLO carries op_name metadata (XSpace with HLO protos), or TensorFlow GPU kernels
--
-- Passes: $peak_flops_per_s $peak_hbm_bytes_per_s $peak_source (to ops._peaks, with its defaults and meaning)
--
-- Show: profile_id, device_kind, scope, depth, ops, occurrences, op_time_ps, self_time_ps, time_share, flop_rate, hbm_bandwidth, bound_by
--
-- Columns:
--   row_kind  VARCHAR  scope, or unscoped (the ops without an op_name, scope NULL)
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   device_kind  VARCHAR  tpu, gpu or cpu (host planes running XLA:CPU programs)
--   source  VARCHAR  hlo (op_name metadata) or tf_op (TensorFlow kernels' framework op)
--   scope  VARCHAR  the scope path, e.g. jit(step)/encoder/layer_0; the full op_name for its own ops
--   name  VARCHAR  the scope's last component
--   parent_scope  VARCHAR  the scope around it; NULL at the root
--   depth  BIGINT  scopes around it (0: the root, e.g. jit(step))
--   ops  BIGINT  distinct ops (program, HLO op) under the scope
--   occurrences  BIGINT  executions of those ops
--   op_time_ps  BIGINT  the time of the ops' events under the scope, summed (an op holding other ops counts whole), ps
--   self_time_ps  BIGINT  their self time: op_time_ps less the ops nested in them, ps
--   own_time_ps  BIGINT  self time of the ops whose op_name is this scope exactly, ps
--   device_time_ps  BIGINT  the device kind's time (ops._op_stats device_time_ps, summed over devices), ps
--   time_share  DOUBLE  self_time_ps / device_time_ps
--   flops  DOUBLE  FLOPs of the innermost ops under the scope, FLOP
--   bytes_accessed  DOUBLE  their bytes read and written, bytes
--   hbm_bytes  DOUBLE  their HBM bytes (memory breakdown, else all bytes), bytes
--   flop_rate  DOUBLE  flops / self_time_ps, FLOP/s
--   memory_bandwidth  DOUBLE  bytes_accessed / self_time_ps, bytes/s
--   hbm_bandwidth  DOUBLE  hbm_bytes / self_time_ps, bytes/s
--   operational_intensity  DOUBLE  flops / hbm_bytes, FLOP/byte
--   peak_flops_per_s  DOUBLE  compute roof (ops._peaks), FLOP/s
--   peak_hbm_bytes_per_s  DOUBLE  HBM roof (ops._peaks), bytes/s
--   ridge_point  DOUBLE  peak_flops_per_s / peak_hbm_bytes_per_s, FLOP/byte
--   flop_utilization  DOUBLE  flop_rate / peak_flops_per_s
--   hbm_utilization  DOUBLE  hbm_bandwidth / peak_hbm_bytes_per_s
--   bound_by  VARCHAR  compute or HBM: the higher utilization; unknown without costs or peaks
--   roofline_efficiency  DOUBLE  the higher utilization
WITH op_names AS (
    SELECT profile_id, program_id, hlo_op, any_value(op_name) AS op_name
    FROM hlo_ops
    WHERE op_name IS NOT NULL AND op_name <> ''
    GROUP BY ALL
),
xla_ops AS (
    SELECT
        s.profile_id, s.device_id, s.device_kind, 'hlo' AS source, s.program_id, s.op, n.op_name,
        s.occurrences, s.total_time_ps, s.self_time_ps,
        lower(coalesce(s.category, '')) NOT IN ('call', 'conditional', 'while', 'megacore fusion') AS innermost,
        s.flops, s.bytes_accessed,
        CASE WHEN s.has_breakdown THEN s.breakdown_hbm_bytes ELSE s.bytes_accessed END AS hbm_bytes
    FROM op_stats AS s
    LEFT JOIN op_names AS n ON n.profile_id = s.profile_id AND n.program_id = s.program_id AND n.hlo_op = s.op
    WHERE s.program_id IS NOT NULL
),
-- TensorFlow GPU kernels of XSpace profiles: their framework op's name.
tf_kernels AS (
    SELECT
        k.profile_id, k.device_id, 'gpu' AS device_kind, 'tf_op' AS source, NULL::UBIGINT AS program_id,
        CAST(k.name AS VARCHAR) AS op, nullif(regexp_replace(k.framework_op, ':.*$', ''), '') AS op_name,
        1::BIGINT AS occurrences, k.dur_ps AS total_time_ps, k.dur_ps AS self_time_ps, true AS innermost,
        NULL::DOUBLE AS flops, NULL::DOUBLE AS bytes_accessed, NULL::DOUBLE AS hbm_bytes
    FROM kernels AS k
    JOIN profiles AS p USING (profile_id)
    WHERE p.format = 'xspace' AND k.hlo_op IS NULL AND k.framework_op IS NOT NULL
      AND k.profile_id NOT IN (SELECT profile_id FROM xla_ops)
),
ops AS MATERIALIZED (
    SELECT * FROM xla_ops WHERE profile_id IN (SELECT profile_id FROM xla_ops WHERE op_name IS NOT NULL)
    UNION ALL
    SELECT * FROM tf_kernels
),
-- Every scope an op lies under: each prefix of its op_name's components.
prefixes AS (
    SELECT o.*, string_split(o.op_name, '/') AS parts
    FROM ops AS o
    WHERE o.op_name IS NOT NULL
),
under AS (
    SELECT p.*, d.depth, array_to_string(p.parts[1:d.depth + 1], '/') AS scope
    FROM prefixes AS p,
         LATERAL (SELECT unnest(range(0, len(p.parts))) AS depth) AS d
),
scopes AS (
    SELECT
        'scope' AS row_kind, profile_id, device_kind, any_value(source) AS source, scope, depth,
        any_value(parts[depth + 1]) AS name,
        CASE WHEN depth > 0 THEN any_value(array_to_string(parts[1:depth], '/')) END AS parent_scope,
        CAST(count(DISTINCT (program_id, op)) AS BIGINT) AS ops,
        CAST(sum(occurrences) AS BIGINT) AS occurrences,
        CAST(sum(total_time_ps) AS BIGINT) AS op_time_ps,
        CAST(sum(self_time_ps) AS BIGINT) AS self_time_ps,
        CAST(coalesce(sum(self_time_ps) FILTER (WHERE depth = len(parts) - 1), 0) AS BIGINT) AS own_time_ps,
        sum(flops) FILTER (WHERE innermost) AS flops,
        sum(bytes_accessed) FILTER (WHERE innermost) AS bytes_accessed,
        sum(hbm_bytes) FILTER (WHERE innermost) AS hbm_bytes
    FROM under
    GROUP BY profile_id, device_kind, scope, depth
    UNION ALL
    SELECT
        'unscoped', profile_id, device_kind, any_value(source), NULL, NULL, NULL, NULL,
        CAST(count(DISTINCT (program_id, op)) AS BIGINT),
        CAST(sum(occurrences) AS BIGINT),
        CAST(sum(total_time_ps) AS BIGINT),
        CAST(sum(self_time_ps) AS BIGINT),
        CAST(sum(self_time_ps) AS BIGINT),
        sum(flops) FILTER (WHERE innermost),
        sum(bytes_accessed) FILTER (WHERE innermost),
        sum(hbm_bytes) FILTER (WHERE innermost)
    FROM ops
    WHERE op_name IS NULL
    GROUP BY profile_id, device_kind
),
device_time AS (
    SELECT profile_id, device_kind, CAST(sum(device_time_ps) AS BIGINT) AS device_time_ps
    FROM (
        SELECT DISTINCT profile_id, device_kind, device_id,
            coalesce(device_time_ps, device_end_ps - device_start_ps) AS device_time_ps
        FROM op_stats
        WHERE profile_id IN (SELECT profile_id FROM ops)
    )
    GROUP BY ALL
),
peaks AS (
-- @include ops._peaks
),
rated AS (
    SELECT
        s.*, dt.device_time_ps,
        s.flops / (nullif(s.self_time_ps, 0) * 1e-12) AS flop_rate,
        s.bytes_accessed / (nullif(s.self_time_ps, 0) * 1e-12) AS memory_bandwidth,
        s.hbm_bytes / (nullif(s.self_time_ps, 0) * 1e-12) AS hbm_bandwidth,
        pk.peak_flops_per_s, pk.peak_hbm_bytes_per_s
    FROM scopes AS s
    LEFT JOIN device_time AS dt USING (profile_id, device_kind)
    LEFT JOIN peaks AS pk USING (profile_id, device_kind)
),
utilized AS (
    SELECT *,
        flop_rate / peak_flops_per_s AS flop_utilization,
        hbm_bandwidth / peak_hbm_bytes_per_s AS hbm_utilization
    FROM rated
)
SELECT
    row_kind, profile_id, device_kind, source, scope, name, parent_scope, depth, ops, occurrences,
    op_time_ps, self_time_ps, own_time_ps, device_time_ps,
    self_time_ps / nullif(device_time_ps, 0) AS time_share,
    flops, bytes_accessed, hbm_bytes, flop_rate, memory_bandwidth, hbm_bandwidth,
    flops / nullif(hbm_bytes, 0) AS operational_intensity,
    peak_flops_per_s, peak_hbm_bytes_per_s,
    peak_flops_per_s / peak_hbm_bytes_per_s AS ridge_point,
    flop_utilization, hbm_utilization,
    CASE
        WHEN greatest(coalesce(flop_utilization, 0), coalesce(hbm_utilization, 0)) <= 0 THEN 'unknown'
        WHEN flop_utilization >= coalesce(hbm_utilization, 0) THEN 'compute'
        ELSE 'HBM'
    END AS bound_by,
    nullif(greatest(coalesce(flop_utilization, 0), coalesce(hbm_utilization, 0)), 0) AS roofline_efficiency
FROM utilized
ORDER BY profile_id, device_kind, row_kind, scope
