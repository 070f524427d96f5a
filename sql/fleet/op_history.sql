-- fleet.op_history: one op followed across a job's runs (its identity across profiles, op_stats.op_key):
-- its time per occurrence in each run, and the run where it changed level (got slower or faster).
-- scope: fleet
--
-- Built on fleet._op_keys (per profile: each op by its op_key, summed over devices). A series is the
-- profiles sharing a value of the tag $tag (a job); a run is the profiles sharing a value of the tag
-- $run_tag (default run), else the same profiles.run (a jax.profiler.trace run directory), else the
-- profile alone. Runs are ordered by their first profile's time (profile_start_time, else start_ns).
-- The ops followed: $op_key alone, or when it is NULL the $top ops of each series with the most total
-- time. An op's value in a run: the median over the run's profiles (where it ran) of its total time
-- over its occurrences, the time one execution takes; a slow host does not move a run's median.
--
-- The change point: a single change in level, found by the least absolute deviations (L1) split.
-- For each candidate first run k of a new level, with at least $min_runs runs on each side,
--   cost(k) = sum over runs before k of |x - median(before)| + sum over runs from k of |x - median(after)|,
-- and k is the split of least cost (ties: the earliest). This is the maximum-likelihood location of one
-- shift in level under Laplace (heavy-tailed) noise: the median/L1 cost that PELT and binary
-- segmentation use for robust change-point detection, which an outlier run moves far less than it
-- moves the mean of the least-squares (CUSUM) split. The split found is a change when the levels
-- (the two medians) differ by at least $threshold relative, and by more than $mads times the noise:
-- 1.4826 x the median absolute residual of the runs around their own level (a robust standard
-- deviation of the run-to-run scatter), so a step no larger than the jitter between runs is not one.
-- $min_runs = 2 keeps one odd last (or first) run from being a level of its own. One change per op:
-- a series with several shifts reports the one that explains the most (fit_gain).
--
-- Needs: profiles tagged with $tag (default job: ingest --tag job=NAME) in at least 2 x $min_runs runs ($run_tag, default run)
--
-- Parameters:
--   $tag        VARCHAR  tag whose values make the series, e.g. job (default: 'job')
--   $run_tag    VARCHAR  tag whose values make a series' runs; profiles without it: profiles.run, else each profile (default: 'run')
--   $op_key     VARCHAR  the op to follow (op_stats.op_key); NULL: the $top longest of each series (default: NULL)
--   $top        BIGINT   ops followed per series when $op_key is NULL, by total time [range: 1..] (default: 20)
--   $min_runs   BIGINT   runs at least on each side of a change [range: 1..] (default: 2)
--   $threshold  DOUBLE   relative change of the level that counts, 0.1 = 10% [range: 0..] (default: 0.1)
--   $mads       DOUBLE   the change must also exceed this many scaled MADs of the runs around their levels [range: 0..] (default: 3.0)
--
-- Show: series, device_kind, op, run, run_index, profiles, time_per_occurrence_ps, is_change_point, change_run, change, direction
--
-- Columns:
--   series  VARCHAR  the $tag value (the job)
--   device_kind  VARCHAR  tpu, gpu or cpu
--   op_key  VARCHAR  the op's identity across runs (op_stats.op_key)
--   op  VARCHAR  its name (HLO op, PyTorch op, kernel)
--   op_key_source  VARCHAR  hlo, hlo_name, torch or kernel (op_stats.op_key_source)
--   op_key_context  VARCHAR  the key's module fingerprint, module path or grid (op_stats.op_key_context)
--   run  VARCHAR  the run ($run_tag value, profiles.run or the profile id)
--   run_index  BIGINT  0-based place of the run in the series, by time
--   run_time_ns  BIGINT  the run's first profile time, ns since epoch
--   profiles  BIGINT  profiles of the run where the op ran
--   occurrences  BIGINT  its executions in them
--   time_ps  BIGINT  its total time in them, ps
--   time_per_occurrence_ps  DOUBLE  median over those profiles of total time / occurrences, ps
--   runs  BIGINT  runs of the series where the op ran
--   is_change_point  BOOLEAN  this run is the first of the op's new level
--   change_run  VARCHAR  the first run of the new level (the same on every row of the op); NULL without a change
--   change_run_index  BIGINT  its run_index
--   before_level_ps  DOUBLE  median time per occurrence of the runs before the best split, ps (also without a change)
--   after_level_ps  DOUBLE  median time per occurrence from the best split on, ps
--   change  DOUBLE  after_level_ps / before_level_ps - 1, signed
--   direction  VARCHAR  slower or faster where there is a change; NULL otherwise
--   noise_ps  DOUBLE  1.4826 x median absolute residual of the runs around their level, ps
--   fit_gain  DOUBLE  share of the one-level L1 cost the split removes, 0..1 (1: two flat levels)
WITH op_keys AS (
-- @include fleet._op_keys
),
params AS (
    SELECT
        CAST($tag AS VARCHAR) AS tag, CAST($run_tag AS VARCHAR) AS run_tag, CAST($op_key AS VARCHAR) AS wanted_op_key,
        CAST($top AS BIGINT) AS top_n, CAST($min_runs AS BIGINT) AS min_runs,
        CAST($threshold AS DOUBLE) AS threshold, CAST($mads AS DOUBLE) AS mads
),
profile_runs AS (
    SELECT p.profile_id, p.tags[pr.tag] AS series,
        coalesce(p.tags[pr.run_tag], p.run, p.profile_id) AS run,
        coalesce(p.profile_start_time_ns, p.start_ns) AS time_ns
    FROM profiles AS p
    CROSS JOIN params AS pr
    WHERE p.tags[pr.tag] IS NOT NULL
),
ranked_runs AS (
    SELECT series, run, run_time_ns,
        row_number() OVER (PARTITION BY series ORDER BY run_time_ns NULLS LAST, run) - 1 AS run_index
    FROM (SELECT series, run, min(time_ns) AS run_time_ns FROM profile_runs GROUP BY series, run)
),
op_profiles AS (
    SELECT r.series, r.run, o.profile_id, o.device_kind, o.op_key, o.op, o.op_key_source, o.op_key_context,
        o.occurrences, o.total_time_ps, CAST(o.total_time_ps AS DOUBLE) / o.occurrences AS per_occurrence
    FROM op_keys AS o
    JOIN profile_runs AS r USING (profile_id)
    WHERE o.occurrences > 0 AND o.total_time_ps IS NOT NULL
),
chosen AS (
    SELECT t.series, t.device_kind, t.op_key
    FROM (SELECT series, device_kind, op_key, min(op) AS op, sum(total_time_ps) AS total
          FROM op_profiles GROUP BY series, device_kind, op_key) AS t
    CROSS JOIN params AS pr
    QUALIFY CASE WHEN pr.wanted_op_key IS NOT NULL THEN t.op_key = pr.wanted_op_key
                 ELSE row_number() OVER (PARTITION BY t.series ORDER BY t.total DESC, t.op, t.device_kind, t.op_key) <= pr.top_n END
),
per_run AS (
    SELECT o.series, o.device_kind, o.op_key, min(o.op) AS op, any_value(o.op_key_source) AS op_key_source,
        any_value(o.op_key_context) AS op_key_context, o.run,
        count(DISTINCT o.profile_id) AS profiles, sum(o.occurrences) AS occurrences, sum(o.total_time_ps) AS time_ps,
        median(o.per_occurrence) AS value
    FROM op_profiles AS o
    SEMI JOIN chosen AS c USING (series, device_kind, op_key)
    GROUP BY o.series, o.device_kind, o.op_key, o.run
),
indexed AS (
    SELECT p.*, r.run_index, r.run_time_ns,
        row_number() OVER (PARTITION BY p.series, p.device_kind, p.op_key ORDER BY r.run_index) - 1 AS point,
        count(*) OVER (PARTITION BY p.series, p.device_kind, p.op_key) AS runs
    FROM per_run AS p
    JOIN ranked_runs AS r USING (series, run)
),
-- Every admissible first point of a new level, and both segments' values for it.
segments AS (
    SELECT s.series, s.device_kind, s.op_key, s.point AS split, i.point >= s.point AS after, i.value
    FROM indexed AS s
    CROSS JOIN params AS pr
    JOIN indexed AS i USING (series, device_kind, op_key)
    WHERE s.point >= pr.min_runs AND s.runs - s.point >= pr.min_runs
),
levels AS (
    SELECT series, device_kind, op_key, split, after, median(value) AS level
    FROM segments
    GROUP BY ALL
),
costs AS (
    SELECT g.series, g.device_kind, g.op_key, g.split,
        sum(abs(g.value - l.level)) AS cost,
        median(abs(g.value - l.level)) AS residual_mad,
        any_value(l.level) FILTER (WHERE NOT g.after) AS before_level,
        any_value(l.level) FILTER (WHERE g.after) AS after_level
    FROM segments AS g
    JOIN levels AS l USING (series, device_kind, op_key, split, after)
    GROUP BY g.series, g.device_kind, g.op_key, g.split
),
one_level AS (
    SELECT i.series, i.device_kind, i.op_key, sum(abs(i.value - w.level)) AS cost
    FROM indexed AS i
    JOIN (SELECT series, device_kind, op_key, median(value) AS level FROM indexed GROUP BY ALL) AS w
      USING (series, device_kind, op_key)
    GROUP BY ALL
),
best AS (
    SELECT c.*, o.cost AS one_level_cost
    FROM costs AS c
    JOIN one_level AS o USING (series, device_kind, op_key)
    QUALIFY row_number() OVER (PARTITION BY c.series, c.device_kind, c.op_key ORDER BY c.cost, c.split) = 1
),
judged AS (
    SELECT b.*,
        1.4826 * b.residual_mad AS noise_ps,
        b.before_level > 0
            AND abs(b.after_level / b.before_level - 1) >= pr.threshold
            AND abs(b.after_level - b.before_level) > pr.mads * 1.4826 * b.residual_mad AS is_change
    FROM best AS b
    CROSS JOIN params AS pr
)
SELECT
    i.series, i.device_kind, i.op_key, i.op, i.op_key_source, i.op_key_context, i.run,
    CAST(i.run_index AS BIGINT) AS run_index, i.run_time_ns,
    CAST(i.profiles AS BIGINT) AS profiles, CAST(i.occurrences AS BIGINT) AS occurrences,
    CAST(i.time_ps AS BIGINT) AS time_ps, i.value AS time_per_occurrence_ps, CAST(i.runs AS BIGINT) AS runs,
    coalesce(j.is_change AND i.point = j.split, false) AS is_change_point,
    CASE WHEN j.is_change THEN cr.run END AS change_run,
    CAST(CASE WHEN j.is_change THEN cr.run_index END AS BIGINT) AS change_run_index,
    j.before_level AS before_level_ps,
    j.after_level AS after_level_ps,
    j.after_level / nullif(j.before_level, 0) - 1 AS change,
    CASE WHEN j.is_change THEN CASE WHEN j.after_level > j.before_level THEN 'slower' ELSE 'faster' END END AS direction,
    j.noise_ps,
    CASE WHEN j.one_level_cost > 0 THEN greatest(0.0, least(1.0, 1 - j.cost / j.one_level_cost)) END AS fit_gain
FROM indexed AS i
LEFT JOIN judged AS j USING (series, device_kind, op_key)
LEFT JOIN indexed AS cr ON cr.series = j.series AND cr.device_kind = j.device_kind AND cr.op_key = j.op_key AND cr.point = j.split
ORDER BY i.series, j.is_change DESC NULLS LAST, i.device_kind, i.op, i.op_key, i.run_index
