-- jobs._members: the profiles of every job, one row per profile: which job it belongs to, its
-- member name and rank, and its wall-clock origin.
--
-- scope: fleet
--
-- A job is, by the first rule a profile meets:
--   tag          profiles with the same tags['job'] (ingest --tag job=NAME, xprosql.json)
--   run          XSpace files of one jax.profiler.trace run directory (plugins/profile/<run>/<host>.xplane.pb)
--   distributed  Kineto traces with a distributed rank (distributedInfo) in one directory, with the same
--                world size, whose capture windows overlap in wall-clock time: ranks of one job run
--                at the same time, so a later run of the same program into the same folder is another job
-- A profile that meets none (one process, no rank, no run, no tag) is in no job.
--
-- Wall-clock origin (origin_ns): profiles.start_ns, the epoch time of the profile's first event, except
-- for XSpace files whose event times count from the profiling session (start_ns before 1970-01-12 as
-- epoch ns, as JAX on CPU writes them): then profile_start_time_ns (the session's epoch start) plus
-- start_ns.
--
-- Parameters:
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   job_id  VARCHAR  the job: first 16 hex digits of the MD5 of its profile ids, sorted and joined by commas
--   job  VARCHAR  the job's key: tag:NAME, or the run / trace directory (with the world size and first start of a distributed job)
--   job_source  VARCHAR  which rule made the job: tag, run or distributed
--   member  VARCHAR  the member's name: rank N, else the host file's name (host0 of host0.xplane.pb)
--   rank  BIGINT  the distributed rank (profiles.rank), else the member's 0-based position by name in its job
--   host  VARCHAR  profiles.host
--   world_size  BIGINT  the job's world size: profiles.world_size, else its members
--   members  BIGINT  profiles in the job
--   origin_ns  BIGINT  the profile's time origin on the wall clock, ns since epoch
--   wall_offset_ps  BIGINT  origin_ns less that of the job's first member (lowest rank), signed, ps: a profile time plus this is the job's time by the wall clocks; NULL when more than ~106 days apart (clocks of no one job)
WITH base AS (
    SELECT p.profile_id, p.source_path, p.host, p.rank, p.world_size, p.format,
        regexp_replace(p.source_path, '/[^/]*$', '') AS folder,
        regexp_extract(p.source_path, '([^/]+?)(\.xplane\.pb|\.pt\.trace\.json\.gz|\.pt\.trace\.json|\.json\.gz|\.json)$', 1) AS file_stem,
        CASE WHEN p.format = 'xspace' AND p.start_ns < 1000000000000000 AND p.profile_start_time_ns IS NOT NULL
             THEN p.profile_start_time_ns + p.start_ns ELSE p.start_ns END AS origin_ns,
        p.duration_ps,
        CASE WHEN p.tags['job'] IS NOT NULL THEN 'tag'
             WHEN p.format = 'xspace' AND p.run IS NOT NULL THEN 'run'
             WHEN p.rank IS NOT NULL THEN 'distributed' END AS job_source,
        p.tags['job'] AS job_tag
    FROM profiles AS p
),
-- Distributed traces of one folder and world size: a new job starts where a trace begins after every
-- earlier one ended (gaps and islands over the capture windows).
windows AS (
    SELECT *, max(origin_ns + duration_ps // 1000) OVER (
        PARTITION BY folder, world_size ORDER BY origin_ns, profile_id
        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach_ns
    FROM base WHERE job_source = 'distributed'
),
islands AS (
    SELECT *, sum(CASE WHEN reach_ns IS NULL OR origin_ns > reach_ns THEN 1 ELSE 0 END) OVER (
        PARTITION BY folder, world_size ORDER BY origin_ns, profile_id ROWS UNBOUNDED PRECEDING) AS island
    FROM windows
),
keyed AS (
    SELECT profile_id, host, rank, world_size, file_stem, origin_ns, job_source,
        'tag:' || job_tag AS job
    FROM base WHERE job_source = 'tag'
    UNION ALL
    SELECT profile_id, host, rank, world_size, file_stem, origin_ns, job_source, folder
    FROM base WHERE job_source = 'run'
    UNION ALL
    SELECT profile_id, host, rank, world_size, file_stem, origin_ns, job_source,
        folder || ' (world ' || coalesce(CAST(world_size AS VARCHAR), '?') || ', from '
            || CAST(min(origin_ns) OVER (PARTITION BY folder, world_size, island) AS VARCHAR) || ' ns)'
    FROM islands
),
named AS (
    SELECT
        profile_id,
        -- Named by its profiles (content hashes): the same files give the same id wherever they lie.
        left(md5(string_agg(profile_id, ',' ORDER BY profile_id) OVER (PARTITION BY job)), 16) AS job_id,
        job, job_source,
        CASE WHEN rank IS NOT NULL THEN 'rank ' || CAST(rank AS VARCHAR)
             ELSE coalesce(nullif(file_stem, ''), host, profile_id) END AS member,
        coalesce(rank, row_number() OVER (PARTITION BY job ORDER BY file_stem, profile_id) - 1) AS rank,
        host,
        coalesce(max(world_size) OVER (PARTITION BY job), count(*) OVER (PARTITION BY job)) AS world_size,
        count(*) OVER (PARTITION BY job) AS members,
        origin_ns
    FROM keyed
)
SELECT *,
    -- The job clock is its first member's (lowest rank): its profile time 0 is job time 0.
    -- Members more than ~106 days apart (BIGINT ps) are on clocks of no one job: NULL, not an overflow.
    TRY_CAST((origin_ns - arg_min(origin_ns, (rank, profile_id)) OVER (PARTITION BY job_id))::HUGEINT * 1000 AS BIGINT)
        AS wall_offset_ps
FROM named
ORDER BY job_id, rank, profile_id
