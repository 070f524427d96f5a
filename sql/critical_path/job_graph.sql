-- critical_path.job_graph: the graph of a job across its ranks and steps: every rank's replay graph
-- (critical_path._rank_graph) on the job clock, its windows chained in order, the ranks joined through the
-- collective instances they share, so that the longest path crosses ranks and steps
-- (xprosql.queries.job_critical_path takes it, step by step, and replays changes).
--
-- scope: fleet
--
-- A job's members (jobs._members) each bring their windows (ProfilerStep#N, or one whole-profile window,
-- step NULL) on the job clock (jobs._aligned offset_ps). Node keys are unique in a job: a member's node as
-- (node_id x 2^20 + the window's index in the job) x 2^16 + the member's index (its position by rank, from 0);
-- a collective instance as -(2^60) - its index in the job; job_start -(2^61), job_end -(2^61) - 1.
--
-- Collective instances (jobs._aligned: one instance per process group, kind and sequence number, or step,
-- message and position): a member's call whose operator edge (its wait and transfer: an NCCL kernel, a host
-- collective) lies in one of its windows, where at least two members have one, is replaced by a
-- collective_arrival edge from its start to the instance node (weight 0: the instance is at the last
-- arrival) and a collective_transfer edge from the instance to its end, weighing that member's end less
-- the last arrival (never below 0): an instance ends when its last member arrives plus the transfer, and
-- every member's end moves with the last arrival. bound_by of the transfer: the call's own
-- (gpu_communication_bound for a kernel, host_communication_bound for a host collective). Calls no other
-- member shares keep their own edge (wait and transfer as measured).
--
-- Windows: job_start links to each member's first window start (start_skew: the member began that much later
-- than the first); a member's window end links to the start of its next window (step_gap: the time between
-- them, cpu_untraced, outside every step); its last window's end to job_end (weight 0). Replayed unchanged,
-- each window end falls at its measured time: the longest path from job_start to the latest end of step N's
-- windows is the job until step N completes.
--
-- Needs: Kineto (PyTorch profiler) traces or XSpace GPU profiles of the ranks of a job (jobs.jobs) that holds each rank once
--
-- Parameters:
--
-- Passes: $include_last_step (to its includes, with their defaults and meaning)
--
-- Columns:
--   job_id  VARCHAR  the job (jobs.jobs.job_id)
--   job  VARCHAR  the job's key (jobs.jobs.job: tag:NAME, the run or the trace directory)
--   job_tag  VARCHAR  the members' tags['job'], when they have one
--   step  BIGINT  step number of the edge's window (N of ProfilerStep#N; NULL for a whole-profile window); of start_skew and step_gap edges the window they enter, of job_end the last window
--   profile_id  VARCHAR  the member (profiles.profile_id) of the edge; of a collective edge, the member whose call it is; of job_start / job_end, the member linked
--   member  VARCHAR  rank N, or the host file's name
--   rank  BIGINT  distributed rank, else position by name
--   member_index  BIGINT  0-based position of the member in its job, by rank
--   step_index  BIGINT  the member's window (critical_path._rank_graph step_index)
--   window_start_ps  BIGINT  the window's start on the job clock (0 at the job's first window start), ps
--   window_end_ps  BIGINT  the window's end on the job clock (0 at the job's first window start), ps
--   window_end_key  BIGINT  the key of the window's end node
--   device_id  INTEGER  devices.device_id of the edge's line (critical_path._rank_graph)
--   track_id  INTEGER  tracks.track_id of that line
--   src_node  BIGINT  the member's node the edge leaves (critical_path._rank_graph node id); NULL for instance and job nodes
--   dst_node  BIGINT  the member's node it enters; NULL for instance and job nodes
--   src_key  BIGINT  the source node's key in the job (see above)
--   dst_key  BIGINT  the target node's key
--   src_ts_ps  BIGINT  the source node's time on the job clock, ps
--   dst_ts_ps  BIGINT  the target node's time on the job clock, ps
--   edge_kind  VARCHAR  critical_path._rank_graph's kinds, collective_arrival, collective_transfer, start_skew, step_gap or job_end
--   weight_ps  BIGINT  weight for replay, ps, >= 0
--   event_id  BIGINT  events.event_id (of the edge's member) its time is attributed to; NULL when none
--   name  VARCHAR  that event's name
--   bound_by  VARCHAR  critical_path._rank_graph's categories, or start_skew; NULL for weight-0 edges
--   instance  VARCHAR  the collective instance (jobs._aligned.instance) of arrival and transfer edges
--   missing_edges  VARCHAR[]  what the member's trace lacks for the graph's edges in the window (critical_path._rank_graph), on the edge that enters the window (start_skew, step_gap); NULL on the others
WITH rank_graph AS (
-- @include critical_path._rank_graph
),
aligned AS (
-- @include jobs._aligned
),
every_job AS (
-- @include jobs.jobs
),
-- A job that holds a rank twice (several runs under one job tag) is no one run: no graph joins its captures.
members AS (
    SELECT DISTINCT a.job_id, a.profile_id, a.member, a.rank, a.offset_ps FROM aligned AS a
    WHERE a.job_id IN (SELECT job_id FROM every_job WHERE one_run)
),
job_keys AS (
    SELECT m.job_id, any_value(m.job) AS job, max(p.tags['job']) AS job_tag
    FROM (
-- @include jobs._members
    ) AS m
    JOIN profiles AS p USING (profile_id)
    GROUP BY m.job_id
),
indexed AS (
    SELECT m.*, k.job, k.job_tag,
        row_number() OVER (PARTITION BY m.job_id ORDER BY m.rank, m.profile_id) - 1 AS member_index
    FROM members AS m JOIN job_keys AS k USING (job_id)
),
windows AS (
    SELECT i.job_id, i.job, i.job_tag, w.step, w.profile_id, i.member, i.rank, i.member_index, w.step_index,
        w.window_start_ps + i.offset_ps AS window_start_ps, w.window_end_ps + i.offset_ps AS window_end_ps, w.missing_edges,
        row_number() OVER (PARTITION BY i.job_id ORDER BY i.member_index, w.step_index) AS window_index,
        row_number() OVER (PARTITION BY i.job_id, i.member_index ORDER BY w.window_start_ps, w.step_index) AS position,
        count(*) OVER (PARTITION BY i.job_id, i.member_index) AS member_windows
    FROM (SELECT profile_id, step_index, any_value(step) AS step, any_value(window_start_ps) AS window_start_ps,
              any_value(window_end_ps) AS window_end_ps, list_distinct(flatten(list(missing_edges) FILTER (WHERE missing_edges IS NOT NULL))) AS missing_edges
          FROM rank_graph GROUP BY profile_id, step_index) AS w
    JOIN indexed AS i USING (profile_id)
),
keyed AS (
    SELECT *, (-2 * 1048576 + window_index) * 65536 + member_index AS end_key,
        (-1 * 1048576 + window_index) * 65536 + member_index AS start_key
    FROM windows
),
edges AS (
    SELECT w.job_id, w.job, w.job_tag, w.step, g.profile_id, w.member, w.rank, w.member_index, g.step_index,
        w.window_start_ps, w.window_end_ps, w.end_key, g.device_id, g.track_id, g.src_node, g.dst_node,
        (g.src_node * 1048576 + w.window_index) * 65536 + w.member_index AS src_key,
        (g.dst_node * 1048576 + w.window_index) * 65536 + w.member_index AS dst_key,
        g.src_ts_ps + (w.window_start_ps - g.window_start_ps) AS src_ts_ps,
        g.dst_ts_ps + (w.window_start_ps - g.window_start_ps) AS dst_ts_ps, g.edge_kind, g.weight_ps,
        g.event_id, g.name, g.bound_by, g.collective
    FROM rank_graph AS g JOIN keyed AS w USING (profile_id, step_index)
),
-- Matched calls of the job whose operator edge lies in a window, with their instance's last arrival.
calls AS (
    SELECT e.*, a.instance,
        count(*) OVER (PARTITION BY e.job_id, a.instance) AS members_in,
        max(e.src_ts_ps) OVER (PARTITION BY e.job_id, a.instance) AS last_arrival_ps,
        dense_rank() OVER (PARTITION BY e.job_id ORDER BY a.instance) AS instance_index
    FROM edges AS e
    JOIN aligned AS a ON a.job_id = e.job_id AND a.profile_id = e.profile_id AND a.event_id = e.event_id
    WHERE e.collective AND a.matched
),
joined AS (
    SELECT *, -(1::BIGINT << 60) - instance_index AS instance_key FROM calls WHERE members_in > 1
),
job_starts AS (
    SELECT job_id, min(window_start_ps) AS job_start_ps FROM keyed WHERE position = 1 GROUP BY job_id
),
out AS (
    SELECT e.job_id, e.job, e.job_tag, e.step, e.profile_id, e.member, e.rank, e.member_index, e.step_index,
        e.window_start_ps, e.window_end_ps, e.end_key, e.device_id, e.track_id, e.src_node, e.dst_node, e.src_key, e.dst_key,
        e.src_ts_ps, e.dst_ts_ps, e.edge_kind, e.weight_ps, e.event_id, e.name, e.bound_by,
        CAST(NULL AS VARCHAR) AS instance, CAST(NULL AS VARCHAR[]) AS missing_edges
    FROM edges AS e
    WHERE NOT EXISTS (SELECT 1 FROM joined AS j WHERE j.job_id = e.job_id AND j.src_key = e.src_key
                                                  AND j.dst_key = e.dst_key AND j.edge_kind = e.edge_kind)
    UNION ALL
    SELECT job_id, job, job_tag, step, profile_id, member, rank, member_index, step_index, window_start_ps, window_end_ps,
        end_key, device_id, track_id, src_node, NULL, src_key, instance_key, src_ts_ps, last_arrival_ps, 'collective_arrival', 0,
        event_id, name, NULL, instance, NULL
    FROM joined
    UNION ALL
    SELECT job_id, job, job_tag, step, profile_id, member, rank, member_index, step_index, window_start_ps, window_end_ps,
        end_key, device_id, track_id, NULL, dst_node, instance_key, dst_key, last_arrival_ps, dst_ts_ps, 'collective_transfer',
        greatest(dst_ts_ps - last_arrival_ps, 0), event_id, name,
        CASE WHEN dst_ts_ps > last_arrival_ps THEN bound_by END, instance, NULL
    FROM joined
    UNION ALL
    SELECT w.job_id, w.job, w.job_tag, w.step, w.profile_id, w.member, w.rank, w.member_index, w.step_index,
        w.window_start_ps, w.window_end_ps, w.end_key, NULL, NULL, NULL, -1, -(1::BIGINT << 61), w.start_key,
        s.job_start_ps, w.window_start_ps, 'start_skew', w.window_start_ps - s.job_start_ps, NULL, NULL,
        CASE WHEN w.window_start_ps > s.job_start_ps THEN 'start_skew' END, NULL, w.missing_edges
    FROM keyed AS w JOIN job_starts AS s USING (job_id)
    WHERE w.position = 1
    UNION ALL
    SELECT n.job_id, n.job, n.job_tag, n.step, n.profile_id, n.member, n.rank, n.member_index, n.step_index,
        n.window_start_ps, n.window_end_ps, n.end_key, NULL, NULL, -2, -1, p.end_key, n.start_key, p.window_end_ps,
        n.window_start_ps, 'step_gap', greatest(n.window_start_ps - p.window_end_ps, 0), NULL, NULL,
        CASE WHEN n.window_start_ps > p.window_end_ps THEN 'cpu_untraced' END, NULL, n.missing_edges
    FROM keyed AS n JOIN keyed AS p
      ON p.job_id = n.job_id AND p.member_index = n.member_index AND p.position = n.position - 1
    UNION ALL
    SELECT w.job_id, w.job, w.job_tag, w.step, w.profile_id, w.member, w.rank, w.member_index, w.step_index,
        w.window_start_ps, w.window_end_ps, w.end_key, NULL, NULL, -2, NULL, w.end_key, -(1::BIGINT << 61) - 1,
        w.window_end_ps, w.window_end_ps, 'job_end', 0, NULL, NULL, NULL, NULL, NULL
    FROM keyed AS w
    WHERE w.position = w.member_windows
)
-- Times from the job's first window start, so that none is negative whatever the members' clock offsets.
SELECT job_id, job, job_tag, step, profile_id, member, rank, CAST(member_index AS BIGINT) AS member_index, step_index,
    CAST(window_start_ps - job_start_ps AS BIGINT) AS window_start_ps, CAST(window_end_ps - job_start_ps AS BIGINT) AS window_end_ps,
    CAST(end_key AS BIGINT) AS window_end_key, device_id, track_id, src_node, dst_node, CAST(src_key AS BIGINT) AS src_key,
    CAST(dst_key AS BIGINT) AS dst_key, CAST(src_ts_ps - job_start_ps AS BIGINT) AS src_ts_ps,
    CAST(dst_ts_ps - job_start_ps AS BIGINT) AS dst_ts_ps,
    edge_kind, CAST(weight_ps AS BIGINT) AS weight_ps, event_id, name, bound_by, instance, missing_edges
FROM out JOIN job_starts USING (job_id)
