-- fleet._op_keys: every op of a profile by its identity across runs (op_stats.op_key), per device kind:
-- what fleet.compare, fleet.regressions and fleet.op_history join profiles on.
--
-- op_stats rows (ops._op_stats) summed per (profile, device kind, op_key), over devices. The key
-- (xprosql_op_key): an HLO op's module fingerprint and instruction name, else its module and
-- instruction name; a PyTorch op's name, input shapes, dtypes and nn.Module path; another GPU
-- activity's normalised name and grid. Rows of files written before op_key get it from the row
-- alone: an HLO op by module and instruction name (hlo_name), a PyTorch op without its module path,
-- a kernel without its grid (op_key_source says which; re-ingest those files for the full key).
-- HBM bytes as ops.roofline counts them: the memory breakdowns where the op has one, else all bytes.
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   device_kind  VARCHAR  tpu, gpu or cpu
--   op_key  VARCHAR  the op's identity across runs (op_stats.op_key)
--   op_key_source  VARCHAR  hlo, hlo_name, torch or kernel (op_stats.op_key_source)
--   op_key_context  VARCHAR  the key's part beyond the op's name, shapes and dtypes (op_stats.op_key_context)
--   op  VARCHAR  the op's name (HLO op, PyTorch op, kernel name); the first by name where a kernel key joins several
--   input_shapes  VARCHAR  a PyTorch op's Input Dims (JSON)
--   input_dtypes  VARCHAR  its Input type (JSON)
--   module  VARCHAR  HLO module name, when known
--   category  VARCHAR  HLO category, cpu_op for PyTorch ops, else the event's category
--   devices  BIGINT  devices of the kind it ran on
--   occurrences  BIGINT  executions, summed over devices
--   total_time_ps  BIGINT  time including nested ops, summed over devices, ps
--   self_time_ps  BIGINT  that less the ops nested in it, ps
--   flops  DOUBLE  FLOPs, FLOP
--   bytes_accessed  DOUBLE  bytes read and written, bytes
--   hbm_bytes  DOUBLE  HBM bytes (breakdown memory space 1, else all bytes), bytes
WITH keyed AS (
    SELECT s.*,
        coalesce(s.op_key_source, CASE WHEN s.program_id IS NOT NULL OR s.module IS NOT NULL THEN 'hlo_name'
                                       WHEN s.category = 'cpu_op' THEN 'torch' ELSE 'kernel' END) AS key_source,
        CASE WHEN s.op_key IS NOT NULL THEN s.op_key_context
             WHEN s.program_id IS NOT NULL OR s.module IS NOT NULL THEN s.module END AS key_context
    FROM op_stats AS s
)
SELECT
    profile_id, device_kind,
    coalesce(op_key, xprosql_op_key(key_source, op, input_shapes, input_dtypes, key_context)) AS op_key,
    any_value(key_source) AS op_key_source,
    any_value(key_context) AS op_key_context,
    min(op) AS op,
    any_value(input_shapes) AS input_shapes,
    any_value(input_dtypes) AS input_dtypes,
    any_value(module) AS module,
    any_value(category) AS category,
    CAST(count(DISTINCT device_id) AS BIGINT) AS devices,
    CAST(sum(occurrences) AS BIGINT) AS occurrences,
    CAST(sum(total_time_ps) AS BIGINT) AS total_time_ps,
    CAST(sum(self_time_ps) AS BIGINT) AS self_time_ps,
    sum(flops) AS flops,
    sum(bytes_accessed) AS bytes_accessed,
    CASE WHEN bool_or(has_breakdown) THEN sum(breakdown_hbm_bytes) ELSE sum(bytes_accessed) END AS hbm_bytes
FROM keyed
GROUP BY profile_id, device_kind, coalesce(op_key, xprosql_op_key(key_source, op, input_shapes, input_dtypes, key_context))
ORDER BY profile_id, device_kind, self_time_ps DESC, op_key
