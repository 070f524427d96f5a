-- diagnose._op_step_share: the share of each roofline op's time that falls inside complete steps,
-- so a finding about ops (diagnose.memory_bound_ops, low_precision, matmul_shapes) counts only
-- what its step-time denominator (diagnose._profile_steps) covers.
--
-- The roofline (ops.roofline, op_stats) sums an op over the whole profile; the capture window
-- also cuts the first and last steps, which XProf leaves out. Here each op's executions are
-- clipped to the complete steps (steps.steps, complete IS NOT false) of the device they ran on:
-- in_step_share = their time inside those steps / their whole time. A rule multiplies the
-- roofline's numbers for the op by it. The executions are those op_stats sums (ops._op_stats):
-- XLA ops (events.hlo_op) of TPU `XLA Ops` lines, GPU streams, and the host lines of profiles
-- without accelerators (JAX on CPU), on the device clock where the event has one; the GPU
-- activities of a PyTorch op (framework_op_kernels). A PyTorch trace without GPU activity
-- (ops timed by their CPU time) has no per-execution rows here: its ops have no row, and a
-- rule takes their whole time (coalesce(in_step_share, 1)).
--
-- Parameters:
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   device_kind  VARCHAR  tpu, gpu or cpu, as ops.roofline
--   program_id  UBIGINT  XLA program id; NULL for PyTorch ops
--   op  VARCHAR  HLO op or PyTorch op, as ops.roofline
--   input_shapes  VARCHAR  a PyTorch op's Input Dims (JSON); NULL for XLA ops
--   input_dtypes  VARCHAR  a PyTorch op's Input type (JSON)
--   op_ps  BIGINT  the op's executions' time, summed over devices, ps
--   in_step_ps  BIGINT  the part of it inside complete steps of their device, ps
--   in_step_share  DOUBLE  in_step_ps / op_ps, 0..1
WITH every_step AS (
-- @include steps.steps
),
windows AS MATERIALIZED (
    SELECT profile_id, device_id, start_ps, end_ps
    FROM every_step
    WHERE complete IS NOT false AND wall_ps > 0
),
accelerated AS (
    SELECT DISTINCT profile_id FROM devices WHERE kind IN ('tpu', 'gpu')
),
op_lines AS (
    SELECT t.profile_id, t.device_id, t.track_id,
        CASE WHEN d.kind IN ('tpu', 'gpu') THEN d.kind ELSE 'cpu' END AS device_kind
    FROM tracks AS t
    JOIN devices AS d USING (profile_id, device_id)
    WHERE (d.kind = 'tpu' AND t.name = 'XLA Ops')
       OR (d.kind = 'gpu' AND t.stream_id IS NOT NULL)
       OR (d.kind IN ('host', 'cpu') AND t.profile_id NOT IN (SELECT profile_id FROM accelerated))
),
executions AS MATERIALIZED (
    SELECT e.profile_id, e.device_id, l.device_kind, e.program_id, e.hlo_op AS op,
        CAST(NULL AS VARCHAR) AS input_shapes, CAST(NULL AS VARCHAR) AS input_dtypes,
        coalesce(e.device_offset_ps, e.start_ps) AS start_ps,
        coalesce(e.device_offset_ps, e.start_ps) + coalesce(e.device_duration_ps, e.dur_ps) AS end_ps
    FROM events AS e
    JOIN op_lines AS l USING (profile_id, device_id, track_id)
    WHERE e.hlo_op IS NOT NULL AND e.start_ps IS NOT NULL
    UNION ALL
    SELECT k.profile_id, k.device_id, 'gpu', CAST(NULL AS UBIGINT), k.op, k.input_shapes, k.input_dtypes,
        k.start_ps, k.start_ps + k.dur_ps
    FROM framework_op_kernels AS k
    WHERE k.start_ps IS NOT NULL
),
clipped AS (
    SELECT x.profile_id, x.device_kind, x.program_id, x.op, x.input_shapes, x.input_dtypes,
        sum(greatest(least(x.end_ps, w.end_ps) - greatest(x.start_ps, w.start_ps), 0)) AS in_step_ps
    FROM executions AS x
    JOIN windows AS w
      ON w.profile_id = x.profile_id AND w.device_id = x.device_id
     AND x.start_ps < w.end_ps AND x.end_ps > w.start_ps
    GROUP BY ALL
),
whole AS (
    SELECT profile_id, device_kind, program_id, op, input_shapes, input_dtypes, sum(end_ps - start_ps) AS op_ps
    FROM executions
    GROUP BY ALL
)
SELECT
    w.profile_id, w.device_kind, w.program_id, w.op, w.input_shapes, w.input_dtypes,
    CAST(w.op_ps AS BIGINT) AS op_ps,
    CAST(coalesce(c.in_step_ps, 0) AS BIGINT) AS in_step_ps,
    CASE WHEN w.op_ps > 0 THEN least(coalesce(c.in_step_ps, 0) / w.op_ps, 1.0) ELSE 1.0 END AS in_step_share
FROM whole AS w
LEFT JOIN clipped AS c
  ON c.profile_id = w.profile_id AND c.device_kind = w.device_kind
 AND c.program_id IS NOT DISTINCT FROM w.program_id AND c.op = w.op
 AND c.input_shapes IS NOT DISTINCT FROM w.input_shapes AND c.input_dtypes IS NOT DISTINCT FROM w.input_dtypes
ORDER BY w.profile_id, w.device_kind, w.program_id, w.op, w.input_shapes, w.input_dtypes
