-- counters.gpu_flops: floating-point operations of each GPU counter range, from
-- the SASS instruction counters CUPTI's range profiler (and PyTorch's
-- cuda_profiler_range events) report: per precision, adds + multiplies + 2 x
-- fused multiply-adds (an FMA is two FLOPs) of
-- smsp__sass_thread_inst_executed_op_{d,f,h}{add,mul,fma}_pred_on.sum
-- (thread-level instructions with the predicate on, so each counts once per
-- thread that executed it). A range without any of these counters has no row.
--
-- Needs: CUPTI SASS FLOP counters (Kineto cuda_profiler_range events)
--
-- Parameters:
--
-- Show: profile_id, device_id, kernel, sample, start_ps, end_ps, flops, flop_rate
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   device_id  INTEGER  devices.device_id of the GPU (Kineto: the process the range was recorded in)
--   event_id  BIGINT  events.event_id of the range
--   kernel  VARCHAR  the range's name (the kernel it profiled)
--   sample  BIGINT  range number within the profile (counters.sample)
--   start_ps  BIGINT  range start, ps
--   end_ps  BIGINT  range end, ps
--   fp64_flops  BIGINT  double-precision FLOPs: dadd + dmul + 2 x dfma
--   fp32_flops  BIGINT  single-precision FLOPs: fadd + fmul + 2 x ffma
--   fp16_flops  BIGINT  half-precision FLOPs: hadd + hmul + 2 x hfma
--   flops  BIGINT  all three
--   flop_rate  DOUBLE  flops per second of range time (NULL for an empty range)
WITH sass AS (
    SELECT
        profile_id, device_id, event_id, kernel, sample, start_ps, end_ps,
        regexp_extract(counter, '^smsp__sass_thread_inst_executed_op_([dfh])(add|mul|fma)_pred_on\.sum$',
                       ['precision', 'op']) AS m,
        value
    FROM counters
    WHERE counter LIKE 'smsp\_\_sass\_thread\_inst\_executed\_op\_%' ESCAPE '\'
)
SELECT
    profile_id, device_id, event_id, kernel, sample, start_ps, end_ps,
    CAST(sum(CASE WHEN m.op = 'fma' THEN 2 ELSE 1 END * value) FILTER (WHERE m.precision = 'd') AS BIGINT) AS fp64_flops,
    CAST(sum(CASE WHEN m.op = 'fma' THEN 2 ELSE 1 END * value) FILTER (WHERE m.precision = 'f') AS BIGINT) AS fp32_flops,
    CAST(sum(CASE WHEN m.op = 'fma' THEN 2 ELSE 1 END * value) FILTER (WHERE m.precision = 'h') AS BIGINT) AS fp16_flops,
    CAST(sum(CASE WHEN m.op = 'fma' THEN 2 ELSE 1 END * value) AS BIGINT) AS flops,
    sum(CASE WHEN m.op = 'fma' THEN 2 ELSE 1 END * value) / nullif((end_ps - start_ps) / 1e12, 0) AS flop_rate
FROM sass
WHERE m.op <> ''
GROUP BY profile_id, device_id, event_id, kernel, sample, start_ps, end_ps
ORDER BY profile_id, sample
