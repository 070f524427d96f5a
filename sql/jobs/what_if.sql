-- jobs.what_if: each job's step time if the step's worst rank had run like the median rank: what
-- that straggler costs.
--
-- scope: fleet
--
-- The replay. In a step, collective instance i ends at max over ranks r of (end of i-1 + c[r,i]) plus
-- its transfer t[i], where c[r,i] is rank r's compute between the two (jobs.collectives: its arrival
-- less the previous end). So the step's end is the sum over i of (max over r of c[r,i] + t[i]), and
-- giving the worst rank w the median rank's compute replaces max over r of c[r,i] by the largest of
-- the others' and the median's, which is the largest of the others'. Each instance where w arrived
-- last then starts at the arrival before w's: the job no longer waits through w's imposed waits. The
-- step shortens by the time those waits cover, each instant once (jobs.stragglers.delay_imposed_ps:
-- the union of their intervals; several collectives w is late to, as DDP's gradient buckets, wait
-- through the same delay), at most the step. So: what_if_step_ps = job_step_ps - the worst rank's
-- delay_imposed_ps, never negative. It assumes the others wait in
-- each collective (synchronous collectives on the critical path); where they overlap the wait with
-- other work, the saving is smaller, so this is an upper bound on what fixing the straggler gains.
-- Where the job's ranks are Kineto traces, run.what_if() (xprosql.queries.job_critical_path.job_what_if)
-- replaces this estimate by a replay over the job's critical-path graph (critical_path.job_graph): the worst
-- rank's compute scaled to the median rank's, the step propagated again; its rows say which (method);
-- compaction stores those rows per job (stored_job_what_if), which diagnose.stragglers reads.
--
-- One row per job and step (scope step), and one per job (scope job: the steps summed; its
-- worst_member is the member with the largest delay over the job).
--
-- Needs: collectives matched across profiles of one job (jobs.collectives), in steps, of a job that holds each rank once
--
-- Parameters:
--
-- Passes: $min_matched (to its includes, with their defaults and meaning)
--
-- Show: job_id, scope, step, job_step_ps, worst_member, worst_delay_ps, median_delay_ps, what_if_step_ps, saving_ps, saving_share
--
-- Columns:
--   job_id  VARCHAR  the job (jobs.jobs.job_id)
--   scope  VARCHAR  step (one step) or job (every step of the job, summed)
--   step  BIGINT  step number; NULL for scope job
--   steps  BIGINT  steps in the row
--   ranks  BIGINT  ranks with matched collectives in the step(s)
--   job_step_ps  BIGINT  the job's step time: the longest rank's wall (jobs.stragglers.job_step_ps), summed for scope job, ps
--   worst_member  VARCHAR  the rank that imposed the most delay (position 1), or over the job
--   worst_rank  BIGINT  its rank
--   worst_delay_ps  BIGINT  the delay it imposed, ps
--   median_delay_ps  BIGINT  the median delay the step's ranks imposed (scope step), ps
--   what_if_step_ps  BIGINT  job_step_ps - worst_delay_ps: the step time with the worst rank running like the median one, ps
--   saving_ps  BIGINT  job_step_ps - what_if_step_ps, ps
--   saving_share  DOUBLE  saving_ps / job_step_ps, 0..1
--   method  VARCHAR  how the saving is estimated: subtraction (this module: the worst rank's imposed delay, an upper bound); run.what_if() replays it over the job's critical-path graph where the job has one (replay; xprosql.queries.job_critical_path)
WITH stragglers AS (
-- @include jobs.stragglers
),
per_step AS (
    SELECT job_id, step, count(*) AS ranks, max(job_step_ps) AS job_step_ps,
        arg_min(member, position) AS worst_member, arg_min(rank, position) AS worst_rank,
        max(delay_imposed_ps) AS worst_delay_ps,
        CAST(median(delay_imposed_ps) AS BIGINT) AS median_delay_ps
    FROM stragglers GROUP BY job_id, step
),
job_worst AS (
    SELECT job_id, arg_max(member, (total, -rank)) AS worst_member, arg_max(rank, (total, -rank)) AS worst_rank
    FROM (SELECT job_id, member, rank, sum(delay_imposed_ps) AS total FROM stragglers GROUP BY ALL)
    GROUP BY job_id
),
rows AS (
    SELECT job_id, 'step' AS scope, step, 1 AS steps, ranks, job_step_ps, worst_member, worst_rank, worst_delay_ps,
        median_delay_ps
    FROM per_step
    UNION ALL
    SELECT s.job_id, 'job', NULL, count(*), max(s.ranks), sum(s.job_step_ps), w.worst_member, w.worst_rank,
        sum(s.worst_delay_ps), NULL
    FROM per_step AS s JOIN job_worst AS w USING (job_id)
    GROUP BY s.job_id, w.worst_member, w.worst_rank
)
SELECT job_id, scope, step, CAST(steps AS BIGINT) AS steps, CAST(ranks AS BIGINT) AS ranks,
    CAST(job_step_ps AS BIGINT) AS job_step_ps, worst_member, worst_rank, CAST(worst_delay_ps AS BIGINT) AS worst_delay_ps,
    median_delay_ps,
    CAST(job_step_ps - worst_delay_ps AS BIGINT) AS what_if_step_ps,
    CAST(worst_delay_ps AS BIGINT) AS saving_ps,
    worst_delay_ps / nullif(job_step_ps, 0) AS saving_share,
    'subtraction' AS method
FROM rows
ORDER BY job_id, scope DESC, step
