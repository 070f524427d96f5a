-- counters.utilization: how busy each TPU chip's units were, measured by its hardware
-- counters, per chip and per kernel: MXU, vector unit, XLU, HBM bandwidth and
-- DMA traffic, each cycle-weighted over the samples (sum(achieved) /
-- sum(peak), never a mean of per-sample ratios) with the busiest sample beside
-- the average. These are measurements; the roofline's utilizations are
-- estimates from op costs (the profile rows here join the roofline's on profile_id).
--
-- Built on utilization_samples (included below, with its parameters and notes):
--   mxu     XProf's Avg MXU Busy: (cycles with one of the 2 MXUs busy / 2 + cycles with both) / cycles
--   vector  XProf's Vector ALUs: vector ALU instructions / (4 ALUs x cycles)
--   xlu     XProf's XLU0 and XLU1 together: cross-lane instructions / (cycles / cycles per XLU instruction), both units
--   hbm     XProf's HBM Rd+Wr of every die: HBM bytes read and written / (peak HBM bandwidth x time)
--   dma     DMA traffic through the chip's interconnect routers, XProf's ICI (Read) and ICI (Write) together:
--           128 B per read / write request inserted at the OCI ICR, over 294.9 GB/s each way
-- A row per (chip, kernel); with kernel NULL, per chip over all its samples; with
-- device_id and kernel NULL, per profile over all chips (pooled the same way: the
-- row to set beside the roofline's per-profile TPU estimates).
--
-- Needs: TPU performance-counter samples (XSpace perf_counters lines: TPU v6e, v7x)
--
-- Show: profile_id, device, chip, kernel, samples, mxu_utilization, vector_utilization, xlu_utilization, hbm_utilization, dma_utilization
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   device_id  INTEGER  devices.device_id of the chip's plane; NULL on profile rows
--   device  VARCHAR  devices.name, e.g. /device:TPU:0; NULL on profile rows
--   chip  BIGINT  chip as XProf's perf_counters names it (global_chip_id, else device_id stat, else plane ordinal); NULL on profile rows
--   generation  VARCHAR  v6e or v7x; NULL on profile rows
--   kernel  VARCHAR  the kernel (counters.kernel: the sample lines' name); NULL: all samples of the chip (or profile)
--   samples  BIGINT  counter samples that gave any metric (a sample without its cycle count gives none)
--   sampled_ps  BIGINT  summed sample lengths, ps
--   mxu_utilization  DOUBLE  MXU busy share (0..1), cycle-weighted over the samples
--   mxu_busiest_utilization  DOUBLE  the busiest sample's MXU busy share
--   mxu_busiest_sample  BIGINT  that sample (counters.sample; on profile rows, of whichever chip)
--   vector_utilization  DOUBLE  vector ALU issue share (0..1)
--   vector_busiest_utilization  DOUBLE  the busiest sample's share
--   vector_busiest_sample  BIGINT  that sample
--   xlu_utilization  DOUBLE  XLU issue share (0..1), both XLUs
--   xlu_busiest_utilization  DOUBLE  the busiest sample's share
--   xlu_busiest_sample  BIGINT  that sample
--   hbm_utilization  DOUBLE  HBM bandwidth used over peak (0..1)
--   hbm_busiest_utilization  DOUBLE  the busiest sample's share
--   hbm_busiest_sample  BIGINT  that sample
--   hbm_bytes  DOUBLE  HBM bytes read and written
--   dma_utilization  DOUBLE  interconnect DMA bytes over peak (0..1), reads and writes
--   dma_busiest_utilization  DOUBLE  the busiest sample's share
--   dma_busiest_sample  BIGINT  that sample
--   dma_bytes  DOUBLE  DMA bytes through the interconnect routers
WITH samples AS (
-- @include counters.utilization_samples
),
grouped AS (
    SELECT
        *,
        CASE
            WHEN metric = 'Avg MXU Busy' THEN 'mxu'
            WHEN metric = 'Vector ALUs' THEN 'vector'
            WHEN metric IN ('XLU0', 'XLU1') THEN 'xlu'
            WHEN metric LIKE 'HBM Rd+Wr - core %' THEN 'hbm'
            WHEN metric IN ('ICI (Read)', 'ICI (Write)') THEN 'dma'
        END AS unit_group
    FROM samples
),
-- One value per sample and unit group: its dies / directions pooled.
per_sample AS (
    SELECT
        profile_id, device_id, chip, generation, kernel, sample, unit_group,
        sum(achieved) AS achieved, sum(peak) AS peak, sum(achieved) / nullif(sum(peak), 0) AS utilization
    FROM grouped
    WHERE unit_group IS NOT NULL
    GROUP BY ALL
),
per_group AS (
    SELECT
        profile_id, device_id, chip, generation,
        CASE WHEN grouping(kernel) = 0 THEN kernel END AS kernel,
        unit_group,
        sum(achieved) AS achieved,
        sum(achieved) / nullif(sum(peak), 0) AS utilization,
        max(utilization) AS busiest_utilization,
        arg_max(sample, utilization) AS busiest_sample
    FROM per_sample
    GROUP BY GROUPING SETS (
        (profile_id, device_id, chip, generation, kernel, unit_group),
        (profile_id, device_id, chip, generation, unit_group),
        (profile_id, unit_group)
    )
),
spans AS (
    SELECT
        profile_id, device_id,
        CASE WHEN grouping(kernel) = 0 THEN kernel END AS kernel,
        count(*) AS samples,
        sum(end_ps - start_ps) AS sampled_ps
    FROM (SELECT DISTINCT profile_id, device_id, kernel, sample, start_ps, end_ps FROM samples)
    GROUP BY GROUPING SETS ((profile_id, device_id, kernel), (profile_id, device_id), (profile_id))
)
SELECT
    g.profile_id, g.device_id, d.name AS device, g.chip, g.generation, g.kernel,
    any_value(s.samples) AS samples,
    any_value(s.sampled_ps) AS sampled_ps,
    max(g.utilization) FILTER (WHERE g.unit_group = 'mxu') AS mxu_utilization,
    max(g.busiest_utilization) FILTER (WHERE g.unit_group = 'mxu') AS mxu_busiest_utilization,
    max(g.busiest_sample) FILTER (WHERE g.unit_group = 'mxu') AS mxu_busiest_sample,
    max(g.utilization) FILTER (WHERE g.unit_group = 'vector') AS vector_utilization,
    max(g.busiest_utilization) FILTER (WHERE g.unit_group = 'vector') AS vector_busiest_utilization,
    max(g.busiest_sample) FILTER (WHERE g.unit_group = 'vector') AS vector_busiest_sample,
    max(g.utilization) FILTER (WHERE g.unit_group = 'xlu') AS xlu_utilization,
    max(g.busiest_utilization) FILTER (WHERE g.unit_group = 'xlu') AS xlu_busiest_utilization,
    max(g.busiest_sample) FILTER (WHERE g.unit_group = 'xlu') AS xlu_busiest_sample,
    max(g.utilization) FILTER (WHERE g.unit_group = 'hbm') AS hbm_utilization,
    max(g.busiest_utilization) FILTER (WHERE g.unit_group = 'hbm') AS hbm_busiest_utilization,
    max(g.busiest_sample) FILTER (WHERE g.unit_group = 'hbm') AS hbm_busiest_sample,
    max(g.achieved) FILTER (WHERE g.unit_group = 'hbm') AS hbm_bytes,
    max(g.utilization) FILTER (WHERE g.unit_group = 'dma') AS dma_utilization,
    max(g.busiest_utilization) FILTER (WHERE g.unit_group = 'dma') AS dma_busiest_utilization,
    max(g.busiest_sample) FILTER (WHERE g.unit_group = 'dma') AS dma_busiest_sample,
    max(g.achieved) FILTER (WHERE g.unit_group = 'dma') AS dma_bytes
FROM per_group AS g
LEFT JOIN devices AS d ON d.profile_id = g.profile_id AND d.device_id = g.device_id
LEFT JOIN spans AS s ON s.profile_id = g.profile_id AND s.device_id IS NOT DISTINCT FROM g.device_id
    AND s.kernel IS NOT DISTINCT FROM g.kernel
GROUP BY g.profile_id, g.device_id, d.name, g.chip, g.generation, g.kernel
ORDER BY g.profile_id, g.device_id NULLS FIRST, g.kernel NULLS FIRST
