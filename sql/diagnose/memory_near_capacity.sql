-- diagnose.memory_near_capacity: a device's allocator came within $within of the device's memory:
-- the next larger input, a longer sequence or a fragmented cache runs out of memory.
--
-- Per GPU allocator with a known device memory (memory.memory_peaks: GPU_N_bfc, cuda:N, hip:N and
-- devices.memory_bytes), two readings of "near": the peak in use (memory.memory_peaks'
-- peak_capacity_share, fleet.job_memory's near-capacity test), or the most the allocator ever held
-- (max memory_events.reserved_bytes: PyTorch's caching allocator keeps freed blocks, so a reserve
-- far above the bytes in use is fragmentation, which fails an allocation that the free total would
-- fit). TPU and host allocators have no known capacity and never fire.
--
-- Saving: none claimed for the risk itself; an out-of-memory error is not a slower step. What a
-- full allocator already costs shows as its calls to the driver: cudaMalloc / cudaFree / hipMalloc
-- / hipFree (and their async forms) inside complete steps, which the caching allocator makes when
-- its cache cannot serve a request (freeing cached blocks and retrying near capacity); cudaFree
-- synchronizes the device. The saving is their time (an upper bound on the device time they
-- stall), 0 when there are none. One finding per profile.
--
-- Parameters:
--   $within  DOUBLE  how close to the device's memory a peak counts as near capacity, a share of it; fleet.job_memory's default [range: 0..1] (default: 0.1)
--
-- Show: profile_id, rule, severity, expected_saving_share, title
--
-- Columns:
--   profile_id  VARCHAR  profile
--   job  VARCHAR  NULL (a finding about one profile)
--   rank  BIGINT  NULL
--   device  VARCHAR  the device of the allocator closest to its memory
--   step  BIGINT  NULL (the peak is over the profile)
--   rule  VARCHAR  memory_near_capacity
--   severity  VARCHAR  high, medium or low (xprosql_severity of expected_saving_share)
--   title  VARCHAR  one line a person reads
--   evidence  VARCHAR  the numbers as a sentence
--   measures  MAP(VARCHAR, DOUBLE)  peak_in_use_bytes, peak_reserved_bytes, capacity_bytes, peak_capacity_share, reserved_capacity_share, fragmentation_share, allocator_calls_count, allocator_calls_ps
--   subjects  VARCHAR[]  the allocators near capacity, closest first
--   expected_saving_ps  BIGINT  the allocator's driver calls inside complete steps (0 when none), ps
--   expected_saving_share  DOUBLE  that time's share of step time, 0..1
--   saving_method  VARCHAR  how the saving is estimated
--   fix  VARCHAR  what to change
--   reference  VARCHAR  where the rule comes from
WITH params AS (
    SELECT CAST($within AS DOUBLE) AS within
),
memory_peaks AS (
-- @include memory.memory_peaks
),
every_step AS (
-- @include steps.steps
),
profile_steps AS (
-- @include diagnose._profile_steps
),
reserved AS (
    SELECT profile_id, allocator, max(reserved_bytes) AS peak_reserved_bytes
    FROM memory_events
    GROUP BY ALL
),
allocators AS (
    SELECT k.profile_id, k.allocator, k.peak_in_use_bytes, k.capacity_bytes, k.peak_capacity_share,
        greatest(coalesce(r.peak_reserved_bytes, k.peak_in_use_bytes), k.peak_in_use_bytes) AS peak_reserved_bytes,
        TRY_CAST(coalesce(nullif(regexp_extract(k.allocator, '^GPU_([0-9]+)_', 1), ''),
                          nullif(regexp_extract(k.allocator, '^(?:cuda|hip):([0-9]+)$', 1), '')) AS INTEGER) AS gpu
    FROM memory_peaks AS k
    LEFT JOIN reserved AS r USING (profile_id, allocator)
    WHERE k.capacity_bytes > 0
),
near AS (
    SELECT a.*,
        a.peak_reserved_bytes / a.capacity_bytes AS reserved_share,
        greatest(a.peak_capacity_share, a.peak_reserved_bytes / a.capacity_bytes) AS closeness
    FROM allocators AS a
    CROSS JOIN params AS x
    WHERE a.peak_capacity_share >= 1 - x.within OR a.peak_reserved_bytes >= (1 - x.within) * a.capacity_bytes
),
per_profile AS (
    SELECT profile_id,
        arg_max(peak_in_use_bytes, closeness) AS peak_bytes,
        arg_max(peak_reserved_bytes, closeness) AS reserved_bytes,
        arg_max(capacity_bytes, closeness) AS capacity_bytes,
        arg_max(peak_capacity_share, closeness) AS peak_share,
        arg_max(reserved_share, closeness) AS reserved_share,
        arg_max(gpu, closeness) AS gpu,
        list(allocator ORDER BY closeness DESC, allocator) AS allocators
    FROM near
    GROUP BY profile_id
),
-- The complete steps of the profile's first device (host calls share its clock).
windows AS (
    SELECT s.profile_id, s.start_ps, s.end_ps
    FROM every_step AS s
    WHERE s.complete IS NOT false AND s.wall_ps > 0
      AND s.device_id = (SELECT min(x.device_id) FROM every_step AS x WHERE x.profile_id = s.profile_id)
),
allocator_calls AS (
    SELECT c.profile_id, count(*) AS calls,
        sum(greatest(least(c.start_ps + c.dur_ps, w.end_ps) - greatest(c.start_ps, w.start_ps), 0)) AS calls_ps
    FROM api_calls AS c
    JOIN windows AS w ON w.profile_id = c.profile_id AND c.start_ps < w.end_ps AND c.start_ps + c.dur_ps > w.start_ps
    WHERE c.profile_id IN (SELECT profile_id FROM per_profile)
      AND regexp_matches(c.name, '^(cuda|hip)(Malloc|Free)(Async)?$')
    GROUP BY c.profile_id
),
found AS (
    SELECT p.*, s.devices, s.step_ps, s.device_step_ps,
        coalesce(c.calls, 0) AS calls, coalesce(c.calls_ps, 0) AS calls_ps,
        least(coalesce(c.calls_ps, 0) / nullif(s.device_step_ps, 0), 1.0) AS share,
        (SELECT min(d.name) FROM devices AS d WHERE d.profile_id = p.profile_id AND d.kind = 'gpu' AND d.ordinal = p.gpu) AS device
    FROM per_profile AS p
    JOIN profile_steps AS s USING (profile_id)
    LEFT JOIN allocator_calls AS c USING (profile_id)
)
SELECT
    f.profile_id,
    CAST(NULL AS VARCHAR) AS job,
    CAST(NULL AS BIGINT) AS rank,
    f.device,
    CAST(NULL AS BIGINT) AS step,
    'memory_near_capacity' AS rule,
    xprosql_severity(coalesce(f.share, 0)) AS severity,
    printf('memory near capacity: %s peaks at %.1f%% of the device''s memory in use, %.1f%% reserved: out-of-memory risk',
        f.allocators[1], 100 * f.peak_share, 100 * f.reserved_share) AS title,
    printf('peak in use %.2f GiB, reserved up to %.2f GiB, of %.2f GiB (%s; %.1f%% of the reserve unused: fragmentation); %d allocator driver calls (cudaMalloc/cudaFree) in complete steps take %s',
        f.peak_bytes / 2^30, f.reserved_bytes / 2^30, f.capacity_bytes / 2^30, array_to_string(f.allocators[1:5], ', '),
        100 * (1 - f.peak_bytes / nullif(f.reserved_bytes, 0)), f.calls, xprosql_duration(f.calls_ps)) AS evidence,
    MAP {'peak_in_use_bytes': CAST(f.peak_bytes AS DOUBLE), 'peak_reserved_bytes': CAST(f.reserved_bytes AS DOUBLE),
         'capacity_bytes': CAST(f.capacity_bytes AS DOUBLE), 'peak_capacity_share': f.peak_share,
         'reserved_capacity_share': f.reserved_share,
         'fragmentation_share': 1 - f.peak_bytes / nullif(f.reserved_bytes, 0),
         'allocator_calls_count': CAST(f.calls AS DOUBLE), 'allocator_calls_ps': CAST(f.calls_ps AS DOUBLE)} AS measures,
    f.allocators[1:5] AS subjects,
    CAST(coalesce(f.share, 0) * f.step_ps AS BIGINT) AS expected_saving_ps,
    coalesce(f.share, 0) AS expected_saving_share,
    'none for the risk itself (an out-of-memory error is not time); the time of cudaMalloc / cudaFree / hipMalloc / hipFree '
        || 'calls inside complete steps, which a full caching allocator makes, as an upper bound; 0 without them' AS saving_method,
    'Leave memory headroom: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (less fragmentation), activation '
        || 'checkpointing (torch.utils.checkpoint, jax.checkpoint / jax.remat), a smaller micro-batch with gradient '
        || 'accumulation, sharding optimizer state (FSDP / ZeRO); JAX: XLA_PYTHON_CLIENT_MEM_FRACTION=.9 or '
        || 'XLA_PYTHON_CLIENT_PREALLOCATE=false to see real use; watch torch.cuda.memory_stats()["num_alloc_retries"]' AS fix,
    'XProf memory profile (peak heap vs. device memory, fragmentation); PyTorch "CUDA semantics: memory management" '
        || '(caching allocator, expandable_segments); JAX "GPU memory allocation" docs' AS reference
FROM found AS f
ORDER BY expected_saving_ps DESC, f.profile_id
