-- steps.steps: the steps of every profile and, per step and device, wall, busy and
-- idle time.
--
-- Where a device's steps come from: the first of these the profile has.
--   steps_line       events of the device's own `Steps` line (XProf's step markers)
--   group_id         the group_id stat on the device's ops (XProf's step grouping)
--   step_annotation  host events with a step_num stat (jax.profiler.StepTraceAnnotation,
--                    tf.profiler.experimental.Trace(step_num=...)), for every device
--   profiler_step    PyTorch `ProfilerStep#N` annotations on the host, for every device
--   profile          none of these: the whole profile, [0, duration_ps), is one step
--   unmarked         none of these on this device while other devices of the profile have their
--                    own (steps_line, group_id): the whole profile as one step, but complete = false,
--                    so step statistics leave the device out (the V100 sample's GPU:1 runs 34 us of
--                    kernels in 2.6 s beside 21 ms steps on the other GPUs: its one "step" would be
--                    the profile's longest). Its busy time stays visible on this row.
-- A step is its marker's own interval, start to end as recorded: the Steps line
-- event, the span of the ops of a group_id, the step annotation (its first start to
-- its last end when several events carry the step number), the ProfilerStep#N
-- event. Time between two steps (the host preparing the next one) belongs to no
-- step, as in XProf's step time (the longest step marker of the step) and
-- PyTorch's ProfilerStep#N durations.
--
-- Incomplete steps: XProf's overview page (its step database, built with
-- maybe_drop_incomplete_steps) drops the first and the last step when there are more
-- than 5, since a capture window can cut them (and CUPTI set-up prolongs the first).
-- Those steps are kept here with complete = false: an analysis that averages or
-- ranks steps filters on `complete` to leave them out, as XProf does.
--
-- A device is busy while one of its ops runs: TPU `XLA Ops` events; GPU kernels,
-- copies and memsets (tables kernels, memcpys); in a profile without
-- accelerators, host events XLA tags with an HLO op (JAX on CPU), else Kineto
-- cpu_op events. Busy time is the union of these intervals inside the step, so
-- ops overlapping on several streams or threads count once.
--
-- Needs: a device that runs ops: TPU XLA Ops, GPU kernels or copies, or on a host without accelerators XLA ops or PyTorch cpu_ops
--
-- Parameters:
--
-- Show: profile_id, device, step_index, step, step_name, start_ps, wall_ps, busy_ps, idle_ps, busy_fraction
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   device_id  INTEGER  devices.device_id of the busy device
--   device  VARCHAR  device name, e.g. /device:TPU:0
--   device_kind  VARCHAR  tpu, gpu, or host (a profile without accelerators)
--   step_index  BIGINT  0-based position of the step on its device, by start
--   step  BIGINT  step number as recorded (step_num, group_id, N of ProfilerStep#N); NULL for source profile
--   step_name  VARCHAR  step name as recorded (Steps line event or step_name stat, annotation name)
--   source  VARCHAR  where the step came from: steps_line, group_id, step_annotation, profiler_step, profile, unmarked
--   start_ps  BIGINT  step start, ps from profiles.start_ns
--   end_ps  BIGINT  step end: the marker's own end, ps
--   wall_ps  BIGINT  end_ps - start_ps
--   busy_ps  BIGINT  time inside the step when at least one op of the device runs, ps
--   idle_ps  BIGINT  wall_ps - busy_ps
--   busy_fraction  DOUBLE  busy_ps / wall_ps (XProf's duty cycle); NULL for an empty step
--   complete  BOOLEAN  false for a step XProf's overview drops as incomplete: the first or last of more than 5 on its device; false for source unmarked
WITH chosen_profiles AS (
    SELECT p.profile_id, p.duration_ps FROM profiles AS p
),
accelerated AS (
    SELECT DISTINCT d.profile_id FROM devices AS d JOIN chosen_profiles USING (profile_id)
    WHERE d.kind IN ('tpu', 'gpu')
),
-- Profiles whose host runs XLA (JAX on CPU): their HLO-tagged events are the ops.
host_xla AS (
    SELECT DISTINCT e.profile_id
    FROM events AS e JOIN chosen_profiles USING (profile_id) JOIN devices AS d USING (profile_id, device_id)
    WHERE e.hlo_op IS NOT NULL AND d.kind NOT IN ('tpu', 'gpu')
),
-- What keeps a device busy, with the group_id XProf gave each op.
steps_busy AS (
    SELECT e.profile_id, e.device_id, e.start_ps, e.start_ps + e.dur_ps AS end_ps, e.group_id
    FROM events AS e
    JOIN chosen_profiles USING (profile_id)
    JOIN devices AS d USING (profile_id, device_id)
    JOIN tracks AS t USING (profile_id, device_id, track_id)
    WHERE d.kind = 'tpu' AND t.name = 'XLA Ops' AND e.start_ps IS NOT NULL
    UNION ALL
    SELECT g.profile_id, g.device_id, g.start_ps, g.start_ps + g.dur_ps, e.group_id
    FROM (
        SELECT profile_id, event_id, device_id, start_ps, dur_ps FROM kernels
        UNION ALL
        SELECT profile_id, event_id, device_id, start_ps, dur_ps FROM memcpys
    ) AS g
    JOIN chosen_profiles USING (profile_id)
    JOIN events AS e USING (profile_id, event_id)
    WHERE g.start_ps IS NOT NULL
    UNION ALL
    SELECT e.profile_id, e.device_id, e.start_ps, e.start_ps + e.dur_ps, e.group_id
    FROM events AS e
    JOIN chosen_profiles USING (profile_id)
    JOIN devices AS d USING (profile_id, device_id)
    WHERE d.kind NOT IN ('tpu', 'gpu') AND e.start_ps IS NOT NULL
      AND e.profile_id NOT IN (SELECT profile_id FROM accelerated)
      AND CASE WHEN e.profile_id IN (SELECT profile_id FROM host_xla) THEN e.hlo_op IS NOT NULL
               ELSE e.category = 'cpu_op' END
),
busy_devices AS (
    SELECT DISTINCT b.profile_id, b.device_id, d.name AS device,
        CASE WHEN d.kind IN ('tpu', 'gpu') THEN d.kind ELSE 'host' END AS device_kind
    FROM steps_busy AS b JOIN devices AS d USING (profile_id, device_id)
),
-- Candidate steps from every source, ranked; a device keeps its best source.
steps_line AS (
    SELECT
        e.profile_id, e.device_id, 1 AS source_rank, 'steps_line' AS source,
        coalesce(e.step_num, e.group_id, TRY_CAST(e.name AS BIGINT)) AS step,
        coalesce(s.str_value, e.name) AS step_name,
        e.start_ps AS raw_start_ps, e.start_ps + e.dur_ps AS raw_end_ps
    FROM events AS e
    JOIN chosen_profiles USING (profile_id)
    JOIN tracks AS t USING (profile_id, device_id, track_id)
    JOIN devices AS d USING (profile_id, device_id)
    LEFT JOIN event_stats AS s ON s.profile_id = e.profile_id AND s.event_id = e.event_id AND s.stat = 'step_name'
    WHERE t.name = 'Steps' AND d.kind IN ('tpu', 'gpu') AND e.start_ps IS NOT NULL
),
group_steps AS (
    SELECT profile_id, device_id, 2, 'group_id', group_id, CAST(group_id AS VARCHAR),
        min(start_ps), max(end_ps)
    FROM steps_busy
    WHERE group_id IS NOT NULL
    GROUP BY ALL
),
host_steps AS (
    SELECT e.profile_id, 3 AS source_rank, 'step_annotation' AS source, e.step_num AS step,
        any_value(e.name) AS step_name, min(e.start_ps) AS raw_start_ps, max(e.start_ps + e.dur_ps) AS raw_end_ps
    FROM events AS e
    JOIN chosen_profiles USING (profile_id)
    JOIN devices AS d USING (profile_id, device_id)
    WHERE d.kind IN ('host', 'cpu', 'other') AND e.step_num IS NOT NULL AND e.start_ps IS NOT NULL
    GROUP BY ALL
    UNION ALL
    SELECT e.profile_id, 4, 'profiler_step',
        CAST(regexp_extract(e.name, 'ProfilerStep\s*#\s*([0-9]+)', 1) AS BIGINT),
        any_value(e.name), min(e.start_ps), max(e.start_ps + e.dur_ps)
    FROM events AS e
    JOIN chosen_profiles USING (profile_id)
    JOIN devices AS d USING (profile_id, device_id)
    WHERE d.kind NOT IN ('tpu', 'gpu') AND e.name LIKE 'ProfilerStep%'
      AND regexp_matches(e.name, '^ProfilerStep\s*#\s*[0-9]+$') AND e.start_ps IS NOT NULL
    GROUP BY ALL
),
candidates AS (
    SELECT * FROM steps_line
    UNION ALL
    SELECT * FROM group_steps
    UNION ALL
    SELECT b.profile_id, b.device_id, h.source_rank, h.source, h.step, h.step_name, h.raw_start_ps, h.raw_end_ps
    FROM host_steps AS h JOIN busy_devices AS b USING (profile_id)
    UNION ALL
    SELECT b.profile_id, b.device_id, 5,
        CASE WHEN b.profile_id IN (SELECT profile_id FROM steps_line UNION ALL SELECT profile_id FROM group_steps)
             THEN 'unmarked' ELSE 'profile' END,
        NULL, NULL, 0, p.duration_ps
    FROM busy_devices AS b JOIN chosen_profiles AS p USING (profile_id)
),
chosen AS (
    SELECT *
    FROM candidates
    QUALIFY source_rank = min(source_rank) OVER (PARTITION BY profile_id, device_id)
),
-- Each step keeps its own interval; XProf's rule (ConvertStepEventsToStepDb,
-- kDropIncomplteteStepThreshold = 5): of more than 5 steps, the first and the last
-- are incomplete.
numbered AS (
    SELECT
        profile_id, device_id, source, step, step_name,
        row_number() OVER w - 1 AS step_index,
        count(*) OVER (PARTITION BY profile_id, device_id) AS device_steps,
        raw_start_ps AS start_ps,
        raw_end_ps AS end_ps
    FROM chosen
    WINDOW w AS (PARTITION BY profile_id, device_id ORDER BY raw_start_ps, step, raw_end_ps)
),
windows AS (
    SELECT profile_id, device_id, source, step, step_name, step_index, start_ps, end_ps,
        source <> 'unmarked' AND NOT (device_steps > 5 AND (step_index = 0 OR step_index = device_steps - 1)) AS complete
    FROM numbered
),
-- Busy intervals merged per device, with the busy time before each: busy time
-- up to any instant t is then one ASOF lookup, whatever the number of ops.
ordered AS (
    SELECT profile_id, device_id, start_ps, end_ps,
        max(end_ps) OVER (PARTITION BY profile_id, device_id ORDER BY start_ps, end_ps
                          ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach_ps
    FROM steps_busy
),
grouped AS (
    SELECT *, sum(CASE WHEN reach_ps IS NULL OR start_ps > reach_ps THEN 1 ELSE 0 END)
        OVER (PARTITION BY profile_id, device_id ORDER BY start_ps, end_ps ROWS UNBOUNDED PRECEDING) AS run
    FROM ordered
),
merged AS (
    SELECT profile_id, device_id, min(start_ps) AS m_start_ps, max(end_ps) AS m_end_ps
    FROM grouped GROUP BY profile_id, device_id, run
),
cumulative AS (
    SELECT *, CAST(coalesce(sum(m_end_ps - m_start_ps) OVER (
        PARTITION BY profile_id, device_id ORDER BY m_start_ps ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0
    ) AS BIGINT) AS before_ps
    FROM merged
),
-- The busy time before each step's start and before its end, by one as-of join of both (each join sorts the merged
-- intervals: one sort, not two).
bounds AS (
    SELECT profile_id, device_id, step_index, start_ps AS at_ps, false AS is_end FROM windows
    UNION ALL
    SELECT profile_id, device_id, step_index, end_ps, true FROM windows
),
busy_at AS MATERIALIZED (
    SELECT b.profile_id, b.device_id, b.step_index, b.is_end,
        coalesce(c.before_ps + least(greatest(b.at_ps - c.m_start_ps, 0), c.m_end_ps - c.m_start_ps), 0) AS busy_before
    FROM bounds AS b
    ASOF LEFT JOIN cumulative AS c
      ON b.profile_id = c.profile_id AND b.device_id = c.device_id AND b.at_ps >= c.m_start_ps
),
with_busy AS (
    SELECT w.*, s.busy_before AS busy_before_start, e.busy_before AS busy_before_end
    FROM windows AS w
    JOIN busy_at AS s ON s.profile_id = w.profile_id AND s.device_id = w.device_id AND s.step_index = w.step_index AND NOT s.is_end
    JOIN busy_at AS e ON e.profile_id = w.profile_id AND e.device_id = w.device_id AND e.step_index = w.step_index AND e.is_end
)
SELECT
    a.profile_id, a.device_id, b.device, b.device_kind, a.step_index, a.step, a.step_name, a.source,
    a.start_ps, a.end_ps,
    a.end_ps - a.start_ps AS wall_ps,
    CAST(a.busy_before_end - a.busy_before_start AS BIGINT) AS busy_ps,
    CAST((a.end_ps - a.start_ps) - (a.busy_before_end - a.busy_before_start) AS BIGINT) AS idle_ps,
    (a.busy_before_end - a.busy_before_start) / nullif(a.end_ps - a.start_ps, 0) AS busy_fraction,
    a.complete
FROM with_busy AS a
JOIN busy_devices AS b USING (profile_id, device_id)
ORDER BY a.profile_id, a.device_id, a.step_index
