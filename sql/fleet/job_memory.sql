-- fleet.job_memory: peak memory per job (and step, with $by_step) across the warehouse, and
-- the profiles that came within $within of their device's memory.
--
-- scope: fleet
--
-- Built on memory.memory_peaks (each profile's allocators, per step with $by_step) and the
-- jobs of jobs._members; a profile in no job is a job of its own (job_id: its profile id, job
-- NULL). A row is a job's highest peak of any allocator of its profiles (steps: the step at
-- the same step_index on each profile). Near capacity: a peak of at least (1 - $within) of the
-- memory of the device its allocator serves (devices.memory_bytes); allocators without a
-- known capacity (host memory, TPU allocators) are never near it.
--
-- Needs: allocator events: XSpace MemoryAllocation / MemoryDeallocation, or Kineto [memory] (profile_memory=True)
--
-- Parameters:
--   $within  DOUBLE  how close to the device's memory a peak counts as near capacity, a share of it, 0..1 [range: 0..1] (default: 0.1)
--
-- Passes: $by_step (to memory.memory_peaks, with its default and meaning)
--
-- Show: job, step_index, profiles, peak_in_use_bytes, peak_profile_id, peak_allocator, capacity_bytes, peak_capacity_share, near_capacity_profiles
--
-- Columns:
--   job_id  VARCHAR  the job (jobs.jobs.job_id), or the profile id of a profile in no job
--   job  VARCHAR  the job's key (jobs.jobs.job); NULL for a profile in no job
--   step_index  BIGINT  with $by_step: the step's 0-based position on each profile; NULL otherwise (and for events outside every step)
--   profiles  BIGINT  profiles of the job with allocator events in the row's span
--   peak_in_use_bytes  BIGINT  the highest peak of bytes in use among them, bytes
--   peak_profile_id  VARCHAR  the profile that reached it
--   peak_allocator  VARCHAR  its allocator
--   peak_ps  BIGINT  when, on that profile's clock, ps
--   capacity_bytes  BIGINT  the memory of the device that allocator serves, bytes
--   peak_capacity_share  DOUBLE  peak_in_use_bytes / capacity_bytes, 0..1
--   near_capacity_profiles  BIGINT  profiles whose peak came within $within of their device's memory
--   near_capacity_profile_ids  VARCHAR[]  those profiles, the closest first
WITH params AS (
    SELECT CAST($within AS DOUBLE) AS within
),
peaks AS (
-- @include memory.memory_peaks
),
members AS (
-- @include jobs._members
),
placed AS (
    SELECT coalesce(m.job_id, k.profile_id) AS job_id, m.job, k.*,
        k.peak_capacity_share >= 1 - x.within AS near_capacity
    FROM peaks AS k
    CROSS JOIN params AS x
    LEFT JOIN members AS m USING (profile_id)
),
near AS (
    SELECT job_id, step_index, list(profile_id ORDER BY share DESC, profile_id) AS profile_ids
    FROM (
        SELECT job_id, step_index, profile_id, max(peak_capacity_share) AS share
        FROM placed
        WHERE near_capacity
        GROUP BY ALL
    )
    GROUP BY ALL
),
jobs AS (
    SELECT
        job_id, any_value(job) AS job, step_index,
        count(DISTINCT profile_id) AS profiles,
        max(peak_in_use_bytes) AS peak_in_use_bytes,
        arg_max(profile_id, (peak_in_use_bytes, profile_id)) AS peak_profile_id,
        arg_max(allocator, (peak_in_use_bytes, profile_id)) AS peak_allocator,
        arg_max(peak_ps, (peak_in_use_bytes, profile_id)) AS peak_ps,
        arg_max(capacity_bytes, (peak_in_use_bytes, profile_id)) AS capacity_bytes,
        arg_max(peak_capacity_share, (peak_in_use_bytes, profile_id)) AS peak_capacity_share
    FROM placed
    GROUP BY job_id, step_index
)
SELECT j.*, coalesce(len(n.profile_ids), 0) AS near_capacity_profiles, coalesce(n.profile_ids, []) AS near_capacity_profile_ids
FROM jobs AS j
LEFT JOIN near AS n ON n.job_id = j.job_id AND n.step_index IS NOT DISTINCT FROM j.step_index
ORDER BY j.peak_in_use_bytes DESC, j.job_id, j.step_index NULLS FIRST
