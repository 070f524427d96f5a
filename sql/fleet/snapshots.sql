-- fleet.snapshots: every profile as a point of its job's time series: its absolute wall-clock
-- start and end, its job (a tag) and host, so that a query asks for "the last hour of this job".
--
-- A job that profiles every N steps (jax.profiler, torch.profiler's schedule and on_trace_ready,
-- XProf's snapshots, xprosql watch) leaves one profile per capture. Its time is the profile's own
-- clock when that is a date: the Task Environment profile_start_time (XSpace, JAX on CPU included),
-- else profiles.start_ns when it is past 1970-01-12 (Kineto, GPU XSpace files). A profile whose
-- times count from its session start with no session start recorded (TensorFlow's XSpace files of
-- 2020) has no date of its own: its time is when xprosql ingested it (clock = ingested), which
-- xprosql watch makes seconds after the capture, an ingest of old files days after. The same rule
-- as fleet.profile_summary's time_ns, with that fallback, so every profile has a place in time.
--
-- The window: with $last_s, the profiles that started within $last_s seconds before $until_ns
-- (default: now); with $job, one job's. Per profile (rows depend on one profile's row each).
--
-- Parameters:
--   $tag      VARCHAR  tag whose value is the job, e.g. job (default: 'job')
--   $job      VARCHAR  only this job (the tag's value); NULL: every profile (default: NULL)
--   $last_s   DOUBLE   only profiles started within this many seconds before until_ns, e.g. 3600; NULL: any time [range: 0<..] (default: NULL)
--   $until_ns BIGINT   the end of that window, ns since epoch; NULL: now (default: NULL)
--
-- Show: job, host, started_at, time_ns, duration_ps, clock, profile_id
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   job  VARCHAR  the tag's value (profiles.tags[$tag]); NULL when the profile has no such tag
--   host  VARCHAR  profiles.host
--   run  VARCHAR  profiles.run (the jax.profiler.trace run directory)
--   time_ns  BIGINT  the profile's start on the wall clock, ns since epoch (see clock)
--   end_ns  BIGINT  time_ns + the profile's duration, ns since epoch
--   started_at  TIMESTAMP WITH TIME ZONE  time_ns as a timestamp (UTC)
--   duration_ps  BIGINT  profiles.duration_ps, ps
--   clock  VARCHAR  where time_ns comes from: task_environment (profile_start_time_ns), trace (start_ns is a date) or ingested (profiles.ingested_at: the profile has no date of its own)
--   ingested_at  TIMESTAMP WITH TIME ZONE  when xprosql committed the profile
--   source_path  VARCHAR  the file it was ingested from
WITH dated AS (
    SELECT
        p.profile_id,
        p.tags[CAST($tag AS VARCHAR)] AS job,
        p.host,
        p.run,
        CASE WHEN p.profile_start_time_ns IS NOT NULL THEN p.profile_start_time_ns
             WHEN p.start_ns >= 1000000000000000 THEN p.start_ns
             ELSE epoch_ns(p.ingested_at) END AS time_ns,
        CASE WHEN p.profile_start_time_ns IS NOT NULL THEN 'task_environment'
             WHEN p.start_ns >= 1000000000000000 THEN 'trace'
             ELSE 'ingested' END AS clock,
        p.duration_ps,
        p.ingested_at,
        p.source_path
    FROM profiles AS p
)
SELECT
    profile_id,
    job,
    host,
    run,
    CAST(time_ns AS BIGINT) AS time_ns,
    CAST(time_ns + coalesce(duration_ps, 0) // 1000 AS BIGINT) AS end_ns,
    make_timestamp(CAST(time_ns // 1000 AS BIGINT))::TIMESTAMPTZ AS started_at,
    duration_ps,
    clock,
    ingested_at,
    source_path
FROM dated
WHERE ($job IS NULL OR job = CAST($job AS VARCHAR))
  AND ($last_s IS NULL OR time_ns >= coalesce(CAST($until_ns AS BIGINT), epoch_ns(now())) - CAST($last_s AS DOUBLE) * 1e9)
  AND ($until_ns IS NULL OR time_ns <= CAST($until_ns AS BIGINT))
ORDER BY job NULLS LAST, time_ns, profile_id
