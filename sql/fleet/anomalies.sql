-- fleet.anomalies: profiles that stand out from their job's recent ones: each profile of a
-- series (a job's snapshots over time, by a tag) against the $window profiles of the same job and
-- host before it, on step time, op time per step, exposed communication, memory peak and idle
-- share; a row per profile and measure that deviates, naming what changed.
-- scope: fleet
--
-- Built on steps.bottlenecks (step time, idle and exposed collective time, per step and device),
-- ops.roofline (op total time, the op key of fleet.regressions: <device kind>:<op>, per step),
-- the memory_events table (the highest bytes in use after any allocation or free, of any allocator:
-- memory.memory_peaks' peak_in_use_bytes, read without that analysis' attribution of the peak) and
-- fleet.snapshots (each profile's wall-clock start: the series' order). The step time of a profile is the median of its
-- complete steps per device kind, the longest kind's (fleet.profile_summary's, as fleet.regressions
-- reads it); idle and exposed collective time are shares of the summed step time; an op is
-- followed when it is among the $top longest of its series.
--
-- The rule: a profile is compared with the $window profiles of its series and host just before it
-- (at least $min_window of them: the first profiles of a job are never flagged), by the median and
-- the MAD (median absolute deviation, scaled by 1.4826 to estimate a standard deviation) of that
-- window. A measure deviates when it is more than $mads scaled MADs from the window's median (the
-- modified z-score of Iglewicz and Hoaglin, 3.5 by default) and also moved by at least $threshold of
-- the median (times, bytes) and by at least $min_step_share of the step time (shares: an absolute
-- change of the share; an op: its change per step over the window's median step time): the second
-- test keeps a window of near-identical profiles (MAD near 0) from flagging noise, and the third an op
-- of a few microseconds from being named for a change no step feels. Why median and MAD rather than a
-- mean and standard deviation, or a change-point test: a window of a few profiles holds earlier
-- anomalies (a slow snapshot, a checkpoint step), which move a mean and inflate a standard
-- deviation until the next anomaly hides, while the median and the MAD ignore up to half the window
-- (a breakdown point of 50%); step times are skewed (a step is never faster than its work, often
-- slower), which a normal model misreads; and a change-point test (fleet.regressions: median before
-- against median after) needs the profiles after a change, which a profile that just landed does not
-- have. An anomaly is one profile off its recent level; a lasting change to a new level is
-- fleet.regressions' to name (its profiles stop being anomalies once the window fills with them).
--
-- Needs: profiles with steps sharing a value of the tag parameter (default job: ingest --tag job=NAME), each after at least min_window earlier ones of its job and host; rows only where a measure moved past the thresholds
--
-- Parameters:
--   $tag               VARCHAR  tag whose values make the series, e.g. job (default: 'job')
--   $window            BIGINT   profiles before each one that it is compared with [range: 1..] (default: 8)
--   $min_window        BIGINT   profiles needed before a profile can be flagged [range: 1..] (default: 3)
--   $mads              DOUBLE   how many scaled MADs from the window's median count as a deviation [range: 0..] (default: 3.5)
--   $threshold         DOUBLE   relative change of a time or byte count that counts, 0.2 = 20% [range: 0..] (default: 0.2)
--   $min_step_share    DOUBLE   change that counts, as a share of step time: of a share (idle, exposed communication) itself, of an op's time per step over the window's median step time, 0..1 [range: 0..1] (default: 0.05)
--   $top               BIGINT   ops followed per series: the longest by total time [range: 1..] (default: 10)
--   $kinds             VARCHAR[]  the measures compared; NULL: every one [choices: step_time, op_time, exposed_communication, memory_peak, idle] (default: NULL)
--
-- Show: series, host, profile_id, metric, value, window_median, change, robust_z, what
--
-- Columns:
--   series  VARCHAR  the tag's value (the job)
--   host  VARCHAR  profiles.host: a profile is compared with its own host's profiles
--   profile_id  VARCHAR  the profile that deviates
--   time_ns  BIGINT  its start on the wall clock (fleet.snapshots.time_ns), ns since epoch
--   metric  VARCHAR  step_time_ps, idle_share, exposed_collective_share, memory_peak_bytes or op_time_per_step_ps:<device kind>:<op>
--   kind  VARCHAR  step_time, idle, exposed_communication, memory_peak or op_time
--   op  VARCHAR  the op (op_time); NULL otherwise
--   device_kind  VARCHAR  the op's device kind (op_time); NULL otherwise
--   value  DOUBLE  the profile's value (ps, a share 0..1, or bytes: the metric's suffix)
--   window_median  DOUBLE  median over the window before, in the metric's unit
--   window_mad  DOUBLE  median absolute deviation from it over the window, unscaled, in the metric's unit
--   window_count  BIGINT  profiles in the window that have the metric
--   difference  DOUBLE  value - window_median, in the metric's unit (signed)
--   change  DOUBLE  value / window_median - 1 (signed); NULL when the median is 0
--   robust_z  DOUBLE  difference / (1.4826 x window_mad): the modified z-score (signed); NULL when the MAD is 0
--   direction  VARCHAR  higher or lower
--   what  VARCHAR  what changed, as a sentence
--   points  BIGINT  profiles of the series on that host
WITH bottlenecks AS (
-- @include steps.bottlenecks
),
roofline AS (
-- @include ops.roofline
),
snapshots AS (
-- @include fleet.snapshots
),
profile_points AS (
    SELECT s.profile_id, s.host, s.time_ns, p.tags[CAST($tag AS VARCHAR)] AS series
    FROM snapshots AS s JOIN profiles AS p USING (profile_id)
    WHERE p.tags[CAST($tag AS VARCHAR)] IS NOT NULL
),
kinds AS (
    SELECT profile_id, device_kind, count(*) AS steps, median(step_ps) AS step_ps
    FROM bottlenecks WHERE scope = 'step'
    GROUP BY profile_id, device_kind
),
step_points AS (
    SELECT k.profile_id, max(k.step_ps) AS step_time_ps, max(k.steps) AS steps,
        any_value(s.idle_share) AS idle_share, any_value(s.exposed_collective_share) AS exposed_collective_share
    FROM kinds AS k
    JOIN (SELECT profile_id, sum(idle_ps) / nullif(sum(step_ps), 0) AS idle_share,
              sum(exposed_collective_ps) / nullif(sum(step_ps), 0) AS exposed_collective_share
          FROM bottlenecks WHERE scope = 'step' GROUP BY profile_id) AS s USING (profile_id)
    GROUP BY k.profile_id
),
op_points AS (
    SELECT pp.series, pp.profile_id, r.device_kind, r.op, sum(r.total_time_ps) / greatest(sp.steps, 1) AS value
    FROM roofline AS r
    JOIN profile_points AS pp USING (profile_id)
    JOIN step_points AS sp USING (profile_id)
    WHERE r.row_kind = 'op' AND r.op IS NOT NULL
    GROUP BY pp.series, pp.profile_id, sp.steps, r.device_kind, r.op
),
top_ops AS (
    SELECT series, device_kind, op FROM (SELECT series, device_kind, op, sum(value) AS total FROM op_points GROUP BY ALL)
    QUALIFY row_number() OVER (PARTITION BY series ORDER BY total DESC, device_kind, op) <= $top
),
points AS (
    SELECT pp.*, 'step_time_ps' AS metric, 'step_time' AS kind, NULL AS op, NULL AS device_kind,
        CAST(sp.step_time_ps AS DOUBLE) AS value, false AS is_share
    FROM profile_points AS pp JOIN step_points AS sp USING (profile_id) WHERE sp.step_time_ps IS NOT NULL
    UNION ALL
    SELECT pp.*, 'idle_share', 'idle', NULL, NULL, sp.idle_share, true
    FROM profile_points AS pp JOIN step_points AS sp USING (profile_id) WHERE sp.idle_share IS NOT NULL
    UNION ALL
    SELECT pp.*, 'exposed_collective_share', 'exposed_communication', NULL, NULL, sp.exposed_collective_share, true
    FROM profile_points AS pp JOIN step_points AS sp USING (profile_id) WHERE sp.exposed_collective_share IS NOT NULL
    UNION ALL
    SELECT pp.*, 'memory_peak_bytes', 'memory_peak', NULL, NULL, CAST(max(m.in_use_bytes) AS DOUBLE), false
    FROM profile_points AS pp JOIN memory_events AS m USING (profile_id)
    WHERE m.in_use_bytes IS NOT NULL
    GROUP BY ALL
    UNION ALL
    SELECT pp.*, 'op_time_per_step_ps:' || o.device_kind || ':' || o.op, 'op_time', o.op, o.device_kind,
        CAST(o.value AS DOUBLE), false
    FROM op_points AS o
    SEMI JOIN top_ops AS t USING (series, device_kind, op)
    JOIN profile_points AS pp USING (series, profile_id)
),
windows AS (
    SELECT
        *,
        count(*) OVER (PARTITION BY series, host, metric) AS points,
        count(value) OVER before AS window_count,
        median(value) OVER before AS window_median,
        mad(value) OVER before AS window_mad
    FROM points
    WINDOW before AS (PARTITION BY series, host, metric ORDER BY time_ns, profile_id
                      ROWS BETWEEN $window PRECEDING AND 1 PRECEDING)
),
step_windows AS (
    SELECT series, host, profile_id, window_median AS step_median FROM windows WHERE metric = 'step_time_ps'
),
flagged AS (
    SELECT
        w.*,
        w.value - w.window_median AS difference,
        CASE WHEN w.window_median <> 0 THEN w.value / w.window_median - 1 END AS change,
        CASE WHEN w.window_mad > 0 THEN (w.value - w.window_median) / (1.4826 * w.window_mad) END AS robust_z
    FROM windows AS w
    LEFT JOIN step_windows AS s USING (series, host, profile_id)
    WHERE w.window_count >= $min_window
      AND ($kinds IS NULL OR list_contains($kinds, w.kind))
      AND abs(w.value - w.window_median) > $mads * 1.4826 * w.window_mad
      AND CASE WHEN w.is_share THEN abs(w.value - w.window_median) >= $min_step_share
               ELSE w.window_median > 0 AND abs(w.value / w.window_median - 1) >= $threshold END
      AND (w.kind <> 'op_time' OR abs(w.value - w.window_median) >= $min_step_share * s.step_median)
)
SELECT
    series,
    host,
    profile_id,
    CAST(time_ns AS BIGINT) AS time_ns,
    metric,
    kind,
    op,
    device_kind,
    value,
    window_median,
    window_mad,
    CAST(window_count AS BIGINT) AS window_count,
    difference,
    change,
    robust_z,
    CASE WHEN difference > 0 THEN 'higher' ELSE 'lower' END AS direction,
    CASE kind
        WHEN 'step_time' THEN printf('step time %s against a median of %s', xprosql_duration(value),
                                     xprosql_duration(window_median))
        WHEN 'op_time' THEN printf('op %s (%s) %s per step against a median of %s', op, device_kind,
                                   xprosql_duration(value), xprosql_duration(window_median))
        WHEN 'memory_peak' THEN printf('memory peak %.1f MiB against a median of %.1f MiB', value / 1048576,
                                       window_median / 1048576)
        WHEN 'idle' THEN printf('idle %.1f%% of step time against a median of %.1f%%', 100 * value, 100 * window_median)
        ELSE printf('exposed communication %.1f%% of step time against a median of %.1f%%', 100 * value,
                    100 * window_median) END
        || printf(' over the %d profiles before (', window_count)
        || CASE WHEN is_share THEN printf('%+.1f points', 100 * difference) ELSE printf('%+.0f%%', 100 * change) END
        || CASE WHEN window_mad > 0 THEN printf(', %.1f scaled MADs)', abs(robust_z)) ELSE ', the window did not vary)' END
        AS what,
    CAST(points AS BIGINT) AS points
FROM flagged
ORDER BY series, host, time_ns, profile_id, metric = 'step_time_ps' DESC, kind, abs(coalesce(robust_z, 1e308)) DESC, metric
