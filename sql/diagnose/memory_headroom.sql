-- diagnose.memory_headroom: the device's memory is mostly unused while its matrix units idle:
-- a larger batch would fit and amortise each step's fixed costs.
--
-- Fires when every GPU allocator of the profile peaks below $max_peak_share of its device's memory
-- (memory.memory_peaks: peak_in_use_bytes / capacity_bytes; at most half, a doubled batch fits even
-- if all of that memory grew with it) while the complete steps use less than $max_flop_utilization
-- of the devices' FLOP/s (steps.bottlenecks' profile row: step_flop_utilization, the ops' FLOPs over
-- peak FLOP/s x step time; XProf calls an MXU utilization below 50% low). Profiles without
-- allocator events, without a known device memory (TPU and host allocators) or without FLOPs
-- (utilization unknown) are never found.
--
-- Saving, an estimate: a batch k times larger (k = the memory left for it, (1 - $within) x capacity /
-- peak, the near-capacity margin of diagnose.memory_near_capacity kept free, as though all of the
-- peak grew with the batch: conservative) runs k times the device work in a step but pays the
-- step's fixed costs once: the device's launch overhead, host wait and idle time
-- (steps._bottleneck_steps: launch_overhead_ps + host_wait_ps + idle_ps). Per sample, the step
-- then takes (busy + fixed / k) / batch instead of (busy + fixed) / batch: the saving is
-- fixed x (1 - 1 / k), expressed as a share of today's step time per sample. Nothing is claimed
-- for the matrix units running better on larger GEMMs (often the larger gain) nor for input-bound
-- steps, whose loader must keep pace with the larger batch.
--
-- One finding per profile.
--
-- Parameters:
--   $max_peak_share  DOUBLE  a profile fires when every allocator's peak is below this share of its device's memory [range: 0..1] (default: 0.5)
--   $max_flop_utilization  DOUBLE  ... and its complete steps' FLOP utilization is below this; XProf's low MXU utilization (50%) [range: 0..1] (default: 0.5)
--   $within  DOUBLE  the share of device memory a larger batch leaves free (fleet.job_memory's near-capacity margin) [range: 0..<1] (default: 0.1)
--
-- Show: profile_id, rule, severity, expected_saving_share, title
--
-- Columns:
--   profile_id  VARCHAR  profile
--   job  VARCHAR  NULL (a finding about one profile)
--   rank  BIGINT  NULL
--   device  VARCHAR  the device of the allocator with the highest peak share
--   step  BIGINT  NULL (the peak is over the profile)
--   rule  VARCHAR  memory_headroom
--   severity  VARCHAR  high, medium or low (xprosql_severity of expected_saving_share)
--   title  VARCHAR  one line a person reads
--   evidence  VARCHAR  the numbers as a sentence
--   measures  MAP(VARCHAR, DOUBLE)  peak_in_use_bytes, capacity_bytes, peak_capacity_share, step_flop_utilization_share, fixed_ps, batch_multiple_count
--   subjects  VARCHAR[]  the allocators, highest peak share first
--   expected_saving_ps  BIGINT  the fixed step costs a k-times batch amortises, per device, ps
--   expected_saving_share  DOUBLE  that time's share of step time, 0..1
--   saving_method  VARCHAR  how the saving is estimated
--   fix  VARCHAR  what to change
--   reference  VARCHAR  where the rule comes from
WITH params AS (
    SELECT CAST($max_peak_share AS DOUBLE) AS max_peak, CAST($max_flop_utilization AS DOUBLE) AS max_util,
        CAST($within AS DOUBLE) AS within
),
memory_peaks AS (
-- @include memory.memory_peaks
),
bottlenecks AS (
-- @include steps.bottlenecks
),
profile_steps AS (
-- @include diagnose._profile_steps
),
allocators AS (
    SELECT profile_id, allocator, peak_in_use_bytes, capacity_bytes, peak_capacity_share,
        -- the GPU the allocator serves (memory.memory_peaks' reading of its name)
        TRY_CAST(coalesce(nullif(regexp_extract(allocator, '^GPU_([0-9]+)_', 1), ''),
                          nullif(regexp_extract(allocator, '^(?:cuda|hip):([0-9]+)$', 1), '')) AS INTEGER) AS gpu
    FROM memory_peaks
    WHERE capacity_bytes > 0 AND peak_in_use_bytes IS NOT NULL
),
per_profile AS (
    SELECT profile_id,
        max(peak_capacity_share) AS peak_share,
        arg_max(peak_in_use_bytes, peak_capacity_share) AS peak_bytes,
        arg_max(capacity_bytes, peak_capacity_share) AS capacity_bytes,
        arg_max(gpu, peak_capacity_share) AS gpu,
        list(allocator ORDER BY peak_capacity_share DESC, allocator) AS allocators
    FROM allocators
    GROUP BY profile_id
),
utilization AS (
    SELECT profile_id, step_flop_utilization, step_ps AS device_step_ps,
        launch_overhead_ps + host_wait_ps + idle_ps AS fixed_ps
    FROM bottlenecks
    WHERE scope = 'profile'
),
found AS (
    SELECT m.*, u.step_flop_utilization, u.fixed_ps, s.devices, s.step_ps, s.device_step_ps,
        -- the batch multiple the memory allows
        (1 - x.within) / m.peak_share AS k
    FROM per_profile AS m
    JOIN utilization AS u USING (profile_id)
    JOIN profile_steps AS s USING (profile_id)
    CROSS JOIN params AS x
    WHERE m.peak_share < x.max_peak AND m.peak_share > 0
      AND u.step_flop_utilization < x.max_util
),
named AS (
    SELECT f.*, least(greatest(f.fixed_ps * (1 - 1 / f.k), 0) / nullif(f.device_step_ps, 0), 1.0) AS share,
        (SELECT min(d.name) FROM devices AS d WHERE d.profile_id = f.profile_id AND d.kind = 'gpu' AND d.ordinal = f.gpu) AS device
    FROM found AS f
)
SELECT
    n.profile_id,
    CAST(NULL AS VARCHAR) AS job,
    CAST(NULL AS BIGINT) AS rank,
    n.device,
    CAST(NULL AS BIGINT) AS step,
    'memory_headroom' AS rule,
    xprosql_severity(n.share) AS severity,
    printf('memory headroom: peak memory is %.1f%% of the device while the steps use %.1f%% of its FLOP/s: a larger batch fits',
        100 * n.peak_share, 100 * n.step_flop_utilization) AS title,
    printf('peak in use %.2f GiB of %.2f GiB (%.1f%%, %s); step FLOP utilization %.1f%%; launch overhead, host wait and idle take %s of %s step time per device: a batch about %.1fx larger fits in %.0f%% of memory and pays them once',
        n.peak_bytes / 2^30, n.capacity_bytes / 2^30, 100 * n.peak_share, n.allocators[1], 100 * n.step_flop_utilization,
        xprosql_duration(n.fixed_ps / n.devices), xprosql_duration(n.step_ps), n.k, 100 * (1 - (SELECT within FROM params))) AS evidence,
    MAP {'peak_in_use_bytes': CAST(n.peak_bytes AS DOUBLE), 'capacity_bytes': CAST(n.capacity_bytes AS DOUBLE),
         'peak_capacity_share': n.peak_share, 'step_flop_utilization_share': n.step_flop_utilization,
         'fixed_ps': CAST(n.fixed_ps AS DOUBLE), 'batch_multiple_count': n.k} AS measures,
    n.allocators[1:5] AS subjects,
    CAST(n.share * n.step_ps AS BIGINT) AS expected_saving_ps,
    n.share AS expected_saving_share,
    'an estimate: the step''s launch overhead, host wait and idle time (steps._bottleneck_steps) x (1 - 1/k), k = the batch '
        || 'multiple the free memory allows (all of the peak assumed to grow with the batch), as a share of step time per '
        || 'sample; better matrix-unit use on larger GEMMs is not claimed' AS saving_method,
    'Raise the batch size (per device) until memory nears capacity, scaling the learning rate with it (linear or sqrt '
        || 'scaling, warmup); for inference, batch more requests (vLLM / sglang: --max-num-seqs, --max-num-batched-tokens; '
        || 'larger decode batches); or fold gradient-accumulation micro-batches into one larger micro-batch' AS fix,
    'XProf overview (low MXU utilization < 50%) and memory profile (peak heap vs. device memory); NVIDIA "Deep Learning '
        || 'Performance" guide: larger batches raise GEMM sizes and amortise per-step overhead' AS reference
FROM named AS n
ORDER BY expected_saving_ps DESC, n.profile_id
