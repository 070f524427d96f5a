-- gpu.launch_coverage: how much GPU activity joins the CPU call that launched it.
-- A kernel or copy joins its launch on (profile_id, correlation_id); the share
-- is below 1 only where the trace lacks the call (a launch recorded before the
-- trace window, a source without runtime records).
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   format  VARCHAR  source format (xspace, kineto, cupti)
--   kernels  BIGINT  rows of kernels
--   kernels_launched  BIGINT  kernels whose correlation_id matches an api_calls row
--   kernel_share  DOUBLE  kernels_launched / kernels (NULL without kernels)
--   copies  BIGINT  rows of memcpys (memcpy and memset)
--   copies_launched  BIGINT  copies whose correlation_id matches an api_calls row
--   copy_share  DOUBLE  copies_launched / copies (NULL without copies)
WITH launches AS (
    SELECT DISTINCT profile_id, correlation_id FROM api_calls WHERE correlation_id IS NOT NULL
),
kernel_counts AS (
    SELECT k.profile_id, count(*) AS kernels, count(l.correlation_id) AS kernels_launched
    FROM kernels AS k LEFT JOIN launches AS l USING (profile_id, correlation_id)
    GROUP BY ALL
),
copy_counts AS (
    SELECT m.profile_id, count(*) AS copies, count(l.correlation_id) AS copies_launched
    FROM memcpys AS m LEFT JOIN launches AS l USING (profile_id, correlation_id)
    GROUP BY ALL
)
SELECT
    p.profile_id,
    p.format,
    coalesce(k.kernels, 0) AS kernels,
    coalesce(k.kernels_launched, 0) AS kernels_launched,
    k.kernels_launched / k.kernels AS kernel_share,
    coalesce(c.copies, 0) AS copies,
    coalesce(c.copies_launched, 0) AS copies_launched,
    c.copies_launched / c.copies AS copy_share
FROM profiles AS p
LEFT JOIN kernel_counts AS k USING (profile_id)
LEFT JOIN copy_counts AS c USING (profile_id)
ORDER BY p.profile_id
