-- names.graph_kernels: the kernels, copies and memsets that CUDA/HIP graph launches replayed, each with
-- its graph launch and, where a capture of the graph is recorded, the op and the user's names that
-- produced it (TraceLens's capture-merge): kernels replayed from a graph name no op of their own.
-- scope: fleet
--
-- Built on names._graph_parts (per profile): the GPU work of each graph launch (cudaGraphLaunch,
-- hipGraphLaunch; launch correlation), in GPU order, and the launches recorded between each
-- StreamBeginCapture and StreamEndCapture, in their order, with the innermost and outermost PyTorch op
-- and the names path around each. The capture may be in the same profile or in another one of the
-- run (vLLM records its captures at start-up, its replays later): every capture region of the
-- profiles analysed is a candidate.
--
-- Which capture a launch replays: launches whose nodes have the same names in the same order share one
-- (the graph replayed again). For each, the capture with the most nodes matched by name (below), then
-- the most in order, then the most equal grids (ROCm graph kernels record none), then the one in the
-- same profile, then the latest capture before the launch. A node then matches its captured launch:
--   order     the k-th node of a name is the k-th captured launch of that name, at the same position
--             (TraceLens's positional match, its first stage)
--   name      the same, at another position (TraceLens's group-by-name stage; it also absorbs captured
--             launches the graph lacks, and graphs on several streams whose GPU order differs from capture order)
--   position  the capture records no kernel names (CUDA Kineto launches carry none), has as many launches
--             as the graph nodes and the same kind (kernel, copy, memset) at the node's position: matched
--             by position alone, unverified (TraceLens does the same, with a warning)
--   unmatched a capture was chosen but no launch of it matches: the node keeps its launch, no op
--   no_capture no capture region in the profiles analysed matches the launch's nodes (none recorded, or
--             the profile of the capture not among those analysed)
--   no_launch the node carries a graph id but its graph launch is not in the trace
-- names.graph_launches counts them per launch.
--
-- XLA command buffers (XSpace GPU profiles): kernels with a cuda_graph_id or cuda_graph_exec_id stat are
-- nodes with their launch where a launch event shares their correlation id; XLA builds command buffers
-- without stream capture and the trace records no per-node op, so they stay no_capture (their kernel
-- events' own hlo_op, where XLA names one, is in the kernels table).
--
-- Needs: GPU kernels launched by a CUDA/HIP graph (cudaGraphLaunch, hipGraphLaunch) or carrying a graph id (a profile holding only the capture gives its ops to the replaying profile's rows)
--
-- Show: profile_id, launch_index, position, name, dur_ps, match, innermost_op, path
--
-- Columns:
--   profile_id  VARCHAR  profile of the graph launch (profiles.profile_id)
--   launch_event_id  BIGINT  events.event_id of the graph launch (api_calls); NULL for no_launch
--   launch_name  VARCHAR  its API name, e.g. hipGraphLaunch
--   launch_index  BIGINT  0-based place of the launch among the profile's graph launches, by start
--   launch_nodes  BIGINT  nodes the launch ran
--   launch_matched  BIGINT  of those, matched to a captured launch (order, position or name)
--   position  BIGINT  0-based place of the node in its launch (GPU order)
--   event_id  BIGINT  events.event_id of the kernel, copy or memset
--   kind  VARCHAR  kernel, memcpy or memset
--   name  VARCHAR  the kernel or copy name
--   device_id  INTEGER  devices.device_id of the GPU
--   stream_id  BIGINT  its stream
--   start_ps  BIGINT  start, ps
--   dur_ps  BIGINT  duration, ps
--   graph_id  BIGINT  the graph id the trace records, if any
--   graph_node_id  BIGINT  the graph node id the trace records, if any
--   match  VARCHAR  how it matched its captured launch: order, position, name, unmatched, no_capture, no_launch (see above)
--   capture_profile_id  VARCHAR  profile holding the chosen capture
--   capture_id  BIGINT  events.event_id of the capture's StreamBeginCapture
--   capture_event_id  BIGINT  events.event_id of the matched captured launch
--   innermost_op  VARCHAR  the innermost PyTorch op around the captured launch: the op that produced the node
--   innermost_op_id  BIGINT  its events.event_id (in the capture's profile)
--   input_shapes  VARCHAR  its Input Dims (JSON)
--   input_dtypes  VARCHAR  its Input type (JSON)
--   outermost_op  VARCHAR  the outermost op around the captured launch
--   path  VARCHAR  the user's names around the captured launch (names.tree's path: annotations, nn.Modules, NVTX)
WITH parts AS (
-- @include names._graph_parts
),
nodes AS (
    SELECT * FROM parts WHERE part = 'node'
),
captured AS (
    SELECT *,
        row_number() OVER (PARTITION BY profile_id, sequence_id, match_name ORDER BY position) AS name_rank
    FROM parts WHERE part = 'captured'
),
launches AS (
    SELECT profile_id, sequence_id, any_value(sequence_start_ps) AS start_ps, count(*) AS nodes,
        md5(string_agg(coalesce(match_name, ''), chr(31) ORDER BY position) || chr(30) || string_agg(kind, ',' ORDER BY position))
            AS signature
    FROM nodes
    WHERE sequence_id IS NOT NULL
    GROUP BY ALL
),
-- One launch stands for each signature (the first in time); the capture chosen for it serves every launch of the signature.
representatives AS (
    SELECT signature, arg_min(profile_id, (start_ps, profile_id, sequence_id)) AS profile_id,
        arg_min(sequence_id, (start_ps, profile_id, sequence_id)) AS sequence_id, min(start_ps) AS start_ps,
        any_value(nodes) AS nodes
    FROM launches
    GROUP BY signature
),
rep_nodes AS (
    SELECT r.signature, r.start_ps AS launch_start_ps, n.profile_id AS launch_profile_id, n.position, n.kind, n.match_name, n.grid,
        row_number() OVER (PARTITION BY r.signature, n.match_name ORDER BY n.position) AS name_rank
    FROM representatives AS r
    JOIN nodes AS n USING (profile_id, sequence_id)
),
captures AS (
    SELECT profile_id, sequence_id, any_value(sequence_start_ps) AS start_ps, count(*) AS launches,
        count(match_name) FILTER (WHERE kind = 'kernel') = 0 AS unnamed
    FROM captured
    GROUP BY ALL
),
by_position AS (
    SELECT n.signature, c.profile_id, c.sequence_id,
        count(*) FILTER (WHERE c.match_name = n.match_name) AS in_order,
        count(*) FILTER (WHERE c.grid = n.grid) AS same_grid,
        count(*) FILTER (WHERE c.match_name IS NULL AND c.kind = n.kind) AS same_kind
    FROM rep_nodes AS n
    JOIN captured AS c ON c.position = n.position
    GROUP BY ALL
),
by_name AS (
    SELECT n.signature, c.profile_id, c.sequence_id, count(*) AS by_name
    FROM rep_nodes AS n
    JOIN captured AS c ON c.match_name = n.match_name AND c.name_rank = n.name_rank
    GROUP BY ALL
),
scored AS (
    SELECT r.signature, c.profile_id AS capture_profile_id, c.sequence_id AS capture_id,
        coalesce(m.by_name, 0) AS by_name, coalesce(p.in_order, 0) AS in_order, coalesce(p.same_grid, 0) AS same_grid,
        -- A capture without kernel names matches by position only when it launched as many as the graph ran.
        CASE WHEN c.unnamed AND c.launches = r.nodes THEN coalesce(p.same_kind, 0) ELSE 0 END AS by_position,
        c.profile_id = r.profile_id AS same_profile, c.start_ps <= r.start_ps AS before_launch, c.start_ps
    FROM representatives AS r
    CROSS JOIN captures AS c
    LEFT JOIN by_position AS p ON p.signature = r.signature AND p.profile_id = c.profile_id AND p.sequence_id = c.sequence_id
    LEFT JOIN by_name AS m ON m.signature = r.signature AND m.profile_id = c.profile_id AND m.sequence_id = c.sequence_id
),
chosen AS (
    SELECT * FROM scored
    WHERE by_name + by_position > 0
    QUALIFY row_number() OVER (
        PARTITION BY signature
        ORDER BY greatest(by_name, by_position) DESC, in_order DESC, same_grid DESC, same_profile DESC,
                 before_launch DESC, CASE WHEN before_launch THEN -start_ps ELSE start_ps END, capture_profile_id, capture_id) = 1
),
assigned AS (
    SELECT n.*, l.signature, ch.capture_profile_id, ch.capture_id, ch.by_position > 0 AS positional,
        row_number() OVER (PARTITION BY n.profile_id, n.sequence_id, n.match_name ORDER BY n.position) AS name_rank
    FROM nodes AS n
    LEFT JOIN launches AS l USING (profile_id, sequence_id)
    LEFT JOIN chosen AS ch USING (signature)
),
matched AS (
    -- The k-th node of a name and the k-th captured launch of that name: a one-to-one match, in order where
    -- their positions agree.
    SELECT a.*,
        coalesce(m.event_id, p.event_id) AS capture_event_id,
        CASE WHEN a.sequence_id IS NULL THEN 'no_launch'
             WHEN a.capture_id IS NULL THEN 'no_capture'
             WHEN m.event_id IS NOT NULL AND m.position = a.position THEN 'order'
             WHEN m.event_id IS NOT NULL THEN 'name'
             WHEN p.event_id IS NOT NULL THEN 'position'
             ELSE 'unmatched' END AS match
    FROM assigned AS a
    LEFT JOIN captured AS m ON m.profile_id = a.capture_profile_id AND m.sequence_id = a.capture_id
     AND m.match_name = a.match_name AND m.name_rank = a.name_rank
    LEFT JOIN captured AS p ON a.positional AND p.profile_id = a.capture_profile_id AND p.sequence_id = a.capture_id
     AND p.position = a.position AND p.kind = a.kind AND p.match_name IS NULL
),
counted AS (
    SELECT m.*,
        dense_rank() OVER (PARTITION BY m.profile_id ORDER BY m.sequence_start_ps, m.sequence_id) - 1 AS launch_index,
        count(*) FILTER (WHERE m.match IN ('order', 'position', 'name')) OVER (PARTITION BY m.profile_id, m.sequence_id) AS launch_matched
    FROM matched AS m
)
SELECT
    c.profile_id, c.sequence_id AS launch_event_id, c.launch_name,
    CAST(CASE WHEN c.sequence_id IS NOT NULL THEN c.launch_index END AS BIGINT) AS launch_index,
    c.sequence_length AS launch_nodes,
    CAST(CASE WHEN c.sequence_id IS NOT NULL THEN c.launch_matched END AS BIGINT) AS launch_matched,
    c.position, c.event_id, c.kind, c.name, c.device_id, c.stream_id, c.start_ps, c.dur_ps, c.graph_id, c.graph_node_id,
    c.match,
    CASE WHEN c.match IN ('order', 'position', 'name') THEN c.capture_profile_id END AS capture_profile_id,
    CASE WHEN c.match IN ('order', 'position', 'name') THEN c.capture_id END AS capture_id,
    c.capture_event_id,
    k.innermost_op, k.innermost_op_id, k.input_shapes, k.input_dtypes, k.outermost_op, k.path
FROM counted AS c
LEFT JOIN captured AS k ON k.profile_id = c.capture_profile_id AND k.event_id = c.capture_event_id
ORDER BY c.profile_id, c.sequence_start_ps NULLS LAST, c.sequence_id, c.position, c.start_ps, c.event_id
