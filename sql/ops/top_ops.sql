-- ops.top_ops: the operations that take the most time, per profile, device and track.
-- Time is summed over every occurrence of an op on a track (an XSpace line such
-- as XLA Ops); accelerator tracks only, or every track of a profile without
-- accelerators (JAX on CPU). On a GPU, only GPU work counts (xprosql_gpu_work: no annotations,
-- stream waits or CUPTI counter ranges), as in ops.roofline.
--
-- Needs: ops: TPU XLA Ops, GPU kernels or copies, or events of a profile without accelerators
--
-- Parameters:
--   $top  BIGINT  rows kept per (profile, device, track), by total time [range: 1..] (default: 10)
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   device  VARCHAR  device name (devices.name), e.g. /device:TPU:0
--   track  VARCHAR  line name (tracks.name), e.g. XLA Ops
--   op  VARCHAR  hlo_op when known, else the event name
--   category  VARCHAR  HLO category when the profile records it
--   occurrences  BIGINT  number of events
--   total_ps  BIGINT  summed dur_ps, picoseconds
--   share_of_track  DOUBLE  total_ps over all events of the track (0..1)
--   flops  BIGINT  summed FLOPs (flops x occurrences), when recorded
--   bytes_accessed  BIGINT  summed bytes, when recorded
WITH per_op AS (
    SELECT
        e.profile_id,
        d.name AS device,
        t.name AS track,
        coalesce(e.hlo_op, e.name) AS op,
        any_value(e.category) AS category,
        count(*) AS occurrences,
        sum(e.dur_ps) AS total_ps,
        sum(e.flops) AS flops,
        sum(e.bytes_accessed) AS bytes_accessed
    FROM events AS e
    JOIN devices AS d USING (profile_id, device_id)
    JOIN tracks AS t USING (profile_id, device_id, track_id)
    WHERE (d.kind = 'tpu' OR (d.kind = 'gpu' AND xprosql_gpu_work(e.category))) OR NOT EXISTS (
        SELECT 1 FROM devices AS dd WHERE dd.profile_id = e.profile_id AND dd.kind IN ('tpu', 'gpu')
    )
    GROUP BY ALL
)
SELECT
    profile_id, device, track, op, category, occurrences, total_ps,
    total_ps / sum(total_ps) OVER (PARTITION BY profile_id, device, track) AS share_of_track,
    flops, bytes_accessed
FROM per_op
QUALIFY row_number() OVER (PARTITION BY profile_id, device, track ORDER BY total_ps DESC, op) <= $top
ORDER BY profile_id, device, track, total_ps DESC, op
