-- jobs._aligned: every collective call of every job, matched to the same collective on the other
-- members and placed on the job's clock.
--
-- scope: fleet
--
-- A member without collective calls has one row with NULL call columns (its offset only).
--
-- Matching. Calls of one job are the same collective instance when they share the process group, the
-- kind and: the sequence number, where the trace records one; else the step, the message (for the
-- kinds whose message is the same on every rank: all_reduce, broadcast, reduce, all_gather,
-- reduce_scatter; an all_to_all's or send / recv's differ by rank) or the XLA op, and the call's
-- position among such calls of its member in that step. A call no other member shares is unmatched,
-- with the reason.
--
-- Clock. A member's offset to the job clock (job time = profile time + offset_ps), by source:
--   reference        the job's first member (lowest rank): its wall clock is the job's
--   host_clock       a member on the reference's host: processes of one machine share its clock, so
--                    the wall-clock offset (jobs._members.wall_offset_ps) is exact
--   collective_ends  another host with at least $min_matched instances matched with the reference: the
--                    wall-clock offset corrected by the median difference of their ends (the end of a
--                    collective is nearly simultaneous on every rank: the last data arrive together);
--                    only instances matched by sequence number or by message count, since a match by
--                    position alone (all_to_all of a sampled trace) can pair different calls
--   wall_clock       otherwise: the wall-clock offset, as the hosts' clocks give it
--
-- Parameters:
--   $min_matched  BIGINT  matched instances with the reference a member on another host needs for its offset to come from collective ends [range: 1..] (default: 3)
--
-- Columns:
--   job_id  VARCHAR  jobs._members.job_id
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   member  VARCHAR  jobs._members.member
--   rank  BIGINT  jobs._members.rank
--   event_id  BIGINT  events.event_id of the call; NULL on the row of a member without calls
--   stream_id  BIGINT  the GPU stream of a kernel; NULL for other sources
--   source  VARCHAR  jobs._collective_calls.source
--   kind  VARCHAR  collective kind
--   name  VARCHAR  event name (XLA: the HLO op)
--   process_group  VARCHAR  process group (XLA: the HLO module)
--   seq  BIGINT  recorded sequence number
--   group_size  BIGINT  ranks in the communicator: the Group size arg, else the job's world size
--   bytes  BIGINT  the message NCCL's tests measure, bytes
--   step  BIGINT  step number
--   instance  VARCHAR  the collective instance: process group / kind / seq:N, or step:S / message / position
--   matched  BOOLEAN  another member has a call of this instance
--   unmatched_reason  VARCHAR  why not: the job has one member, or no other member has this call (the trace is sampled or the peers were not profiled)
--   start_ps  BIGINT  start on the profile's clock, ps
--   end_ps  BIGINT  end on the profile's clock, ps
--   offset_ps  BIGINT  the member's offset to the job clock, signed, ps
--   offset_source  VARCHAR  reference, host_clock, collective_ends or wall_clock (see above)
--   offset_instances  BIGINT  instances matched with the reference that the offset is derived from (collective_ends)
--   job_start_ps  BIGINT  start on the job clock (start_ps + offset_ps), signed (below 0 on a member that began recording before the reference), ps
--   job_end_ps  BIGINT  end on the job clock, signed, ps
WITH members AS (
-- @include jobs._members
),
calls AS (
-- @include jobs._collective_calls
),
keyed AS (
    SELECT m.job_id, m.profile_id, m.member, m.rank, m.host, m.members, m.wall_offset_ps,
        c.event_id, c.stream_id, c.source, c.kind, c.name, c.process_group, c.seq,
        coalesce(c.group_size, m.world_size) AS group_size, c.bytes, c.step, c.start_ps, c.end_ps,
        CASE WHEN c.source = 'xla_op' THEN c.name
             WHEN c.kind IN ('all_reduce', 'broadcast', 'reduce', 'all_gather', 'reduce_scatter')
             THEN coalesce(CAST(c.bytes AS VARCHAR), CAST(c.in_elements AS VARCHAR), '?') || ' B'
             ELSE 'any size' END AS message
    FROM calls AS c JOIN members AS m USING (profile_id)
),
positioned AS (
    SELECT *,
        process_group || ' / ' || kind || ' / ' || CASE
            WHEN seq IS NOT NULL THEN 'seq:' || CAST(seq AS VARCHAR)
            ELSE 'step:' || coalesce(CAST(step AS VARCHAR), '-') || ' / ' || message || ' / #' || CAST(row_number() OVER (
                PARTITION BY profile_id, process_group, kind, step, message ORDER BY start_ps, event_id) AS VARCHAR)
        END AS instance
    FROM keyed
),
matched AS (
    SELECT *, count(DISTINCT profile_id) OVER (PARTITION BY job_id, instance) AS instance_members
    FROM positioned
),
reference AS (
    SELECT job_id, arg_min(profile_id, (rank, profile_id)) AS ref_profile, arg_min(host, (rank, profile_id)) AS ref_host
    FROM members GROUP BY job_id
),
-- End differences against the reference member, on the wall clocks.
end_gaps AS (
    SELECT c.job_id, c.profile_id,
        quantile_disc((r.end_ps + r.wall_offset_ps) - (c.end_ps + c.wall_offset_ps), 0.5) AS correction_ps,
        count(*) AS instances
    FROM matched AS c
    JOIN reference AS ref USING (job_id)
    JOIN matched AS r ON r.job_id = c.job_id AND r.instance = c.instance AND r.profile_id = ref.ref_profile
    WHERE c.profile_id <> ref.ref_profile AND (c.seq IS NOT NULL OR c.message <> 'any size')
    GROUP BY ALL
),
offsets AS (
    SELECT m.job_id, m.profile_id,
        CASE WHEN m.profile_id = ref.ref_profile THEN 'reference'
             WHEN m.host IS NOT DISTINCT FROM ref.ref_host THEN 'host_clock'
             WHEN g.instances >= $min_matched THEN 'collective_ends'
             ELSE 'wall_clock' END AS offset_source,
        m.wall_offset_ps, g.correction_ps, g.instances
    FROM members AS m JOIN reference AS ref USING (job_id)
    LEFT JOIN end_gaps AS g USING (job_id, profile_id)
)
SELECT
    o.job_id, o.profile_id, m.member, m.rank, c.event_id, c.stream_id, c.source, c.kind, c.name, c.process_group, c.seq,
    c.group_size, c.bytes, c.step, c.instance,
    c.instance_members > 1 AS matched,
    CASE WHEN c.instance_members > 1 OR c.event_id IS NULL THEN NULL
         WHEN c.members = 1 THEN 'the job has one member'
         ELSE 'no other member has this call (the trace is sampled, or the peers were not profiled)' END
        AS unmatched_reason,
    c.start_ps, c.end_ps,
    CAST(o.wall_offset_ps + CASE WHEN o.offset_source = 'collective_ends' THEN o.correction_ps ELSE 0 END AS BIGINT)
        AS offset_ps,
    o.offset_source,
    CASE WHEN o.offset_source = 'collective_ends' THEN o.instances END AS offset_instances,
    CAST(c.start_ps + o.wall_offset_ps + CASE WHEN o.offset_source = 'collective_ends' THEN o.correction_ps ELSE 0 END
         AS BIGINT) AS job_start_ps,
    CAST(c.end_ps + o.wall_offset_ps + CASE WHEN o.offset_source = 'collective_ends' THEN o.correction_ps ELSE 0 END
         AS BIGINT) AS job_end_ps
FROM offsets AS o
JOIN members AS m USING (job_id, profile_id)
LEFT JOIN matched AS c USING (job_id, profile_id)
ORDER BY o.job_id, c.instance, m.rank, o.profile_id, c.event_id
