-- diagnose.low_utilization: parts of steps where the GPU is busy less than half the time,
-- its idle time scattered in short gaps (many small kernels, launch-bound Python): the idle
-- time a denser launch stream would fill.
--
-- Nsight Systems' expert-system rule gpu_time_util cuts each GPU's time range (first op to
-- last) into equal chunks, 30 by default (chunks=<n>), and reports the chunks whose GPU "time
-- utilization" is below a threshold, 50% by default (threshold=<percent>), coalescing
-- neighbours ("nsys analyze --help-rules gpu_time_util"). This rule cuts each complete step
-- (steps.steps complete IS NOT false) of each GPU into $windows equal windows instead, so the
-- windows follow the steps the findings are shares of, and computes a window's utilisation as
-- its busy time over its length, busy time being the union of the GPU's ops (diagnose._gpu_idle,
-- steps.steps' busy time); nsys adds up concurrent ops, so its utilisation can pass 100%, ours
-- cannot. Windows below $max_utilization are low.
--
-- How it differs from diagnose.gpu_gaps: gpu_gaps counts the idle stretches of at least
-- $min_gap_ps, wherever they fall; this rule counts, inside low windows, only the idle time in
-- gaps shorter than $min_gap_ps: the fragmented idle of a GPU starved by a slow launch stream,
-- which no single gap shows. With the same $min_gap_ps (1 ms by default in both) the two rules
-- never count the same idle time, and their savings add up to at most steps.steps' idle_ps.
--
-- Saving: that short-gap idle time in low windows, summed over GPUs: fusing small ops, CUDA
-- graphs or torch.compile(mode="reduce-overhead") issue the same work faster than the GPU runs
-- it, filling the gaps. An upper bound: some gaps are dependencies (a kernel waits for a copy).
--
-- One finding per profile whose saving reaches $min_share of its step time.
--
-- Only steps with a marker (diagnose._gpu_idle marked): without one the "step" is the whole capture,
-- whose idle time is start-up, compilation and the capture's ends, not a gap a fix in the training
-- loop removes (the MI300 and MI355 JAX samples idle 97% and 99.9% of theirs). diagnose.host_bound
-- leaves those profiles out for the same reason.
--
-- Parameters:
--   $windows  BIGINT  windows each step is cut into; nsys's default chunk count [range: 1..1000] (default: 30)
--   $max_utilization  DOUBLE  busy fraction below which a window is low; nsys's default threshold, 50% [range: 0<..1] (default: 0.5)
--   $min_gap_ps  BIGINT  gaps at least this long are gpu_gaps', not counted here, ps; gpu_gaps' default [range: 1..] (default: 1000000000)
--   $min_share  DOUBLE  saving share of step time from which the rule fires; XProf's moderate kernel-launch share, 3% (short scattered gaps are launch overhead) [range: 0..1] (default: 0.03)
--
-- Show: profile_id, rule, severity, expected_saving_share, title
--
-- Columns:
--   profile_id  VARCHAR  profile
--   job  VARCHAR  NULL (a finding about one profile)
--   rank  BIGINT  NULL
--   device  VARCHAR  the GPU with the most short-gap idle time in low windows
--   step  BIGINT  the step with the most short-gap idle time in low windows
--   rule  VARCHAR  low_utilization
--   severity  VARCHAR  high, medium or low (xprosql_severity of expected_saving_share)
--   title  VARCHAR  one line a person reads
--   evidence  VARCHAR  the numbers as a sentence
--   measures  MAP(VARCHAR, DOUBLE)  short_gap_idle_ps (in low windows, summed over GPUs), short_gap_idle_share, low_window_share (step time in low windows), low_window_utilization (their busy fraction), low_windows_count, windows_count, short_gaps_count
--   subjects  VARCHAR[]  the kernels most often launched in the low windows, most first
--   expected_saving_ps  BIGINT  the short-gap idle time per device: the share times one device's step time, ps
--   expected_saving_share  DOUBLE  short_gap_idle_ps over the device step time, 0..1
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
gpu_steps AS (
    SELECT DISTINCT profile_id, device_id, device, step_index, step, step_start_ps, step_end_ps FROM gpu_idle
),
-- Each step cut into $windows windows that tile it exactly.
windows AS MATERIALIZED (
    SELECT s.*, w.k,
        s.step_start_ps + (s.step_end_ps - s.step_start_ps) * w.k // CAST($windows AS BIGINT) AS w_start_ps,
        s.step_start_ps + (s.step_end_ps - s.step_start_ps) * (w.k + 1) // CAST($windows AS BIGINT) AS w_end_ps
    FROM gpu_steps AS s
    CROSS JOIN range(CAST($windows AS BIGINT)) AS w(k)
),
window_idle AS (
    SELECT w.profile_id, w.device_id, w.device, w.step_index, w.step, w.k, w.w_start_ps, w.w_end_ps,
        -- (least and greatest skip NULLs: a window without gaps must not count itself)
        coalesce(sum(least(g.end_ps, w.w_end_ps) - greatest(g.start_ps, w.w_start_ps)) FILTER (WHERE g.gap_ps IS NOT NULL), 0) AS idle_ps,
        coalesce(sum(least(g.end_ps, w.w_end_ps) - greatest(g.start_ps, w.w_start_ps))
                 FILTER (WHERE g.gap_ps < CAST($min_gap_ps AS BIGINT)), 0) AS short_idle_ps,
        count(*) FILTER (WHERE g.gap_ps < CAST($min_gap_ps AS BIGINT)) AS short_gaps
    FROM windows AS w
    LEFT JOIN gpu_idle AS g
      ON g.profile_id = w.profile_id AND g.device_id = w.device_id AND g.step_index = w.step_index
     AND g.start_ps < w.w_end_ps AND g.end_ps > w.w_start_ps
    WHERE w.w_end_ps > w.w_start_ps
    GROUP BY ALL
),
low AS MATERIALIZED (
    SELECT *, 1 - idle_ps / (w_end_ps - w_start_ps) AS utilization
    FROM window_idle
    WHERE 1 - idle_ps / (w_end_ps - w_start_ps) < CAST($max_utilization AS DOUBLE)
),
per_step AS (
    SELECT profile_id, device, step, sum(short_idle_ps) AS short_idle_ps FROM low GROUP BY ALL
),
per_profile AS (
    SELECT l.profile_id, sum(l.short_idle_ps) AS short_idle_ps, sum(l.short_gaps) AS short_gaps,
        count(*) AS low_windows, sum(l.w_end_ps - l.w_start_ps) AS low_ps, sum(l.idle_ps) AS low_idle_ps,
        (SELECT count(*) FROM window_idle AS a WHERE a.profile_id = l.profile_id) AS all_windows,
        (SELECT arg_max(x.device, x.short_idle_ps) FROM per_step AS x WHERE x.profile_id = l.profile_id) AS worst_device,
        (SELECT arg_max(x.step, x.short_idle_ps) FROM per_step AS x WHERE x.profile_id = l.profile_id) AS worst_step
    FROM low AS l
    GROUP BY l.profile_id
),
found AS (
    SELECT p.*, s.device_step_ps, s.step_ps, s.devices,
        least(p.short_idle_ps / nullif(s.device_step_ps, 0), 1.0) AS share,
        least(p.low_ps / nullif(s.device_step_ps, 0), 1.0) AS low_share
    FROM per_profile AS p
    JOIN profile_steps AS s USING (profile_id)
    WHERE p.short_idle_ps / nullif(s.device_step_ps, 0) >= CAST($min_share AS DOUBLE)
),
-- The kernels starting in the low windows, by count: the small ops to fuse or capture.
low_kernels AS (
    SELECT k.profile_id, CAST(k.name AS VARCHAR) AS name, count(*) AS launches
    FROM kernels AS k
    JOIN low AS l
      ON l.profile_id = k.profile_id AND l.device_id = k.device_id AND k.start_ps >= l.w_start_ps AND k.start_ps < l.w_end_ps
    WHERE k.profile_id IN (SELECT profile_id FROM found)
    GROUP BY ALL
),
named AS (
    SELECT profile_id, list(name ORDER BY launches DESC, name)[1:5] AS subjects, sum(launches) AS launches
    FROM low_kernels GROUP BY profile_id
)
SELECT
    f.profile_id,
    CAST(NULL AS VARCHAR) AS job,
    CAST(NULL AS BIGINT) AS rank,
    f.worst_device AS device,
    f.worst_step AS step,
    'low_utilization' AS rule,
    xprosql_severity(f.share) AS severity,
    printf('low GPU utilisation: %.1f%% of step time runs the GPU under %.0f%% busy, idling %.1f%% of step time in short gaps',
        100 * f.low_share, 100 * CAST($max_utilization AS DOUBLE), 100 * f.share) AS title,
    printf('%d of %d step windows (1/%d of a step each) are under %.0f%% busy: %s of %s step time per device (%.1f%%), %.1f%% busy on '
        || 'average; %d gaps shorter than %s in them idle the GPU %s per device (%.1f%% of step time); %d kernels start in them: %s',
        f.low_windows, f.all_windows, CAST($windows AS BIGINT), 100 * CAST($max_utilization AS DOUBLE),
        xprosql_duration(f.low_ps / f.devices), xprosql_duration(f.step_ps), 100 * f.low_share, 100 * (1 - f.low_idle_ps / f.low_ps),
        f.short_gaps, xprosql_duration(CAST($min_gap_ps AS BIGINT)), xprosql_duration(f.short_idle_ps / f.devices), 100 * f.share,
        coalesce(n.launches, 0), coalesce(array_to_string(n.subjects, ', '), '-')) AS evidence,
    MAP {'short_gap_idle_ps': CAST(f.short_idle_ps AS DOUBLE), 'short_gap_idle_share': f.share, 'low_window_share': f.low_share,
         'low_window_utilization': 1 - f.low_idle_ps / f.low_ps, 'low_windows_count': CAST(f.low_windows AS DOUBLE),
         'windows_count': CAST(f.all_windows AS DOUBLE), 'short_gaps_count': CAST(f.short_gaps AS DOUBLE)} AS measures,
    coalesce(n.subjects, CAST([] AS VARCHAR[])) AS subjects,
    CAST(f.share * f.step_ps AS BIGINT) AS expected_saving_ps,
    f.share AS expected_saving_share,
    'the idle time in gaps shorter than min_gap_ps inside the windows under max_utilization busy (diagnose._gpu_idle), summed over '
        || 'GPUs: what issuing the same work faster fills; the long gaps are gpu_gaps''' AS saving_method,
    'Issue the GPU work faster than it runs: torch.compile (mode="reduce-overhead" adds CUDA graphs) or torch.cuda.graphs for '
        || 'the step, fused kernels (torch._foreach_* / fused=True optimizers, fused attention and norms) instead of many small ops, '
        || 'larger batches per launch; profile the host side of the low windows (torch.profiler with_stack=True) for Python overhead' AS fix,
    'Nsight Systems expert system rule gpu_time_util (nsys analyze; 30 chunks, 50% threshold by default), per step here; '
        || 'XProf overview page, kernel launch time (3% moderate)' AS reference
FROM found AS f
LEFT JOIN named AS n USING (profile_id)
ORDER BY expected_saving_ps DESC, f.profile_id
