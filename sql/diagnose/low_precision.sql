-- diagnose.low_precision: matrix multiplies and convolutions computing in fp32 on a chip whose
-- matrix units have a much faster bf16 / fp16 (or TF32) roof.
--
-- The ops: PyTorch GEMMs and convolutions (aten::mm, addmm, bmm, baddbmm, matmul, linear, conv*,
-- convolution, convolution_backward, cudnn/miopen convolutions) whose math is fp32 (ops.roofline's
-- precision, from the Input type of Kineto's record_shapes: float operands); XLA ops that are, or
-- fuse, a dot or convolution with f32 operands (hlo_ops.operand_shapes; a fusion's called
-- computation holding one), or a cuBLAS / cuDNN / hipBLAS custom-call with f32 operands. Time: the
-- roofline's self time of those ops, inside complete steps (diagnose._op_step_share). Roofs:
-- ops._peaks, the roofline's own: peak_flops_per_s is the chip's bf16/fp16 matrix roof and
-- peak_fp32_flops_per_s its fp32 roof (xprosql.models.hardware, data sheets); the rule fires only
-- where both are known and fp32 is the slower. TPUs have no fp32 roof in the chip table (XLA runs
-- f32 dots through the bf16 MXU at DEFAULT precision), so they never fire here.
--
-- Saving: an fp32 op running at the fp32 roof would take fp32 peak / bf16 peak of its time at the
-- bf16 roof, so time x (1 - fp32 peak / bf16 peak). An upper bound: it assumes the op is
-- compute-bound at both precisions (a memory-bound op gains about 2x from halving its bytes, not the
-- peak ratio), and a GPU already using TF32 (torch.backends.cuda.matmul.allow_tf32, JAX's default
-- on Ampere and later) gains at most 2x from bf16. One finding per profile whose fp32 GEMMs and
-- convolutions could save at least $min_share of step time.
--
-- Parameters:
--   $min_share  DOUBLE  saving share of step time from which the rule fires; XProf's "moderate" 5% of its overview's bottleneck levels [range: 0..1] (default: 0.05)
--
-- Passes: $peak_flops_per_s $peak_hbm_bytes_per_s $peak_source (to ops.roofline and ops._peaks: the roofs)
--
-- Show: profile_id, rule, severity, expected_saving_share, title
--
-- Columns:
--   profile_id  VARCHAR  profile
--   job  VARCHAR  NULL (a finding about one profile)
--   rank  BIGINT  NULL
--   device  VARCHAR  the chip (ops._peaks.hardware_chip) whose roofs apply
--   step  BIGINT  NULL (ops are summed over the complete steps)
--   rule  VARCHAR  low_precision
--   severity  VARCHAR  high, medium or low (xprosql_severity of expected_saving_share)
--   title  VARCHAR  one line a person reads
--   evidence  VARCHAR  the numbers as a sentence
--   measures  MAP(VARCHAR, DOUBLE)  fp32_ps, fp32_share, peak_fp32_flops_per_s, peak_flops_per_s, ops_count
--   subjects  VARCHAR[]  the fp32 GEMM / convolution ops, longest first (PyTorch ops with their input shapes)
--   expected_saving_ps  BIGINT  their time x (1 - fp32 peak / bf16 peak), per device, ps
--   expected_saving_share  DOUBLE  that time's share of step time, 0..1
--   saving_method  VARCHAR  how the saving is estimated
--   fix  VARCHAR  what to change
--   reference  VARCHAR  where the rule comes from
WITH roofline AS (
-- @include ops.roofline
),
peaks AS (
-- @include ops._peaks
),
in_steps AS (
-- @include diagnose._op_step_share
),
profile_steps AS (
-- @include diagnose._profile_steps
),
-- f32 dots and convolutions of the HLO, and the custom-calls to GEMM / convolution libraries.
f32_math AS (
    SELECT profile_id, program_id, computation, hlo_op
    FROM hlo_ops
    WHERE (opcode IN ('dot', 'convolution')
           OR (opcode = 'custom-call' AND regexp_matches(lower(coalesce(custom_call_target, '')), '(gemm|matmul|blas|conv)')))
      AND len(operand_shapes) >= 2
      AND starts_with(operand_shapes[1], 'f32[') AND starts_with(operand_shapes[2], 'f32[')
),
-- The XLA ops that run them: the instruction itself, or a fusion whose body holds one.
xla_fp32 AS (
    SELECT DISTINCT profile_id, program_id, hlo_op AS op FROM f32_math
    UNION
    SELECT DISTINCT h.profile_id, h.program_id, h.hlo_op
    FROM hlo_ops AS h
    JOIN f32_math AS m ON m.profile_id = h.profile_id AND m.program_id = h.program_id
     AND list_contains(h.called_computations, m.computation)
    WHERE h.opcode = 'fusion'
),
fp32_ops AS (
    SELECT r.profile_id, r.device_kind, r.op, r.input_shapes, r.self_time_ps,
        r.self_time_ps * coalesce(s.in_step_share, 1.0) AS step_time_ps
    FROM roofline AS r
    LEFT JOIN in_steps AS s
      ON s.profile_id = r.profile_id AND s.device_kind = r.device_kind AND s.program_id IS NOT DISTINCT FROM r.program_id
     AND s.op = r.op AND s.input_shapes IS NOT DISTINCT FROM r.input_shapes AND s.input_dtypes IS NOT DISTINCT FROM r.input_dtypes
    WHERE r.row_kind = 'op'
      AND (
            (r.precision = 'fp32' AND regexp_matches(r.op,
                '^aten::(mm|addmm|bmm|baddbmm|matmul|linear|_?convolution|convolution_backward|conv[a-z0-9_]*|cudnn_convolution[a-z_]*|miopen_convolution[a-z_]*)$'))
         OR EXISTS (SELECT 1 FROM xla_fp32 AS x
                    WHERE x.profile_id = r.profile_id AND x.program_id = r.program_id AND x.op = r.op)
      )
),
per_profile AS (
    SELECT
        o.profile_id,
        any_value(pk.hardware_chip) AS chip,
        max(pk.peak_flops_per_s) AS peak_flops_per_s,
        max(pk.peak_fp32_flops_per_s) AS peak_fp32_flops_per_s,
        count(*) AS ops,
        sum(o.step_time_ps) AS fp32_ps,
        sum(o.step_time_ps * (1 - pk.peak_fp32_flops_per_s / pk.peak_flops_per_s)) AS saving_ps,
        list(o.op || coalesce(' ' || o.input_shapes, '') ORDER BY o.step_time_ps DESC, o.op, o.input_shapes) AS subjects
    FROM fp32_ops AS o
    JOIN peaks AS pk USING (profile_id, device_kind)
    WHERE pk.peak_fp32_flops_per_s < pk.peak_flops_per_s
    GROUP BY o.profile_id
),
found AS (
    SELECT p.*, s.devices, s.step_ps, s.device_step_ps,
        least(p.saving_ps / nullif(s.device_step_ps, 0), 1.0) AS share
    FROM per_profile AS p
    JOIN profile_steps AS s USING (profile_id)
    WHERE p.saving_ps / nullif(s.device_step_ps, 0) >= CAST($min_share AS DOUBLE)
)
SELECT
    f.profile_id,
    CAST(NULL AS VARCHAR) AS job,
    CAST(NULL AS BIGINT) AS rank,
    f.chip AS device,
    CAST(NULL AS BIGINT) AS step,
    'low_precision' AS rule,
    xprosql_severity(f.share) AS severity,
    printf('fp32 matrix math: %d GEMM/convolution ops run in fp32 on %s, whose bf16 roof is %.0fx faster',
        f.ops, f.chip, f.peak_flops_per_s / f.peak_fp32_flops_per_s) AS title,
    printf('%s of %s step time per device (%.1f%%) runs fp32 GEMMs and convolutions on %s (fp32 roof %.1f TFLOP/s, bf16 %.1f TFLOP/s): %s',
        xprosql_duration(f.fp32_ps / f.devices), xprosql_duration(f.step_ps), 100 * f.fp32_ps / f.device_step_ps,
        f.chip, f.peak_fp32_flops_per_s / 1e12, f.peak_flops_per_s / 1e12, array_to_string(f.subjects[1:5], '; ')) AS evidence,
    MAP {'fp32_ps': CAST(f.fp32_ps AS DOUBLE), 'fp32_share': f.fp32_ps / f.device_step_ps,
         'peak_fp32_flops_per_s': f.peak_fp32_flops_per_s, 'peak_flops_per_s': f.peak_flops_per_s,
         'ops_count': CAST(f.ops AS DOUBLE)} AS measures,
    f.subjects[1:5] AS subjects,
    CAST(f.share * f.step_ps AS BIGINT) AS expected_saving_ps,
    f.share AS expected_saving_share,
    'the fp32 GEMM and convolution time inside complete steps x (1 - fp32 peak / bf16 peak) of the chip (ops._peaks): '
        || 'an upper bound, reached by compute-bound ops; memory-bound ones gain about 2x, TF32 ones at most 2x' AS saving_method,
    'Run the matrix math in bf16: PyTorch with torch.autocast(device_type="cuda", dtype=torch.bfloat16) around the forward '
        || 'pass, or at least TF32: torch.backends.cuda.matmul.allow_tf32 = True / torch.set_float32_matmul_precision("high") '
        || 'and torch.backends.cudnn.allow_tf32 = True; JAX: bf16 parameters and activations (jnp.bfloat16), or '
        || 'jax.default_matmul_precision("bfloat16") / jax.config.update("jax_default_matmul_precision", "bfloat16")' AS fix,
    'Chip data sheets (fp32 vs bf16 dense peaks, xprosql.models.hardware); NVIDIA "Train With Mixed Precision" guide; '
        || 'PyTorch "Automatic Mixed Precision" and torch.set_float32_matmul_precision docs' AS reference
FROM found AS f
ORDER BY expected_saving_ps DESC, f.profile_id
