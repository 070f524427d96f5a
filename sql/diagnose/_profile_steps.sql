-- diagnose._profile_steps: the step time every finding's saving is a share of: per profile,
-- its complete steps (steps.steps, XProf's incomplete first and last left out) on each device.
--
-- A finding's expected_saving_share is the device time a fix would save, summed over devices,
-- over device_step_ps (the same sum of step wall time over devices); its expected_saving_ps is
-- that share of step_ps, the step time of one device: a profile of 8 GPUs that each lose 10% of
-- their steps saves 10% of its step time, not 80%.
--
-- Needs: a device that runs ops: TPU XLA Ops, GPU kernels or copies, or on a host without accelerators XLA ops or PyTorch cpu_ops
--
-- Parameters:
--
-- Columns:
--   profile_id  VARCHAR  profile
--   devices  BIGINT  devices with complete steps
--   steps  BIGINT  complete steps of the device with the most
--   device_step_ps  BIGINT  wall time of the complete steps, summed over devices, ps
--   step_ps  BIGINT  device_step_ps / devices: the profile's step time, ps
--   worst_step  BIGINT  steps.step of the longest complete step (any device)
WITH every_step AS (
-- @include steps.steps
),
complete AS (
    SELECT * FROM every_step WHERE complete IS NOT false AND wall_ps > 0
),
per_device AS (
    SELECT profile_id, device_id, count(*) AS steps, sum(wall_ps) AS wall_ps
    FROM complete GROUP BY profile_id, device_id
)
SELECT
    d.profile_id,
    CAST(count(*) AS BIGINT) AS devices,
    CAST(max(d.steps) AS BIGINT) AS steps,
    CAST(sum(d.wall_ps) AS BIGINT) AS device_step_ps,
    CAST(sum(d.wall_ps) / count(*) AS BIGINT) AS step_ps,
    (SELECT arg_max(c.step, c.wall_ps) FROM complete AS c WHERE c.profile_id = d.profile_id) AS worst_step
FROM per_device AS d
GROUP BY d.profile_id
ORDER BY d.profile_id
