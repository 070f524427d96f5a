-- diagnose.regressions: where a series of profiles (the runs of one job, by a tag) got slower: its
-- step time or the time of one of its longest ops rose to a new level, and from which profile on.
--
-- scope: fleet
--
-- Built on fleet.regressions (its rows, unchanged): per value of the tag $tag, the profiles ordered by
-- time, at each profile the median of the $window profiles before it against the median of it and
-- the $window - 1 after it; a change is a move of the median by at least $threshold (relative) and by
-- more than $mads scaled MADs (1.4826 x MAD) of the window before, robust to single outliers; its
-- first profile is where the medians differ most. Only changes to slower become findings. The
-- defaults are fleet.regressions' (window 5, 10%, 3 MADs: the usual median/MAD outlier rule).
--
-- The saving is the regressed amount: after_median - before_median, the time a step (step_time_ps)
-- or the op (op_time_per_step_ps, per device and step) gained, times the complete steps of the first
-- regressed profile (diagnose._profile_steps steps), at most its step time (diagnose._profile_steps
-- step_ps, per device); the share is that over its step time. Undoing the change gives that time
-- back; for an op whose added time overlaps other work the step gains less, so this is an upper
-- bound. Where the step time and one of its ops both moved, each is a finding (the op's names the
-- cause, the step time's the total).
--
-- An op is followed across the series by its identity (fleet.regressions' op_key: op_stats.op_key), so
-- two ops of one name are two findings; the evidence names the key.
--
-- One finding per series and metric that changed (profile_id: the first profile of the slower level;
-- job, rank, device and step NULL: a series is a tag's value, not a jobs.jobs job). The baseline is
-- the series' profile just before it (by profiles time, as fleet.regressions orders them), and the
-- fix names both profiles' commit and run tags where they have them.
--
-- Parameters:
--
-- Passes: $tag $window $threshold $mads $top (to its includes, with their defaults and meaning)
--
-- Show: profile_id, severity, expected_saving_share, title
--
-- Columns:
--   profile_id  VARCHAR  the first profile of the slower level
--   job  VARCHAR  NULL (the series is named in the title and evidence)
--   rank  BIGINT  NULL
--   device  VARCHAR  NULL
--   step  BIGINT  NULL (about every step)
--   rule  VARCHAR  regressions
--   severity  VARCHAR  high, medium or low (xprosql_severity of expected_saving_share)
--   title  VARCHAR  one line a person reads
--   evidence  VARCHAR  the numbers as a sentence
--   measures  MAP(VARCHAR, DOUBLE)  before_median_ps, after_median_ps, added_per_step_ps, change_ratio, window_count, points_count, steps_count
--   subjects  VARCHAR[]  the op (for an op's time) and the first regressed profile, then the baseline profile
--   expected_saving_ps  BIGINT  the added time over the first regressed profile's complete steps, per device, ps
--   expected_saving_share  DOUBLE  that over its step time, 0..1
--   saving_method  VARCHAR  how the saving is estimated
--   fix  VARCHAR  what to change
--   reference  VARCHAR  where the rule comes from
WITH regressions AS (
-- @include fleet.regressions
),
profile_steps AS (
-- @include diagnose._profile_steps
),
-- The series' profiles in fleet.regressions' order (fleet.profile_summary's time_ns), for the baseline.
series_profiles AS (
    SELECT profile_id, host, tags, tags[CAST($tag AS VARCHAR)] AS series,
        coalesce(profile_start_time_ns, CASE WHEN start_ns >= 1000000000000000 THEN start_ns END) AS time_ns
    FROM profiles
),
slower AS (
    SELECT r.*,
        r.after_median - r.before_median AS added_ps,
        CASE WHEN r.metric = 'step_time_ps' THEN NULL
             ELSE regexp_extract(r.metric, '^op_time_per_step_ps:([^:]*):(.*)$', 2) END AS op,
        CASE WHEN r.metric = 'step_time_ps' THEN NULL
             ELSE regexp_extract(r.metric, '^op_time_per_step_ps:([^:]*):(.*)$', 1) END AS device_kind
    FROM regressions AS r
    WHERE r.direction = 'slower' AND r.after_median > r.before_median
),
baselines AS (
    SELECT s.series, s.metric, s.op_key,
        arg_max(p.profile_id, (p.time_ns, p.profile_id)) AS baseline_profile_id
    FROM slower AS s
    JOIN series_profiles AS p
      ON p.series = s.series AND (p.time_ns < s.time_ns OR (p.time_ns = s.time_ns AND p.profile_id < s.first_profile_id))
    GROUP BY s.series, s.metric, s.op_key
),
found AS (
    SELECT s.*, b.baseline_profile_id, ps.steps, ps.step_ps,
        CAST(least(s.added_ps * ps.steps, ps.step_ps) AS BIGINT) AS saving_ps,
        tf.tags['commit'] AS first_commit, tf.tags['run'] AS first_run,
        tb.tags['commit'] AS baseline_commit, tb.tags['run'] AS baseline_run
    FROM slower AS s
    JOIN profile_steps AS ps ON ps.profile_id = s.first_profile_id
    LEFT JOIN baselines AS b ON b.series = s.series AND b.metric = s.metric AND b.op_key IS NOT DISTINCT FROM s.op_key
    LEFT JOIN series_profiles AS tf ON tf.profile_id = s.first_profile_id
    LEFT JOIN series_profiles AS tb ON tb.profile_id = b.baseline_profile_id
    WHERE ps.step_ps > 0
),
said AS (
    SELECT *,
        saving_ps / step_ps AS share,
        CASE WHEN op IS NULL THEN 'step time' ELSE printf('op %s (%s)', op, device_kind) END AS what,
        CASE WHEN op IS NULL THEN 'the step time'
             ELSE printf('the time per step of op %s on %s devices (op_key %s)', op, device_kind, op_key) END AS what_long,
        concat_ws(', ', CASE WHEN first_commit IS NOT NULL THEN 'commit ' || first_commit END,
                  CASE WHEN first_run IS NOT NULL THEN 'run ' || first_run END) AS first_tags,
        concat_ws(', ', CASE WHEN baseline_commit IS NOT NULL THEN 'commit ' || baseline_commit END,
                  CASE WHEN baseline_run IS NOT NULL THEN 'run ' || baseline_run END) AS baseline_tags
    FROM found
)
SELECT
    first_profile_id AS profile_id,
    CAST(NULL AS VARCHAR) AS job,
    CAST(NULL AS BIGINT) AS rank,
    CAST(NULL AS VARCHAR) AS device,
    CAST(NULL AS BIGINT) AS step,
    'regressions' AS rule,
    xprosql_severity(share) AS severity,
    printf('regression in %s=%s from profile %s: %s %.1f%% slower (+%s per step)', CAST($tag AS VARCHAR), series,
        first_profile_id, what, 100 * change, xprosql_duration(added_ps)) AS title,
    printf('In the profiles tagged %s=%s (%d, by time), %s moved from a median of %s over the %d profiles before profile %s '
        || '(host %s%s) to %s over it and the %d after (+%.1f%%: at least %.0f%% and above %g scaled MADs of the window '
        || 'before, fleet.regressions); %s per step over its %d complete steps is %s, %.1f%% of its step time; '
        || 'the profile before it: %s%s',
        CAST($tag AS VARCHAR), series, points, what_long, xprosql_duration(before_median), CAST($window AS BIGINT),
        first_profile_id, coalesce(host, '-'), CASE WHEN first_tags <> '' THEN ', ' || first_tags ELSE '' END,
        xprosql_duration(after_median), CAST($window AS BIGINT) - 1, 100 * change, 100 * CAST($threshold AS DOUBLE),
        CAST($mads AS DOUBLE), xprosql_duration(added_ps), steps, xprosql_duration(saving_ps), 100 * share,
        coalesce(baseline_profile_id, '-'), CASE WHEN baseline_tags <> '' THEN ' (' || baseline_tags || ')' ELSE '' END) AS evidence,
    MAP {'before_median_ps': before_median, 'after_median_ps': after_median, 'added_per_step_ps': added_ps,
         'change_ratio': change, 'window_count': CAST($window AS DOUBLE), 'points_count': CAST(points AS DOUBLE),
         'steps_count': CAST(steps AS DOUBLE)} AS measures,
    list_filter([op, first_profile_id, baseline_profile_id], lambda x: x IS NOT NULL) AS subjects,
    saving_ps AS expected_saving_ps,
    share AS expected_saving_share,
    'fleet.regressions: the median after the change less the median before (per step), times the first regressed '
        || 'profile''s complete steps, at most its step time: the time undoing the change gives back' AS saving_method,
    printf('Bisect the changes between %s and %s (git bisect run, re-profiling each candidate with xprosql ingest --tag %s=%s); '
        || '%s; compare the two profiles: xprosql compare <warehouse> --baseline "profile_id = ''%s''" --candidate "profile_id = ''%s''"',
        CASE WHEN baseline_tags <> '' THEN baseline_tags ELSE 'profile ' || coalesce(baseline_profile_id, '-') END,
        CASE WHEN first_tags <> '' THEN first_tags ELSE 'profile ' || first_profile_id END,
        CAST($tag AS VARCHAR), series,
        CASE WHEN op IS NULL THEN 'look at the ops whose time grew in the same profile (the op findings of this rule, '
                                  || 'ops.roofline total_time_ps) and at input, host and collective waits (steps.bottlenecks)'
             ELSE printf('look at op %s: its shapes, dtype, fusion and the kernel or HLO it runs as (ops.roofline, '
                         || 'op_stats) in both profiles', op) END,
        coalesce(baseline_profile_id, first_profile_id), first_profile_id) AS fix,
    'fleet.regressions (median of a window before against the window after, with a scaled-MAD guard: the median/MAD '
        || 'change-point rule of continuous benchmarking); git bisect' AS reference
FROM said
ORDER BY expected_saving_ps DESC, series, metric
