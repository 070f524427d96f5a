-- diagnose.matmul_shapes: compute-bound matrix multiplies whose M, N or K is not a multiple of
-- the matrix unit's tile, so the unit computes padding.
--
-- Tiles: NVIDIA tensor cores want M, N, K multiples of 8 for fp16 / bf16 and of 16 for int8 / fp8
-- (NVIDIA "Matrix Multiplication Background User's Guide", Tensor Core requirements; "Deep Learning
-- Performance" guide); fp32 GEMMs (no tensor cores unless TF32) are diagnose.low_precision's.
-- TPU MXUs are 128 x 128 on v4 / v5e / v5p and 256 x 256 on v6e and later (Cloud TPU "Performance
-- guide": choose dimensions that are multiples of 128). The chip comes from ops._peaks (the
-- roofline's match of devices.model on the chip table). AMD GPUs and CPUs have no tile here: pass
-- $tile to check them against one.
--
-- The GEMMs: PyTorch aten::mm, addmm, bmm, baddbmm, matmul and linear, M, N, K from their Input
-- Dims (ops.roofline's input_shapes, as Kineto's record_shapes wrote them; linear's M is the
-- product of its input's leading dims); XLA dots (hlo_ops: operand shapes and dot dimension
-- numbers, M and N the products of the non-contracting, non-batch dims), as the op that runs them:
-- the dot itself or a fusion whose body holds it. Only ops the roofline calls compute-bound count:
-- a memory-bound GEMM (a GEMV, M = 1 decoding) moves the same bytes padded or not.
--
-- Saving: the unit computes ceil(M/t)t x ceil(N/t)t x ceil(K/t)t multiply-adds for M x N x K useful
-- ones; at the compute roof the op's time scales with the padded work, so aligned shapes would
-- take useful / padded of it: the saving is time x (1 - useful / padded) (summed over an op's
-- dots, weighted by their work), with the op's time inside complete steps
-- (diagnose._op_step_share). An estimate: libraries pick tile shapes larger than the unit's, and
-- misaligned fp16 GEMMs on old cuBLAS leave the tensor cores entirely (slower than this says).
-- One finding per profile whose misaligned GEMMs could save at least $min_share of step time.
--
-- Parameters:
--   $tile  BIGINT  one tile for every device and precision, overriding the chip's; NULL: the chip's (NVIDIA tensor cores by dtype, TPU MXU by generation) [range: 1..] (default: NULL)
--   $min_share  DOUBLE  saving share of step time from which the rule fires: padding wastes a few percent of a GEMM, so a hundredth of the step is worth a change of shapes [range: 0..1] (default: 0.01)
--
-- Passes: $peak_flops_per_s $peak_hbm_bytes_per_s $peak_source (to ops.roofline and ops._peaks: the roofs that say compute-bound)
--
-- Show: profile_id, rule, severity, expected_saving_share, title
--
-- Columns:
--   profile_id  VARCHAR  profile
--   job  VARCHAR  NULL (a finding about one profile)
--   rank  BIGINT  NULL
--   device  VARCHAR  the chip (ops._peaks.hardware_chip), NULL when $tile is given for an unknown one
--   step  BIGINT  NULL (ops are summed over the complete steps)
--   rule  VARCHAR  matmul_shapes
--   severity  VARCHAR  high, medium or low (xprosql_severity of expected_saving_share)
--   title  VARCHAR  one line a person reads
--   evidence  VARCHAR  the numbers as a sentence
--   measures  MAP(VARCHAR, DOUBLE)  misaligned_ps, misaligned_share, padding_waste_share, tile_count, ops_count
--   subjects  VARCHAR[]  the misaligned GEMMs with M, N, K, largest saving first
--   expected_saving_ps  BIGINT  their time x (1 - useful / padded work), per device, ps
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
-- PyTorch GEMMs: the operands' dims from Input Dims.
torch_operands AS (
    SELECT profile_id, device_kind, program_id, op, input_shapes, input_dtypes, precision,
        CASE WHEN op IN ('aten::addmm', 'aten::baddbmm') THEN CAST(json_extract(input_shapes, '$[1]') AS BIGINT[])
             ELSE CAST(json_extract(input_shapes, '$[0]') AS BIGINT[]) END AS a,
        CASE WHEN op IN ('aten::addmm', 'aten::baddbmm') THEN CAST(json_extract(input_shapes, '$[2]') AS BIGINT[])
             ELSE CAST(json_extract(input_shapes, '$[1]') AS BIGINT[]) END AS b
    FROM roofline
    WHERE row_kind = 'op' AND input_shapes IS NOT NULL
      AND op IN ('aten::mm', 'aten::addmm', 'aten::bmm', 'aten::baddbmm', 'aten::matmul', 'aten::linear')
),
torch_gemms AS (
    SELECT profile_id, device_kind, program_id, op, input_shapes, input_dtypes, precision,
        CASE WHEN op = 'aten::linear' THEN coalesce(list_aggregate(a[1:len(a) - 1], 'product'), 1) ELSE a[len(a) - 1] END AS m,
        CASE WHEN op = 'aten::linear' THEN b[1] ELSE b[len(b)] END AS n,
        a[len(a)] AS k,
        CASE WHEN op = 'aten::linear' THEN 1 ELSE coalesce(list_aggregate(a[1:len(a) - 2], 'product'), 1) END AS batch
    FROM torch_operands
    WHERE len(a) >= 2 AND len(b) >= 2
),
-- XLA dots: dims of the operands, split by the dot's dimension numbers (0-based).
dots AS (
    SELECT profile_id, program_id, computation, hlo_op,
        lower(regexp_extract(operand_shapes[1], '^([a-z0-9]+)\[', 1)) AS element_type,
        list_filter(list_transform(string_split(regexp_extract(operand_shapes[1], '\[([0-9,]*)\]', 1), ','),
                                   lambda x: TRY_CAST(x AS BIGINT)), lambda x: x IS NOT NULL) AS l,
        list_filter(list_transform(string_split(regexp_extract(operand_shapes[2], '\[([0-9,]*)\]', 1), ','),
                                   lambda x: TRY_CAST(x AS BIGINT)), lambda x: x IS NOT NULL) AS r,
        coalesce(dot_lhs_contracting_dims, []) AS lc, coalesce(dot_rhs_contracting_dims, []) AS rc,
        coalesce(dot_lhs_batch_dims, []) AS lb, coalesce(dot_rhs_batch_dims, []) AS rb
    FROM hlo_ops
    WHERE opcode = 'dot' AND len(operand_shapes) >= 2
),
dot_dims AS (
    SELECT profile_id, program_id, computation, hlo_op,
        CASE WHEN element_type IN ('bf16', 'f16') THEN 'bf16'
             WHEN element_type LIKE 'f8%' OR element_type IN ('s8', 'u8') THEN 'fp8'
             WHEN element_type = 'f32' THEN 'fp32' ELSE element_type END AS precision,
        coalesce(list_aggregate(list_filter(list_transform(l, lambda x, i: CASE WHEN NOT list_contains(lc, i - 1) AND NOT list_contains(lb, i - 1) THEN x END), lambda x: x IS NOT NULL), 'product'), 1) AS m,
        coalesce(list_aggregate(list_filter(list_transform(r, lambda x, i: CASE WHEN NOT list_contains(rc, i - 1) AND NOT list_contains(rb, i - 1) THEN x END), lambda x: x IS NOT NULL), 'product'), 1) AS n,
        coalesce(list_aggregate(list_filter(list_transform(l, lambda x, i: CASE WHEN list_contains(lc, i - 1) THEN x END), lambda x: x IS NOT NULL), 'product'), 1) AS k,
        coalesce(list_aggregate(list_filter(list_transform(l, lambda x, i: CASE WHEN list_contains(lb, i - 1) THEN x END), lambda x: x IS NOT NULL), 'product'), 1) AS batch
    FROM dots
),
-- The XLA ops that run them: the dot itself, or the fusion whose body holds it.
xla_gemms AS (
    SELECT d.profile_id, d.program_id, d.hlo_op AS op, d.precision, d.m, d.n, d.k, d.batch FROM dot_dims AS d
    UNION ALL
    SELECT h.profile_id, h.program_id, h.hlo_op, d.precision, d.m, d.n, d.k, d.batch
    FROM hlo_ops AS h
    JOIN dot_dims AS d ON d.profile_id = h.profile_id AND d.program_id = h.program_id
     AND list_contains(h.called_computations, d.computation)
    WHERE h.opcode = 'fusion'
),
gemms AS (
    SELECT r.profile_id, r.device_kind, r.program_id, r.op, r.input_shapes, r.input_dtypes, r.self_time_ps,
        r.bound_by, g.precision, CAST(g.m AS DOUBLE) AS m, CAST(g.n AS DOUBLE) AS n, CAST(g.k AS DOUBLE) AS k,
        CAST(g.batch AS DOUBLE) AS batch
    FROM roofline AS r
    JOIN xla_gemms AS g ON g.profile_id = r.profile_id AND g.program_id = r.program_id AND g.op = r.op
    WHERE r.row_kind = 'op'
    UNION ALL
    SELECT t.profile_id, t.device_kind, t.program_id, t.op, t.input_shapes, t.input_dtypes, r.self_time_ps,
        r.bound_by, t.precision, t.m, t.n, t.k, t.batch
    FROM torch_gemms AS t
    JOIN roofline AS r
      ON r.row_kind = 'op' AND r.profile_id = t.profile_id AND r.device_kind = t.device_kind
     AND r.program_id IS NOT DISTINCT FROM t.program_id AND r.op = t.op
     AND r.input_shapes IS NOT DISTINCT FROM t.input_shapes AND r.input_dtypes IS NOT DISTINCT FROM t.input_dtypes
),
-- The tile of each GEMM's matrix unit.
tiled AS (
    SELECT g.*, pk.hardware_chip,
        coalesce(CAST($tile AS BIGINT),
            CASE
                WHEN g.device_kind = 'tpu' AND pk.hardware_chip IN ('TPU v4', 'TPU v5e', 'TPU v5p') THEN 128
                WHEN g.device_kind = 'tpu' AND pk.hardware_chip IN ('TPU v6e', 'TPU7x') THEN 256
                WHEN g.device_kind = 'gpu' AND NOT starts_with(coalesce(pk.hardware_chip, 'MI'), 'MI')
                THEN CASE WHEN g.precision IN ('bf16', 'fp16') THEN 8 WHEN g.precision IN ('fp8', 'int8') THEN 16 END
            END) AS tile
    FROM gemms AS g
    LEFT JOIN peaks AS pk USING (profile_id, device_kind)
    WHERE g.bound_by = 'compute' AND g.m > 0 AND g.n > 0 AND g.k > 0
),
per_op AS (
    SELECT profile_id, device_kind, program_id, op, input_shapes, input_dtypes,
        any_value(hardware_chip) AS hardware_chip, any_value(tile) AS tile, any_value(self_time_ps) AS self_time_ps,
        sum(batch * m * n * k) AS useful,
        sum(batch * ceil(m / tile) * tile * ceil(n / tile) * tile * ceil(k / tile) * tile) AS padded,
        -- the largest dot's dims, for the evidence
        arg_max(printf('M=%d N=%d K=%d', CAST(m AS BIGINT), CAST(n AS BIGINT), CAST(k AS BIGINT)), batch * m * n * k) AS dims
    FROM tiled
    WHERE tile IS NOT NULL
    GROUP BY ALL
),
wasted AS (
    SELECT o.*, o.self_time_ps * coalesce(s.in_step_share, 1.0) AS step_time_ps,
        1 - o.useful / o.padded AS waste,
        o.self_time_ps * coalesce(s.in_step_share, 1.0) * (1 - o.useful / o.padded) AS saving_ps,
        o.op || coalesce(' ' || o.input_shapes, '') || printf(' (%s, tile %d)', o.dims, o.tile) AS subject
    FROM per_op AS o
    LEFT JOIN in_steps AS s
      ON s.profile_id = o.profile_id AND s.device_kind = o.device_kind AND s.program_id IS NOT DISTINCT FROM o.program_id
     AND s.op = o.op AND s.input_shapes IS NOT DISTINCT FROM o.input_shapes AND s.input_dtypes IS NOT DISTINCT FROM o.input_dtypes
    WHERE o.padded > o.useful
),
per_profile AS (
    SELECT profile_id,
        any_value(hardware_chip) AS chip,
        count(*) AS ops,
        min(tile) AS tile,
        sum(step_time_ps) AS misaligned_ps,
        sum(saving_ps) AS saving_ps,
        list(subject ORDER BY saving_ps DESC, subject) AS subjects,
        list(printf('%s: %.1f%% padding', subject, 100 * waste) ORDER BY saving_ps DESC, subject) AS described
    FROM wasted
    GROUP BY profile_id
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
    'matmul_shapes' AS rule,
    xprosql_severity(f.share) AS severity,
    printf('misaligned GEMM shapes: %d compute-bound matrix multiplies have dimensions that are not multiples of the %d-wide matrix unit',
        f.ops, f.tile) AS title,
    printf('%s of %s step time per device (%.1f%%) runs GEMMs with M, N or K off the tile; padded work would waste %s of it: %s',
        xprosql_duration(f.misaligned_ps / f.devices), xprosql_duration(f.step_ps), 100 * f.misaligned_ps / f.device_step_ps,
        xprosql_duration(f.saving_ps / f.devices), array_to_string(f.described[1:5], '; ')) AS evidence,
    MAP {'misaligned_ps': CAST(f.misaligned_ps AS DOUBLE), 'misaligned_share': f.misaligned_ps / f.device_step_ps,
         'padding_waste_share': f.saving_ps / nullif(f.misaligned_ps, 0), 'tile_count': CAST(f.tile AS DOUBLE),
         'ops_count': CAST(f.ops AS DOUBLE)} AS measures,
    f.subjects[1:5] AS subjects,
    CAST(f.share * f.step_ps AS BIGINT) AS expected_saving_ps,
    f.share AS expected_saving_share,
    'each misaligned compute-bound GEMM''s time inside complete steps x (1 - M*N*K / padded M*N*K), each dim rounded up '
        || 'to the tile: the matrix unit''s wasted work, an estimate (libraries tile coarser; old cuBLAS leaves tensor cores)' AS saving_method,
    'Pad the model''s dimensions to multiples of the tile (64 or 128 is safe on every chip): vocabulary size (e.g. '
        || 'pad_to_multiple_of=64 / resize_token_embeddings), hidden and FFN sizes, attention head dims; choose batch and '
        || 'sequence lengths (M) as multiples of 8 on NVIDIA GPUs and of 128 / 256 on TPUs (pad or bucket sequences)' AS fix,
    'NVIDIA "Matrix Multiplication Background User''s Guide" (Tensor Core requirements: multiples of 8 for FP16/BF16, 16 for '
        || 'INT8/FP8) and "Deep Learning Performance" guide; Cloud TPU "Performance guide" (MXU 128x128, 256x256 on v6e)' AS reference
FROM found AS f
ORDER BY expected_saving_ps DESC, f.profile_id
