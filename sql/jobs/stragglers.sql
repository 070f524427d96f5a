-- jobs.stragglers: per job, step and rank, how much that rank delayed the others (its late arrivals
-- at collectives, summed) and the step time that costs, with HTA's straggler metric and the pace of
-- the step's first collective beside it.
--
-- scope: fleet
--
-- delay_imposed_ps is the step time the rank cost the job: over the step's collective instances where
-- it arrived last, the wait it imposed at each (jobs.collectives.imposed_wait_ps: from the arrival
-- before its own to its own, on the job clock), as the union of those intervals, so waits that
-- overlap count once. The job waits for its last arrival once, not once per waiting rank nor once
-- per collective: DDP's gradient buckets are all-reduced one after another, and a rank that is late
-- to the first is late to each (the generated 4-rank gloo job with two buckets: a 50 ms delay imposed
-- 43-47 ms at each of the step's two all-reduces, 90 ms summed, 48 ms as their union). It is at most
-- the job's step time. imposed_wait_sum_ps keeps the plain sum (overlapping waits counted each time),
-- and waiting_rank_time_ps the time every other rank spent waiting for it, summed over those ranks
-- (rank-time: up to (ranks - 1) x the step time). position ranks the
-- step's ranks by it (1: the worst). A rank is a straggler in a step when it imposed at least
-- $min_cost_share of the job's step time (the longest of the ranks' walls for that step). Why 20%:
-- a healthy job's ranks still arrive apart, by the jitter of whatever runs before the collective
-- (OS scheduling, launch queues, garbage collection, data loading). Measured on the generated
-- 4-rank gloo control run (tests/test_multirank.py): up to 1.4 ms of a 0.5 s step when the host is
-- quiet, and stalls of 50 ms (10% of the step) on its 2 shared cores under load. Twice that worst
-- noise names only ranks whose cost is not jitter; it is also a saving worth acting on (a fifth
-- of the step). XProf's overview reports idle time from 10%; a cost that small is within the
-- step-to-step spread of a shared host, so it stays visible (cost_share, position) but unnamed.
--
-- Second view, HTA's get_potential_stragglers metric (find_stragglers_with_late_start_comm_kernels),
-- per job: the communication calls (matched or not: HTA matches none) at least 1% of the mean step
-- time long (the mean step: the job's span of steps over their count); of each rank, stream, step
-- and kernel name the last; the (stream, name) pair whose duration, over the mean step, varies most
-- across ranks (sample standard deviation per step, averaged over steps); for it, each rank's start less the job's first step start, over the
-- mean step. hta_position ranks a step's ranks by it (1: latest; HTA flags its top 2 per step). The
-- stream is the GPU stream of a kernel; calls of other sources (a gloo worker's annotation, an XLA op)
-- count as one stream per source. Times are on the job clock rather than each rank's own.
--
-- Third view, Nsight Systems' kernel pace: pace_ps, the time from the rank's arrival at the first
-- collective of the previous step to its arrival at that of this step (the cadence of one kernel
-- across ranks and time), and pace_excess_ps, that less the step's median pace over the ranks.
--
-- Jobs that hold a rank twice (not jobs.jobs one_run: several runs under one job tag, or a rank
-- captured twice) are left out: their ranks are no one run, and the "waits" between runs are the time
-- between them (on the 1,000-profile corpus, runs days apart: sums past int64).
--
-- Needs: collectives matched across profiles of one job (jobs.collectives), in steps, of a job that holds each rank once
--
-- Parameters:
--   $min_cost_share  DOUBLE  share of the job's step time a rank must impose to be named a straggler, 0..1 [range: 0..1] (default: 0.2)
--
-- Passes: $min_matched (to its includes, with their defaults and meaning)
--
-- Show: job_id, step, member, rank, step_ps, delay_imposed_ps, cost_share, position, straggler
--
-- Columns:
--   job_id  VARCHAR  the job (jobs.jobs.job_id)
--   step  BIGINT  step number
--   profile_id  VARCHAR  profile (profiles.profile_id) of the rank
--   member  VARCHAR  rank N, or the host file's name
--   rank  BIGINT  distributed rank, else position by name
--   step_ps  BIGINT  the rank's wall time of the step (steps.wall_ps, its longest device), ps
--   job_step_ps  BIGINT  the job's step time: the longest of its ranks' step_ps, ps
--   instances  BIGINT  matched collective instances of the rank in the step
--   last_arrivals  BIGINT  of those, where it arrived last
--   delay_imposed_ps  BIGINT  the step time it cost: the union of its imposed waits' intervals, at most job_step_ps, ps
--   imposed_wait_sum_ps  BIGINT  its imposed waits summed over the step's instances, overlapping ones each time, ps
--   waiting_rank_time_ps  BIGINT  the other ranks' waits for it (its arrival less theirs, where it arrived last), summed over them: rank-time, ps
--   cost_share  DOUBLE  delay_imposed_ps / job_step_ps, 0..1
--   position  BIGINT  1 for the rank that imposed the most in the step, 2 the next, ...
--   straggler  BOOLEAN  delay_imposed_ps >= $min_cost_share x job_step_ps, and above 0
--   hta_normalized_start  DOUBLE  HTA's metric: start of its last long call of HTA's (stream, name) pair less the job's first step start, over the mean step time
--   hta_position  BIGINT  ranks of the step by hta_normalized_start, 1 the latest
--   pace_ps  BIGINT  arrival at the step's first collective less that of the previous step, ps
--   pace_excess_ps  BIGINT  pace_ps less the median pace of the step's ranks, signed (below 0: faster than the median), ps
WITH collectives AS (
-- @include jobs.collectives
),
all_steps AS (
-- @include steps.steps
),
member_steps AS (
    SELECT profile_id, step, max(wall_ps) AS step_ps, min(start_ps) AS start_ps, max(end_ps) AS end_ps
    FROM all_steps WHERE step IS NOT NULL GROUP BY ALL
),
every_job AS (
-- @include jobs.jobs
),
matched AS (
    SELECT * FROM collectives
    WHERE matched AND step IS NOT NULL
      AND job_id IN (SELECT job_id FROM every_job WHERE one_run)
),
members AS (
    SELECT DISTINCT job_id, profile_id, member, rank, offset_ps FROM matched
),
rank_steps AS (
    SELECT m.job_id, s.step, m.profile_id, m.member, m.rank, s.step_ps,
        s.start_ps + m.offset_ps AS job_step_start_ps, s.end_ps + m.offset_ps AS job_step_end_ps
    FROM members AS m JOIN member_steps AS s USING (profile_id)
),
job_span AS (
    SELECT job_id, min(job_step_start_ps) AS t_min_ps,
        (max(job_step_end_ps) - min(job_step_start_ps)) / count(DISTINCT step) AS mean_step_ps
    FROM rank_steps GROUP BY job_id
),
-- The others' waits at each instance: the last arrival less each arrival, summed, on the last rank's row.
instance_waits AS (
    SELECT job_id, instance, sum(arrival_skew_ps - arrival_delay_ps) AS waiting_rank_time_ps
    FROM matched GROUP BY ALL
),
-- The intervals the rank kept the others waiting, merged where they overlap (gaps and islands).
waits AS (
    SELECT job_id, step, profile_id, start_ps - imposed_wait_ps AS wait_start_ps, start_ps AS wait_end_ps,
        max(start_ps) OVER (PARTITION BY job_id, step, profile_id ORDER BY start_ps - imposed_wait_ps, start_ps
                            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach_ps
    FROM matched WHERE imposed_wait_ps > 0
),
wait_islands AS (
    SELECT *, sum(CASE WHEN reach_ps IS NULL OR wait_start_ps > reach_ps THEN 1 ELSE 0 END) OVER (
        PARTITION BY job_id, step, profile_id ORDER BY wait_start_ps, wait_end_ps ROWS UNBOUNDED PRECEDING) AS island
    FROM waits
),
wait_union AS (
    SELECT job_id, step, profile_id, sum(island_ps) AS delay_imposed_ps
    FROM (SELECT job_id, step, profile_id, max(wait_end_ps) - min(wait_start_ps) AS island_ps
          FROM wait_islands GROUP BY job_id, step, profile_id, island)
    GROUP BY ALL
),
per_rank AS (
    SELECT m.job_id, m.step, m.profile_id,
        count(*) AS instances,
        count(*) FILTER (WHERE m.member = m.last_member) AS last_arrivals,
        sum(m.imposed_wait_ps) AS imposed_wait_sum_ps,
        sum(w.waiting_rank_time_ps) FILTER (WHERE m.member = m.last_member) AS waiting_rank_time_ps,
        min(m.start_ps) AS first_arrival_ps
    FROM matched AS m JOIN instance_waits AS w USING (job_id, instance)
    GROUP BY ALL
),
-- HTA: the last long call of each rank, stream, step and name; the (stream, name) pair that varies most.
hta_calls AS (
    SELECT c.job_id, c.step, c.profile_id, coalesce('stream ' || CAST(c.stream_id AS VARCHAR), c.source) AS stream,
        c.name, arg_max(c.start_ps, c.start_ps) AS start_ps, arg_max(c.dur_ps, c.start_ps) / j.mean_step_ps AS duration
    FROM collectives AS c JOIN job_span AS j USING (job_id)
    WHERE c.dur_ps >= 0.01 * j.mean_step_ps AND c.step IS NOT NULL
    GROUP BY c.job_id, c.step, c.profile_id, stream, c.name, j.mean_step_ps
),
hta_pair AS (
    SELECT job_id, arg_max((stream, name), (spread, stream, name)) AS pair
    FROM (
        SELECT job_id, stream, name, avg(step_spread) AS spread
        FROM (SELECT job_id, stream, name, step, stddev_samp(duration) AS step_spread FROM hta_calls GROUP BY ALL)
        GROUP BY ALL HAVING avg(step_spread) IS NOT NULL
    )
    GROUP BY job_id
),
hta AS (
    SELECT c.job_id, c.step, c.profile_id, c.start_ps AS last_long_start_ps
    FROM hta_calls AS c JOIN hta_pair AS p ON p.job_id = c.job_id AND p.pair = (c.stream, c.name)
),
joined AS (
    SELECT r.job_id, r.step, r.profile_id, r.member, r.rank, r.step_ps,
        max(r.step_ps) OVER (PARTITION BY r.job_id, r.step) AS job_step_ps,
        coalesce(p.instances, 0) AS instances, coalesce(p.last_arrivals, 0) AS last_arrivals,
        coalesce(u.delay_imposed_ps, 0) AS union_ps,
        coalesce(p.imposed_wait_sum_ps, 0) AS imposed_wait_sum_ps,
        coalesce(p.waiting_rank_time_ps, 0) AS waiting_rank_time_ps,
        (h.last_long_start_ps - j.t_min_ps) / nullif(j.mean_step_ps, 0) AS hta_normalized_start,
        p.first_arrival_ps - lag(p.first_arrival_ps) OVER (PARTITION BY r.job_id, r.profile_id ORDER BY r.step) AS pace_ps
    FROM rank_steps AS r
    JOIN job_span AS j USING (job_id)
    LEFT JOIN per_rank AS p USING (job_id, step, profile_id)
    LEFT JOIN wait_union AS u USING (job_id, step, profile_id)
    LEFT JOIN hta AS h USING (job_id, step, profile_id)
),
costed AS (
    SELECT *, CAST(least(union_ps, job_step_ps) AS BIGINT) AS delay_imposed_ps FROM joined
)
SELECT
    job_id, step, profile_id, member, rank, step_ps, job_step_ps, instances, last_arrivals, delay_imposed_ps,
    CAST(imposed_wait_sum_ps AS BIGINT) AS imposed_wait_sum_ps, CAST(waiting_rank_time_ps AS BIGINT) AS waiting_rank_time_ps,
    delay_imposed_ps / nullif(job_step_ps, 0) AS cost_share,
    row_number() OVER (PARTITION BY job_id, step ORDER BY delay_imposed_ps DESC, rank, profile_id) AS position,
    delay_imposed_ps > 0 AND delay_imposed_ps >= $min_cost_share * job_step_ps AS straggler,
    hta_normalized_start,
    CASE WHEN hta_normalized_start IS NOT NULL THEN row_number() OVER (
        PARTITION BY job_id, step ORDER BY hta_normalized_start DESC NULLS LAST, rank, profile_id) END AS hta_position,
    pace_ps,
    CAST(pace_ps - median(pace_ps) OVER (PARTITION BY job_id, step) AS BIGINT) AS pace_excess_ps
FROM costed
ORDER BY job_id, step, position
