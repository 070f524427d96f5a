-- ops._peaks: the roofs of each (profile, device kind) that ran ops: peak FLOP/s and
-- memory bandwidths, and where each comes from.
--
-- One definition for the SQL roofline (included by ops.roofline) and its Polars twin
-- (xprosql.queries.roofline.roofline_polars runs this file over its frames).
-- Precedence per peak: a $peak_* parameter when given (it wins); else the profile's own
-- device stats (devices.peak_*; GPU FLOP/s modelled from SMs x clock at ingest); else the
-- published chip numbers of hardware_models (xprosql.models.hardware), matched on
-- devices.model (and memory_bytes, which tells board variants apart). CPUs have no
-- modelled peak: pass one. VMEM / CMEM peaks come from the profile only.
-- A peak the profile reports (not one modelled at ingest from SMs x clock) more than 1% below
-- the data sheet of a chip the table knows loses to the
-- data sheet (source 'hardware_model (profile below data sheet)'): a roof is the most the chip
-- can do, and ROCm XSpace files report a `memory_bandwidth` about half of MI300X's and MI355X's
-- data sheet, which their own ops then beat (HBM utilization 1.2-1.7). TPU profiles report
-- the data sheet's numbers, so XProf's roofs stay.
--
-- Parameters:
--   $peak_flops_per_s      DOUBLE     peak FLOP/s for every device, overriding the profile and the chip table; the CPU roof [range: 0<..] (default: NULL)
--   $peak_hbm_bytes_per_s  DOUBLE     peak HBM bandwidth (CPU: DRAM) for every device, bytes/s, overriding like $peak_flops_per_s [range: 0<..] (default: NULL)
--   $peak_source           VARCHAR    what an overridden peak's source column says, e.g. user or measured (default: 'user')
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   device_kind  VARCHAR  tpu, gpu or cpu
--   device_model  VARCHAR  devices.model (the smallest of the kind's devices that ran ops)
--   hardware_chip  VARCHAR  the hardware_models chip matched on device_model, when one matches
--   peak_flops_per_s  DOUBLE  the FLOP/s roof (matrix units at bf16/fp16 where the chip has them), FLOP/s
--   peak_flops_source  VARCHAR  profile, hardware_model, hardware_model (profile below data sheet), $peak_source, or NULL (unknown)
--   peak_fp32_flops_per_s  DOUBLE  the chip's fp32 roof, for ops computing in fp32 (NULL when $peak_flops_per_s is given: it is every op's roof), FLOP/s
--   peak_fp8_flops_per_s  DOUBLE  the chip's fp8 roof, for ops computing in fp8 (NULL like peak_fp32_flops_per_s), FLOP/s
--   peak_hbm_bytes_per_s  DOUBLE  the HBM roof, bytes/s
--   peak_hbm_source  VARCHAR  profile, hardware_model, hardware_model (profile below data sheet), $peak_source, or NULL (unknown)
--   peak_vmem_read_bytes_per_s  DOUBLE  VMEM read roof from the profile, bytes/s
--   peak_vmem_write_bytes_per_s  DOUBLE  VMEM write roof from the profile, bytes/s
--   peak_cmem_read_bytes_per_s  DOUBLE  CMEM read roof from the profile, bytes/s
--   peak_cmem_write_bytes_per_s  DOUBLE  CMEM write roof from the profile, bytes/s
WITH params AS (
    SELECT
        CAST($peak_flops_per_s AS DOUBLE) AS peak_flops_override,
        CAST($peak_hbm_bytes_per_s AS DOUBLE) AS peak_hbm_override,
        CAST($peak_source AS VARCHAR) AS override_source
),
memory_peaks AS (
    SELECT
        profile_id, device_id,
        max(double_value) FILTER (WHERE stat = 'peak_vmem_rd_bw_gigabytes_per_second') * 1e9 AS peak_vmem_read,
        max(double_value) FILTER (WHERE stat = 'peak_vmem_wr_bw_gigabytes_per_second') * 1e9 AS peak_vmem_write,
        max(double_value) FILTER (WHERE stat = 'peak_cmem_rd_bw_gigabytes_per_second') * 1e9 AS peak_cmem_read,
        max(double_value) FILTER (WHERE stat = 'peak_cmem_wr_bw_gigabytes_per_second') * 1e9 AS peak_cmem_write
    FROM device_stats
    WHERE stat IN ('peak_vmem_rd_bw_gigabytes_per_second', 'peak_vmem_wr_bw_gigabytes_per_second',
                   'peak_cmem_rd_bw_gigabytes_per_second', 'peak_cmem_wr_bw_gigabytes_per_second')
    GROUP BY ALL
),
device_peaks AS (
    SELECT
        d.profile_id,
        CASE WHEN d.kind IN ('tpu', 'gpu') THEN d.kind ELSE 'cpu' END AS device_kind,
        min(d.model) AS device_model,
        min(d.memory_bytes) AS memory_bytes,
        max(d.peak_flops_per_s) AS profile_flops,
        CASE WHEN bool_and(coalesce(d.peak_source, '') = 'profile') THEN 'profile' ELSE 'hardware_model' END AS profile_flops_source,
        max(d.peak_hbm_bytes_per_s) AS profile_hbm,
        -- profile+hardware_model: bandwidth from the profile, FLOP/s modelled at ingest (XSpace GPUs)
        CASE WHEN bool_and(coalesce(d.peak_source, '') IN ('profile', 'profile+hardware_model')) THEN 'profile'
             ELSE 'hardware_model' END AS profile_hbm_source,
        max(m.peak_vmem_read) AS peak_vmem_read,
        max(m.peak_vmem_write) AS peak_vmem_write,
        max(m.peak_cmem_read) AS peak_cmem_read,
        max(m.peak_cmem_write) AS peak_cmem_write
    FROM devices AS d
    JOIN (SELECT DISTINCT profile_id, device_id FROM op_stats) USING (profile_id, device_id)
    LEFT JOIN memory_peaks AS m USING (profile_id, device_id)
    GROUP BY ALL
),
chip_peaks AS (
    SELECT dp.profile_id, dp.device_kind, h.chip, h.peak_flops_per_s, h.peak_hbm_bytes_per_s,
        h.peak_fp32_flops_per_s, h.peak_fp8_flops_per_s
    FROM device_peaks AS dp
    JOIN hardware_models AS h
      ON h.kind = dp.device_kind
     AND regexp_matches(regexp_replace(lower(dp.device_model), '[^a-z0-9]', '', 'g'), h.model_pattern)
     AND (h.max_memory_bytes IS NULL OR dp.memory_bytes <= h.max_memory_bytes)
    QUALIFY row_number() OVER (PARTITION BY dp.profile_id, dp.device_kind ORDER BY h.priority) = 1
)
SELECT
    dp.profile_id, dp.device_kind, dp.device_model, cp.chip AS hardware_chip,
    coalesce(p.peak_flops_override,
        CASE WHEN NOT (dp.profile_flops_source = 'profile' AND dp.profile_flops < 0.99 * cp.peak_flops_per_s)
             THEN dp.profile_flops END,
        cp.peak_flops_per_s, dp.profile_flops) AS peak_flops_per_s,
    CASE
        WHEN p.peak_flops_override IS NOT NULL THEN p.override_source
        WHEN dp.profile_flops_source = 'profile' AND dp.profile_flops < 0.99 * cp.peak_flops_per_s
        THEN 'hardware_model (profile below data sheet)'
        WHEN dp.profile_flops IS NOT NULL THEN dp.profile_flops_source
        WHEN cp.peak_flops_per_s IS NOT NULL THEN 'hardware_model'
    END AS peak_flops_source,
    CASE WHEN p.peak_flops_override IS NULL THEN cp.peak_fp32_flops_per_s END AS peak_fp32_flops_per_s,
    CASE WHEN p.peak_flops_override IS NULL THEN cp.peak_fp8_flops_per_s END AS peak_fp8_flops_per_s,
    coalesce(p.peak_hbm_override,
        CASE WHEN NOT (dp.profile_hbm_source = 'profile' AND dp.profile_hbm < 0.99 * cp.peak_hbm_bytes_per_s)
             THEN dp.profile_hbm END,
        cp.peak_hbm_bytes_per_s, dp.profile_hbm) AS peak_hbm_bytes_per_s,
    CASE
        WHEN p.peak_hbm_override IS NOT NULL THEN p.override_source
        WHEN dp.profile_hbm_source = 'profile' AND dp.profile_hbm < 0.99 * cp.peak_hbm_bytes_per_s
        THEN 'hardware_model (profile below data sheet)'
        WHEN dp.profile_hbm IS NOT NULL THEN dp.profile_hbm_source
        WHEN cp.peak_hbm_bytes_per_s IS NOT NULL THEN 'hardware_model'
    END AS peak_hbm_source,
    nullif(dp.peak_vmem_read, 0) AS peak_vmem_read_bytes_per_s,
    nullif(dp.peak_vmem_write, 0) AS peak_vmem_write_bytes_per_s,
    nullif(dp.peak_cmem_read, 0) AS peak_cmem_read_bytes_per_s,
    nullif(dp.peak_cmem_write, 0) AS peak_cmem_write_bytes_per_s
FROM device_peaks AS dp
LEFT JOIN chip_peaks AS cp USING (profile_id, device_kind)
CROSS JOIN params AS p
