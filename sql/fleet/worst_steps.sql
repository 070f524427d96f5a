-- fleet.worst_steps: the longest steps across every profile of the warehouse.
--
-- Per profile with a global LIMIT: on a Dask cluster each share returns its own
-- worst steps and the combined rows are ordered and cut again, which gives the
-- same rows as one pass.
--
-- Parameters:
--   $top  BIGINT  steps returned, the longest first [range: 1..] (default: 10)
--
-- Show: profile_id, host, device, step_index, step, wall_ps, busy_ps, idle_ps, busy_fraction
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   host  VARCHAR  profiles.host
--   tags  MAP(VARCHAR, VARCHAR)  profiles.tags
--   device  VARCHAR  device name (steps.device)
--   device_kind  VARCHAR  tpu, gpu or host
--   step_index  BIGINT  0-based position of the step on its device
--   step  BIGINT  step number as recorded (steps.step)
--   source  VARCHAR  where the step came from (steps.source)
--   wall_ps  BIGINT  step wall time, ps
--   busy_ps  BIGINT  time the device ran an op inside the step, ps
--   idle_ps  BIGINT  wall_ps - busy_ps
--   busy_fraction  DOUBLE  busy_ps / wall_ps
WITH every_step AS (
-- @include steps.steps
),
-- XProf leaves the incomplete first and last steps of a long trace out (steps.complete);
-- so do we. NULL: a step stored by an older xprosql, kept.
steps AS (
    SELECT * FROM every_step WHERE complete IS NOT false
)
SELECT
    s.profile_id, p.host, p.tags, s.device, s.device_kind, s.step_index, s.step, s.source,
    s.wall_ps, s.busy_ps, s.idle_ps, s.busy_fraction
FROM steps AS s
JOIN profiles AS p USING (profile_id)
ORDER BY wall_ps DESC, profile_id, device, step_index
LIMIT $top
