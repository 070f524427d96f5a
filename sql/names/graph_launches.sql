-- names.graph_launches: per CUDA/HIP graph launch, the GPU work it replayed and how much of it
-- names.graph_kernels attributed to the ops that produced it, by how each node matched its capture.
-- scope: fleet
--
-- Built on names.graph_kernels (its rows, unchanged): one row per graph launch, and one per profile for
-- the nodes that carry a graph id without a launch in the trace (launch_event_id NULL). The matched
-- nodes (order, name, position) are attributed: their time belongs to the op and names of their
-- captured launch; the others keep their launch only.
--
-- Needs: GPU kernels launched by a CUDA/HIP graph (cudaGraphLaunch, hipGraphLaunch) or carrying a graph id (a profile holding only the capture gives its ops to the replaying profile's rows)
--
-- Show: profile_id, launch_index, launch_name, nodes, gpu_time_ps, matched_order, matched_name, matched_position, unmatched, no_capture, attributed_share
--
-- Columns:
--   profile_id  VARCHAR  profile of the graph launch (profiles.profile_id)
--   launch_event_id  BIGINT  events.event_id of the graph launch; NULL for the nodes without one
--   launch_name  VARCHAR  its API name, e.g. cudaGraphLaunch
--   launch_index  BIGINT  0-based place of the launch among the profile's graph launches, by start
--   start_ps  BIGINT  the first node's start, ps
--   end_ps  BIGINT  the last node's end, ps
--   nodes  BIGINT  kernels, copies and memsets it ran
--   gpu_time_ps  BIGINT  their durations summed, ps
--   matched_order  BIGINT  nodes matched in order (names.graph_kernels match order)
--   matched_name  BIGINT  nodes matched by name at another position
--   matched_position  BIGINT  nodes matched by position alone (a capture without kernel names)
--   unmatched  BIGINT  nodes of a chosen capture that no captured launch matches
--   no_capture  BIGINT  nodes of a launch no capture matches
--   no_launch  BIGINT  nodes with a graph id and no launch in the trace
--   attributed  BIGINT  matched_order + matched_name + matched_position
--   attributed_share  DOUBLE  attributed / nodes, 0..1
--   attributed_time_ps  BIGINT  gpu_time_ps of the attributed nodes, ps
--   capture_profile_id  VARCHAR  profile of the capture matched (NULL when none)
--   capture_id  BIGINT  events.event_id of its StreamBeginCapture
WITH graph_kernels AS (
-- @include names.graph_kernels
)
SELECT
    profile_id, launch_event_id, any_value(launch_name) AS launch_name, any_value(launch_index) AS launch_index,
    min(start_ps) AS start_ps, max(start_ps + dur_ps) AS end_ps,
    CAST(count(*) AS BIGINT) AS nodes,
    CAST(sum(dur_ps) AS BIGINT) AS gpu_time_ps,
    CAST(count(*) FILTER (WHERE match = 'order') AS BIGINT) AS matched_order,
    CAST(count(*) FILTER (WHERE match = 'name') AS BIGINT) AS matched_name,
    CAST(count(*) FILTER (WHERE match = 'position') AS BIGINT) AS matched_position,
    CAST(count(*) FILTER (WHERE match = 'unmatched') AS BIGINT) AS unmatched,
    CAST(count(*) FILTER (WHERE match = 'no_capture') AS BIGINT) AS no_capture,
    CAST(count(*) FILTER (WHERE match = 'no_launch') AS BIGINT) AS no_launch,
    CAST(count(*) FILTER (WHERE match IN ('order', 'name', 'position')) AS BIGINT) AS attributed,
    count(*) FILTER (WHERE match IN ('order', 'name', 'position')) / count(*) AS attributed_share,
    CAST(coalesce(sum(dur_ps) FILTER (WHERE match IN ('order', 'name', 'position')), 0) AS BIGINT) AS attributed_time_ps,
    any_value(capture_profile_id) AS capture_profile_id,
    any_value(capture_id) AS capture_id
FROM graph_kernels
GROUP BY profile_id, launch_event_id
ORDER BY profile_id, launch_index NULLS LAST, launch_event_id
