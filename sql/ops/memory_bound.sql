-- ops.memory_bound: is each op held back by compute or by a memory, and how much of
-- each device's time goes each way, per profile.
--
-- Built on the roofline analysis (included below, with its parameters). An op
-- is compute-bound when compute is its most utilized resource, memory-bound
-- when a memory is (equivalently: its operational intensity for that memory is
-- left of the memory's ridge point). Ops without cost data, ops whose FLOPs are
-- unknown (cost_source operand_bytes: a custom call or compiled kernel known by its
-- bytes only), and ops on devices whose peaks are unknown (CPU without $peak_*
-- parameters), are kept apart, and
-- so are collectives (xprosql_collective: on every backend): their time is
-- communication, neither compute- nor memory-bound, whatever their bytes.
-- Roofline's $top stays NULL (it is not passed): the shares are over every op.
--
-- Needs: ops: TPU XLA Ops, GPU kernels, or XLA ops on a host without accelerators
--
-- Parameters:
--   $high_utilization  DOUBLE  a profile whose HBM (compute) utilization is above this ... [range: 0..1] (default: 0.7)
--   $low_utilization   DOUBLE  ... and whose compute (HBM) utilization is below this is memory-bound (compute-bound); XProf's thresholds [range: 0..1] (default: 0.5)
--   $top  BIGINT  op rows kept per (profile, device kind), by self time; the profile rows' shares always cover every op; NULL for all [range: 1..] (default: NULL)
--
-- Passes: $peak_flops_per_s $peak_hbm_bytes_per_s $peak_source (to its includes, with their defaults and meaning)
--
-- Show: row_kind, profile_id, device_kind, op, category, classification, self_time_ps, time_share, operational_intensity, ridge_point, span_memory_bound_share, span_compute_bound_share
--
-- Columns:
--   row_kind  VARCHAR  'op' or 'profile' (one per profile and device kind)
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   device_kind  VARCHAR  tpu, gpu or cpu
--   program_id  UBIGINT  XLA program id of the op
--   module  VARCHAR  HLO module of the op
--   op  VARCHAR  HLO op or kernel name; NULL on profile rows
--   input_shapes  VARCHAR  a PyTorch op's Input Dims (JSON); NULL otherwise
--   input_dtypes  VARCHAR  a PyTorch op's Input type (JSON)
--   category  VARCHAR  HLO category of the op
--   classification  VARCHAR  op: collective, compute-bound, memory-bound, no cost data, or unknown (peaks unknown, FLOPs unknown: operand_bytes, or no FLOPs and no bytes); profile: the XProf-style verdict compute-bound / memory-bound from the utilization thresholds, else balanced, or unknown without peaks
--   bound_by  VARCHAR  roofline.bound_by: compute, HBM, VMEM read, ... or unknown
--   self_time_ps  BIGINT  op: self time; profile: summed self time of all ops (busy time), ps
--   device_time_ps  BIGINT  the profile's device time on this device kind (roofline.device_time_ps), ps
--   time_share  DOUBLE  self_time_ps / device_time_ps
--   operational_intensity  DOUBLE  FLOP/byte (roofline)
--   ridge_point  DOUBLE  FLOP/byte (roofline)
--   flop_utilization  DOUBLE  roofline.flop_utilization (profile rows: over device time)
--   hbm_utilization  DOUBLE  roofline.hbm_utilization (profile rows: over device time)
--   above_roof  BOOLEAN  roofline.above_roof: a utilization above 1
--   above_roof_reason  VARCHAR  roofline.above_roof_reason
--   span_memory_bound_share  DOUBLE  profile: share of the device time (device_time_ps: the ops' span, first op start to last op end) in memory-bound ops
--   span_compute_bound_share  DOUBLE  profile: share of device time in compute-bound ops
--   span_no_cost_data_share  DOUBLE  profile: share of device time in ops without cost data
--   span_unknown_share  DOUBLE  profile: share of device time in ops with cost data that cannot be placed (unknown peaks, or bytes only: operand_bytes)
--   span_collective_share  DOUBLE  profile: share of device time in collectives
--   span_idle_share  DOUBLE  profile: share of device time with no op running
WITH roofline AS (
-- @include ops.roofline
),
classified AS (
    SELECT
        *,
        CASE
            WHEN xprosql_collective(op, category) IS NOT NULL THEN 'collective'
            WHEN cost_source IS NULL THEN 'no cost data'
            WHEN bound_by = 'compute' THEN 'compute-bound'
            WHEN bound_by IN ('HBM', 'VMEM read', 'VMEM write', 'CMEM read', 'CMEM write') THEN 'memory-bound'
            ELSE 'unknown'
        END AS classification
    FROM roofline
    WHERE row_kind = 'op'
),
thresholds AS (
    SELECT CAST($high_utilization AS DOUBLE) AS high, CAST($low_utilization AS DOUBLE) AS low
),
shares AS (
    SELECT
        profile_id, device_kind,
        sum(self_time_ps) FILTER (WHERE classification = 'memory-bound') AS memory_ps,
        sum(self_time_ps) FILTER (WHERE classification = 'compute-bound') AS compute_ps,
        sum(self_time_ps) FILTER (WHERE classification = 'no cost data') AS no_cost_ps,
        sum(self_time_ps) FILTER (WHERE classification = 'unknown') AS unknown_ps,
        sum(self_time_ps) FILTER (WHERE classification = 'collective') AS collective_ps
    FROM classified
    GROUP BY ALL
)
SELECT
    'op' AS row_kind, profile_id, device_kind, program_id, module, op, input_shapes, input_dtypes, category,
    classification, bound_by,
    self_time_ps, device_time_ps, self_time_share AS time_share, operational_intensity, ridge_point,
    flop_utilization, hbm_utilization, above_roof, above_roof_reason,
    CAST(NULL AS DOUBLE) AS span_memory_bound_share, CAST(NULL AS DOUBLE) AS span_compute_bound_share,
    CAST(NULL AS DOUBLE) AS span_no_cost_data_share, CAST(NULL AS DOUBLE) AS span_unknown_share,
    CAST(NULL AS DOUBLE) AS span_collective_share, CAST(NULL AS DOUBLE) AS span_idle_share
FROM classified
QUALIFY CAST($top AS BIGINT) IS NULL
    OR row_number() OVER (PARTITION BY profile_id, device_kind ORDER BY self_time_ps DESC, program_id, op, input_shapes,
                          input_dtypes) <= CAST($top AS BIGINT)
UNION ALL
SELECT
    'profile', r.profile_id, r.device_kind, NULL, NULL, NULL, NULL, NULL, NULL,
    CASE
        WHEN r.flop_utilization IS NULL OR r.hbm_utilization IS NULL THEN 'unknown'
        WHEN r.hbm_utilization > t.high AND r.flop_utilization < t.low THEN 'memory-bound'
        WHEN r.flop_utilization > t.high AND r.hbm_utilization < t.low THEN 'compute-bound'
        ELSE 'balanced'
    END,
    r.bound_by, r.self_time_ps, r.device_time_ps, r.self_time_share, r.operational_intensity, r.ridge_point,
    r.flop_utilization, r.hbm_utilization, r.above_roof, r.above_roof_reason,
    coalesce(s.memory_ps, 0) / nullif(r.device_time_ps, 0),
    coalesce(s.compute_ps, 0) / nullif(r.device_time_ps, 0),
    coalesce(s.no_cost_ps, 0) / nullif(r.device_time_ps, 0),
    coalesce(s.unknown_ps, 0) / nullif(r.device_time_ps, 0),
    coalesce(s.collective_ps, 0) / nullif(r.device_time_ps, 0),
    greatest(1 - r.self_time_ps / nullif(r.device_time_ps, 0), 0)
FROM roofline AS r
CROSS JOIN thresholds AS t
LEFT JOIN shares AS s USING (profile_id, device_kind)
WHERE r.row_kind = 'profile'
ORDER BY profile_id, device_kind, row_kind DESC, self_time_ps DESC, program_id, op
