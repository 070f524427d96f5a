-- jobs.collectives: one row per collective instance per rank of every job, on the job's clock, with
-- the instance across its ranks: the last to arrive, the wait it imposed, the transfer after it, and
-- NCCL's algorithm and bus bandwidth.
--
-- scope: fleet
--
-- Calls, their matching into instances and the job clock: jobs._aligned (a call's arrival is its
-- start on the job clock: an NCCL kernel's start, a gloo worker's annotation, an XLA op's start).
-- Across the ranks of an instance: the first and last arrival; arrival_skew_ps, the last less the
-- first; imposed_wait_ps, on the last rank's row only, the last arrival less the one before it: how
-- much sooner the instance would have started, for every other rank, had the last one come with
-- the next latest; transfer_ps, the last rank's call from its arrival to its end: the time data
-- move once everyone is there.
--
-- Bandwidth as NCCL's tests report it (nccl-tests doc/PERFORMANCE.md): algbw = bytes / transfer time,
-- with bytes the message those tests count (jobs._collective_calls), and busbw = algbw x a factor
-- of the kind and of n, the ranks in the communicator (Group size, else the job's world size):
--   all_reduce                               2(n-1)/n
--   all_gather, reduce_scatter, all_to_all   (n-1)/n
--   broadcast, reduce, send / recv, collective_permute   1
-- NCCL's tests time a collective after a barrier, so their time is the transfer time here, not the
-- call's duration (which includes waiting for the last rank). Unmatched calls have no instance
-- columns (NULL): their peers are not in the data.
--
-- Needs: collectives (NCCL / RCCL kernels, gloo:* annotations, XLA collective ops) in profiles of one job
--
-- Parameters:
--
-- Passes: $min_matched (to its includes, with their defaults and meaning)
--
-- Show: job_id, instance, kind, step, member, rank, bytes, arrival_delay_ps, last_member, imposed_wait_ps, transfer_ps, busbw_bytes_per_s
--
-- Columns:
--   job_id  VARCHAR  the job (jobs.jobs.job_id)
--   instance  VARCHAR  the collective instance (jobs._aligned.instance)
--   kind  VARCHAR  all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce, send_recv, ...
--   process_group  VARCHAR  process group (XLA: the HLO module)
--   seq  BIGINT  recorded sequence number
--   step  BIGINT  step number
--   profile_id  VARCHAR  profile (profiles.profile_id) of this rank
--   member  VARCHAR  rank N, or the host file's name
--   rank  BIGINT  distributed rank, else position by name
--   event_id  BIGINT  events.event_id of the call
--   stream_id  BIGINT  the GPU stream of a kernel; NULL for other sources
--   source  VARCHAR  gpu_kernel, host_annotation or xla_op
--   name  VARCHAR  event name (XLA: the HLO op)
--   bytes  BIGINT  the message NCCL's tests count, bytes
--   group_size  BIGINT  n: ranks in the communicator
--   offset_ps  BIGINT  the rank's offset to the job clock (jobs.clock_offsets), signed, ps
--   start_ps  BIGINT  arrival on the job clock, signed (below 0 on a rank that began recording before the reference member), ps
--   end_ps  BIGINT  end on the job clock, signed, ps
--   dur_ps  BIGINT  end_ps - start_ps, ps
--   matched  BOOLEAN  another rank has a call of this instance
--   unmatched_reason  VARCHAR  why not (jobs._aligned)
--   ranks  BIGINT  ranks with a call of this instance
--   arrival_delay_ps  BIGINT  this rank's arrival less the first arrival, ps
--   last_member  VARCHAR  the member that arrived last
--   last_rank  BIGINT  its rank
--   arrival_skew_ps  BIGINT  last arrival less the first, ps
--   imposed_wait_ps  BIGINT  on the last rank's row: its arrival less the one before it, the wait it imposed on every other rank; 0 on the other rows, ps
--   transfer_ps  BIGINT  the last rank's end less its arrival: transfer time after the last arrival, ps
--   algbw_bytes_per_s  DOUBLE  bytes / transfer_ps, bytes/s
--   busbw_factor  DOUBLE  NCCL's bus bandwidth factor for the kind and n (see above)
--   busbw_bytes_per_s  DOUBLE  algbw_bytes_per_s x busbw_factor, bytes/s
WITH aligned AS (
-- @include jobs._aligned
),
calls AS (
    SELECT * FROM aligned WHERE event_id IS NOT NULL
),
across AS (
    SELECT c.*,
        count(*) FILTER (WHERE matched) OVER w AS ranks,
        min(job_start_ps) OVER w AS first_arrival_ps,
        max(job_start_ps) OVER w AS last_arrival_ps,
        arg_max(member, (job_start_ps, rank)) OVER w AS last_member,
        arg_max(rank, (job_start_ps, rank)) OVER w AS last_rank,
        arg_max(job_end_ps - job_start_ps, (job_start_ps, rank)) OVER w AS last_dur_ps,
        list_sort(list(job_start_ps) OVER w, 'DESC') AS arrivals
    FROM calls AS c
    WINDOW w AS (PARTITION BY job_id, instance)
)
SELECT
    job_id, instance, kind, process_group, seq, step, profile_id, member, rank, event_id, stream_id, source, name, bytes,
    group_size, offset_ps,
    job_start_ps AS start_ps, job_end_ps AS end_ps, job_end_ps - job_start_ps AS dur_ps,
    matched, unmatched_reason,
    CASE WHEN matched THEN ranks END AS ranks,
    CASE WHEN matched THEN job_start_ps - first_arrival_ps END AS arrival_delay_ps,
    CASE WHEN matched THEN last_member END AS last_member,
    CASE WHEN matched THEN last_rank END AS last_rank,
    CASE WHEN matched THEN last_arrival_ps - first_arrival_ps END AS arrival_skew_ps,
    CASE WHEN NOT matched THEN NULL WHEN member = last_member THEN last_arrival_ps - arrivals[2] ELSE 0 END
        AS imposed_wait_ps,
    CASE WHEN matched THEN last_dur_ps END AS transfer_ps,
    CASE WHEN matched THEN bytes / nullif(last_dur_ps / 1e12, 0) END AS algbw_bytes_per_s,
    CASE WHEN kind = 'all_reduce' THEN 2.0 * (group_size - 1) / group_size
         WHEN kind IN ('all_gather', 'reduce_scatter', 'all_to_all') THEN (group_size - 1) / group_size
         WHEN kind IN ('broadcast', 'reduce', 'send_recv', 'send', 'recv', 'collective_permute') THEN 1.0
    END AS busbw_factor,
    CASE WHEN matched THEN bytes / nullif(last_dur_ps / 1e12, 0) END * CASE
         WHEN kind = 'all_reduce' THEN 2.0 * (group_size - 1) / group_size
         WHEN kind IN ('all_gather', 'reduce_scatter', 'all_to_all') THEN (group_size - 1) / group_size
         WHEN kind IN ('broadcast', 'reduce', 'send_recv', 'send', 'recv', 'collective_permute') THEN 1.0
    END AS busbw_bytes_per_s
FROM across
ORDER BY job_id, first_arrival_ps, instance, rank, profile_id
