-- ops.roofline: where each op sits under its device's roofs (peak FLOP/s and memory
-- bandwidths), for one profile or thousands, in one query.
--
-- One row per (profile_id, device_kind, program_id, op, input_shapes, input_dtypes)
-- (the shapes and dtypes of PyTorch ops; NULL for XLA ops), plus a total per
-- program and per (profile, device kind) built the way XProf builds its
-- "Program" row: FLOPs and bytes summed over innermost ops only (categories
-- call, conditional, while and megacore fusion hold other ops), HBM bytes from
-- the summed memory breakdown (all bytes count as HBM when no op has one).
--
-- Built on the op_stats table (sql/ops/_op_stats.sql, stored per profile at
-- ingest): which events are ops, self time (nesting), cost data, memory
-- breakdowns. An op without a breakdown counts all its bytes as HBM (XProf's rule).
--
-- Where an op's FLOPs and bytes come from (cost_source), best first:
--   profile        the profile's own op stats (flops, bytes_accessed: XLA's TPU compiler)
--   declared       what the kernel's author declared: a Pallas / Mosaic TPU kernel's
--                  cost_estimate in its custom call's backend config; a torch.compile /
--                  Inductor kernel's kernel_flop and kernel_num_gb args (Kineto)
--   triton_gemm    a fusion XLA runs as a Triton GEMM (__triton_gemm,
--                  __triton_nested_gemm_fusion): 2*M*N*K of the dots in its HLO body;
--                  bytes its operands and results
--   library        a known library custom call, by target name and operand shapes:
--                  fused attention (cuDNN __cudnn$fmha*, Transformer Engine
--                  te_fused_attn_* on cuDNN or CK; forward and backward, causal, GQA:
--                  xprosql.models.torch_costs's attention formulas), cuBLAS / hipBLASLt
--                  GEMMs (__cublas$gemm, __cublas$lt$matmul: 2 x output x contracting
--                  size), cuDNN / MIOpen convolutions (__cudnn$conv*)
--   hlo            XLA's cost rules over the embedded HLO (hlo_ops.derived_*)
--   trace, shapes  PyTorch ops: the trace's flops arg; TraceLens's formulas from the
--                  recorded shapes (xprosql.models.torch_costs)
--   operand_bytes  any other custom call, or a compiled PyTorch kernel that declares
--                  nothing: the bytes of its operands and results, a lower bound, and
--                  FLOPs unknown (NULL): bound_by 'unknown', as the op cannot be placed
--   NULL           no cost data: bound_by 'unknown'
--
-- Peaks per (profile, device kind): ops._peaks (included below) says which
-- roof each peak is and where it comes from ($peak_* parameters, the profile's
-- device stats, or the chip table). A PyTorch op computing in fp32 or fp8 (its
-- precision) has the chip's fp32 or fp8 roof when the chip table has one; others,
-- and total rows, the bf16/fp16 matrix roof.
--
-- PyTorch (Kineto) traces: an op's time is the GPU time of the kernels, copies
-- and memsets it launched (op_stats; framework_op_kernels says which op each
-- belongs to), its FLOPs and bytes those of xprosql.models.torch_costs (TraceLens's
-- formulas for GEMM, convolution and attention) or the trace's flops arg. GPU work
-- that no op launched in the trace keeps its kernel name and has no cost data.
--
-- Deliberate differences from XProf: the bytes of an async pair (copy-start /
-- copy-done, ...) move during the pair's window (op_stats.async_window_ps).
-- XProf divides them by the few nanoseconds of the start op (hundreds of
-- millions of GiB/s in the TPU sample); here both ops' bandwidths are bytes
-- over their pairs' windows. On GPU XSpace profiles (tests/data/h200: the roof,
-- SMs x clock x the per-SM matrix rate, and every op's time equal), a cuBLAS GEMM
-- custom call's FLOPs and bytes are the GEMM's (library): XProf counts both twice,
-- which puts the H200's GEMMs at 1.3-1.5x its own roof; and an elementwise fusion
-- counts one FLOP per arithmetic element op, where XProf weighs them by XLA's GPU
-- cost model (3-22x ours): bytes, bound_by and efficiency agree, as those fusions
-- are memory-bound.
--
-- Needs: ops: TPU XLA Ops, GPU kernels, or XLA ops on a host without accelerators
--
-- Parameters:
--   $top                   BIGINT     op rows kept per (profile, device kind), by self time; NULL for all [range: 1..] (default: NULL)
--
-- Passes: $peak_flops_per_s $peak_hbm_bytes_per_s $peak_source (to ops._peaks, with its defaults and meaning)
--
-- Show: row_kind, profile_id, device_kind, op, category, occurrences, self_time_ps, self_time_share, flop_rate, hbm_bandwidth, operational_intensity, ridge_point, bound_by, roofline_efficiency
--
-- Columns:
--   row_kind  VARCHAR  'op', 'program' (one program's total) or 'profile' (the profile's total on that device kind, XProf's Program row)
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   device_kind  VARCHAR  tpu, gpu or cpu (host planes running XLA:CPU programs)
--   program_id  UBIGINT  XLA program id; NULL on profile rows and for ops without one
--   module  VARCHAR  HLO module name, when known
--   op  VARCHAR  HLO op (events.hlo_op), a PyTorch op (aten::mm), else the event name (a GPU kernel); NULL on total rows
--   input_shapes  VARCHAR  a PyTorch op's Input Dims (JSON); NULL for other ops and total rows
--   input_dtypes  VARCHAR  a PyTorch op's Input type (JSON)
--   precision  VARCHAR  a PyTorch op's dtype class (fp8, bf16, fp16, fp32, ...): which FLOP/s roof applies
--   category  VARCHAR  HLO category from the profile, else the HLO opcode; PyTorch ops: cpu_op
--   cost_source  VARCHAR  where flops and bytes came from, best first: profile (the profile's op stats); declared (the kernel author's: a Pallas/Mosaic cost_estimate, an Inductor kernel's kernel_flop / kernel_num_gb); triton_gemm (an XLA Triton GEMM fusion: 2*M*N*K of its dots); library (a known library custom call by target and operand shapes: cuDNN / Transformer Engine / CK fused attention, cuBLAS / hipBLASLt GEMM, cuDNN / MIOpen convolution); hlo (XLA's cost rules over the HLO); trace, shapes (PyTorch: the trace's flops arg, the shape formulas); operand_bytes (another custom call or compiled kernel: operand and result bytes, a lower bound, FLOPs NULL); NULL (none); total rows: the best of their ops'
--   devices  BIGINT  devices of this kind the op ran on (a host plane running several XLA devices: each counts)
--   occurrences  BIGINT  executions, summed over devices (total rows: over their ops)
--   total_time_ps  BIGINT  time including nested ops, summed over devices, ps; program rows: the program's busy time (its ops' self time); profile rows: device time, as XProf
--   self_time_ps  BIGINT  total_time_ps minus nested ops' time, ps (total rows: summed self time of their ops)
--   device_time_ps  BIGINT  per (profile, device kind): each device's first op start to last op end, summed over devices (XLA devices of a host plane each count), ps
--   self_time_share  DOUBLE  self_time_ps / device_time_ps (XProf's "Total self time (%)" / 100)
--   async_window_ps  BIGINT  async pairs: start-to-done windows of this op's occurrences, summed, ps; NULL otherwise
--   flops  DOUBLE  FLOPs, summed over occurrences
--   bytes_accessed  DOUBLE  bytes read and written, summed over occurrences
--   hbm_bytes  DOUBLE  bytes to and from HBM (breakdown memory space 1, else all bytes)
--   vmem_read_bytes  DOUBLE  VMEM bytes read (breakdown memory space 3); NULL when the profile has no breakdown
--   vmem_write_bytes  DOUBLE  VMEM bytes written
--   cmem_read_bytes  DOUBLE  CMEM bytes read (breakdown memory space 2)
--   cmem_write_bytes  DOUBLE  CMEM bytes written
--   flop_rate  DOUBLE  flops / total time, FLOP/s
--   memory_bandwidth  DOUBLE  bytes_accessed / time (async pairs: their windows), bytes/s
--   hbm_bandwidth  DOUBLE  hbm_bytes / time (async pairs: their windows), bytes/s
--   operational_intensity  DOUBLE  flops / bytes_accessed, FLOP/byte
--   hbm_operational_intensity  DOUBLE  flops / hbm_bytes, FLOP/byte
--   peak_flops_per_s  DOUBLE  compute roof (of the op's precision, see above), FLOP/s
--   peak_hbm_bytes_per_s  DOUBLE  HBM roof, bytes/s
--   peak_vmem_read_bytes_per_s  DOUBLE  VMEM read roof (profile stat), bytes/s
--   peak_vmem_write_bytes_per_s  DOUBLE  VMEM write roof (profile stat), bytes/s
--   peak_cmem_read_bytes_per_s  DOUBLE  CMEM read roof (profile stat), bytes/s
--   peak_cmem_write_bytes_per_s  DOUBLE  CMEM write roof (profile stat), bytes/s
--   peak_flops_source  VARCHAR  ops._peaks.peak_flops_source
--   peak_hbm_source  VARCHAR  ops._peaks.peak_hbm_source
--   device_model  VARCHAR  devices.model of the device kind
--   hardware_chip  VARCHAR  the hardware_models chip matched on device_model, when one matches
--   ridge_point  DOUBLE  peak_flops_per_s / peak_hbm_bytes_per_s, FLOP/byte: ops left of it are HBM-bound
--   flop_utilization  DOUBLE  flop_rate / peak_flops_per_s
--   hbm_utilization  DOUBLE  hbm_bandwidth / peak_hbm_bytes_per_s
--   vmem_read_utilization  DOUBLE  VMEM read bandwidth / its peak, when both are known
--   vmem_write_utilization  DOUBLE  VMEM write bandwidth / its peak
--   cmem_read_utilization  DOUBLE  CMEM read bandwidth / its peak
--   cmem_write_utilization  DOUBLE  CMEM write bandwidth / its peak
--   bound_by  VARCHAR  the resource with the highest utilization: compute, HBM, CMEM read, CMEM write, VMEM read, VMEM write; unknown when none is known and above 0, or when the FLOPs are unknown (ties: that order, as XProf)
--   roofline_efficiency  DOUBLE  the highest utilization (XProf's roofline efficiency)
--   above_roof  BOOLEAN  the highest utilization is above 1: the op beats a roof, so the peaks are too low (a peak measured on a busy machine) or its costs too high; its utilizations may then exceed 1
--   above_roof_reason  VARCHAR  on rows above a roof: which roof, by how much, where its peak came from and what that means; NULL otherwise
WITH params AS (
    SELECT
        CAST($top AS BIGINT) AS top_n
),
stats AS (
    -- An op has a row per device and op_key (a kernel launched with two grids: two keys); its devices count once.
    SELECT *, row_number() OVER (PARTITION BY profile_id, device_kind, program_id, op, input_shapes, input_dtypes, device_id
                                 ORDER BY op_key) = 1 AS first_on_device
    FROM op_stats
),
ops AS MATERIALIZED (
    SELECT
        profile_id, device_kind, program_id, op, input_shapes, input_dtypes,
        any_value(precision) AS precision,
        any_value(module) AS module,
        any_value(category) AS category,
        CASE WHEN bool_or(cost_source = 'profile') THEN 'profile' WHEN bool_or(cost_source = 'declared') THEN 'declared'
             WHEN bool_or(cost_source = 'triton_gemm') THEN 'triton_gemm' WHEN bool_or(cost_source = 'library') THEN 'library'
             WHEN bool_or(cost_source = 'hlo') THEN 'hlo' WHEN bool_or(cost_source = 'trace') THEN 'trace'
             WHEN bool_or(cost_source = 'shapes') THEN 'shapes' WHEN bool_or(cost_source = 'operand_bytes') THEN 'operand_bytes'
        END AS cost_source,
        -- An op's row per device says on how many of the device's XLA devices it ran (older files: 1).
        CAST(sum(coalesce(xla_devices, 1)) FILTER (WHERE first_on_device) AS BIGINT) AS devices,
        CAST(sum(occurrences) AS BIGINT) AS occurrences,
        CAST(sum(total_time_ps) AS BIGINT) AS total_time_ps,
        CAST(sum(self_time_ps) AS BIGINT) AS self_time_ps,
        CAST(sum(async_window_ps) AS BIGINT) AS async_window_ps,
        CAST(sum(bandwidth_time_ps) AS BIGINT) AS bandwidth_time_ps,
        sum(flops) AS flops,
        sum(bytes_accessed) AS bytes_accessed,
        bool_or(has_breakdown) AS has_breakdown,
        sum(breakdown_hbm_bytes) AS breakdown_hbm_bytes,
        CASE WHEN bool_or(has_breakdown) THEN sum(breakdown_hbm_bytes) ELSE sum(bytes_accessed) END AS hbm_bytes,
        CASE WHEN bool_or(has_breakdown) THEN sum(vmem_read_bytes) END AS vmem_read_bytes,
        CASE WHEN bool_or(has_breakdown) THEN sum(vmem_write_bytes) END AS vmem_write_bytes,
        CASE WHEN bool_or(has_breakdown) THEN sum(cmem_read_bytes) END AS cmem_read_bytes,
        CASE WHEN bool_or(has_breakdown) THEN sum(cmem_write_bytes) END AS cmem_write_bytes
    FROM stats
    GROUP BY profile_id, device_kind, program_id, op, input_shapes, input_dtypes
),
device_time AS MATERIALIZED (
    SELECT profile_id, device_kind, CAST(sum(device_time_ps) AS BIGINT) AS device_time_ps
    FROM (
        -- Files written before device_time_ps: the device's first-to-last op span.
        SELECT DISTINCT profile_id, device_kind, device_id,
            coalesce(device_time_ps, device_end_ps - device_start_ps) AS device_time_ps
        FROM stats
    )
    GROUP BY ALL
),
-- Totals per program and per (profile, device kind): XProf's Program row.
totals AS (
    SELECT
        CASE WHEN grouping(program_id) = 0 THEN 'program' ELSE 'profile' END AS row_kind,
        profile_id, device_kind, program_id,
        CASE WHEN grouping(program_id) = 0 THEN any_value(module) END AS module,
        CASE WHEN bool_or(cost_source = 'profile') THEN 'profile' WHEN bool_or(cost_source = 'declared') THEN 'declared'
             WHEN bool_or(cost_source = 'triton_gemm') THEN 'triton_gemm' WHEN bool_or(cost_source = 'library') THEN 'library'
             WHEN bool_or(cost_source = 'hlo') THEN 'hlo' WHEN bool_or(cost_source = 'trace') THEN 'trace'
             WHEN bool_or(cost_source = 'shapes') THEN 'shapes' WHEN bool_or(cost_source = 'operand_bytes') THEN 'operand_bytes'
        END AS cost_source,
        CAST(max(devices) AS BIGINT) AS devices,
        CAST(sum(occurrences) AS BIGINT) AS occurrences,
        CAST(sum(self_time_ps) AS BIGINT) AS self_time_ps,
        CAST(sum(flops) FILTER (WHERE innermost) AS DOUBLE) AS flops,
        CAST(sum(bytes_accessed) FILTER (WHERE innermost) AS DOUBLE) AS bytes_accessed,
        CAST(CASE WHEN bool_or(has_breakdown) FILTER (WHERE innermost)
                  THEN sum(breakdown_hbm_bytes) FILTER (WHERE innermost)
                  ELSE sum(bytes_accessed) FILTER (WHERE innermost) END AS DOUBLE) AS hbm_bytes,
        CAST(sum(vmem_read_bytes) FILTER (WHERE innermost) AS DOUBLE) AS vmem_read_bytes,
        CAST(sum(vmem_write_bytes) FILTER (WHERE innermost) AS DOUBLE) AS vmem_write_bytes,
        CAST(sum(cmem_read_bytes) FILTER (WHERE innermost) AS DOUBLE) AS cmem_read_bytes,
        CAST(sum(cmem_write_bytes) FILTER (WHERE innermost) AS DOUBLE) AS cmem_write_bytes
    FROM (
        SELECT *, lower(coalesce(category, '')) NOT IN ('call', 'conditional', 'while', 'megacore fusion') AS innermost
        FROM ops
    )
    GROUP BY GROUPING SETS ((profile_id, device_kind, program_id), (profile_id, device_kind))
),
all_rows AS (
    SELECT
        'op' AS row_kind, profile_id, device_kind, program_id, module, op, input_shapes, input_dtypes, precision,
        category, cost_source, devices,
        occurrences, total_time_ps, self_time_ps, async_window_ps, bandwidth_time_ps, flops, bytes_accessed,
        hbm_bytes, vmem_read_bytes, vmem_write_bytes, cmem_read_bytes, cmem_write_bytes
    FROM ops CROSS JOIN params AS p
    QUALIFY p.top_n IS NULL
         OR row_number() OVER (PARTITION BY profile_id, device_kind
                               ORDER BY self_time_ps DESC, program_id, op, input_shapes, input_dtypes) <= p.top_n
    UNION ALL
    SELECT
        t.row_kind, t.profile_id, t.device_kind, t.program_id, t.module, NULL, NULL, NULL, NULL, NULL, t.cost_source,
        t.devices,
        t.occurrences,
        CASE WHEN t.row_kind = 'profile' THEN dt.device_time_ps ELSE t.self_time_ps END,
        t.self_time_ps, NULL,
        CASE WHEN t.row_kind = 'profile' THEN dt.device_time_ps ELSE t.self_time_ps END,
        t.flops, t.bytes_accessed, t.hbm_bytes, t.vmem_read_bytes, t.vmem_write_bytes, t.cmem_read_bytes,
        t.cmem_write_bytes
    FROM totals AS t
    LEFT JOIN device_time AS dt USING (profile_id, device_kind)
),
peaks AS (
-- @include ops._peaks
),
rates AS (
    SELECT
        r.*,
        dt.device_time_ps,
        r.flops / (nullif(r.total_time_ps, 0) * 1e-12) AS flop_rate,
        r.bytes_accessed / (nullif(r.bandwidth_time_ps, 0) * 1e-12) AS memory_bandwidth,
        r.hbm_bytes / (nullif(r.bandwidth_time_ps, 0) * 1e-12) AS hbm_bandwidth,
        r.vmem_read_bytes / (nullif(r.bandwidth_time_ps, 0) * 1e-12) AS vmem_read_bandwidth,
        r.vmem_write_bytes / (nullif(r.bandwidth_time_ps, 0) * 1e-12) AS vmem_write_bandwidth,
        r.cmem_read_bytes / (nullif(r.bandwidth_time_ps, 0) * 1e-12) AS cmem_read_bandwidth,
        r.cmem_write_bytes / (nullif(r.bandwidth_time_ps, 0) * 1e-12) AS cmem_write_bandwidth,
        pk.* EXCLUDE (profile_id, device_kind, peak_flops_per_s, peak_fp32_flops_per_s, peak_fp8_flops_per_s),
        CASE r.precision
            WHEN 'fp32' THEN coalesce(pk.peak_fp32_flops_per_s, pk.peak_flops_per_s)
            WHEN 'fp8' THEN coalesce(pk.peak_fp8_flops_per_s, pk.peak_flops_per_s)
            ELSE pk.peak_flops_per_s
        END AS peak_flops_per_s
    FROM all_rows AS r
    LEFT JOIN device_time AS dt USING (profile_id, device_kind)
    LEFT JOIN peaks AS pk USING (profile_id, device_kind)
),
utilized AS (
    SELECT
        *,
        flop_rate / peak_flops_per_s AS flop_utilization,
        hbm_bandwidth / peak_hbm_bytes_per_s AS hbm_utilization,
        CASE WHEN vmem_read_bytes > 0 THEN vmem_read_bandwidth / peak_vmem_read_bytes_per_s END AS vmem_read_utilization,
        CASE WHEN vmem_write_bytes > 0 THEN vmem_write_bandwidth / peak_vmem_write_bytes_per_s END AS vmem_write_utilization,
        CASE WHEN cmem_read_bytes > 0 THEN cmem_read_bandwidth / peak_cmem_read_bytes_per_s END AS cmem_read_utilization,
        CASE WHEN cmem_write_bytes > 0 THEN cmem_write_bandwidth / peak_cmem_write_bytes_per_s END AS cmem_write_utilization
    FROM rates
),
bounded AS (
    SELECT
        *,
        -- Without FLOPs (operand_bytes: bytes only) no side of the ridge can be told.
        CASE WHEN flops IS NULL THEN 0 ELSE greatest(
            coalesce(flop_utilization, 0), coalesce(hbm_utilization, 0),
            coalesce(cmem_read_utilization, 0), coalesce(cmem_write_utilization, 0),
            coalesce(vmem_read_utilization, 0), coalesce(vmem_write_utilization, 0)
        ) END AS max_utilization
    FROM utilized
)
SELECT
    row_kind, profile_id, device_kind, program_id, module, op, input_shapes, input_dtypes, precision, category,
    cost_source, devices, occurrences,
    total_time_ps, self_time_ps, device_time_ps,
    self_time_ps / nullif(device_time_ps, 0) AS self_time_share,
    async_window_ps,
    flops, bytes_accessed, hbm_bytes, vmem_read_bytes, vmem_write_bytes, cmem_read_bytes, cmem_write_bytes,
    flop_rate, memory_bandwidth, hbm_bandwidth,
    flops / nullif(bytes_accessed, 0) AS operational_intensity,
    flops / nullif(hbm_bytes, 0) AS hbm_operational_intensity,
    peak_flops_per_s, peak_hbm_bytes_per_s,
    peak_vmem_read_bytes_per_s, peak_vmem_write_bytes_per_s, peak_cmem_read_bytes_per_s, peak_cmem_write_bytes_per_s,
    peak_flops_source, peak_hbm_source, device_model, hardware_chip,
    peak_flops_per_s / peak_hbm_bytes_per_s AS ridge_point,
    flop_utilization, hbm_utilization,
    vmem_read_utilization, vmem_write_utilization, cmem_read_utilization, cmem_write_utilization,
    CASE
        WHEN max_utilization <= 0 THEN 'unknown'
        WHEN flop_utilization = max_utilization THEN 'compute'
        WHEN hbm_utilization = max_utilization THEN 'HBM'
        WHEN cmem_read_utilization = max_utilization THEN 'CMEM read'
        WHEN cmem_write_utilization = max_utilization THEN 'CMEM write'
        WHEN vmem_read_utilization = max_utilization THEN 'VMEM read'
        WHEN vmem_write_utilization = max_utilization THEN 'VMEM write'
    END AS bound_by,
    CASE WHEN max_utilization > 0 THEN max_utilization END AS roofline_efficiency,
    max_utilization > 1 AS above_roof,
    CASE WHEN max_utilization > 1 THEN
        CASE WHEN flop_utilization = max_utilization
             THEN 'compute above its roof (peak from ' || coalesce(peak_flops_source, 'unknown')
                  || '): the peak is below what the op achieved, or its FLOPs are overcounted'
             WHEN hbm_utilization = max_utilization
             THEN 'HBM above its roof (peak from ' || coalesce(peak_hbm_source, 'unknown')
                  || '): the peak is below what the op achieved, or its bytes are overcounted'
             ELSE 'on-chip memory above its roof (peak from profile): the peak is below what the op achieved, or its bytes are overcounted'
        END END AS above_roof_reason
FROM bounded
ORDER BY
    profile_id, device_kind,
    CASE row_kind WHEN 'profile' THEN 0 WHEN 'program' THEN 1 ELSE 2 END,
    self_time_ps DESC, program_id, op, input_shapes, input_dtypes
