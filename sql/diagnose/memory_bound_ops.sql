-- diagnose.memory_bound_ops: the ops that take the most time while the roofline calls them
-- memory-bound, and the time they would save running at their memory roof.
--
-- An op is memory-bound as ops.memory_bound calls it (the roofline, included below with its
-- numbers): a memory (HBM, VMEM, CMEM) is its most utilized resource, it has cost data, and it
-- is no collective. Left out: async pairs (copy-start / copy-done, ...: their bytes move over a
-- window, mostly to or from the host, whose link and not HBM bounds them; the host-offload and
-- transfer rules are about them). Of the rest, the $top ops by time (self time summed over the
-- profile's devices) are the finding's subjects.
--
-- Saving: an op cannot run faster than its roofline time, max(FLOPs / peak FLOP/s, bytes /
-- peak bandwidth) for each of its memories (TraceLens's roofline time; ops.roofline's peaks and
-- bytes). What it takes beyond that, time - roofline time, is what fusing it with its neighbours,
-- a better layout or not materialising intermediates could win back at most: the saving is that
-- headroom summed over the $top ops, bounded by their time (never below 0). Each op's time
-- counts only inside complete steps (diagnose._op_step_share: the roofline sums the whole
-- profile). An upper bound: a fused kernel still moves its inputs and outputs at the roof.
-- One finding per profile whose $top memory-bound ops could save at least $min_share of step time.
--
-- Deliberate difference from XProf: XProf's memory-bound verdict is for the whole program (HBM
-- utilization above 70% and MXU below 50%, ops.memory_bound's profile rows); this rule looks at
-- the ops, whose headroom is what a fix recovers, whatever the program's verdict.
--
-- Parameters:
--   $top  BIGINT  memory-bound ops counted, by time [range: 1..] (default: 5)
--   $min_share  DOUBLE  saving share of step time from which the rule fires; XProf's "moderate" 5% of its overview's bottleneck levels [range: 0..1] (default: 0.05)
--
-- Passes: $peak_flops_per_s $peak_hbm_bytes_per_s $peak_source (to ops.roofline: the roofs)
--
-- Show: profile_id, rule, severity, expected_saving_share, title
--
-- Columns:
--   profile_id  VARCHAR  profile
--   job  VARCHAR  NULL (a finding about one profile)
--   rank  BIGINT  NULL
--   device  VARCHAR  NULL (ops are summed over the profile's devices)
--   step  BIGINT  NULL (ops are summed over the complete steps)
--   rule  VARCHAR  memory_bound_ops
--   severity  VARCHAR  high, medium or low (xprosql_severity of expected_saving_share)
--   title  VARCHAR  one line a person reads
--   evidence  VARCHAR  the numbers as a sentence
--   measures  MAP(VARCHAR, DOUBLE)  memory_bound_ps, roofline_ps, headroom_ps, hbm_utilization_share, memory_bound_share, ops_count
--   subjects  VARCHAR[]  the $top memory-bound ops, longest first (PyTorch ops with their input shapes)
--   expected_saving_ps  BIGINT  their time beyond their roofline time, per device, ps
--   expected_saving_share  DOUBLE  that time's share of step time, 0..1
--   saving_method  VARCHAR  how the saving is estimated
--   fix  VARCHAR  what to change
--   reference  VARCHAR  where the rule comes from
WITH roofline AS (
-- @include ops.roofline
),
in_steps AS (
-- @include diagnose._op_step_share
),
profile_steps AS (
-- @include diagnose._profile_steps
),
-- ops.memory_bound's classification, on the roofline's op rows.
memory_bound AS (
    SELECT r.*, coalesce(s.in_step_share, 1.0) AS in_step_share
    FROM roofline AS r
    LEFT JOIN in_steps AS s
      ON s.profile_id = r.profile_id AND s.device_kind = r.device_kind AND s.program_id IS NOT DISTINCT FROM r.program_id
     AND s.op = r.op AND s.input_shapes IS NOT DISTINCT FROM r.input_shapes AND s.input_dtypes IS NOT DISTINCT FROM r.input_dtypes
    WHERE r.row_kind = 'op'
      AND xprosql_collective(r.op, r.category) IS NULL
      AND r.cost_source IS NOT NULL
      AND r.bound_by IN ('HBM', 'VMEM read', 'VMEM write', 'CMEM read', 'CMEM write')
      AND r.async_window_ps IS NULL
),
costed AS (
    SELECT
        *,
        -- The roofline time: the slowest roof the op's FLOPs and bytes allow, ps.
        1e12 * greatest(
            coalesce(flops / nullif(peak_flops_per_s, 0), 0),
            coalesce(hbm_bytes / nullif(peak_hbm_bytes_per_s, 0), 0),
            coalesce(vmem_read_bytes / nullif(peak_vmem_read_bytes_per_s, 0), 0),
            coalesce(vmem_write_bytes / nullif(peak_vmem_write_bytes_per_s, 0), 0),
            coalesce(cmem_read_bytes / nullif(peak_cmem_read_bytes_per_s, 0), 0),
            coalesce(cmem_write_bytes / nullif(peak_cmem_write_bytes_per_s, 0), 0)
        ) AS roofline_ps
    FROM memory_bound
),
ranked AS (
    SELECT
        *,
        self_time_ps * in_step_share AS step_time_ps,
        least(roofline_ps, self_time_ps) * in_step_share AS step_roofline_ps,
        hbm_bytes / nullif(peak_hbm_bytes_per_s, 0) * 1e12 * in_step_share AS step_hbm_roof_ps,
        op || coalesce(' ' || input_shapes, '') AS subject,
        row_number() OVER (PARTITION BY profile_id ORDER BY self_time_ps DESC, program_id, op, input_shapes, input_dtypes) AS rank_by_time
    FROM costed
    QUALIFY rank_by_time <= CAST($top AS BIGINT)
),
per_profile AS (
    SELECT
        profile_id,
        count(*) AS ops,
        sum(step_time_ps) AS memory_bound_ps,
        sum(step_roofline_ps) AS roofline_ps,
        sum(least(step_hbm_roof_ps, step_time_ps)) AS hbm_roof_ps,
        list(subject ORDER BY rank_by_time) AS subjects,
        -- each op's time per device inside complete steps, its share of HBM bandwidth
        list(printf('%s (%s, %.0f%% of HBM bandwidth)', subject, xprosql_duration(step_time_ps / s.devices),
                    100 * coalesce(hbm_utilization, 0)) ORDER BY rank_by_time) AS described
    FROM ranked
    JOIN profile_steps AS s USING (profile_id)
    GROUP BY profile_id
),
found AS (
    SELECT
        p.*, s.devices, s.step_ps, s.device_step_ps,
        greatest(p.memory_bound_ps - p.roofline_ps, 0) AS headroom_ps,
        least(greatest(p.memory_bound_ps - p.roofline_ps, 0) / nullif(s.device_step_ps, 0), 1.0) AS share
    FROM per_profile AS p
    JOIN profile_steps AS s USING (profile_id)
    WHERE greatest(p.memory_bound_ps - p.roofline_ps, 0) / nullif(s.device_step_ps, 0) >= CAST($min_share AS DOUBLE)
)
SELECT
    f.profile_id,
    CAST(NULL AS VARCHAR) AS job,
    CAST(NULL AS BIGINT) AS rank,
    CAST(NULL AS VARCHAR) AS device,
    CAST(NULL AS BIGINT) AS step,
    'memory_bound_ops' AS rule,
    xprosql_severity(f.share) AS severity,
    printf('memory-bound ops: %d ops limited by memory bandwidth could save %.1f%% of step time at their roofline',
        f.ops, 100 * f.share) AS title,
    printf('%s of %s step time per device runs the top %d memory-bound ops (%.1f%%), whose roofline time is %s: %s',
        xprosql_duration(f.memory_bound_ps / f.devices), xprosql_duration(f.step_ps), f.ops,
        100 * f.memory_bound_ps / f.device_step_ps, xprosql_duration(f.roofline_ps / f.devices),
        array_to_string(f.described[1:5], '; ')) AS evidence,
    MAP {'memory_bound_ps': CAST(f.memory_bound_ps AS DOUBLE), 'roofline_ps': CAST(f.roofline_ps AS DOUBLE),
         'headroom_ps': CAST(f.headroom_ps AS DOUBLE),
         'hbm_utilization_share': f.hbm_roof_ps / nullif(f.memory_bound_ps, 0),
         'memory_bound_share': f.memory_bound_ps / f.device_step_ps, 'ops_count': CAST(f.ops AS DOUBLE)} AS measures,
    f.subjects[1:5] AS subjects,
    CAST(f.share * f.step_ps AS BIGINT) AS expected_saving_ps,
    f.share AS expected_saving_share,
    'the top ops'' time beyond their roofline time, max(FLOPs / peak FLOP/s, bytes / peak bandwidth) with ops.roofline''s '
        || 'peaks and bytes, summed over the ops and devices inside complete steps: an upper bound, bounded by the ops'' time' AS saving_method,
    'Cut the bytes these ops move: fuse them with their producers and consumers (torch.compile(model); JAX/XLA fuses inside '
        || 'jax.jit: check XLA_FLAGS=--xla_dump_to for unfused ops), avoid materialising intermediates (in-place ops, '
        || 'fused optimizers: torch.optim.AdamW(fused=True)), keep layouts contiguous (no transpose copies), and raise '
        || 'arithmetic intensity (larger batch per kernel, lower-precision activations)' AS fix,
    'XProf roofline model and its memory-bound program verdict (HBM utilization > 70%, MXU < 50%); TraceLens roofline time '
        || 'max(FLOPs/peak, bytes/bandwidth); NVIDIA "GPU Performance Background User''s Guide": memory-limited operations' AS reference
FROM found AS f
ORDER BY expected_saving_ps DESC, f.profile_id
