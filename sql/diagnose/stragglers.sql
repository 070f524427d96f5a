-- diagnose.stragglers: ranks that keep the rest of their job waiting at collectives: the step time
-- the job would save if the rank ran like the median one.
--
-- scope: fleet
--
-- Built on jobs.stragglers and jobs.what_if (their numbers, unchanged). A rank straggles in a step
-- when jobs.stragglers names it (straggler: the delay it imposed, the union of the waits it kept the
-- others in by arriving last at the step's collectives, is at least $min_cost_share of the job's
-- step time) and it is the step's worst rank, the one jobs.what_if's replay gives the median rank's
-- compute. HTA's get_potential_stragglers names ranks whose communication kernels start late in the
-- step (find_stragglers_with_late_start_comm_kernels); the arrivals here are on the job clock
-- (jobs.clock_offsets) and the cost is what the others waited, HTA's late start kept beside it as a
-- measure (the steps where its metric ranks the rank in its top 2).
--
-- The saving is the what-if's: in each step where the rank straggles, the job's step time less the
-- step time with the rank running like the median. Where compaction stored the job's what-if
-- (stored_job_what_if, method replay: the job's critical-path graph propagated again with the rank's
-- compute scaled to the median's, xprosql.queries.job_critical_path), that replayed saving; otherwise
-- jobs.what_if's subtraction (the step time had the rank arrived with the next latest: saving_ps = its
-- delay_imposed_ps), labelled in saving_method. A job not stored yet (its last member arrived after the
-- last compaction) keeps the subtraction here, where run.what_if() replays it at query time: compaction
-- stores it. Summed over those steps; the share is that over the job's step time (jobs.stragglers'
-- job_step_ps, the longest rank's wall) summed over every step of the job, so it is at most 1. An
-- upper bound: it assumes the others wait in each collective (synchronous collectives on the
-- critical path). A rank that imposes $min_cost_share in a step where another rank imposes more is
-- left out of that step: the replay of the worst rank alone does not shorten the step by its delay.
-- Only complete steps count (steps.steps complete IS NOT false on every rank of the job). Jobs that
-- hold a rank twice have no stragglers (jobs.stragglers leaves them out).
--
-- One finding per job and straggler rank (profile_id: the rank's profile; step: the step it delayed
-- most; device: its device with the longest wall in that step).
--
-- Parameters:
--
-- Passes: $min_cost_share $min_matched (to its includes, with their defaults and meaning)
--
-- Show: job, rank, severity, expected_saving_share, title
--
-- Columns:
--   profile_id  VARCHAR  the straggler rank's profile
--   job  VARCHAR  the job (jobs.jobs.job_id)
--   rank  BIGINT  the straggler's rank
--   device  VARCHAR  its device with the longest wall in the step it delayed most
--   step  BIGINT  the step it delayed most
--   rule  VARCHAR  stragglers
--   severity  VARCHAR  high, medium or low (xprosql_severity of expected_saving_share)
--   title  VARCHAR  one line a person reads
--   evidence  VARCHAR  the numbers as a sentence
--   measures  MAP(VARCHAR, DOUBLE)  delay_imposed_ps, job_step_ps, worst_step_delay_share, straggled_steps_count, steps_count, last_arrivals_count, waiting_rank_time_ps, max_pace_excess_ps_signed, hta_flagged_steps_count
--   subjects  VARCHAR[]  the rank (member of jobs.stragglers)
--   expected_saving_ps  BIGINT  the what-if's saving over the steps it straggles in (replayed where stored, else jobs.what_if's), ps
--   expected_saving_share  DOUBLE  that over the job's step time summed over its complete steps, 0..1
--   saving_method  VARCHAR  how the saving is estimated: replay (stored_job_what_if), jobs.what_if's subtraction, or replay in some steps
--   fix  VARCHAR  what to change
--   reference  VARCHAR  where the rule comes from
WITH stragglers AS (
-- @include jobs.stragglers
),
what_if AS (
-- @include jobs.what_if
),
all_steps AS (
-- @include steps.steps
),
profile_steps AS (
    SELECT profile_id, step, bool_and(complete IS NOT false) AS complete, arg_max(device, wall_ps) AS device
    FROM all_steps WHERE step IS NOT NULL
    GROUP BY profile_id, step
),
rank_steps AS (
    SELECT s.*, p.complete, p.device
    FROM stragglers AS s LEFT JOIN profile_steps AS p USING (profile_id, step)
),
job_steps AS (
    SELECT job_id, step FROM rank_steps GROUP BY job_id, step HAVING bool_and(complete IS NOT false)
),
step_what_if AS (
    SELECT w.job_id, w.step, w.job_step_ps, w.worst_member, coalesce(r.saving_ps, w.saving_ps) AS saving_ps,
        r.saving_ps IS NOT NULL AS replayed
    FROM what_if AS w JOIN job_steps AS j USING (job_id, step)
    LEFT JOIN stored_job_what_if AS r
        ON r.job_id = w.job_id AND r.step = w.step AND r.scope = 'step' AND r.method = 'replay'
        AND r.worst_member = w.worst_member
    WHERE w.scope = 'step'
),
job_time AS (
    SELECT job_id, sum(job_step_ps) AS job_step_ps, count(*) AS steps FROM step_what_if GROUP BY job_id
),
straggled AS (
    SELECT s.*, w.saving_ps, w.replayed
    FROM rank_steps AS s
    JOIN step_what_if AS w ON w.job_id = s.job_id AND w.step = s.step AND w.worst_member = s.member
    WHERE s.straggler
),
per_rank AS (
    SELECT
        job_id, profile_id, member, rank,
        count(*) AS straggled_steps,
        list(step ORDER BY step) AS steps_list,
        sum(saving_ps) AS saving_ps,
        count(*) FILTER (WHERE replayed) AS replayed_steps,
        sum(delay_imposed_ps) AS delay_imposed_ps,
        sum(last_arrivals) AS last_arrivals,
        sum(instances) AS instances,
        sum(waiting_rank_time_ps) AS waiting_rank_time_ps,
        arg_max(step, (delay_imposed_ps, -step)) AS worst_step,
        arg_max(device, (delay_imposed_ps, -step)) AS worst_device,
        max(cost_share) AS worst_share,
        max(pace_excess_ps) AS max_pace_excess_ps,
        count(*) FILTER (WHERE hta_position <= 2) AS hta_flagged
    FROM straggled
    GROUP BY job_id, profile_id, member, rank
),
found AS (
    SELECT r.*, t.job_step_ps, t.steps,
        least(1.0, r.saving_ps / nullif(t.job_step_ps, 0)) AS share
    FROM per_rank AS r JOIN job_time AS t USING (job_id)
    WHERE t.job_step_ps > 0
)
SELECT
    f.profile_id,
    f.job_id AS job,
    f.rank,
    f.worst_device AS device,
    f.worst_step AS step,
    'stragglers' AS rule,
    xprosql_severity(f.share) AS severity,
    printf('straggler: %s keeps the other ranks of job %s waiting, %.1f%% of its step time', f.member, f.job_id,
        100 * f.share) AS title,
    printf('%s (profile %s) arrived last at %d of its %d collectives in step%s %s and kept the other ranks waiting %s '
        || '(the union of the waits it imposed, jobs.stragglers delay_imposed_ps; worst: step %d, %.1f%% of that step; '
        || '%s of rank-time summed over the waiting ranks); with it running like the median rank (jobs.what_if) the '
        || 'job''s %d complete steps take %s instead of %s (%.1f%% less); its pace (arrival to arrival at the step''s first '
        || 'collective) less the median rank''s: up to %s (above 0: it computes slower; near 0: it starts late); HTA''s '
        || 'late-start metric ranks it in its top 2 in %d of those steps',
        f.member, f.profile_id, f.last_arrivals, f.instances, CASE WHEN f.straggled_steps > 1 THEN 's' ELSE '' END,
        array_to_string(f.steps_list, ', '), xprosql_duration(f.delay_imposed_ps), f.worst_step, 100 * f.worst_share,
        xprosql_duration(f.waiting_rank_time_ps), f.steps, xprosql_duration(f.job_step_ps - f.saving_ps),
        xprosql_duration(f.job_step_ps), 100 * f.share,
        coalesce(xprosql_duration(f.max_pace_excess_ps), '- (no previous step)'), f.hta_flagged) AS evidence,
    MAP {'delay_imposed_ps': CAST(f.delay_imposed_ps AS DOUBLE), 'job_step_ps': CAST(f.job_step_ps AS DOUBLE),
         'worst_step_delay_share': f.worst_share, 'straggled_steps_count': CAST(f.straggled_steps AS DOUBLE),
         'steps_count': CAST(f.steps AS DOUBLE), 'last_arrivals_count': CAST(f.last_arrivals AS DOUBLE),
         'waiting_rank_time_ps': CAST(f.waiting_rank_time_ps AS DOUBLE),
         'max_pace_excess_ps_signed': CAST(f.max_pace_excess_ps AS DOUBLE),
         'hta_flagged_steps_count': CAST(f.hta_flagged AS DOUBLE)} AS measures,
    [f.member] AS subjects,
    CAST(least(f.saving_ps, f.job_step_ps) AS BIGINT) AS expected_saving_ps,
    f.share AS expected_saving_share,
    CASE WHEN f.replayed_steps = f.straggled_steps THEN
        'replay (stored_job_what_if): in each step it straggles in, the job''s critical-path graph propagated again '
        || 'with its compute scaled to the median rank''s, the step time saved, summed'
    ELSE
        (CASE WHEN f.replayed_steps > 0 THEN printf('replay in %d of its %d steps, else ', f.replayed_steps, f.straggled_steps)
         ELSE '' END)
        || 'jobs.what_if: in each step it straggles in, the job''s step time less the step time with the rank running like '
        || 'the median one (its delay_imposed_ps: the waits it imposed, each instant once), summed; an upper bound that '
        || 'assumes the other ranks wait in every collective'
    END AS saving_method,
    printf('Look at %s''s host (profile %s) in the steps it is late in: CPU contention (other processes, too few cores '
        || 'per rank: torch.set_num_threads, taskset/numactl pinning), data loading (DataLoader num_workers, '
        || 'pin_memory, prefetch_factor), thermal throttling or a lower clock (nvidia-smi -q -d CLOCK,PERFORMANCE), a '
        || 'slow GPU or link (nvidia-smi topo -m, NCCL_DEBUG=INFO); if its inputs are larger, rebalance the data '
        || '(DistributedSampler, bucket sequences by length); compare its pace_ps with the other ranks'' in '
        || 'jobs.stragglers to see whether it computes slower or starts late', f.member, f.profile_id) AS fix,
    'Holistic Trace Analysis get_potential_stragglers (late start of communication kernels); jobs.what_if (replay '
        || 'with the worst rank at the median pace); jobs.stragglers delay_imposed_ps' AS reference
FROM found AS f
ORDER BY expected_saving_ps DESC, f.job_id, f.rank
