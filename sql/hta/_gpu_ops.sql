-- hta._gpu_ops: the GPU ops that Holistic Trace Analysis (HTA) analyses see, one
-- row each, with its kind by HTA's name rules and the CPU call that launched it.
-- The hta_* analyses build on it.
--
-- GPU ops are kernels, copies and memsets with a stream and a correlation id.
-- HTA's loader drops the last iteration when a trace has two or more
-- ProfilerStep#N annotations: it keeps the GPU ops whose launching CPU call
-- started before the last ProfilerStep began (before it ended with
-- $include_last_step); with fewer annotations it keeps every op.
--
-- Kinds (HTA's rules, docs/reference.md, HTA): COMMUNICATION the collective
-- kernels (xprosql_collective: HTA's ^nccl|ncclKernel|^hccl, and also RCCL's
-- rccl* kernels, which HTA counts as computation); MEMORY
-- ^(hip)?Memcpy|^(hip)?Memset|^dma; COMPUTATION the rest, except names HTA
-- also keeps out of compute (any Memcpy or Sync in the name, a leading
-- Memset), which are OTHER.
--
-- HTA rounds every event to whole microseconds (start up, end down; PyTorch
-- PR 122425). $us_rounding true does the same, for like-for-like comparisons;
-- by default times stay exact (ps).
--
-- Parameters:
--   $include_last_step  BOOLEAN    keep the ops of the last ProfilerStep as well (HTA's include_last_profiler_step) (default: false)
--   $us_rounding        BOOLEAN    round starts up and ends down to whole microseconds, as HTA does (default: false)
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   rank  BIGINT  profiles.rank (distributed rank), when the trace says
--   device_id  INTEGER  devices.device_id of the GPU
--   stream_id  BIGINT  CUDA/HIP stream
--   event_id  BIGINT  events.event_id of the op
--   correlation_id  BIGINT  CUPTI correlation id
--   name  VARCHAR  kernel name, or the copy's event name (Memcpy HtoD ...)
--   op_kind  VARCHAR  kernel, memcpy or memset
--   kernel_type  VARCHAR  COMMUNICATION, MEMORY, COMPUTATION or OTHER (HTA's kernel types)
--   start_ps  BIGINT  start, ps from profiles.start_ns (rounded when $us_rounding)
--   end_ps  BIGINT  end, ps
--   dur_ps  BIGINT  end_ps - start_ps
--   launch_event_id  BIGINT  events.event_id of the launching CPU call (api_calls); NULL when the trace lacks it
--   launch_name  VARCHAR  name of that call, e.g. cudaLaunchKernel (XSpace host events: the op's name)
--   launch_api  VARCHAR  api_calls.api of that call: launch for XSpace host events that launch GPU work, else the runtime or driver API
--   launch_start_ps  BIGINT  its start, ps
--   launch_dur_ps  BIGINT  its duration, ps
WITH params AS (
    SELECT
        CAST($include_last_step AS BOOLEAN) AS include_last,
        CAST($us_rounding AS BOOLEAN) AS us_rounding
),
chosen_profiles AS (
    SELECT p.profile_id, p.rank, p.start_ns FROM profiles AS p
),
gpu_ops AS (
    SELECT k.profile_id, k.device_id, k.stream_id, k.event_id, k.correlation_id, k.name, 'kernel' AS op_kind,
        k.start_ps, k.dur_ps
    FROM kernels AS k JOIN chosen_profiles USING (profile_id)
    UNION ALL
    SELECT m.profile_id, m.device_id, m.stream_id, m.event_id, m.correlation_id, e.name,
        CASE WHEN m.kind = 'memset' THEN 'memset' ELSE 'memcpy' END, m.start_ps, m.dur_ps
    FROM memcpys AS m JOIN chosen_profiles USING (profile_id) JOIN events AS e USING (profile_id, event_id)
),
launches AS (
    SELECT a.profile_id, a.correlation_id, a.event_id, a.name, a.api, a.start_ps, a.dur_ps
    FROM api_calls AS a JOIN chosen_profiles USING (profile_id)
    WHERE a.correlation_id IS NOT NULL
    QUALIFY row_number() OVER (PARTITION BY a.profile_id, a.correlation_id ORDER BY a.start_ps, a.event_id) = 1
),
-- The last ProfilerStep on the CPU, in traces with at least two of them.
last_step AS (
    SELECT e.profile_id, max(e.start_ps) AS last_start_ps, max(e.start_ps + e.dur_ps) AS last_end_ps
    FROM events AS e JOIN chosen_profiles USING (profile_id) JOIN devices AS d USING (profile_id, device_id)
    WHERE d.kind <> 'gpu' AND e.name LIKE 'ProfilerStep#%' AND e.start_ps IS NOT NULL
    GROUP BY e.profile_id
    HAVING count(DISTINCT e.name) >= 2
),
kept AS (
    SELECT g.*, l.event_id AS launch_event_id, l.name AS launch_name, l.api AS launch_api, l.start_ps AS launch_start_ps,
        l.dur_ps AS launch_dur_ps
    FROM gpu_ops AS g
    CROSS JOIN params AS x
    LEFT JOIN launches AS l USING (profile_id, correlation_id)
    LEFT JOIN last_step AS s USING (profile_id)
    WHERE g.stream_id IS NOT NULL AND g.correlation_id IS NOT NULL AND g.start_ps IS NOT NULL
      AND (s.profile_id IS NULL
           OR (NOT x.include_last AND l.start_ps < s.last_start_ps)
           OR (x.include_last AND l.start_ps <= s.last_end_ps))
),
-- Whole microseconds since the epoch, as HTA has them, back to ps from start_ns.
timed AS (
    SELECT k.*,
        CASE WHEN x.us_rounding THEN ((p.start_ns + k.start_ps // 1000 + 999) // 1000 * 1000 - p.start_ns) * 1000
             ELSE k.start_ps END AS r_start_ps,
        CASE WHEN x.us_rounding THEN ((p.start_ns + (k.start_ps + k.dur_ps) // 1000) // 1000 * 1000 - p.start_ns) * 1000
             ELSE k.start_ps + k.dur_ps END AS r_end_ps,
        CASE WHEN x.us_rounding THEN ((p.start_ns + k.launch_start_ps // 1000 + 999) // 1000 * 1000 - p.start_ns) * 1000
             ELSE k.launch_start_ps END AS r_launch_start_ps,
        CASE WHEN x.us_rounding THEN ((p.start_ns + (k.launch_start_ps + k.launch_dur_ps) // 1000) // 1000 * 1000 - p.start_ns) * 1000
             ELSE k.launch_start_ps + k.launch_dur_ps END AS r_launch_end_ps,
        p.rank
    FROM kept AS k
    JOIN chosen_profiles AS p USING (profile_id)
    CROSS JOIN params AS x
)
SELECT
    profile_id, rank, device_id, stream_id, event_id, correlation_id, name, op_kind,
    CASE
        WHEN xprosql_collective(name, NULL) IS NOT NULL THEN 'COMMUNICATION'
        WHEN regexp_matches(name, '^(hip)?Memcpy|^(hip)?Memset|^dma') THEN 'MEMORY'
        WHEN NOT regexp_matches(name, '^(.*Memcpy|Memset|.*Sync)') THEN 'COMPUTATION'
        ELSE 'OTHER'
    END AS kernel_type,
    r_start_ps AS start_ps, r_end_ps AS end_ps, r_end_ps - r_start_ps AS dur_ps,
    launch_event_id, launch_name, launch_api, r_launch_start_ps AS launch_start_ps, r_launch_end_ps - r_launch_start_ps AS launch_dur_ps
FROM timed
ORDER BY profile_id, device_id, stream_id, start_ps
