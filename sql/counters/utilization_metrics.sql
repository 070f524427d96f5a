-- counters.utilization_metrics: every metric of XProf's utilization_viewer per chip and
-- kernel, over all of their counter samples, cycle-weighted: sum(achieved) /
-- sum(peak), never a mean of per-sample ratios (an idle sample and a busy one
-- weigh by their cycles), with the busiest sample beside it.
--
-- Built on utilization_samples (included below, with its parameters and notes).
-- Rows come per (kernel, node, metric) and, with kernel NULL, per (node,
-- metric) over all samples of the chip: the number XProf's tool reports for
-- the whole capture.
--
-- Needs: TPU performance-counter samples (XSpace perf_counters lines: TPU v6e, v7x)
--
-- Show: profile_id, device_id, chip, kernel, node, metric, unit, achieved, peak, utilization
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   device_id  INTEGER  devices.device_id of the chip's plane
--   chip  BIGINT  chip as XProf's perf_counters names it (global_chip_id, else device_id stat, else plane ordinal)
--   generation  VARCHAR  v6e or v7x
--   kernel  VARCHAR  the kernel (counters.kernel); NULL: all samples of the chip
--   node  INTEGER  XProf's node: TensorCore = die, SparseCore = die * 2 + core, 0 for HBM and ICI rows
--   metric  VARCHAR  XProf's metric name, e.g. Avg MXU Busy, Vector ALUs, XLU0, HBM Rd+Wr - core 0, ICI (Read)
--   unit  VARCHAR  cycles, instructions, bytes or percent
--   samples  BIGINT  samples the row sums over
--   achieved  DOUBLE  summed achieved, in unit
--   peak  DOUBLE  summed peak, in unit
--   utilization  DOUBLE  achieved / peak (0..1); NULL when peak is 0
--   busiest_sample  BIGINT  the sample with the highest achieved / peak (counters.sample)
--   busiest_utilization  DOUBLE  that sample's achieved / peak
--   start_ps  BIGINT  first sample start, ps
--   end_ps  BIGINT  last sample end, ps
WITH samples AS (
-- @include counters.utilization_samples
)
SELECT
    profile_id, device_id, chip, generation,
    CASE WHEN grouping(kernel) = 0 THEN kernel END AS kernel,
    node, metric, unit,
    count(*) AS samples,
    sum(achieved) AS achieved,
    sum(peak) AS peak,
    sum(achieved) / nullif(sum(peak), 0) AS utilization,
    arg_max(sample, utilization) AS busiest_sample,
    max(utilization) AS busiest_utilization,
    min(start_ps) AS start_ps,
    max(end_ps) AS end_ps
FROM samples
GROUP BY GROUPING SETS (
    (profile_id, device_id, chip, generation, kernel, node, metric, unit),
    (profile_id, device_id, chip, generation, node, metric, unit)
)
ORDER BY profile_id, device_id, kernel NULLS FIRST, node, metric
