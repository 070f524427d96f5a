-- jobs.jobs: the jobs of the warehouse, one row per job: its profiles, the ranks and hosts present,
-- and the ranks missing.
--
-- scope: fleet
--
-- Profiles form a job by the first rule they meet (jobs._members): the same tags['job']; the XSpace
-- host files of one jax.profiler.trace run directory; Kineto traces with a distributed rank in one
-- directory, with the same world size, captured at the same time. Missing ranks: 0 .. world_size - 1
-- (profiles.world_size, Kineto distributedInfo) less the ranks present; for hosts without a recorded
-- rank the world size is the files present, so none is missing.
--
-- Needs: profiles of one job: a distributed rank (Kineto distributedInfo), a jax.profiler.trace run of XSpace host files, or a job tag
--
-- Parameters:
--
-- Show: job_id, job, job_source, profiles, world_size, ranks, hosts, missing_ranks, duplicate_ranks
--
-- Columns:
--   job_id  VARCHAR  the job: first 16 hex digits of the MD5 of its profile ids (sorted, comma-joined)
--   job  VARCHAR  its key: tag:NAME, the run directory, or the trace directory with world size and first start
--   job_source  VARCHAR  tag, run or distributed (see above)
--   profiles  BIGINT  profiles in the job
--   world_size  BIGINT  ranks the job ran: profiles.world_size, else its profiles
--   ranks  BIGINT[]  ranks present, in order
--   members  VARCHAR[]  member names present (rank N, or host file names), in rank order
--   hosts  VARCHAR[]  distinct hosts (profiles.host)
--   missing_ranks  BIGINT  ranks of 0 .. world_size - 1 without a profile
--   missing  BIGINT[]  those ranks, in order
--   duplicate_ranks  BIGINT[]  ranks with more than one profile (two captures of a rank in one job)
--   one_run  BOOLEAN  each rank once (no duplicate_ranks): one run, what the cross-rank analyses need (jobs.stragglers, jobs.what_if, critical_path.job_graph)
--   start_ns  BIGINT  the job's earliest profile origin, ns since epoch
--   profile_ids  VARCHAR[]  its profiles, in rank order
WITH members AS (
-- @include jobs._members
),
per_job AS (
    SELECT job_id, any_value(job) AS job, any_value(job_source) AS job_source, count(*) AS profiles,
        max(world_size) AS world_size,
        list(DISTINCT rank ORDER BY rank) AS ranks,
        list(member ORDER BY rank, profile_id) AS members,
        list(DISTINCT host ORDER BY host) FILTER (WHERE host IS NOT NULL) AS hosts,
        min(origin_ns) AS start_ns,
        list(profile_id ORDER BY rank, profile_id) AS profile_ids
    FROM members GROUP BY job_id
),
duplicates AS (
    SELECT job_id, list(rank ORDER BY rank) AS duplicate_ranks
    FROM (SELECT job_id, rank FROM members GROUP BY ALL HAVING count(*) > 1)
    GROUP BY job_id
)
SELECT
    j.job_id, j.job, j.job_source, j.profiles, j.world_size, j.ranks, j.members, j.hosts,
    CAST(j.world_size - len(list_filter(j.ranks, lambda r: r >= 0 AND r < j.world_size)) AS BIGINT) AS missing_ranks,
    list_filter(CAST(range(0, j.world_size) AS BIGINT[]), lambda r: NOT list_contains(j.ranks, r)) AS missing,
    coalesce(d.duplicate_ranks, CAST([] AS BIGINT[])) AS duplicate_ranks,
    d.job_id IS NULL AS one_run,
    j.start_ns, j.profile_ids
FROM per_job AS j
LEFT JOIN duplicates AS d USING (job_id)
ORDER BY j.start_ns, j.job_id
