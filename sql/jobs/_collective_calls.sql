-- jobs._collective_calls: one row per collective call of each profile, the building block the job
-- analyses match across ranks: its kind, process group, message, interval and step.
--
-- Which event is the call, by source (one per call, the one that moves the data):
--   gpu_kernel       an NCCL / RCCL kernel (xprosql_collective). Its kind is that of the c10d:: op
--                    around its launch (an all_to_all runs as ncclKernel_SendRecv), else the kernel's
--                    own; its message from the kernel's args (Collective name, In msg nelems, Out msg
--                    nelems, Group size, dtype, Process Group Name), else from the nccl:* annotation
--                    inside that op (its Input Dims and Input type). Its step is that of its launch.
--   host_annotation  on a rank without collective kernels (gloo on the CPU): the process-group
--                    annotation (gloo:all_reduce, ...), which spans the collective on its worker thread
--   xla_op           an XLA collective op (by its HLO opcode: all-reduce, all-gather, ...): on TPU / GPU
--                    planes the XLA Ops line, on a host running XLA:CPU any line of the host. Of an async
--                    pair only the -start op, with its own interval: its end is the start op's, not the
--                    -done's (async.async_ops has the windows; not joined here yet). XLA ops carry no
--                    message size here (bytes NULL).
-- c10d:: ops, record_param_comms and nccl:* annotations are the CPU side of a kernel: not calls.
--
-- bytes is the message NCCL's tests measure (PERFORMANCE.md): all_reduce, broadcast, reduce, all_to_all,
-- send / recv: the input; all_gather: the gathered output; reduce_scatter: the input (the whole buffer).
--
-- Needs: collectives: NCCL / RCCL kernels, process-group annotations (gloo:*), or XLA collective ops
--
-- Parameters:
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   event_id  BIGINT  events.event_id of the call
--   device_id  INTEGER  devices.device_id it ran on
--   stream_id  BIGINT  the GPU stream of a kernel (kernels.stream_id); NULL for other sources
--   source  VARCHAR  gpu_kernel, host_annotation or xla_op (see above)
--   kind  VARCHAR  all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce, send_recv, collective_permute, ...
--   name  VARCHAR  the event's name, or for an XLA op its HLO op
--   process_group  VARCHAR  process group name (Kineto Process Group Name), else 0; XLA: the HLO module
--   seq  BIGINT  the collective's sequence number in its group, when the trace records one (Seq arg)
--   group_size  BIGINT  ranks in the communicator (Group size arg), when recorded
--   in_elements  BIGINT  elements of the input (In msg nelems, or the annotation's Input Dims)
--   dtype_bytes  BIGINT  bytes per element of its dtype
--   bytes  BIGINT  the message NCCL's tests measure (see above), bytes
--   step  BIGINT  the step (steps.step) its launch, or itself, starts in; NULL outside every step
--   start_ps  BIGINT  start, ps on the profile's clock (profiles.start_ns)
--   end_ps  BIGINT  end, ps on the profile's clock
WITH profile_steps AS (
-- @include steps.steps
),
-- A step of a profile: its recorded number on any device, the widest interval.
step_windows AS (
    SELECT profile_id, step, min(start_ps) AS step_start_ps, max(end_ps) AS step_end_ps
    FROM profile_steps WHERE step IS NOT NULL GROUP BY ALL
),
-- Each distinct name classified once, here: xprosql_collective's regular expressions on every event took 2.6 s of
-- 3 over 100 corpus profiles.
event_kinds AS MATERIALIZED (
    SELECT name, category, xprosql_collective(name, category) AS kind FROM (SELECT DISTINCT name, category FROM events)
),
kernel_calls AS (
    SELECT k.profile_id, k.event_id, k.device_id, k.stream_id, k.start_ps, k.start_ps + k.dur_ps AS end_ps, e.name,
        n.kind AS kernel_kind, k.correlation_id
    FROM kernels AS k JOIN events AS e USING (profile_id, event_id)
    JOIN event_kinds AS n ON n.name IS NOT DISTINCT FROM e.name AND n.category IS NOT DISTINCT FROM e.category
    WHERE n.kind IS NOT NULL AND k.start_ps IS NOT NULL
),
with_profile_kernels AS (
    SELECT DISTINCT profile_id FROM kernel_calls
),
kernel_args AS (
    SELECT s.profile_id, s.event_id,
        max(s.str_value) FILTER (WHERE s.stat = 'Collective name') AS collective_name,
        max(s.int_value) FILTER (WHERE s.stat = 'In msg nelems') AS in_elements,
        max(s.int_value) FILTER (WHERE s.stat = 'Out msg nelems') AS out_elements,
        max(s.int_value) FILTER (WHERE s.stat = 'Group size') AS group_size,
        max(s.str_value) FILTER (WHERE s.stat = 'dtype') AS dtype,
        max(coalesce(s.str_value, CAST(s.int_value AS VARCHAR))) FILTER (WHERE s.stat = 'Process Group Name') AS process_group,
        max(s.int_value) FILTER (WHERE lower(s.stat) IN ('seq', 'sequence number')) AS seq
    FROM event_stats AS s JOIN kernel_calls AS k USING (profile_id, event_id)
    GROUP BY ALL
),
-- The c10d:: op around each kernel's launch (the innermost collective op of its op stack).
around AS (
    SELECT f.profile_id, f.event_id, u.op_id, u.depth
    FROM framework_op_kernels AS f JOIN kernel_calls AS k USING (profile_id, event_id),
        unnest(f.around_op_ids) WITH ORDINALITY AS u(op_id, depth)
),
-- The op's thread and interval come along (depths are distinct: each arg_min picks the same op), so the annotations
-- below join no second scan of every event (it built a hash table of them: 0.43 s of 0.72 over 100 profiles).
kernel_ops AS (
    SELECT a.profile_id, a.event_id,
        arg_min(o.event_id, a.depth) AS op_id,
        arg_min(n.kind, a.depth) AS op_kind,
        arg_min(o.track_id, a.depth) AS op_track_id,
        arg_min(o.start_ps, a.depth) AS op_start_ps,
        arg_min(o.start_ps + o.dur_ps, a.depth) AS op_end_ps
    FROM around AS a JOIN events AS o ON o.profile_id = a.profile_id AND o.event_id = a.op_id
    JOIN event_kinds AS n ON n.name IS NOT DISTINCT FROM o.name AND n.category IS NOT DISTINCT FROM o.category
    WHERE n.kind <> 'other'
    GROUP BY ALL
),
launches AS (
    SELECT k.profile_id, k.event_id, min(c.start_ps) AS launch_ps
    FROM kernel_calls AS k JOIN api_calls AS c USING (profile_id, correlation_id)
    GROUP BY ALL
),
-- Process-group annotations (nccl:all_reduce, gloo:all_reduce) and their recorded input, by prefix (a regular
-- expression per event was a tenth of the module's time over 100 profiles).
annotations AS (
    SELECT e.profile_id, e.event_id, e.device_id, e.track_id, e.name, e.start_ps, e.start_ps + e.dur_ps AS end_ps,
        xprosql_collective(e.name, e.category) AS kind,
        max(s.str_value) FILTER (WHERE s.stat = 'Input Dims') AS input_dims,
        max(s.str_value) FILTER (WHERE s.stat = 'Input type') AS input_type
    FROM events AS e
    LEFT JOIN event_stats AS s ON s.profile_id = e.profile_id AND s.event_id = e.event_id
        AND s.stat IN ('Input Dims', 'Input type')
    WHERE xprosql_process_group_annotation(e.name) AND e.start_ps IS NOT NULL
    GROUP BY ALL
),
-- The annotation inside a kernel's c10d:: op, on its thread.
kernel_annotations AS (
    SELECT ko.profile_id, ko.event_id, arg_min(an.event_id, an.start_ps) AS annotation_id
    FROM kernel_ops AS ko
    JOIN annotations AS an ON an.profile_id = ko.profile_id AND an.track_id = ko.op_track_id
        AND an.start_ps >= ko.op_start_ps AND an.start_ps <= ko.op_end_ps
    GROUP BY ALL
),
gpu_calls AS (
    SELECT k.profile_id, k.event_id, k.device_id, k.stream_id, 'gpu_kernel' AS source,
        coalesce(nullif(xprosql_collective('nccl:' || ka.collective_name, NULL), 'other'), ko.op_kind, an.kind,
                 k.kernel_kind) AS kind,
        k.name, coalesce(ka.process_group, '0') AS process_group, ka.seq, ka.group_size,
        coalesce(ka.in_elements, TRY_CAST(list_reduce(
            CAST(json_extract(an.input_dims, '$[0]') AS BIGINT[]), lambda a, b: a * b) AS BIGINT)) AS in_elements,
        ka.out_elements,
        coalesce(ka.dtype, json_extract_string(an.input_type, '$[0]')) AS dtype,
        coalesce(l.launch_ps, k.start_ps) AS step_time_ps, k.start_ps, k.end_ps
    FROM kernel_calls AS k
    LEFT JOIN kernel_args AS ka USING (profile_id, event_id)
    LEFT JOIN kernel_ops AS ko USING (profile_id, event_id)
    LEFT JOIN kernel_annotations AS kan USING (profile_id, event_id)
    LEFT JOIN annotations AS an ON an.profile_id = kan.profile_id AND an.event_id = kan.annotation_id
    LEFT JOIN launches AS l USING (profile_id, event_id)
),
host_calls AS (
    SELECT an.profile_id, an.event_id, an.device_id, CAST(NULL AS BIGINT), 'host_annotation', an.kind, an.name, '0', CAST(NULL AS BIGINT),
        CAST(NULL AS BIGINT),
        TRY_CAST(list_reduce(CAST(json_extract(an.input_dims, '$[0]') AS BIGINT[]), lambda a, b: a * b) AS BIGINT),
        CAST(NULL AS BIGINT), json_extract_string(an.input_type, '$[0]'), an.start_ps, an.start_ps, an.end_ps
    FROM annotations AS an
    WHERE an.profile_id NOT IN (SELECT profile_id FROM with_profile_kernels)
      AND an.kind IS NOT NULL AND an.kind <> 'other'
),
xla_candidates AS (
    SELECT e.profile_id, e.event_id, e.device_id, e.track_id, e.name, e.hlo_op, e.hlo_module, e.start_ps,
        e.start_ps + e.dur_ps AS end_ps, coalesce(e.category, h.opcode) AS category
    FROM events AS e
    LEFT JOIN hlo_ops AS h USING (profile_id, program_id, hlo_op)
    WHERE e.hlo_op IS NOT NULL AND e.start_ps IS NOT NULL AND NOT e.hlo_op LIKE '%-done%'
),
-- As event_kinds: each distinct op name and category classified once.
xla_kinds AS MATERIALIZED (
    SELECT hlo_op, category, xprosql_collective(hlo_op, category) AS kind
    FROM (SELECT DISTINCT hlo_op, category FROM xla_candidates)
),
xla_calls AS (
    SELECT x.profile_id, x.event_id, x.device_id, CAST(NULL AS BIGINT), 'xla_op', n.kind, x.hlo_op, coalesce(x.hlo_module, '0'),
        CAST(NULL AS BIGINT), CAST(NULL AS BIGINT), CAST(NULL AS BIGINT), CAST(NULL AS BIGINT), CAST(NULL AS VARCHAR),
        x.start_ps, x.start_ps, x.end_ps
    FROM xla_candidates AS x
    JOIN xla_kinds AS n ON n.hlo_op = x.hlo_op AND n.category IS NOT DISTINCT FROM x.category
    JOIN devices AS d USING (profile_id, device_id)
    JOIN tracks AS t USING (profile_id, device_id, track_id)
    WHERE n.kind <> 'other' AND (d.kind NOT IN ('tpu', 'gpu') OR t.name = 'XLA Ops')
),
calls AS (
    SELECT * FROM gpu_calls
    UNION ALL
    SELECT * FROM host_calls
    UNION ALL
    SELECT * FROM xla_calls
),
sized AS (
    SELECT c.*,
        CASE
            WHEN dtype IS NULL THEN NULL
            WHEN regexp_matches(lower(dtype), '(double|float64|long|int64)') THEN 8
            WHEN regexp_matches(lower(dtype), '(half|bfloat16|float16|short|int16)') THEN 2
            WHEN regexp_matches(lower(dtype), '(float8|char|byte|bool|int8|uint8)') THEN 1
            WHEN regexp_matches(lower(dtype), '(float|int)') THEN 4
        END AS dtype_bytes
    FROM calls AS c
)
SELECT
    s.profile_id, s.event_id, s.device_id, s.stream_id, s.source, s.kind, s.name, s.process_group, s.seq, s.group_size,
    s.in_elements, s.dtype_bytes,
    CAST(CASE WHEN s.kind = 'all_gather' THEN coalesce(s.out_elements, s.in_elements * s.group_size)
              ELSE s.in_elements END * s.dtype_bytes AS BIGINT) AS bytes,
    CASE WHEN s.step_time_ps < w.step_end_ps THEN w.step END AS step,
    s.start_ps, s.end_ps
FROM sized AS s
ASOF LEFT JOIN step_windows AS w ON w.profile_id = s.profile_id AND s.step_time_ps >= w.step_start_ps
ORDER BY s.profile_id, s.start_ps, s.event_id
