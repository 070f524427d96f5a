-- diagnose._gpu_idle: every stretch of time a GPU is idle inside its complete steps: the
-- idle time of steps.steps, cut into its gaps. The GPU-timeline rules (gpu_gaps,
-- low_utilization, sync_calls) measure idle time on these rows, so their numbers add up
-- to steps.steps' idle_ps.
--
-- A GPU is busy while a kernel, copy or memset runs (tables kernels and memcpys: steps.steps'
-- definition of busy). Per complete step (steps.steps complete IS NOT false) of a GPU, the
-- step's interval less the union of its ops, clipped to the step, leaves the gaps: before the
-- first op, between ops, after the last op. Summed per step they are steps.steps' idle_ps
-- exactly. Ops of no duration keep no time busy and do not split a gap.
--
-- Needs: GPU kernels or copies inside complete steps
--
-- Parameters:
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   device_id  INTEGER  devices.device_id of the GPU
--   device  VARCHAR  device name
--   step_index  BIGINT  steps.step_index of the step holding the gap
--   step  BIGINT  steps.step
--   step_start_ps  BIGINT  step start, ps
--   step_end_ps  BIGINT  step end, ps
--   start_ps  BIGINT  gap start: the step start or the end of the GPU's last op before it, ps
--   end_ps  BIGINT  gap end: the start of the GPU's next op, or the step end, ps
--   gap_ps  BIGINT  end_ps - start_ps (> 0), ps
--   edge  VARCHAR  where the gap lies: before (the step's first op), between (two ops), after (the last op), empty (a step without ops)
--   marked  BOOLEAN  the step has a marker (steps.source other than profile or unmarked); false: the step is the whole capture, start-up and compilation included
WITH every_step AS (
-- @include steps.steps
),
gpu_steps AS MATERIALIZED (
    SELECT profile_id, device_id, device, step_index, step, start_ps AS step_start_ps, end_ps AS step_end_ps,
        source NOT IN ('profile', 'unmarked') AS marked
    FROM every_step
    WHERE complete IS NOT false AND device_kind = 'gpu' AND wall_ps > 0
),
gpu_ops AS (
    SELECT profile_id, device_id, start_ps, start_ps + dur_ps AS end_ps
    FROM kernels WHERE start_ps IS NOT NULL AND dur_ps > 0
    UNION ALL
    SELECT profile_id, device_id, start_ps, start_ps + dur_ps AS end_ps
    FROM memcpys WHERE start_ps IS NOT NULL AND dur_ps > 0
),
-- Each op clipped to the steps it overlaps.
clipped AS (
    SELECT s.profile_id, s.device_id, s.step_index,
        greatest(o.start_ps, s.step_start_ps) AS start_ps, least(o.end_ps, s.step_end_ps) AS end_ps
    FROM gpu_steps AS s
    JOIN gpu_ops AS o
      ON o.profile_id = s.profile_id AND o.device_id = s.device_id
     AND o.start_ps < s.step_end_ps AND o.end_ps > s.step_start_ps
),
-- The union of the ops of a step: a run starts at an op that begins after every earlier op ended.
reach AS (
    SELECT *, max(end_ps) OVER (PARTITION BY profile_id, device_id, step_index ORDER BY start_ps, end_ps
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach_ps
    FROM clipped
),
runs AS (
    SELECT *, sum(CASE WHEN reach_ps IS NULL OR start_ps > reach_ps THEN 1 ELSE 0 END)
        OVER (PARTITION BY profile_id, device_id, step_index ORDER BY start_ps, end_ps ROWS UNBOUNDED PRECEDING) AS run
    FROM reach
),
busy AS (
    SELECT profile_id, device_id, step_index, min(start_ps) AS start_ps, max(end_ps) AS end_ps
    FROM runs GROUP BY profile_id, device_id, step_index, run
),
-- A gap before each busy interval (from the previous one's end, or the step start), and one after the last.
gaps AS (
    SELECT s.profile_id, s.device_id, s.step_index,
        coalesce(lag(b.end_ps) OVER w, s.step_start_ps) AS start_ps, b.start_ps AS end_ps,
        CASE WHEN lag(b.end_ps) OVER w IS NULL THEN 'before' ELSE 'between' END AS edge
    FROM busy AS b
    JOIN gpu_steps AS s USING (profile_id, device_id, step_index)
    WINDOW w AS (PARTITION BY b.profile_id, b.device_id, b.step_index ORDER BY b.start_ps)
    UNION ALL
    SELECT s.profile_id, s.device_id, s.step_index, coalesce(max(b.end_ps), s.step_start_ps), s.step_end_ps,
        CASE WHEN max(b.end_ps) IS NULL THEN 'empty' ELSE 'after' END
    FROM gpu_steps AS s
    LEFT JOIN busy AS b USING (profile_id, device_id, step_index)
    GROUP BY s.profile_id, s.device_id, s.step_index, s.step_start_ps, s.step_end_ps
)
SELECT
    g.profile_id, g.device_id, s.device, g.step_index, s.step, s.step_start_ps, s.step_end_ps,
    CAST(g.start_ps AS BIGINT) AS start_ps, CAST(g.end_ps AS BIGINT) AS end_ps,
    CAST(g.end_ps - g.start_ps AS BIGINT) AS gap_ps, g.edge, s.marked
FROM gaps AS g
JOIN gpu_steps AS s USING (profile_id, device_id, step_index)
WHERE g.end_ps > g.start_ps
ORDER BY g.profile_id, g.device_id, g.start_ps
