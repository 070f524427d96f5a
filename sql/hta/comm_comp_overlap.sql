-- hta.comm_comp_overlap: per GPU, the share of communication time during which
-- compute runs too (HTA's communication / computation overlap, docs/reference.md,
-- HTA).
--
-- Built on hta_gpu_ops (included below, with its parameters). Overlap is the
-- time both a COMMUNICATION op and a COMPUTATION op run, over the union of
-- COMMUNICATION ops; overlapping ops of one kind count once. NULL on a GPU
-- without communication.
--
-- Passes: $include_last_step $us_rounding (to its includes, with their defaults and meaning)
--
-- Needs: GPU kernels or copies on streams (a Kineto GPU trace, an XSpace GPU plane)
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   rank  BIGINT  distributed rank (profiles.rank)
--   device_id  INTEGER  devices.device_id of the GPU
--   comm_ps  BIGINT  union of communication ops, ps
--   overlap_ps  BIGINT  time communication and computation both run, ps
--   overlap_pct  DOUBLE  100 * overlap_ps / comm_ps
WITH hta_gpu_ops AS (
-- @include hta._gpu_ops
),
typed AS (
    SELECT profile_id, rank, device_id, kernel_type AS subset, start_ps, end_ps
    FROM hta_gpu_ops WHERE kernel_type IN ('COMMUNICATION', 'COMPUTATION')
),
merged AS (
    SELECT profile_id, rank, device_id, subset, min(start_ps) AS m_start_ps, max(end_ps) AS m_end_ps
    FROM (
        SELECT *, sum(CASE WHEN reach IS NULL OR start_ps > reach THEN 1 ELSE 0 END)
            OVER (PARTITION BY profile_id, device_id, subset ORDER BY start_ps, end_ps ROWS UNBOUNDED PRECEDING) AS run
        FROM (
            SELECT *, max(end_ps) OVER (PARTITION BY profile_id, device_id, subset ORDER BY start_ps, end_ps
                                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
            FROM typed
        )
    )
    GROUP BY profile_id, rank, device_id, subset, run
),
-- Compute time before any instant t is one ASOF lookup into the merged compute runs.
compute_runs AS (
    SELECT *, CAST(coalesce(sum(m_end_ps - m_start_ps) OVER (
        PARTITION BY profile_id, device_id ORDER BY m_start_ps ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS BIGINT) AS before_ps
    FROM merged WHERE subset = 'COMPUTATION'
),
comm AS (SELECT * FROM merged WHERE subset = 'COMMUNICATION'),
at_start AS (
    SELECT c.*, coalesce(r.before_ps + least(greatest(c.m_start_ps - r.m_start_ps, 0), r.m_end_ps - r.m_start_ps), 0) AS compute_before_start
    FROM comm AS c
    ASOF LEFT JOIN compute_runs AS r ON c.profile_id = r.profile_id AND c.device_id = r.device_id AND c.m_start_ps >= r.m_start_ps
),
at_end AS (
    SELECT c.*, coalesce(r.before_ps + least(greatest(c.m_end_ps - r.m_start_ps, 0), r.m_end_ps - r.m_start_ps), 0) AS compute_before_end
    FROM at_start AS c
    ASOF LEFT JOIN compute_runs AS r ON c.profile_id = r.profile_id AND c.device_id = r.device_id AND c.m_end_ps >= r.m_start_ps
),
devices_seen AS (SELECT DISTINCT profile_id, rank, device_id FROM hta_gpu_ops)
SELECT
    d.profile_id, d.rank, d.device_id,
    CAST(sum(a.m_end_ps - a.m_start_ps) AS BIGINT) AS comm_ps,
    CAST(sum(a.compute_before_end - a.compute_before_start) AS BIGINT) AS overlap_ps,
    100 * sum(a.compute_before_end - a.compute_before_start) / nullif(sum(a.m_end_ps - a.m_start_ps), 0) AS overlap_pct
FROM devices_seen AS d
LEFT JOIN at_end AS a USING (profile_id, device_id)
GROUP BY ALL
ORDER BY d.profile_id, d.device_id
