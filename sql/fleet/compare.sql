-- fleet.compare: two cohorts of profiles side by side, per op (or HLO category, or
-- module): time per profile, share of op time, FLOP rate and HBM bandwidth in
-- each cohort and the differences, the largest change in time first.
-- scope: fleet
--
-- Built on the roofline analysis (included below; on a Dask cluster it runs per
-- share of profiles and this query runs on the combined op rows). A cohort is a
-- list of profile ids; run.compare and xprosql compare make them from SQL predicates on
-- profiles. A profile may sit in both cohorts. Time is op self time summed over
-- the cohort's profiles and devices, divided by the cohort's profile count, so
-- cohorts of different sizes compare. By op, a row is one op across runs: its op_key
-- (fleet._op_keys, op_stats.op_key: an HLO op's module fingerprint and instruction, a
-- PyTorch op's name, shapes, dtypes and nn.Module path, a kernel's normalised name and
-- grid), so the same op of two runs is one row and two ops of one name are two.
--
-- Parameters:
--   $baseline   VARCHAR[]  profile ids of the baseline cohort (run.compare takes these or, as xprosql compare does, a SQL expression on profiles) [choices: profiles.profile_id]
--   $candidate  VARCHAR[]  profile ids of the candidate cohort (run.compare takes these or, as xprosql compare does, a SQL expression on profiles) [choices: profiles.profile_id]
--   $by         VARCHAR    what a row is: op, category or module [choices: op, category, module] (default: 'op')
--
-- Passes: $peak_flops_per_s $peak_hbm_bytes_per_s $peak_source (to its includes, with their defaults and meaning)
--
-- Show: device_kind, key, baseline_time_per_profile_ps, candidate_time_per_profile_ps, delta_time_per_profile_ps, time_ratio, baseline_share, candidate_share, delta_share
--
-- Columns:
--   device_kind  VARCHAR  tpu, gpu or cpu
--   key  VARCHAR  the op (HLO op, PyTorch op or kernel name), category or module
--   op_key  VARCHAR  by op: the op's identity across runs (op_stats.op_key); NULL by category or module
--   baseline_profiles  BIGINT  profiles in the baseline cohort
--   candidate_profiles  BIGINT  profiles in the candidate cohort
--   baseline_time_per_profile_ps  DOUBLE  self time per baseline profile, ps
--   candidate_time_per_profile_ps  DOUBLE  self time per candidate profile, ps
--   delta_time_per_profile_ps  DOUBLE  candidate minus baseline, signed (below 0: the candidate is faster), ps (the impact; rows sorted by its size)
--   time_ratio  DOUBLE  candidate / baseline time per profile
--   baseline_share  DOUBLE  share of the baseline cohort's op self time
--   candidate_share  DOUBLE  share of the candidate cohort's op self time
--   delta_share  DOUBLE  candidate_share - baseline_share, signed, -1..1
--   baseline_flop_rate  DOUBLE  FLOPs over self time, FLOP/s (NULL without cost data)
--   candidate_flop_rate  DOUBLE  FLOP/s
--   baseline_hbm_bandwidth  DOUBLE  HBM bytes over self time, bytes/s
--   candidate_hbm_bandwidth  DOUBLE  bytes/s
--   baseline_occurrences_per_profile  DOUBLE  executions per baseline profile
--   candidate_occurrences_per_profile  DOUBLE  executions per candidate profile
WITH roofline AS (
-- @include ops.roofline
),
op_keys AS (
-- @include fleet._op_keys
),
cohorts AS (
    SELECT DISTINCT unnest(CAST($baseline AS VARCHAR[])) AS profile_id, 'baseline' AS cohort
    UNION ALL
    SELECT DISTINCT unnest(CAST($candidate AS VARCHAR[])), 'candidate'
),
sizes AS (
    SELECT
        count(*) FILTER (WHERE cohort = 'baseline') AS baseline_profiles,
        count(*) FILTER (WHERE cohort = 'candidate') AS candidate_profiles
    FROM cohorts
),
items AS (
    SELECT
        c.cohort,
        r.device_kind,
        CASE $by WHEN 'category' THEN r.category WHEN 'module' THEN r.module END AS key,
        NULL::VARCHAR AS op_key,
        r.self_time_ps, r.flops, r.hbm_bytes, r.occurrences
    FROM roofline AS r
    JOIN cohorts AS c USING (profile_id)
    WHERE r.row_kind = 'op' AND $by <> 'op'
    UNION ALL
    SELECT c.cohort, o.device_kind, o.op, o.op_key, o.self_time_ps, o.flops, o.hbm_bytes, o.occurrences
    FROM op_keys AS o
    JOIN cohorts AS c USING (profile_id)
    WHERE $by = 'op'
),
per_key AS (
    SELECT
        device_kind, min(key) AS key, op_key,
        sum(self_time_ps) FILTER (WHERE cohort = 'baseline') AS b_time,
        sum(self_time_ps) FILTER (WHERE cohort = 'candidate') AS c_time,
        sum(flops) FILTER (WHERE cohort = 'baseline') AS b_flops,
        sum(flops) FILTER (WHERE cohort = 'candidate') AS c_flops,
        sum(hbm_bytes) FILTER (WHERE cohort = 'baseline') AS b_hbm,
        sum(hbm_bytes) FILTER (WHERE cohort = 'candidate') AS c_hbm,
        sum(occurrences) FILTER (WHERE cohort = 'baseline') AS b_n,
        sum(occurrences) FILTER (WHERE cohort = 'candidate') AS c_n
    FROM items
    GROUP BY device_kind, op_key, CASE WHEN op_key IS NULL THEN key END
),
totals AS (
    SELECT sum(b_time) AS b_total, sum(c_time) AS c_total FROM per_key
),
compared AS (
    SELECT
        k.device_kind,
        k.key,
        k.op_key,
        s.baseline_profiles,
        s.candidate_profiles,
        coalesce(k.b_time, 0) / nullif(s.baseline_profiles, 0) AS baseline_time_per_profile_ps,
        coalesce(k.c_time, 0) / nullif(s.candidate_profiles, 0) AS candidate_time_per_profile_ps,
        coalesce(k.b_time, 0) / nullif(t.b_total, 0) AS baseline_share,
        coalesce(k.c_time, 0) / nullif(t.c_total, 0) AS candidate_share,
        k.b_flops / nullif(k.b_time / 1e12, 0) AS baseline_flop_rate,
        k.c_flops / nullif(k.c_time / 1e12, 0) AS candidate_flop_rate,
        k.b_hbm / nullif(k.b_time / 1e12, 0) AS baseline_hbm_bandwidth,
        k.c_hbm / nullif(k.c_time / 1e12, 0) AS candidate_hbm_bandwidth,
        coalesce(k.b_n, 0) / nullif(s.baseline_profiles, 0) AS baseline_occurrences_per_profile,
        coalesce(k.c_n, 0) / nullif(s.candidate_profiles, 0) AS candidate_occurrences_per_profile
    FROM per_key AS k CROSS JOIN sizes AS s CROSS JOIN totals AS t
)
SELECT
    device_kind, key, op_key, baseline_profiles, candidate_profiles,
    baseline_time_per_profile_ps, candidate_time_per_profile_ps,
    candidate_time_per_profile_ps - baseline_time_per_profile_ps AS delta_time_per_profile_ps,
    candidate_time_per_profile_ps / nullif(baseline_time_per_profile_ps, 0) AS time_ratio,
    baseline_share, candidate_share, candidate_share - baseline_share AS delta_share,
    baseline_flop_rate, candidate_flop_rate, baseline_hbm_bandwidth, candidate_hbm_bandwidth,
    baseline_occurrences_per_profile, candidate_occurrences_per_profile
FROM compared
ORDER BY abs(delta_time_per_profile_ps) DESC NULLS LAST, device_kind, key, op_key
