-- names._graph_parts: the two sides of CUDA/HIP graphs in one profile, for names.graph_kernels to match
-- (across profiles): the GPU work each graph launch replayed (part node), and the launches recorded
-- while a graph was captured (part captured), each side in its order.
--
-- Nodes: the kernels, copies and memsets whose launching API call (same correlation id; the launch
-- nearest before the activity should a trace repeat an id) is a graph launch (cudaGraphLaunch,
-- cuGraphLaunch, hipGraphLaunch: an API name containing GraphLaunch), and those that carry a graph id
-- (xprosql.cupti's 'graph id', XSpace's 'cuda_graph_id' / 'cuda_graph_exec_id' stats; a node without
-- a graph launch in the trace has no sequence). A launch's nodes are a sequence in GPU order (start,
-- then event id): for a graph on one stream, the order of its nodes.
--
-- Captured: the API calls that launch a kernel or a copy or memset (an API name containing LaunchKernel,
-- LaunchCooperativeKernel, Memcpy or Memset, graph calls excepted) between a StreamBeginCapture and the
-- next StreamEndCapture on the same thread (cudaStreamBeginCapture, hipStreamBeginCapture, ...): a
-- capture region, its launches in their order, from every thread of the capturing process: PyTorch runs
-- a backward pass on its autograd thread, which launches into the captured stream (75 of the 202 nodes
-- of tests/data/h200's graph). A launch of another thread into another stream meanwhile is counted
-- too: the counts then differ and a capture without kernel names is not matched by position.
-- Each captured launch carries what produced it: the innermost
-- PyTorch op (cpu_op) around it on its thread and the outermost, and the path of the user's names
-- around it (user_annotation and nn.Module python_function events, as names._calls names them:
-- ProfilerStep#N as ProfilerStep, "nn.Module: Linear_0" as Linear_0, NVTX ranges by their name).
--
-- A kernel is named by its name; on the captured side by the launch's 'kernel' arg (ROCm traces record
-- it; CUDA Kineto traces do not: match_name NULL). Copies match as memcpy and memsets as memset.
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   part  VARCHAR  node (GPU work a graph launch ran) or captured (a launch recorded while capturing)
--   sequence_id  BIGINT  node: events.event_id of its graph launch (NULL without one); captured: that of its StreamBeginCapture
--   sequence_start_ps  BIGINT  start of the graph launch or of the capture region, ps
--   sequence_length  BIGINT  nodes of the launch, or launches of the capture region
--   position  BIGINT  0-based place in its sequence (NULL for a node without a launch)
--   event_id  BIGINT  node: events.event_id of the kernel, copy or memset; captured: of the launching API call
--   kind  VARCHAR  kernel, memcpy or memset
--   name  VARCHAR  node: the kernel or copy name; captured: the API call's name
--   match_name  VARCHAR  what the two sides compare: the kernel name (captured: its 'kernel' arg, NULL when not recorded), memcpy or memset
--   grid  VARCHAR  the kernel's grid as x,y,z, when recorded
--   device_id  INTEGER  node: devices.device_id of the GPU; captured: of the host process
--   track_id  INTEGER  tracks.track_id of the stream or thread
--   stream_id  BIGINT  node: its stream
--   start_ps  BIGINT  start, ps
--   dur_ps  BIGINT  duration, ps
--   launch_event_id  BIGINT  node: events.event_id of its graph launch (or other launch)
--   launch_name  VARCHAR  node: that call's name
--   graph_id  BIGINT  node: the graph id the trace records, if any
--   graph_node_id  BIGINT  node: the graph node id the trace records, if any
--   innermost_op  VARCHAR  captured: the innermost PyTorch op around the launch
--   innermost_op_id  BIGINT  captured: its events.event_id
--   input_shapes  VARCHAR  captured: that op's Input Dims (JSON)
--   input_dtypes  VARCHAR  captured: its Input type (JSON)
--   outermost_op  VARCHAR  captured: the outermost op around the launch
--   path  VARCHAR  captured: the user's names around the launch, root first, joined with '/'
WITH graph_stats AS (
    SELECT profile_id, event_id,
        max(coalesce(int_value, CAST(uint_value AS BIGINT))) FILTER (WHERE stat IN ('graph id', 'cuda_graph_id', 'cuda_graph_exec_id')) AS graph_id,
        max(coalesce(int_value, CAST(uint_value AS BIGINT))) FILTER (WHERE stat = 'graph node id') AS graph_node_id
    FROM event_stats
    WHERE stat IN ('graph id', 'cuda_graph_id', 'cuda_graph_exec_id', 'graph node id')
    GROUP BY ALL
),
activities AS (
    SELECT profile_id, event_id, device_id, track_id, stream_id, 'kernel' AS kind, CAST(name AS VARCHAR) AS name,
        CAST(name AS VARCHAR) AS match_name,
        CASE WHEN grid_x IS NOT NULL THEN concat_ws(',', grid_x, grid_y, grid_z) END AS grid,
        start_ps, dur_ps, correlation_id
    FROM kernels
    UNION ALL
    SELECT profile_id, event_id, device_id, track_id, stream_id, CASE WHEN kind = 'memset' THEN 'memset' ELSE 'memcpy' END,
        e.name, CASE WHEN kind = 'memset' THEN 'memset' ELSE 'memcpy' END, NULL, m.start_ps, m.dur_ps, m.correlation_id
    FROM memcpys AS m
    JOIN (SELECT profile_id, event_id, CAST(name AS VARCHAR) AS name FROM events) AS e USING (profile_id, event_id)
),
launched AS (
    SELECT g.*, a.event_id AS launch_event_id, CAST(a.name AS VARCHAR) AS launch_name, a.start_ps AS launch_start_ps
    FROM activities AS g
    JOIN api_calls AS a ON a.profile_id = g.profile_id AND a.correlation_id = g.correlation_id
    QUALIFY row_number() OVER (PARTITION BY g.profile_id, g.event_id
                               ORDER BY (a.start_ps <= g.start_ps) DESC, g.start_ps - a.start_ps, a.event_id) = 1
),
nodes AS (
    SELECT g.profile_id, g.event_id, g.device_id, g.track_id, g.stream_id, g.kind, g.name, g.match_name, g.grid,
        g.start_ps, g.dur_ps, l.launch_event_id, l.launch_name, l.launch_start_ps, s.graph_id, s.graph_node_id,
        CASE WHEN l.launch_name LIKE '%GraphLaunch%' THEN l.launch_event_id END AS sequence_id
    FROM activities AS g
    LEFT JOIN launched AS l USING (profile_id, event_id)
    LEFT JOIN graph_stats AS s USING (profile_id, event_id)
    WHERE l.launch_name LIKE '%GraphLaunch%' OR s.graph_id > 0
),
ordered_nodes AS (
    SELECT *,
        CASE WHEN sequence_id IS NOT NULL THEN
            row_number() OVER (PARTITION BY profile_id, sequence_id ORDER BY start_ps, event_id) - 1 END AS position,
        count(*) OVER (PARTITION BY profile_id, sequence_id) AS sequence_length,
        min(CASE WHEN sequence_id IS NOT NULL THEN launch_start_ps END) OVER (PARTITION BY profile_id, sequence_id) AS sequence_start_ps
    FROM nodes
),
-- Capture regions: each StreamBeginCapture with the next StreamEndCapture on its thread.
begins AS (
    SELECT profile_id, device_id, track_id, event_id, start_ps FROM api_calls WHERE name LIKE '%StreamBeginCapture%'
),
ends AS (
    SELECT profile_id, track_id, start_ps FROM api_calls WHERE name LIKE '%StreamEndCapture%'
),
regions AS (
    SELECT b.profile_id, b.device_id, b.event_id AS capture_id, b.start_ps AS begin_ps, min(e.start_ps) AS end_ps
    FROM begins AS b
    JOIN ends AS e ON e.profile_id = b.profile_id AND e.track_id = b.track_id AND e.start_ps > b.start_ps
    GROUP BY ALL
),
captured_calls AS MATERIALIZED (
    SELECT a.profile_id, a.event_id, a.device_id, a.track_id, CAST(a.name AS VARCHAR) AS name, a.start_ps, a.dur_ps,
        r.capture_id, r.begin_ps,
        CASE WHEN regexp_matches(a.name, 'Memset') THEN 'memset' WHEN regexp_matches(a.name, 'Memcpy') THEN 'memcpy'
             ELSE 'kernel' END AS kind
    FROM api_calls AS a
    JOIN regions AS r ON r.profile_id = a.profile_id AND r.device_id = a.device_id
     AND a.start_ps > r.begin_ps AND a.start_ps < r.end_ps
    WHERE regexp_matches(a.name, 'LaunchKernel|LaunchCooperativeKernel|Memcpy|Memset')
      AND NOT regexp_matches(a.name, 'Graph')
),
call_args AS (
    SELECT s.profile_id, s.event_id,
        any_value(s.str_value) FILTER (WHERE s.stat = 'kernel') AS kernel,
        any_value(s.str_value) FILTER (WHERE s.stat = 'grid') AS grid
    FROM event_stats AS s
    SEMI JOIN captured_calls AS c USING (profile_id, event_id)
    WHERE s.stat IN ('kernel', 'grid')
    GROUP BY ALL
),
-- The PyTorch ops around each captured launch on its thread: innermost (latest start, then shortest) and outermost.
around_ops AS (
    SELECT c.profile_id, c.event_id,
        arg_max(o.event_id, (o.start_ps, -o.dur_ps, o.event_id)) AS innermost_op_id,
        arg_min(CAST(o.name AS VARCHAR), (o.start_ps, -o.dur_ps, o.event_id)) AS outermost_op
    FROM captured_calls AS c
    JOIN events AS o ON o.profile_id = c.profile_id AND o.track_id = c.track_id AND o.category = 'cpu_op'
     AND o.start_ps <= c.start_ps AND c.start_ps + c.dur_ps <= o.start_ps + o.dur_ps
    GROUP BY ALL
),
op_args AS (
    SELECT s.profile_id, s.event_id,
        any_value(s.str_value) FILTER (WHERE s.stat = 'Input Dims') AS input_shapes,
        any_value(s.str_value) FILTER (WHERE s.stat = 'Input type') AS input_dtypes
    FROM event_stats AS s
    SEMI JOIN (SELECT profile_id, innermost_op_id AS event_id FROM around_ops) AS o USING (profile_id, event_id)
    WHERE s.stat IN ('Input Dims', 'Input type')
    GROUP BY ALL
),
-- The user's names around each captured launch (names._calls' components), root first.
around_names AS (
    SELECT c.profile_id, c.event_id,
        string_agg(CASE WHEN n.category = 'python_function' THEN substr(n.name, length('nn.Module: ') + 1)
                        WHEN regexp_matches(n.name, '^ProfilerStep#[0-9]+$') THEN 'ProfilerStep'
                        ELSE CAST(n.name AS VARCHAR) END, '/' ORDER BY n.start_ps, n.dur_ps DESC, n.event_id) AS path
    FROM captured_calls AS c
    JOIN events AS n ON n.profile_id = c.profile_id AND n.track_id = c.track_id
     AND n.start_ps <= c.start_ps AND c.start_ps < n.start_ps + n.dur_ps
     AND (n.category IN ('user_annotation', 'nvtx') OR (n.category = 'python_function' AND starts_with(n.name, 'nn.Module: ')))
    GROUP BY ALL
),
captured AS (
    SELECT c.*,
        row_number() OVER (PARTITION BY c.profile_id, c.capture_id ORDER BY c.start_ps, c.event_id) - 1 AS position,
        count(*) OVER (PARTITION BY c.profile_id, c.capture_id) AS sequence_length,
        CASE WHEN c.kind = 'kernel' THEN ca.kernel ELSE c.kind END AS match_name,
        nullif(regexp_replace(ca.grid, '[\[\] ]', '', 'g'), '') AS grid,
        ao.innermost_op_id, CAST(io.name AS VARCHAR) AS innermost_op, oa.input_shapes, oa.input_dtypes, ao.outermost_op,
        an.path
    FROM captured_calls AS c
    LEFT JOIN call_args AS ca USING (profile_id, event_id)
    LEFT JOIN around_ops AS ao USING (profile_id, event_id)
    LEFT JOIN events AS io ON io.profile_id = ao.profile_id AND io.event_id = ao.innermost_op_id
    LEFT JOIN op_args AS oa ON oa.profile_id = ao.profile_id AND oa.event_id = ao.innermost_op_id
    LEFT JOIN around_names AS an USING (profile_id, event_id)
)
SELECT
    profile_id, 'node' AS part, sequence_id, sequence_start_ps,
    CAST(CASE WHEN sequence_id IS NOT NULL THEN sequence_length END AS BIGINT) AS sequence_length,
    CAST(position AS BIGINT) AS position, event_id, kind, name, match_name, grid, device_id, track_id, stream_id,
    start_ps, dur_ps, launch_event_id, launch_name, graph_id, graph_node_id,
    NULL::VARCHAR AS innermost_op, NULL::BIGINT AS innermost_op_id, NULL::VARCHAR AS input_shapes,
    NULL::VARCHAR AS input_dtypes, NULL::VARCHAR AS outermost_op, NULL::VARCHAR AS path
FROM ordered_nodes
UNION ALL
SELECT
    profile_id, 'captured', capture_id, begin_ps, CAST(sequence_length AS BIGINT), CAST(position AS BIGINT), event_id,
    kind, name, match_name, grid, device_id, track_id, NULL, start_ps, dur_ps, NULL, NULL, NULL, NULL,
    innermost_op, innermost_op_id, input_shapes, input_dtypes, outermost_op, path
FROM captured
