-- diagnose.launch_bound: steps whose GPU idles while the kernels it will run are still being
-- launched: the launch overhead that CUDA graphs or fewer, larger kernels would remove.
--
-- XProf's overview page reports kernel launch time as a share of step time (moderate from 3%,
-- high from 15%) and suggests fewer, larger kernels. The time is steps._bottleneck_steps'
-- launch_overhead_ps: the device idle (no kernel, copy or collective runs) while a kernel or copy
-- it will run has been launched, from the launching CUDA / HIP call's start to the op's start.
-- The usual cause is many short kernels, each taking longer to launch than to run; the evidence
-- counts the kernels of the complete steps that ran under $short_kernel_us, with their median.
--
-- Saving: the launch overhead itself. A CUDA graph replays the kernels without a CPU launch each
-- (torch.cuda.graphs, torch.compile(mode="reduce-overhead")), and fusion launches fewer kernels;
-- either takes the launch latency off the device's critical path. An upper bound: a graph still
-- starts each kernel a few microseconds after the last (graph launch, kernel ramp-up).
--
-- A host without GPU (CPU PyTorch, XLA:CPU, TPU) launches nothing: launch_overhead_ps is 0 there
-- and the rule never fires.
--
-- One finding per profile whose complete steps idle in launches at least $min_share of their time.
--
-- Parameters:
--   $min_share        DOUBLE  launch overhead share of step time from which the rule fires; XProf's moderate kernel launch share (high: 15%) [range: 0..1] (default: 0.03)
--   $short_kernel_us  DOUBLE  kernels shorter than this are counted as short (launch latency is a few us), us [range: 0<..] (default: 10)
--
-- Show: profile_id, rule, severity, expected_saving_share, title
--
-- Columns:
--   profile_id  VARCHAR  profile
--   job  VARCHAR  NULL (a finding about one profile)
--   rank  BIGINT  NULL
--   device  VARCHAR  the device with the largest launch overhead share in a step
--   step  BIGINT  that step
--   rule  VARCHAR  launch_bound
--   severity  VARCHAR  high, medium or low (xprosql_severity of expected_saving_share)
--   title  VARCHAR  one line a person reads
--   evidence  VARCHAR  the numbers as a sentence
--   measures  MAP(VARCHAR, DOUBLE)  launch_overhead_ps, launch_overhead_share, worst_step_launch_overhead_share, steps_count, kernels_count, short_kernels_count, short_kernel_median_ps, kernel_median_ps
--   subjects  VARCHAR[]  the short kernels launched most often, most first
--   expected_saving_ps  BIGINT  the launch overhead per device over the complete steps, ps
--   expected_saving_share  DOUBLE  launch overhead share of step time, 0..1
--   saving_method  VARCHAR  how the saving is estimated
--   fix  VARCHAR  what to change
--   reference  VARCHAR  where the rule comes from
WITH step_rows AS (
-- @include steps._bottleneck_steps
),
per_profile AS (
    SELECT
        profile_id,
        sum(launch_overhead_ps) AS launch_ps,
        sum(step_ps) AS device_step_ps,
        count(DISTINCT device_id) AS devices,
        count(*) AS step_rows,
        arg_max(device, launch_overhead_ps / nullif(step_ps, 0)) AS worst_device,
        arg_max(step, launch_overhead_ps / nullif(step_ps, 0)) AS worst_step,
        max(launch_overhead_ps / nullif(step_ps, 0)) AS worst_share
    FROM step_rows
    GROUP BY profile_id
),
found AS (
    SELECT p.*, p.launch_ps / nullif(p.device_step_ps, 0) AS share
    FROM per_profile AS p
    WHERE p.launch_ps / nullif(p.device_step_ps, 0) >= CAST($min_share AS DOUBLE)
),
-- The kernels that start in the complete steps of the profiles found.
step_kernels AS (
    SELECT k.profile_id, k.name, k.dur_ps, k.dur_ps < CAST($short_kernel_us AS DOUBLE) * 1e6 AS short
    FROM kernels AS k
    JOIN step_rows AS s
      ON s.profile_id = k.profile_id AND s.device_id = k.device_id AND k.start_ps >= s.start_ps AND k.start_ps < s.end_ps
    WHERE k.profile_id IN (SELECT profile_id FROM found) AND k.start_ps IS NOT NULL
),
kernel_stats AS (
    SELECT profile_id,
        count(*) AS kernels,
        count(*) FILTER (WHERE short) AS short_kernels,
        median(dur_ps) FILTER (WHERE short) AS short_median_ps,
        median(dur_ps) AS median_ps
    FROM step_kernels
    GROUP BY profile_id
),
short_names AS (
    SELECT profile_id, name, count(*) AS n
    FROM step_kernels WHERE short
    GROUP BY profile_id, name
),
named AS (
    SELECT profile_id, list(name ORDER BY n DESC, name)[1:5] AS subjects, max(n) AS top_n
    FROM short_names GROUP BY profile_id
)
SELECT
    f.profile_id,
    CAST(NULL AS VARCHAR) AS job,
    CAST(NULL AS BIGINT) AS rank,
    f.worst_device AS device,
    f.worst_step AS step,
    'launch_bound' AS rule,
    xprosql_severity(f.share) AS severity,
    printf('launch-bound: the GPU idles %.1f%% of step time while its kernels are being launched', 100 * f.share) AS title,
    printf('%s of %s step time per device the device idles with launched work queued (%.1f%%); worst step %s %.1f%%; '
           || '%d of the %d kernels in the steps ran under %g us (median %s, all kernels median %s)%s',
        xprosql_duration(f.launch_ps / f.devices), xprosql_duration(f.device_step_ps / f.devices), 100 * f.share,
        coalesce(CAST(f.worst_step AS VARCHAR), '-'), 100 * f.worst_share,
        coalesce(s.short_kernels, 0), coalesce(s.kernels, 0), CAST($short_kernel_us AS DOUBLE),
        xprosql_duration(s.short_median_ps), xprosql_duration(s.median_ps),
        CASE WHEN n.subjects IS NULL THEN ''
             ELSE printf('; most launched short kernel: %s (%d times)', left(n.subjects[1], 120), n.top_n) END) AS evidence,
    MAP {'launch_overhead_ps': CAST(f.launch_ps AS DOUBLE), 'launch_overhead_share': f.share,
         'worst_step_launch_overhead_share': f.worst_share, 'steps_count': CAST(f.step_rows AS DOUBLE) / f.devices,
         'kernels_count': CAST(coalesce(s.kernels, 0) AS DOUBLE), 'short_kernels_count': CAST(coalesce(s.short_kernels, 0) AS DOUBLE),
         'short_kernel_median_ps': CAST(s.short_median_ps AS DOUBLE), 'kernel_median_ps': CAST(s.median_ps AS DOUBLE)} AS measures,
    coalesce(n.subjects, CAST([] AS VARCHAR[])) AS subjects,
    CAST(f.launch_ps / f.devices AS BIGINT) AS expected_saving_ps,
    f.share AS expected_saving_share,
    'the device idle time while launched kernels and copies wait to start (steps._bottleneck_steps launch_overhead_ps): '
        || 'what CUDA graphs or fewer launches remove; an upper bound' AS saving_method,
    'Launch fewer, larger kernels: capture the step in a CUDA graph (torch.compile(model, mode="reduce-overhead"), or '
        || 'torch.cuda.CUDAGraph / torch.cuda.graphs.make_graphed_callables); fuse small ops (torch.compile, '
        || 'TensorFlow jit_compile=True, XLA GPU --xla_gpu_enable_command_buffer); raise the batch size so each kernel '
        || 'does more work; keep the CPU ahead (no .item() / synchronising calls inside the step)' AS fix,
    'XProf overview page, kernel launch time (3% moderate, 15% high) and its suggestion of fewer, larger kernels; '
        || 'HTA launch stats (launch delay); PyTorch "CUDA Graphs" documentation' AS reference
FROM found AS f
LEFT JOIN kernel_stats AS s USING (profile_id)
LEFT JOIN named AS n USING (profile_id)
ORDER BY expected_saving_ps DESC, f.profile_id
