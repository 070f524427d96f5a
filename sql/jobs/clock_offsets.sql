-- jobs.clock_offsets: each profile's offset to its job's clock and where it comes from, so every
-- time column of a member can be read on the job clock (job time = profile time + offset_ps).
--
-- scope: fleet
--
-- Jobs as jobs.jobs groups them. The job clock is the clock of the job's first member (lowest rank):
-- its profile time 0 (its first event) is job time 0, so a member that started earlier has negative
-- job times. A member's offset, by source (jobs._aligned): reference (that member); host_clock (a process
-- on the reference's host: one machine, one clock, the wall-clock offset is exact); collective_ends (a
-- member on another host with at least $min_matched collective instances matched with the reference:
-- the wall-clock offset corrected by the median difference of their ends, since a collective ends
-- nearly together on every rank); wall_clock (otherwise: the hosts' wall clocks as recorded: Kineto
-- baseTimeNanoseconds + ts, XSpace start times).
--
-- Needs: profiles of one job: a distributed rank (Kineto distributedInfo), a jax.profiler.trace run of XSpace host files, or a job tag
--
-- Parameters:
--
-- Passes: $min_matched (to its includes, with their defaults and meaning)
--
-- Show: job_id, member, rank, host, offset_ps, offset_source, correction_ps, matched_calls, end_spread_ps
--
-- Columns:
--   job_id  VARCHAR  the job (jobs.jobs.job_id)
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   member  VARCHAR  rank N, or the host file's name
--   rank  BIGINT  distributed rank, else position by name
--   host  VARCHAR  profiles.host
--   offset_ps  BIGINT  offset to the job clock: job time = profile time + offset_ps, signed, ps
--   offset_source  VARCHAR  reference, host_clock, collective_ends or wall_clock (see above)
--   wall_offset_ps  BIGINT  the offset the wall clocks give (the profile's origin less the first member's), signed, ps
--   correction_ps  BIGINT  offset_ps - wall_offset_ps: what the collectives moved the wall clock by, signed, ps
--   offset_instances  BIGINT  collective instances matched with the reference the offset is derived from (collective_ends)
--   calls  BIGINT  the member's collective calls
--   matched_calls  BIGINT  those matched with another member
--   end_spread_ps  BIGINT  after alignment, the median absolute difference between the ends of this member's and the reference's matched calls, ps
WITH aligned AS (
-- @include jobs._aligned
),
members AS (
-- @include jobs._members
),
per_member AS (
    SELECT job_id, profile_id, any_value(member) AS member, any_value(rank) AS rank,
        any_value(offset_ps) AS offset_ps, any_value(offset_source) AS offset_source,
        any_value(offset_instances) AS offset_instances,
        count(event_id) AS calls, count(event_id) FILTER (WHERE matched) AS matched_calls
    FROM aligned GROUP BY ALL
),
reference AS (
    SELECT job_id, profile_id AS ref_profile FROM per_member WHERE offset_source = 'reference'
),
spread AS (
    SELECT c.job_id, c.profile_id, quantile_disc(abs(c.job_end_ps - r.job_end_ps), 0.5) AS end_spread_ps
    FROM aligned AS c
    JOIN reference AS ref USING (job_id)
    JOIN aligned AS r ON r.job_id = c.job_id AND r.instance = c.instance AND r.profile_id = ref.ref_profile
    WHERE c.profile_id <> ref.ref_profile AND c.matched
    GROUP BY ALL
)
SELECT
    p.job_id, p.profile_id, p.member, p.rank, m.host, p.offset_ps, p.offset_source, m.wall_offset_ps,
    p.offset_ps - m.wall_offset_ps AS correction_ps,
    p.offset_instances, p.calls, p.matched_calls,
    CAST(s.end_spread_ps AS BIGINT) AS end_spread_ps
FROM per_member AS p
JOIN members AS m USING (job_id, profile_id)
LEFT JOIN spread AS s USING (job_id, profile_id)
ORDER BY p.job_id, p.rank, p.profile_id
