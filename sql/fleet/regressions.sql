-- fleet.regressions: where a series of profiles changed level over time: step
-- time, and the time per step of the longest ops, per value of a tag (a job).
-- scope: fleet
--
-- Built on fleet_profiles (step times) and fleet._op_keys (op total times, per op
-- across runs: op_stats.op_key), which run per share of profiles on a Dask cluster;
-- this query runs on their rows. An op is followed by its op_key, so the same op of
-- two runs is one series and two ops of one name (other shapes, modules, grids) are
-- two. An op's time is its total time, nested ops included: a slower op that comes to overlap
-- the ops after it (a TPU copy-done whose transfer grew) hands them its self time,
-- so its self time falls as it gets slower (the corpus's injected TPU regressions:
-- self time -74%, total time +30%).
--
-- The rule, robust to single outliers: order a series' profiles by time; at
-- each profile compare the median of the $window profiles before it with the
-- median of it and the $window - 1 after it. A change is where both windows are
-- full, the medians differ by at least $threshold (relative) and by more than
-- the $mads multiple of the scaled MAD (1.4826 x MAD) of the window before. Neighbouring profiles
-- that pass form one change; the first profile of the new level is the one where
-- the medians differ most (ties: the means, then the earlier profile).
--
-- Needs: a series of at least 2 x window profiles with steps sharing a value of the tag parameter (default job: ingest --tag job=NAME); rows only where its median step or op time moved by the threshold
--
-- Parameters:
--   $tag        VARCHAR  tag whose values make the series, e.g. job (default: 'job')
--   $window     BIGINT   profiles in each window [range: 1..] (default: 5)
--   $threshold  DOUBLE   relative change of the median that counts, 0.1 = 10% [range: 0..] (default: 0.1)
--   $mads       DOUBLE   the change must also exceed this many scaled MADs of the window before [range: 0..] (default: 3.0)
--   $top        BIGINT   ops followed per series: the longest by total time [range: 1..] (default: 10)
--
-- Columns:
--   series  VARCHAR  the tag's value
--   metric  VARCHAR  step_time_ps, or op_time_per_step_ps:<device kind>:<op>
--   first_profile_id  VARCHAR  the first profile of the new level
--   host  VARCHAR  its host
--   time_ns  BIGINT  its time (fleet_profiles.time_ns)
--   before_median  DOUBLE  median over the window before, ps
--   after_median  DOUBLE  median over the window from first_profile_id on, ps
--   change  DOUBLE  after_median / before_median - 1
--   direction  VARCHAR  slower or faster
--   points  BIGINT  profiles in the series
--   op_key  VARCHAR  the op's identity across runs (op_stats.op_key) of an op metric; NULL for step_time_ps
WITH fleet_profiles AS (
-- @include fleet.profile_summary
),
op_keys AS (
-- @include fleet._op_keys
),
profile_points AS (
    SELECT profile_id, any_value(host) AS host, any_value(tags)[$tag] AS series, any_value(time_ns) AS time_ns,
           max(step_time_ps) AS step_time_ps, max(steps) AS steps
    FROM fleet_profiles
    GROUP BY profile_id
    HAVING series IS NOT NULL
),
op_points AS (
    SELECT pp.series, pp.profile_id, pp.host, pp.time_ns, o.device_kind || ':' || o.op AS op, o.op_key,
           CAST(o.total_time_ps AS DOUBLE) / greatest(pp.steps, 1) AS value
    FROM op_keys AS o JOIN profile_points AS pp USING (profile_id)
    WHERE o.op IS NOT NULL
),
top_ops AS (
    SELECT series, op_key FROM (SELECT series, op_key, min(op) AS op, sum(value) AS total FROM op_points GROUP BY series, op_key)
    QUALIFY row_number() OVER (PARTITION BY series ORDER BY total DESC, op, op_key) <= $top
),
points AS (
    SELECT series, profile_id, host, time_ns, 'step_time_ps' AS metric, NULL::VARCHAR AS op_key,
        CAST(step_time_ps AS DOUBLE) AS value
    FROM profile_points WHERE step_time_ps IS NOT NULL
    UNION ALL
    SELECT o.series, o.profile_id, o.host, o.time_ns, 'op_time_per_step_ps:' || o.op, o.op_key, CAST(o.value AS DOUBLE)
    FROM op_points AS o SEMI JOIN top_ops AS t USING (series, op_key)
),
windows AS (
    SELECT
        *,
        count(*) OVER (PARTITION BY series, metric, op_key) AS points,
        count(value) OVER before AS n_before,
        median(value) OVER before AS before_median,
        mad(value) OVER before AS before_mad,
        avg(value) OVER before AS before_mean,
        count(value) OVER after AS n_after,
        median(value) OVER after AS after_median,
        avg(value) OVER after AS after_mean
    FROM points
    WINDOW
        before AS (PARTITION BY series, metric, op_key ORDER BY time_ns, profile_id ROWS BETWEEN $window PRECEDING AND 1 PRECEDING),
        after AS (PARTITION BY series, metric, op_key ORDER BY time_ns, profile_id ROWS BETWEEN CURRENT ROW AND $window - 1 FOLLOWING)
),
flagged AS (
    SELECT
        *,
        n_before = $window AND n_after = $window AND before_median > 0
            AND abs(after_median / before_median - 1) >= $threshold
            AND abs(after_median - before_median) > $mads * 1.4826 * before_mad AS is_change
    FROM windows
),
runs AS (
    SELECT
        *,
        sum(CAST(is_change AND NOT coalesce(previous_change, false) AS INTEGER))
            OVER (PARTITION BY series, metric, op_key ORDER BY time_ns, profile_id ROWS UNBOUNDED PRECEDING) AS run_id
    FROM (
        SELECT *, lag(is_change) OVER (PARTITION BY series, metric, op_key ORDER BY time_ns, profile_id) AS previous_change
        FROM flagged
    )
)
SELECT
    series,
    metric,
    profile_id AS first_profile_id,
    host,
    time_ns,
    before_median,
    after_median,
    after_median / before_median - 1 AS change,
    CASE WHEN after_median > before_median THEN 'slower' ELSE 'faster' END AS direction,
    points,
    op_key
FROM runs
WHERE is_change
QUALIFY row_number() OVER (
    PARTITION BY series, metric, op_key, run_id
    ORDER BY abs(after_median - before_median) DESC, abs(after_mean - before_mean) DESC, time_ns, profile_id
) = 1
ORDER BY series, metric = 'step_time_ps' DESC, metric, op_key, time_ns
