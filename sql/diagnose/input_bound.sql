-- diagnose.input_bound: steps whose device waits for input (data loading, infeed): the
-- wait a faster input pipeline would remove.
--
-- XProf's overview page calls a step "highly input-bound" when its input wait reaches 20% of
-- step time (moderately: 5%) and suggests making the input pipeline faster. The wait is
-- steps._bottleneck_steps' input_wait_ps: the device idle while the host reads input
-- ($input_events there: DataLoader iteration, tf.data's IteratorGetNext, infeed). A fix that
-- prefetches or speeds up loading removes that idle time: the saving is the input wait itself
-- (an upper bound when the loader's own work would still show through a prefetch).
--
-- One finding per profile whose complete steps wait for input at least $min_share of their time.
--
-- Parameters:
--   $min_share  DOUBLE  input wait share of step time from which the rule fires; XProf's "moderately input-bound" [range: 0..1] (default: 0.05)
--
-- Passes: $input_events (to steps._bottleneck_steps: the host events that read input)
--
-- Show: profile_id, rule, severity, expected_saving_share, title
--
-- Columns:
--   profile_id  VARCHAR  profile
--   job  VARCHAR  NULL (a finding about one profile)
--   rank  BIGINT  NULL
--   device  VARCHAR  the device waiting longest for input
--   step  BIGINT  the step waiting longest for input
--   rule  VARCHAR  input_bound
--   severity  VARCHAR  high, medium or low (xprosql_severity of expected_saving_share)
--   title  VARCHAR  one line a person reads
--   evidence  VARCHAR  the numbers as a sentence
--   measures  MAP(VARCHAR, DOUBLE)  input_wait_ps, input_wait_share, worst_step_input_wait_share, steps_count
--   subjects  VARCHAR[]  the input events seen in the steps, longest first
--   expected_saving_ps  BIGINT  the input wait per device over the complete steps, ps
--   expected_saving_share  DOUBLE  input wait share of step time, 0..1
--   saving_method  VARCHAR  how the saving is estimated
--   fix  VARCHAR  what to change
--   reference  VARCHAR  where the rule comes from
WITH step_rows AS (
-- @include steps._bottleneck_steps
),
per_profile AS (
    SELECT
        profile_id,
        sum(input_wait_ps) AS input_wait_ps,
        sum(step_ps) AS device_step_ps,
        count(DISTINCT device_id) AS devices,
        count(*) AS step_rows,
        arg_max(device, input_wait_ps / nullif(step_ps, 0)) AS worst_device,
        arg_max(step, input_wait_ps / nullif(step_ps, 0)) AS worst_step,
        max(input_wait_ps / nullif(step_ps, 0)) AS worst_share
    FROM step_rows
    GROUP BY profile_id
),
-- The host events that read input, by time: what the fix is about. Each distinct name is matched once, into a
-- column (as a filter on the events, the regular expression ran on every event: a fifth of the rule's time).
waiting AS (
    SELECT profile_id FROM per_profile WHERE input_wait_ps > 0
),
event_names AS MATERIALIZED (
    SELECT name, regexp_matches(name, CAST($input_events AS VARCHAR)) AS reads_input
    FROM (SELECT DISTINCT name FROM events WHERE profile_id IN (SELECT profile_id FROM waiting))
),
input_events AS (
    SELECT e.profile_id, e.name, sum(e.dur_ps) AS total_ps
    FROM events AS e
    JOIN waiting USING (profile_id)
    JOIN event_names AS n ON n.name = e.name AND n.reads_input
    GROUP BY e.profile_id, e.name
),
named AS (
    SELECT profile_id, list(name ORDER BY total_ps DESC, name)[1:5] AS subjects
    FROM input_events GROUP BY profile_id
),
found AS (
    SELECT p.*, p.input_wait_ps / nullif(p.device_step_ps, 0) AS share
    FROM per_profile AS p
    WHERE p.input_wait_ps / nullif(p.device_step_ps, 0) >= CAST($min_share AS DOUBLE)
)
SELECT
    f.profile_id,
    CAST(NULL AS VARCHAR) AS job,
    CAST(NULL AS BIGINT) AS rank,
    f.worst_device AS device,
    f.worst_step AS step,
    'input_bound' AS rule,
    xprosql_severity(f.share) AS severity,
    printf('input-bound: the device waits for input %.1f%% of step time', 100 * f.share) AS title,
    printf('%s of %s step time per device is spent waiting for input (%.1f%%); worst step %s waits %.1f%% of its time; input events: %s',
        xprosql_duration(f.input_wait_ps / f.devices), xprosql_duration(f.device_step_ps / f.devices), 100 * f.share,
        coalesce(CAST(f.worst_step AS VARCHAR), '-'), 100 * f.worst_share,
        coalesce(array_to_string(n.subjects, ', '), 'infeed ops')) AS evidence,
    MAP {'input_wait_ps': CAST(f.input_wait_ps AS DOUBLE), 'input_wait_share': f.share,
         'worst_step_input_wait_share': f.worst_share, 'steps_count': CAST(f.step_rows AS DOUBLE) / f.devices} AS measures,
    coalesce(n.subjects, CAST([] AS VARCHAR[])) AS subjects,
    CAST(f.input_wait_ps / f.devices AS BIGINT) AS expected_saving_ps,
    f.share AS expected_saving_share,
    'the device idle time while the host reads input (steps._bottleneck_steps input_wait_ps): what prefetching hides' AS saving_method,
    'Overlap input with compute: PyTorch DataLoader(num_workers=N, pin_memory=True, prefetch_factor=2, persistent_workers=True); '
        || 'tf.data: dataset.prefetch(tf.data.AUTOTUNE) and map(num_parallel_calls=tf.data.AUTOTUNE); JAX: prefetch batches to the '
        || 'device (flax.jax_utils.prefetch_to_device); move decoding and augmentation off the training loop' AS fix,
    'XProf overview page, input-bound step (20% high, 5% moderate); TensorFlow guide "Better performance with the tf.data API"; '
        || 'PyTorch "Performance Tuning Guide": asynchronous data loading' AS reference
FROM found AS f
LEFT JOIN named AS n USING (profile_id)
ORDER BY expected_saving_ps DESC, f.profile_id
