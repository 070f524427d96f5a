-- hta.launch_stats: one row per GPU op launched by a CUDA or HIP call, with the
-- call's duration, the op's duration and the launch delay between them (HTA's
-- CUDA kernel launch statistics, docs/reference.md, HTA).
--
-- Built on hta_gpu_ops (included below, with its parameters). Launch calls are
-- those xprosql_launch_kind names: HTA's list (cudaLaunchKernel,
-- cudaLaunchKernelExC and MTIA's runFunction, plus cudaMemcpyAsync and
-- cudaMemsetAsync with $include_memory_events) and its HIP counterparts
-- (hipLaunchKernel, hipExtLaunchKernel, hipModuleLaunchKernel,
-- hipExtModuleLaunchKernel, hipGraphLaunch; hipMemcpy*, hipMemset*;
-- docs/reference.md, AMD GPUs), and on XSpace GPU profiles the host events that launch a
-- kernel (api_calls.api launch; HTA reads no XSpace). Launch delay = op start - (call start + call
-- duration), at least 0.
--
-- Needs: GPU kernels launched by a runtime call HTA counts (cudaLaunchKernel[ExC], hip*LaunchKernel, hipGraphLaunch) or an XSpace launch event, in the trace; HTA leaves driver launches (cuLaunchKernel: Triton) out, and so does this
--
-- Parameters:
--   $include_memory_events  BOOLEAN  count copies and memsets launched by cudaMemcpyAsync / cudaMemsetAsync / hipMemcpy* / hipMemset* (default: true)
--   $runtime_cutoff_ps      BIGINT   a call longer than this is a runtime outlier, ps; HTA's 50 us [range: 0..] (default: 50000000)
--   $launch_delay_cutoff_ps BIGINT   a delay longer than this is a launch-delay outlier, ps; HTA's 100 us [range: 0..] (default: 100000000)
--
-- Passes: $include_last_step $us_rounding (to its includes, with their defaults and meaning)
--
-- Show: profile_id, rank, stream_id, launch_name, name, cpu_dur_ps, gpu_dur_ps, launch_delay_ps, short_kernel, long_runtime, long_delay
--
-- Columns:
--   profile_id  VARCHAR  profile (profiles.profile_id)
--   rank  BIGINT  distributed rank (profiles.rank)
--   device_id  INTEGER  devices.device_id of the GPU
--   stream_id  BIGINT  CUDA/HIP stream of the op
--   correlation_id  BIGINT  CUPTI (ROCm: roctracer) correlation id joining the call and the op
--   launch_name  VARCHAR  the CUDA or HIP call
--   name  VARCHAR  the op (kernel name, Memcpy ..., Memset ...)
--   launch_start_ps  BIGINT  call start, ps
--   cpu_dur_ps  BIGINT  call duration, ps
--   gpu_dur_ps  BIGINT  op duration, ps
--   launch_delay_ps  BIGINT  op start - call end, at least 0, ps
--   short_kernel  BOOLEAN  the op ran shorter than its call, and the call was not an outlier (HTA's "short GPU kernels")
--   long_runtime  BOOLEAN  cpu_dur_ps > $runtime_cutoff_ps
--   long_delay  BOOLEAN  launch_delay_ps > $launch_delay_cutoff_ps
WITH hta_gpu_ops AS (
-- @include hta._gpu_ops
)
SELECT
    profile_id, rank, device_id, stream_id, correlation_id, launch_name, name, launch_start_ps,
    launch_dur_ps AS cpu_dur_ps,
    dur_ps AS gpu_dur_ps,
    greatest(start_ps - launch_start_ps - launch_dur_ps, 0) AS launch_delay_ps,
    launch_dur_ps <= CAST($runtime_cutoff_ps AS BIGINT) AND dur_ps < launch_dur_ps AS short_kernel,
    launch_dur_ps > CAST($runtime_cutoff_ps AS BIGINT) AS long_runtime,
    greatest(start_ps - launch_start_ps - launch_dur_ps, 0) > CAST($launch_delay_cutoff_ps AS BIGINT) AS long_delay
FROM hta_gpu_ops
WHERE xprosql_launch_kind(launch_name) = 'kernel'
    -- XSpace GPU profiles (TensorFlow, JAX) name a launch event after what it launched, not after the
    -- CUDA call, and mark it api = 'launch' at ingest: the same kernels gpu.launch_coverage joins.
    OR (launch_api = 'launch' AND op_kind = 'kernel')
   OR (CAST($include_memory_events AS BOOLEAN) AND xprosql_launch_kind(launch_name) = 'memory')
ORDER BY profile_id, device_id, launch_start_ps, correlation_id
