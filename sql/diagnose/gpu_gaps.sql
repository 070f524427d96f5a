-- diagnose.gpu_gaps: long stretches inside steps when a GPU runs nothing, with what the host
-- was doing meanwhile.
--
-- Nsight Systems' expert-system rule gpu_gaps lists the time ranges where a GPU is idle for at
-- least a threshold, 500 ms by default (gap=<ms>, "nsys analyze --help-rules gpu_gaps"),
-- between the first and the last GPU op of a process. This rule finds the same ranges inside
-- each complete step (steps.steps complete IS NOT false) of each GPU: the gaps of
-- diagnose._gpu_idle, which sum to steps.steps' idle_ps, including the idle before the step's
-- first op and after its last. nsys's 500 ms suits a whole application's timeline (start-up,
-- checkpoints); a training or inference step lasts milliseconds to a second, so 500 ms would
-- flag nothing inside one. The default $min_gap_ps, 1 ms, is about 100 kernel launches
-- (5-10 us each) and 30 times HTA's 30 us kernel-wait threshold (hta.idle_time): a gap that
-- long is not launch latency but host work the GPU waits for (Python, data loading, a sync,
-- a host-side decision), which is what nsys's advice (CPU sampling, NVTX ranges) looks for.
--
-- Saving: the whole time of the gaps of at least $min_gap_ps, summed over GPUs and complete
-- steps: removing the host work that opens a gap (moving it off the critical path, prefetching,
-- CUDA graphs) lets the GPU run straight through it. An upper bound: the ops after a gap may
-- depend on the host work in it. Gaps shorter than $min_gap_ps are left to
-- diagnose.low_utilization, which counts only those, so the two never count the same time.
--
-- Evidence: the host work during the gaps: the outermost PyTorch ops and CUDA/HIP API calls
-- (cpu_op events and api_calls that no cpu_op encloses, on any host thread) overlapping the
-- gaps, by overlapped time; Python frames and annotations are left out (they enclose
-- everything).
--
-- One finding per profile whose long gaps reach $min_share of its step time.
--
-- Only steps with a marker (diagnose._gpu_idle marked): without one the "step" is the whole capture,
-- whose idle time is start-up, compilation and the capture's ends, not a gap a fix in the training
-- loop removes (the MI300 and MI355 JAX samples idle 97% and 99.9% of theirs). diagnose.host_bound
-- leaves those profiles out for the same reason.
--
-- Parameters:
--   $min_gap_ps  BIGINT  shortest idle stretch counted, ps; nsys's default is 500 ms for a whole application, 1 ms for steps (see above) [range: 1..] (default: 1000000000)
--   $min_share  DOUBLE  long-gap share of step time from which the rule fires; XProf's TensorCore-idle threshold, 10% [range: 0..1] (default: 0.1)
--
-- Show: profile_id, rule, severity, expected_saving_share, title
--
-- Columns:
--   profile_id  VARCHAR  profile
--   job  VARCHAR  NULL (a finding about one profile)
--   rank  BIGINT  NULL
--   device  VARCHAR  the GPU with the most long-gap time
--   step  BIGINT  the step holding the longest gap
--   rule  VARCHAR  gpu_gaps
--   severity  VARCHAR  high, medium or low (xprosql_severity of expected_saving_share)
--   title  VARCHAR  one line a person reads
--   evidence  VARCHAR  the numbers as a sentence, naming the host work during the gaps
--   measures  MAP(VARCHAR, DOUBLE)  gap_ps (long gaps summed over GPUs), gap_share, gaps_count, longest_gap_ps, idle_ps (all idle time of the steps, steps.steps), idle_share, min_gap_ps
--   subjects  VARCHAR[]  the host ops and API calls overlapping the long gaps most, longest overlap first
--   expected_saving_ps  BIGINT  the long-gap time per device: the share times one device's step time, ps
--   expected_saving_share  DOUBLE  gap_ps over the device step time, 0..1
--   saving_method  VARCHAR  how the saving is estimated
--   fix  VARCHAR  what to change
--   reference  VARCHAR  where the rule comes from
WITH every_gpu_idle AS MATERIALIZED (
-- @include diagnose._gpu_idle
),
gpu_idle AS MATERIALIZED (
    SELECT * FROM every_gpu_idle WHERE marked
),
profile_steps AS (
-- @include diagnose._profile_steps
),
long_gaps AS MATERIALIZED (
    SELECT * FROM gpu_idle WHERE gap_ps >= CAST($min_gap_ps AS BIGINT)
),
per_profile AS (
    SELECT profile_id, sum(gap_ps) AS gap_ps, count(*) AS gaps, max(gap_ps) AS longest_ps,
        arg_max(step, gap_ps) AS worst_step
    FROM long_gaps GROUP BY profile_id
),
per_device AS (
    SELECT profile_id, arg_max(device, gap_ps) AS worst_device
    FROM (SELECT profile_id, device, sum(gap_ps) AS gap_ps FROM long_gaps GROUP BY ALL)
    GROUP BY profile_id
),
all_idle AS (
    SELECT profile_id, sum(gap_ps) AS idle_ps FROM gpu_idle GROUP BY profile_id
),
found AS (
    SELECT p.*, d.worst_device, i.idle_ps, s.device_step_ps, s.step_ps, s.devices,
        least(p.gap_ps / nullif(s.device_step_ps, 0), 1.0) AS share
    FROM per_profile AS p
    JOIN per_device AS d USING (profile_id)
    JOIN all_idle AS i USING (profile_id)
    JOIN profile_steps AS s USING (profile_id)
    WHERE p.gap_ps / nullif(s.device_step_ps, 0) >= CAST($min_share AS DOUBLE)
),
-- Host work during the long gaps of the profiles found: cpu_ops and API calls overlapping a gap
-- (an event's enclosing ops overlap it too, so the set keeps every parent), nested per thread.
gap_windows AS (
    SELECT DISTINCT g.profile_id, g.start_ps, g.end_ps FROM long_gaps AS g SEMI JOIN found USING (profile_id)
),
host_events AS MATERIALIZED (
    SELECT DISTINCT h.profile_id, h.track_id, h.event_id, h.start_ps, h.dur_ps, h.name
    FROM (
        SELECT e.profile_id, e.track_id, e.event_id, e.start_ps, e.dur_ps, CAST(e.name AS VARCHAR) AS name
        FROM events AS e
        WHERE e.category = 'cpu_op' AND e.start_ps IS NOT NULL AND e.profile_id IN (SELECT profile_id FROM found)
        UNION ALL
        SELECT a.profile_id, a.track_id, a.event_id, a.start_ps, a.dur_ps, CAST(a.name AS VARCHAR)
        FROM api_calls AS a
        WHERE a.start_ps IS NOT NULL AND a.profile_id IN (SELECT profile_id FROM found)
    ) AS h
    JOIN gap_windows AS g
      ON g.profile_id = h.profile_id AND h.start_ps < g.end_ps AND h.start_ps + h.dur_ps > g.start_ps
),
nesting_events AS (
    SELECT profile_id, track_id, event_id, start_ps, dur_ps FROM host_events
),
nesting AS MATERIALIZED (
-- @include ops._nesting
),
outermost AS (
    SELECT h.* FROM host_events AS h
    LEFT JOIN nesting AS n USING (profile_id, event_id)
    WHERE n.parent_id IS NULL
),
host_overlap AS (
    SELECT o.profile_id, o.name,
        sum(least(o.start_ps + o.dur_ps, g.end_ps) - greatest(o.start_ps, g.start_ps)) AS overlap_ps
    FROM outermost AS o
    JOIN gap_windows AS g
      ON g.profile_id = o.profile_id AND o.start_ps < g.end_ps AND o.start_ps + o.dur_ps > g.start_ps
    GROUP BY ALL
),
host_named AS (
    SELECT profile_id,
        list(name ORDER BY overlap_ps DESC, name)[1:5] AS subjects,
        string_agg(printf('%s (%s)', name, xprosql_duration(overlap_ps)), ', ' ORDER BY overlap_ps DESC, name)
            FILTER (WHERE rn <= 5) AS host_work
    FROM (SELECT *, row_number() OVER (PARTITION BY profile_id ORDER BY overlap_ps DESC, name) AS rn FROM host_overlap)
    GROUP BY profile_id
)
SELECT
    f.profile_id,
    CAST(NULL AS VARCHAR) AS job,
    CAST(NULL AS BIGINT) AS rank,
    f.worst_device AS device,
    f.worst_step AS step,
    'gpu_gaps' AS rule,
    xprosql_severity(f.share) AS severity,
    printf('GPU gaps: idle stretches of %s or more (%d) take %.1f%% of step time', xprosql_duration(CAST($min_gap_ps AS BIGINT)), f.gaps,
        100 * f.share) AS title,
    printf('%d gaps of at least %s in complete steps (longest %s) leave the GPU idle %s of %s step time per device (%.1f%%; all idle '
        || 'time: %.1f%%); host work during them: %s',
        f.gaps, xprosql_duration(CAST($min_gap_ps AS BIGINT)), xprosql_duration(f.longest_ps), xprosql_duration(f.gap_ps / f.devices),
        xprosql_duration(f.step_ps), 100 * f.share, 100 * least(f.idle_ps / f.device_step_ps, 1.0),
        coalesce(n.host_work, 'no PyTorch op or CUDA call traced (Python, data loading or an untraced thread)')) AS evidence,
    MAP {'gap_ps': CAST(f.gap_ps AS DOUBLE), 'gap_share': f.share, 'gaps_count': CAST(f.gaps AS DOUBLE),
         'longest_gap_ps': CAST(f.longest_ps AS DOUBLE), 'idle_ps': CAST(f.idle_ps AS DOUBLE),
         'idle_share': least(f.idle_ps / f.device_step_ps, 1.0), 'min_gap_ps': CAST($min_gap_ps AS DOUBLE)} AS measures,
    coalesce(n.subjects, CAST([] AS VARCHAR[])) AS subjects,
    CAST(f.share * f.step_ps AS BIGINT) AS expected_saving_ps,
    f.share AS expected_saving_share,
    'the time of the GPU idle stretches of at least min_gap_ps inside complete steps (diagnose._gpu_idle, part of steps.steps '
        || 'idle_ps), summed over GPUs: the GPU would run straight through them without the host work that opens them' AS saving_method,
    'Find the host work in the gaps (the host ops named in the evidence; torch.profiler with with_stack=True, or nsys with CPU '
        || 'sampling and NVTX ranges) and take it off the GPU''s path: DataLoader(num_workers>0, pin_memory=True, '
        || 'persistent_workers=True) for input, no .item()/.cpu() syncs in the loop, logging and checkpointing every N steps or on '
        || 'a background thread, torch.compile(mode="reduce-overhead") or CUDA graphs for launch-heavy Python' AS fix,
    'Nsight Systems expert system rule gpu_gaps (nsys analyze; default gap 500 ms, here 1 ms for steps); '
        || 'HTA idle time breakdown (host wait)' AS reference
FROM found AS f
LEFT JOIN host_named AS n USING (profile_id)
ORDER BY expected_saving_ps DESC, f.profile_id
