-- async.async_summary: per profile and kind of async operation, how much of it is
-- exposed and what transfer bandwidth it reaches against the device's peak.
--
-- Built on async_ops (included below, with its parameters). Exposed time is
-- summed over ops: three copies exposed at once count three times here; the
-- bottlenecks analysis counts wall time instead. Aggregate bandwidth divides
-- all bytes by the time at least one window of the kind is open on a device
-- (host clock), so concurrent transfers add up.
--
-- Passes: $hidden_coverage $exposed_coverage $prefer_async_line (to its includes, with their defaults and meaning)
--
-- Needs: async operations: TPU copy, host-offload or collective start / done pairs, GPU copies, collective kernels
--
-- Show: profile_id, device_kind, kind, direction, ops, exposed, bytes, exposed_ps, exposed_fraction, aggregate_vs_peak
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   device_kind  VARCHAR  tpu or gpu
--   kind  VARCHAR  async kind (async_ops.kind)
--   direction  VARCHAR  async_ops.direction (to_host / from_host for host offload)
--   devices  BIGINT  devices with ops of this kind
--   ops  BIGINT  async ops
--   unpaired  BIGINT  starts without a done
--   hidden  BIGINT  ops with status hidden
--   partial  BIGINT  ops with status partial
--   exposed  BIGINT  ops with status exposed
--   bytes  BIGINT  bytes moved, summed
--   window_ps  BIGINT  windows summed, ps
--   open_ps  BIGINT  time at least one window of the kind is open, summed over devices, ps
--   covered_ps  BIGINT  covered time summed, ps
--   exposed_ps  BIGINT  exposed time summed over ops, ps
--   exposed_fraction  DOUBLE  exposed_ps / window_ps
--   mean_bandwidth_bytes_per_s  DOUBLE  mean of the ops' window bandwidths, bytes/s
--   max_bandwidth_bytes_per_s  DOUBLE  highest window bandwidth, bytes/s
--   aggregate_bandwidth_bytes_per_s  DOUBLE  bytes / open_ps, bytes/s
--   peak_hbm_bytes_per_s  DOUBLE  the devices' peak HBM bandwidth, bytes/s
--   aggregate_vs_peak  DOUBLE  aggregate_bandwidth_bytes_per_s / peak_hbm_bytes_per_s
--   dma_stall_ps  BIGINT  dma_stall_duration_ps summed; NULL when the profile records none
WITH async_ops AS (
-- @include async.async_ops
),
open_runs AS (
    SELECT *, sum(CASE WHEN reach_ps IS NULL OR start_ps > reach_ps THEN 1 ELSE 0 END) OVER (
        PARTITION BY profile_id, device_id, kind, direction ORDER BY start_ps, end_ps ROWS UNBOUNDED PRECEDING) AS run
    FROM (
        SELECT profile_id, device_id, kind, direction, start_ps, end_ps,
            max(end_ps) OVER (PARTITION BY profile_id, device_id, kind, direction ORDER BY start_ps, end_ps
                              ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach_ps
        FROM async_ops WHERE paired
    )
),
open_time AS (
    SELECT profile_id, kind, direction, CAST(sum(run_ps) AS BIGINT) AS open_ps
    FROM (
        SELECT profile_id, device_id, kind, direction, max(end_ps) - min(start_ps) AS run_ps
        FROM open_runs GROUP BY profile_id, device_id, kind, direction, run
    )
    GROUP BY ALL
)
SELECT
    a.profile_id, any_value(a.device_kind) AS device_kind, a.kind, a.direction,
    count(DISTINCT a.device_id) AS devices,
    count(*) AS ops,
    count(*) FILTER (WHERE NOT a.paired) AS unpaired,
    count(*) FILTER (WHERE a.status = 'hidden') AS hidden,
    count(*) FILTER (WHERE a.status = 'partial') AS partial,
    count(*) FILTER (WHERE a.status = 'exposed') AS exposed,
    CAST(sum(a.bytes) AS BIGINT) AS bytes,
    CAST(sum(a.window_ps) AS BIGINT) AS window_ps,
    any_value(o.open_ps) AS open_ps,
    CAST(sum(a.covered_ps) AS BIGINT) AS covered_ps,
    CAST(sum(a.exposed_ps) AS BIGINT) AS exposed_ps,
    sum(a.exposed_ps) / nullif(sum(a.window_ps), 0) AS exposed_fraction,
    avg(a.bandwidth_bytes_per_s) AS mean_bandwidth_bytes_per_s,
    max(a.bandwidth_bytes_per_s) AS max_bandwidth_bytes_per_s,
    sum(a.bytes) FILTER (WHERE a.paired) / (any_value(o.open_ps) / 1e12) AS aggregate_bandwidth_bytes_per_s,
    max(a.peak_hbm_bytes_per_s) AS peak_hbm_bytes_per_s,
    sum(a.bytes) FILTER (WHERE a.paired) / (any_value(o.open_ps) / 1e12) / max(a.peak_hbm_bytes_per_s) AS aggregate_vs_peak,
    CAST(sum(a.dma_stall_ps) AS BIGINT) AS dma_stall_ps
FROM async_ops AS a
LEFT JOIN open_time AS o ON o.profile_id = a.profile_id AND o.kind = a.kind AND o.direction IS NOT DISTINCT FROM a.direction
GROUP BY a.profile_id, a.kind, a.direction
ORDER BY a.profile_id, exposed_ps DESC, a.kind
