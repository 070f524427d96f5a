-- diagnose.anomalies: a profile of a job stands out from the job's recent profiles: a slower step, a
-- slower op, more idle time or exposed communication, or a higher memory peak than the profiles just
-- before it (a transient slowdown that continuous profiling's snapshots are taken to catch).
--
-- scope: fleet
--
-- Built on fleet.anomalies (its rows, unchanged): per value of the tag $tag and host, each profile
-- against the $window profiles before it (at least $min_window), flagged when a measure is more than
-- $mads scaled MADs (1.4826 x MAD) from the window's median and moved by at least $threshold (times,
-- bytes) and $min_step_share of step time; the header of sql/fleet/anomalies.sql says why median and
-- MAD. Only deviations for the worse become findings: higher step time, op time, idle share, exposed
-- communication share or memory peak.
--
-- The saving is the deviation, over the profile's complete steps (diagnose._profile_steps): for step
-- and op time, the added time per step (value - window median) times its steps, at most its step
-- time; for idle and exposed communication, the added share of its step time; for the memory peak,
-- 0 (a risk, not time: the bytes above the usual peak are what could run out). Undoing the cause
-- gives that time back; an op's added time that overlaps other work gives back less, so it is an
-- upper bound. Where the step time and an op or the idle share of the same profile moved, each is a
-- finding (the op's or the idle's names the cause, the step time's the total).
--
-- One finding per profile and measure (profile_id: the profile that stands out; job, rank, device and
-- step NULL: a series is a tag's value, not a jobs.jobs job). The baseline is the profile of the same
-- series and host just before it (fleet.snapshots' time), which the fix compares it with.
--
-- Parameters:
--
-- Passes: $tag $window $min_window $mads $threshold $min_step_share $top $kinds (to its includes, with their defaults and meaning)
--
-- Show: profile_id, severity, expected_saving_share, title
--
-- Columns:
--   profile_id  VARCHAR  the profile that stands out
--   job  VARCHAR  NULL (the series is named in the title and evidence)
--   rank  BIGINT  NULL
--   device  VARCHAR  NULL
--   step  BIGINT  NULL (about every step of the profile)
--   rule  VARCHAR  anomalies
--   severity  VARCHAR  high, medium or low (xprosql_severity of expected_saving_share)
--   title  VARCHAR  one line a person reads
--   evidence  VARCHAR  the numbers as a sentence
--   measures  MAP(VARCHAR, DOUBLE)  value and window_median and window_mad (each suffixed by the metric's unit: _ps, _share, _bytes), change_ratio, robust_z_count, window_count, steps_count
--   subjects  VARCHAR[]  the op (for an op's time), the profile, then the baseline profile
--   expected_saving_ps  BIGINT  the added time over the profile's complete steps, per device, ps (0 for a memory peak)
--   expected_saving_share  DOUBLE  that over its step time, 0..1
--   saving_method  VARCHAR  how the saving is estimated
--   fix  VARCHAR  what to change
--   reference  VARCHAR  where the rule comes from
WITH anomalies AS (
-- @include fleet.anomalies
),
profile_steps AS (
-- @include diagnose._profile_steps
),
snapshots AS (
-- @include fleet.snapshots
),
series_profiles AS (
    SELECT s.profile_id, s.host, s.time_ns, p.tags[CAST($tag AS VARCHAR)] AS series
    FROM snapshots AS s JOIN profiles AS p USING (profile_id)
),
worse AS (
    SELECT a.*,
        CASE a.kind WHEN 'step_time' THEN '_ps' WHEN 'op_time' THEN '_ps' WHEN 'memory_peak' THEN '_bytes' ELSE '_share' END AS unit
    FROM anomalies AS a
    WHERE a.direction = 'higher' AND a.difference > 0
),
baselines AS (
    SELECT w.profile_id, w.metric, arg_max(sp.profile_id, (sp.time_ns, sp.profile_id)) AS baseline_profile_id
    FROM worse AS w
    JOIN series_profiles AS sp
      ON sp.series = w.series AND sp.host IS NOT DISTINCT FROM w.host
     AND (sp.time_ns < w.time_ns OR (sp.time_ns = w.time_ns AND sp.profile_id < w.profile_id))
    GROUP BY w.profile_id, w.metric
),
found AS (
    SELECT w.*, b.baseline_profile_id, ps.steps, ps.step_ps,
        CAST(CASE w.kind
            WHEN 'memory_peak' THEN 0
            WHEN 'step_time' THEN least(w.difference * ps.steps, ps.step_ps)
            WHEN 'op_time' THEN least(w.difference * ps.steps, ps.step_ps)
            ELSE least(w.difference, 1.0) * ps.step_ps END AS BIGINT) AS saving_ps
    FROM worse AS w
    JOIN profile_steps AS ps USING (profile_id)
    LEFT JOIN baselines AS b USING (profile_id, metric)
    WHERE ps.step_ps > 0
),
said AS (
    SELECT *,
        least(greatest(saving_ps / step_ps, 0.0), 1.0) AS share,
        CASE kind
            WHEN 'step_time' THEN printf('step time %+.0f%%', 100 * change)
            WHEN 'op_time' THEN printf('op %s (%s) %+.0f%% per step', op, device_kind, 100 * change)
            WHEN 'memory_peak' THEN printf('memory peak %+.0f%%', 100 * change)
            WHEN 'idle' THEN printf('idle %+.1f points of step time', 100 * difference)
            ELSE printf('exposed communication %+.1f points of step time', 100 * difference) END AS short
    FROM found
)
SELECT
    profile_id,
    CAST(NULL AS VARCHAR) AS job,
    CAST(NULL AS BIGINT) AS rank,
    CAST(NULL AS VARCHAR) AS device,
    CAST(NULL AS BIGINT) AS step,
    'anomalies' AS rule,
    xprosql_severity(share) AS severity,
    printf('anomaly in %s=%s (host %s), profile %s: %s against the %d profiles before', CAST($tag AS VARCHAR), series,
        coalesce(host, '-'), profile_id, short, window_count) AS title,
    printf('Profile %s of %s=%s on host %s, started %s: %s (median and scaled MAD of the window before, fleet.anomalies: '
        || 'at least %g MADs, %.0f%% and %.0f%% of step time); over its %d complete steps that is %s, %.1f%% of its '
        || 'step time; the profile before it: %s',
        profile_id, CAST($tag AS VARCHAR), series, coalesce(host, '-'),
        strftime(make_timestamp(CAST(time_ns // 1000 AS BIGINT)), '%Y-%m-%d %H:%M:%S UTC'), what,
        CAST($mads AS DOUBLE), 100 * CAST($threshold AS DOUBLE), 100 * CAST($min_step_share AS DOUBLE), steps,
        CASE WHEN kind = 'memory_peak' THEN 'no step time (a risk of running out of memory)' ELSE xprosql_duration(saving_ps) END,
        100 * share, coalesce(baseline_profile_id, '-')) AS evidence,
    MAP {'value' || unit: value, 'window_median' || unit: window_median, 'window_mad' || unit: window_mad,
         'change_ratio': change, 'robust_z_count': robust_z, 'window_count': CAST(window_count AS DOUBLE),
         'steps_count': CAST(steps AS DOUBLE)} AS measures,
    list_filter([op, profile_id, baseline_profile_id], lambda x: x IS NOT NULL) AS subjects,
    saving_ps AS expected_saving_ps,
    share AS expected_saving_share,
    CASE WHEN kind IN ('step_time', 'op_time')
         THEN 'fleet.anomalies: the time per step above the window''s median, times the profile''s complete steps, at most its step time'
         WHEN kind = 'memory_peak' THEN 'none: a higher memory peak costs no time until it runs out'
         ELSE 'fleet.anomalies: the share of step time above the window''s median, times the profile''s step time' END AS saving_method,
    CASE kind
        WHEN 'step_time' THEN 'See what else ran on the host then (a checkpoint, an evaluation, data loading, preemption, '
            || 'another process): this profile''s op, idle and communication findings of this rule name the part that grew; '
        WHEN 'op_time' THEN printf('Look at op %s in this profile: its shapes and dtype (a new input size recompiles), the '
            || 'kernel or HLO it runs as and what ran beside it (ops.roofline, op_stats); ', op)
        WHEN 'idle' THEN 'The device waited inside the step: host-side work (input pipeline, logging, a sleep, a '
            || 'synchronisation, garbage collection) ran between its ops (steps.bottlenecks names host_wait, input_wait, idle); '
        WHEN 'memory_peak' THEN 'Find what was live at the peak (memory.memory_peaks live_at_peak: a larger batch or '
            || 'sequence, a cache, a leak: memory.memory_leaks) before it runs out; '
        ELSE 'A collective waited for a peer: a straggling rank or host, or a slower link (jobs.stragglers, '
            || 'jobs.collectives); ' END
        || printf('compare it with the profile before: xprosql compare <warehouse> --baseline "profile_id = ''%s''" '
                  || '--candidate "profile_id = ''%s''"', coalesce(baseline_profile_id, profile_id), profile_id) AS fix,
    'fleet.anomalies: the modified z-score (median and MAD; Iglewicz and Hoaglin, How to Detect and Handle Outliers, '
        || '1993: 3.5) against the job''s recent profiles; XProf continuous profiling snapshots' AS reference
FROM said
ORDER BY expected_saving_ps DESC, series, host, profile_id, metric
