-- async_summary: per profile and kind of async operation, how much of it is
-- exposed and what transfer bandwidth it reaches against the device's peak.
--
-- Built on async_ops (included below, with its parameters). Exposed time is
-- summed over ops: three copies exposed at once count three times here; the
-- bottlenecks analysis counts wall time instead. Aggregate bandwidth divides
-- all bytes by the time at least one window of the kind is open on a device
-- (host clock), so concurrent transfers add up.
--
-- Columns:
--   profile_id                       profile (profiles.profile_id)
--   device_kind                      tpu or gpu
--   kind                             async kind (async_ops.kind)
--   direction                        async_ops.direction (to_host / from_host for host offload)
--   devices                          devices with ops of this kind
--   ops                              async ops
--   unpaired                         starts without a done
--   hidden                           ops with status hidden
--   partial                          ops with status partial
--   exposed                          ops with status exposed
--   bytes                            bytes moved, summed
--   window_ps                        windows summed, ps
--   open_ps                          time at least one window of the kind is open, summed over devices, ps
--   covered_ps                       covered time summed, ps
--   exposed_ps                       exposed time summed over ops, ps
--   exposed_fraction                 exposed_ps / window_ps
--   mean_bandwidth_bytes_per_s       mean of the ops' window bandwidths, bytes/s
--   max_bandwidth_bytes_per_s        highest window bandwidth, bytes/s
--   aggregate_bandwidth_bytes_per_s  bytes / open_ps, bytes/s
--   peak_hbm_bytes_per_s             the devices' peak HBM bandwidth, bytes/s
--   aggregate_vs_peak                aggregate_bandwidth_bytes_per_s / peak_hbm_bytes_per_s
--   dma_stall_ps                     dma_stall_duration_ps summed; NULL when the profile records none
WITH async_ops AS (
-- @include async_ops
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
