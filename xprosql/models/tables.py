"""The warehouse tables: names, columns, types, units and descriptions.

This module is the public contract of the warehouse: each table is a Delta Lake
table ``<root>/<table>/`` whose Parquet files hold ``profile_id`` as their first
column (not partitioned); compaction packs small files ordered by profile
(:mod:`xprosql.warehouse`). See the README for reading them without xprosql.

Times are integer picoseconds relative to the profile's ``start_ns``.

Example:
    >>> from xprosql.models import table_schema
    >>> table_schema("events").field("dur_ps").type
    DataType(int64)
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["INGEST_DERIVED_TABLES", "JOB_DERIVED_TABLES", "PACK_DERIVED_TABLES", "PARTITION_COLUMN", "TABLES", "column_unit", "table_schema", "tables_markdown"]

PARTITION_COLUMN = "profile_id"

_dict_str = pa.dictionary(pa.int32(), pa.string())


def _col(name: str, dtype: pa.DataType, description: str, unit: str | None = None) -> pa.Field:
    meta = {"description": description}
    if unit:
        meta["unit"] = unit
    return pa.field(name, dtype, metadata=meta)


_STAT_VALUE_COLUMNS = [
    _col("stat", _dict_str, "stat name (XStatMetadata.name)"),
    _col("value_type", _dict_str, "which value is set: double, uint64, int64, str, bytes, ref (XStat), json (a Kineto list or object, as text)"),
    _col("int_value", pa.int64(), "value when value_type is int64"),
    _col("uint_value", pa.uint64(), "value when value_type is uint64"),
    _col("double_value", pa.float64(), "value when value_type is double"),
    _col("str_value", pa.string(), "value when value_type is str, or the interned string of a ref"),
    _col("bytes_value", pa.binary(), "value when value_type is bytes"),
]

# The categories of a job's critical path (xprosql.queries.job_critical_path.JOB_BOUND_BY; a test checks they agree).
_JOB_PATH_CATEGORIES = ("cpu_bound", "gpu_compute_bound", "gpu_communication_bound", "gpu_kernel_kernel_overhead",
                        "gpu_kernel_launch_overhead", "cpu_untraced", "host_communication_bound", "start_skew")

TABLES: dict[str, pa.Schema] = {
    "profiles": pa.schema([
        _col("source_path", pa.string(), "absolute path of the ingested file"),
        _col("host", pa.string(), "host the profile was taken on (XSpace hostnames, Kineto host_name, else the file name: <host>_<pid>... of the TensorBoard handler)"),
        _col("run", pa.string(), "run directory of a jax.profiler.trace log (plugins/profile/<run>/)"),
        _col("tags", pa.map_(pa.string(), pa.string()), "user tags: ingest --tag k=v and xprosql.json files of the profile's directories; read one with tags['job']"),
        _col("format", _dict_str, "source format: xspace, kineto (PyTorch profiler JSON), cupti (xprosql.cupti recording) or rocprof (rocprofv3 JSON)"),
        _col("start_ns", pa.int64(), "profile time origin: the earliest event start", "ns since epoch (as recorded)"),
        _col("duration_ps", pa.int64(), "latest event end minus start_ns", "ps"),
        _col("n_events", pa.int64(), "rows written to events for this profile"),
        _col("n_devices", pa.int64(), "rows written to devices (XSpace planes)"),
        _col("file_bytes", pa.int64(), "size of the source file", "bytes"),
        _col("content_sha256", pa.string(), "SHA-256 of the file; profile_id is its first 16 hex digits"),
        _col("producer", pa.string(), "framework and version that wrote the profile, when the file says"),
        _col("profile_start_time_ns", pa.int64(), "Task Environment profile_start_time, when present", "ns since epoch"),
        _col("profile_stop_time_ns", pa.int64(), "Task Environment profile_stop_time, when present", "ns since epoch"),
        _col("rank", pa.int64(), "distributed rank (Kineto distributedInfo.rank)"),
        _col("world_size", pa.int64(), "distributed world size (Kineto distributedInfo.world_size)"),
        _col("trace_metadata", pa.string(), "JSON of the trace's top-level fields other than its events (Kineto)"),
        _col("dropped_events", pa.int64(), "source events not written, with reasons in drop_reasons"),
        _col("drop_reasons", pa.list_(pa.string()), "why events were dropped, e.g. '3 X events without ts'"),
        _col("errors", pa.list_(pa.string()), "errors the profiler recorded in the XSpace"),
        _col("warnings", pa.list_(pa.string()), "warnings the profiler recorded in the XSpace"),
        _col("ingested_at", pa.timestamp("us", tz="UTC"), "when xprosql wrote this profile"),
        _col("xprosql_version", pa.string(), "version of xprosql that wrote it"),
        _col("redacted_secrets", pa.int64(), "values replaced by <redacted> at ingest: credentials and values of keys naming secrets (xprosql.ingest.secrets); null when ingested with keep_secrets"),
    ]),
    "devices": pa.schema([
        _col("device_id", pa.int32(), "plane ordinal within the file: the key other tables use"),
        _col("plane_id", pa.int64(), "XPlane.id as recorded (not unique: host planes often share 0)"),
        _col("name", pa.string(), "plane name, e.g. /device:TPU:0, /host:CPU"),
        _col("kind", _dict_str, "tpu, gpu, cpu, host, metadata, custom, chip, task or other"),
        _col("ordinal", pa.int32(), "N of /device:<KIND>:N, when the name has it"),
        _col("model", pa.string(), "device model, e.g. TPU v6 Lite, Tesla V100, AMD Instinct MI300X"),
        _col("peak_flops_per_s", pa.float64(), "peak compute rate (profile stat, else hardware model)", "FLOP/s"),
        _col("peak_hbm_bytes_per_s", pa.float64(), "peak HBM bandwidth (profile stat, else hardware model)", "bytes/s"),
        _col("peak_source", _dict_str, "where the peaks came from: profile, hardware_model, or profile+hardware_model (GPU: bandwidth stat, modelled FLOP/s)"),
        _col("core_count", pa.int64(), "GPU SM count, AMD: compute units (core_count stat, Kineto numSms)"),
        _col("clock_rate_khz", pa.int64(), "GPU clock (clock_rate stat)", "kHz"),
        _col("memory_bytes", pa.int64(), "device memory size (memory_size stat)", "bytes"),
        _col("compute_capability", pa.string(), "CUDA compute capability, e.g. 7.0; AMD: the gfx arch, e.g. 9.4 for gfx942"),
        _col("n_tracks", pa.int32(), "lines in this plane"),
        _col("n_events", pa.int64(), "events in this plane"),
    ]),
    "device_stats": pa.schema([
        _col("device_id", pa.int32(), "devices.device_id"),
        *_STAT_VALUE_COLUMNS,
    ]),
    "tracks": pa.schema([
        _col("device_id", pa.int32(), "devices.device_id"),
        _col("track_id", pa.int32(), "line ordinal within the file: the key events use"),
        _col("line_id", pa.int64(), "XLine.id as recorded (thread id, GPU stream id, ...)"),
        _col("display_id", pa.int64(), "XLine.display_id"),
        _col("name", pa.string(), "line name, e.g. XLA Ops, Stream #134(Compute), main/3116817"),
        _col("display_name", pa.string(), "XLine.display_name"),
        _col("timestamp_ns", pa.int64(), "XLine.timestamp_ns as recorded", "ns"),
        _col("duration_ps", pa.int64(), "XLine.duration_ps as recorded", "ps"),
        _col("n_events", pa.int64(), "events on this line"),
        _col("sort_index", pa.int64(), "display order the trace asks for (Kineto thread_sort_index)"),
        _col("stream_id", pa.int64(), "GPU stream of a stream line (XSpace Stream #N, Kineto GPU tid)"),
    ]),
    "events": pa.schema([
        _col("event_id", pa.int64(), "event ordinal within the file (line order): the key event_stats uses"),
        _col("device_id", pa.int32(), "devices.device_id"),
        _col("track_id", pa.int32(), "tracks.track_id"),
        _col("metadata_id", pa.int64(), "XEvent.metadata_id: event_metadata key within the device"),
        _col("name", _dict_str, "event metadata name"),
        _col("display_name", _dict_str, "event metadata display name (the bare HLO op name on TPU op lines)"),
        _col("start_ps", pa.int64(), "start relative to profiles.start_ns; null for aggregated events", "ps"),
        _col("dur_ps", pa.int64(), "XEvent.duration_ps", "ps"),
        _col("num_occurrences", pa.int64(), "XEvent.num_occurrences of an aggregated event (no start)"),
        _col("hlo_module", _dict_str, "HLO module (stat hlo_module, else the module of program_id)"),
        _col("hlo_op", _dict_str, "HLO instruction (stat hlo_op, else parsed from the op name)"),
        _col("program_id", pa.uint64(), "XLA program id (stat program_id)"),
        _col("group_id", pa.int64(), "step group (stat group_id)"),
        _col("step_num", pa.int64(), "step number (stat step_num)"),
        _col("correlation_id", pa.int64(), "CUPTI correlation id (stat correlation_id)"),
        _col("category", _dict_str, "HLO category (stat hlo_category); for Kineto traces the event's cat (kernel, cpu_op, ...)"),
        _col("flops", pa.int64(), "FLOPs of one occurrence (stat flops)", "FLOP"),
        _col("bytes_accessed", pa.int64(), "bytes of one occurrence (stat bytes_accessed)", "bytes"),
        _col("is_async", pa.bool_(), "stat _a"),
        _col("device_offset_ps", pa.int64(), "TPU device clock start (stat device_offset_ps), as recorded", "ps"),
        _col("device_duration_ps", pa.int64(), "TPU device clock duration (stat device_duration_ps)", "ps"),
    ]),
    "event_stats": pa.schema([
        _col("event_id", pa.int64(), "events.event_id"),
        *_STAT_VALUE_COLUMNS,
    ]),
    "event_metadata": pa.schema([
        _col("device_id", pa.int32(), "devices.device_id"),
        _col("metadata_id", pa.int64(), "XEventMetadata.id"),
        _col("name", pa.string(), "XEventMetadata.name"),
        _col("display_name", pa.string(), "XEventMetadata.display_name"),
        _col("metadata", pa.binary(), "XEventMetadata.metadata bytes (usually empty)"),
        _col("child_ids", pa.list_(pa.int64()), "XEventMetadata.child_id"),
        _col("n_events", pa.int64(), "events that refer to this metadata"),
    ]),
    "metadata_stats": pa.schema([
        _col("device_id", pa.int32(), "devices.device_id"),
        _col("metadata_id", pa.int64(), "event_metadata.metadata_id"),
        *_STAT_VALUE_COLUMNS,
    ]),
    "kernels": pa.schema([
        _col("event_id", pa.int64(), "events.event_id of the same activity"),
        _col("device_id", pa.int32(), "devices.device_id (the GPU)"),
        _col("track_id", pa.int32(), "tracks.track_id (the stream's line)"),
        _col("stream_id", pa.int64(), "CUDA/HIP stream"),
        _col("name", _dict_str, "kernel name"),
        _col("start_ps", pa.int64(), "start relative to profiles.start_ns", "ps"),
        _col("dur_ps", pa.int64(), "duration", "ps"),
        _col("correlation_id", pa.int64(), "CUPTI correlation id: api_calls.correlation_id of the launch"),
        _col("grid_x", pa.int64(), "grid size, x"),
        _col("grid_y", pa.int64(), "grid size, y"),
        _col("grid_z", pa.int64(), "grid size, z"),
        _col("block_x", pa.int64(), "block size, x"),
        _col("block_y", pa.int64(), "block size, y"),
        _col("block_z", pa.int64(), "block size, z"),
        _col("registers_per_thread", pa.int64(), "registers per thread"),
        _col("shared_memory_bytes", pa.int64(), "shared memory per block (static + dynamic)", "bytes"),
        _col("occupancy_pct", pa.float64(), "estimated achieved occupancy, when the source has it", "%"),
        _col("hlo_module", _dict_str, "HLO module the kernel belongs to (XLA)"),
        _col("hlo_op", _dict_str, "HLO op the kernel belongs to (XLA)"),
        _col("framework_op", _dict_str, "framework op: Kineto cpu_op of the same External id, XSpace tf_op or annotation"),
    ]),
    "memcpys": pa.schema([
        _col("event_id", pa.int64(), "events.event_id of the same activity"),
        _col("device_id", pa.int32(), "devices.device_id (the GPU)"),
        _col("track_id", pa.int32(), "tracks.track_id (the stream's line)"),
        _col("stream_id", pa.int64(), "CUDA/HIP stream"),
        _col("kind", _dict_str, "HtoD, DtoH, DtoD, HtoH, PtoP, memset"),
        _col("bytes", pa.int64(), "bytes copied or set", "bytes"),
        _col("start_ps", pa.int64(), "start relative to profiles.start_ns", "ps"),
        _col("dur_ps", pa.int64(), "duration", "ps"),
        _col("correlation_id", pa.int64(), "CUPTI correlation id: api_calls.correlation_id of the call"),
        _col("src_kind", _dict_str, "source memory kind when known (Pageable, Pinned, Device, ...)"),
        _col("dst_kind", _dict_str, "destination memory kind when known"),
    ]),
    "api_calls": pa.schema([
        _col("event_id", pa.int64(), "events.event_id of the same call"),
        _col("device_id", pa.int32(), "devices.device_id (the host)"),
        _col("track_id", pa.int32(), "tracks.track_id (the calling thread)"),
        _col("thread", pa.string(), "calling thread (name, else id)"),
        _col("api", _dict_str, "runtime or driver (XSpace launch events: launch; rocprofv3 also compiler, hsa, rccl, rocdecode, rocjpeg)"),
        _col("name", _dict_str, "API name, e.g. cudaLaunchKernel, hipLaunchKernel (XSpace names the launched kernel)"),
        _col("start_ps", pa.int64(), "start relative to profiles.start_ns", "ps"),
        _col("dur_ps", pa.int64(), "duration", "ps"),
        _col("correlation_id", pa.int64(), "CUPTI correlation id: joins kernels and memcpys"),
    ]),
    "counters": pa.schema([
        _col("event_id", pa.int64(), "events.event_id of the counter event or range; NULL for plane-level stats"),
        _col("device_id", pa.int32(), "devices.device_id (TPU counters: the chip's plane)"),
        _col("kernel", pa.string(), "kernel the value was read for: XSpace the sample line's name (XProf's Kernel), Kineto the range name"),
        _col("sample", pa.int64(), "sample: XSpace the line id (XProf's Sample), on _counters_ lines the interval's rank; Kineto the range's rank; CUPTI PM sampling the sample index"),
        _col("counter_id", pa.int64(), "counter id: performance_counter_id stat; an unnamed TPU counter event without one: its metadata id"),
        _col("counter", _dict_str, "counter name (TPU: lowercased as XProf shows it, else from the xprof wheel's id dictionary), e.g. smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"),
        _col("description", pa.string(), "counter description, when the source has it"),
        _col("counter_set", pa.string(), "counter set, when the source has it; 'plane' for plane-level utilization stats; 'pm_sampling' for CUPTI PM samples"),
        _col("value", pa.uint64(), "raw value, when a non-negative integer (the all-ones 'could not read' value is dropped and counted in profiles.drop_reasons)"),
        _col("value_double", pa.float64(), "value as a double: every numeric value, fractional ones only here"),
        _col("start_ps", pa.int64(), "start of the range or sample", "ps"),
        _col("end_ps", pa.int64(), "end of the range or sample", "ps"),
    ]),
    "flows": pa.schema([
        _col("flow_id", pa.int64(), "flow id (Kineto ac2g: the correlation id)"),
        _col("category", _dict_str, "flow category, e.g. ac2g (launch to GPU), fwdbwd"),
        _col("phase", _dict_str, "s (start), t (step) or f (finish)"),
        _col("track_id", pa.int32(), "tracks.track_id of the flow point"),
        _col("ts_ps", pa.int64(), "time of the flow point", "ps"),
        _col("binding_point", _dict_str, "bp: e (enclosing slice) or absent (next slice)"),
    ]),
    "hlo_modules": pa.schema([
        _col("program_id", pa.uint64(), "XLA program id: events.program_id joins here"),
        _col("module", pa.string(), "HLO module name, e.g. jit_step"),
        _col("entry_computation", pa.string(), "name of the entry computation"),
        _col("n_computations", pa.int64(), "computations in the module"),
        _col("n_instructions", pa.int64(), "instructions in all computations"),
        _col("hlo_proto", pa.binary(), "the serialized xla.HloProto, as recorded"),
    ]),
    "hlo_ops": pa.schema([
        _col("program_id", pa.uint64(), "hlo_modules.program_id"),
        _col("module", pa.string(), "HLO module name"),
        _col("computation", pa.string(), "computation holding the instruction"),
        _col("is_entry_computation", pa.bool_(), "the computation is the module's entry"),
        _col("is_fusion_computation", pa.bool_(), "the computation is the body of a fusion"),
        _col("instruction_id", pa.int64(), "HloInstructionProto.id"),
        _col("hlo_op", pa.string(), "instruction name: events.hlo_op joins here"),
        _col("opcode", pa.string(), "HLO opcode, e.g. fusion, dot, convolution"),
        _col("shape", pa.string(), "result shape with layout, as XLA prints it, e.g. f32[8,128]{1,0}"),
        _col("element_type", pa.string(), "result element type, e.g. f32, bf16, tuple"),
        _col("dimensions", pa.list_(pa.int64()), "result dimensions ([] for scalars and tuples)"),
        _col("operand_names", pa.list_(pa.string()), "operand instruction names"),
        _col("operand_shapes", pa.list_(pa.string()), "operand shapes with layout"),
        _col("called_computations", pa.list_(pa.string()), "computations this instruction calls (fusion body, ...)"),
        _col("fusion_kind", pa.string(), "kLoop, kInput, kOutput, kCustom for fusions"),
        _col("custom_call_target", pa.string(), "target of a custom-call"),
        _col("op_type", pa.string(), "framework op type from OpMetadata"),
        _col("op_name", pa.string(), "framework op name from OpMetadata"),
        _col("source_file", pa.string(), "source file from OpMetadata"),
        _col("source_line", pa.int64(), "source line from OpMetadata"),
        _col("dot_lhs_contracting_dims", pa.list_(pa.int64()), "dot: lhs contracting dimensions"),
        _col("dot_rhs_contracting_dims", pa.list_(pa.int64()), "dot: rhs contracting dimensions"),
        _col("dot_lhs_batch_dims", pa.list_(pa.int64()), "dot: lhs batch dimensions"),
        _col("dot_rhs_batch_dims", pa.list_(pa.int64()), "dot: rhs batch dimensions"),
        _col("window", pa.string(), "window as XLA prints it, e.g. size=3x3 stride=1x1 pad=1_1x1_1"),
        _col("convolution_dims", pa.string(), "convolution dim_labels, e.g. b01f_01io->b01f"),
        _col("feature_group_count", pa.int64(), "convolution feature groups"),
        _col("batch_group_count", pa.int64(), "convolution batch groups"),
        _col("instruction_dimensions", pa.list_(pa.int64()), "the instruction's dimensions field (reduce, broadcast, ...)"),
        _col("parameter_number", pa.int64(), "parameter index of a parameter instruction"),
        _col("tuple_index", pa.int64(), "index of a get-tuple-element"),
        _col("derived_flops", pa.int64(), "FLOPs of one execution, derived from the HLO by XLA's cost-analysis rules (fusions: their body; custom calls: see derived_cost_source; null: unknown, a custom call known by its bytes only). A module's total is the sum over its entry computation", "FLOP"),
        _col("derived_transcendentals", pa.int64(), "transcendental ops (exp, tanh, ...) of one execution, derived like derived_flops"),
        _col("derived_bytes_accessed", pa.int64(), "bytes read and written by one execution, derived from operand and result sizes (fusions: what their body reads plus their results)", "bytes"),
        _col("derived_cost_source", pa.string(), "where derived_* come from (xprosql.ingest.hlo_cost): hlo (XLA's cost rules), declared (a Pallas/Mosaic kernel's cost_estimate), triton_gemm (a Triton GEMM fusion: 2·M·N·K of its dots), library (a known library custom call by target and shapes: cuDNN/TE/CK fused attention, cuBLAS/hipBLASLt GEMM, cuDNN/MIOpen convolution), operand_bytes (another custom call: operand and result bytes, a lower bound; FLOPs null); null in files written before it"),
    ]),
    # The compiler's buffer assignment of each HLO module (xprosql.ingest.hlo, from hlo_modules.hlo_proto):
    # what XProf's memory viewer draws. Program order is the heap simulator's order of events.
    "memory_buffers": pa.schema([
        _col("program_id", pa.uint64(), "hlo_modules.program_id"),
        _col("module", pa.string(), "HLO module name"),
        _col("logical_buffer_id", pa.int64(), "LogicalBufferProto.id; null on the one row of an allocation no logical buffer is assigned to"),
        _col("size_bytes", pa.int64(), "the logical buffer's size as assigned (padded, with layout)", "bytes"),
        _col("unpadded_bytes", pa.int64(), "its shape's size without layout padding (XProf's unpadded size: elements x element width; tuples 8 bytes an element)", "bytes"),
        _col("shape", pa.string(), "the buffer's shape with layout, as XLA prints it (the defining instruction's shape, or its tuple element)"),
        _col("element_type", pa.string(), "element type, e.g. f32, bf16, tuple"),
        _col("instruction", pa.string(), "the instruction that defines it (hlo_ops.hlo_op)"),
        _col("shape_index", pa.list_(pa.int64()), "where in the instruction's (tuple) result it is defined; [] for the whole result"),
        _col("opcode", pa.string(), "the defining instruction's opcode"),
        _col("op_name", pa.string(), "the defining instruction's framework op (OpMetadata.op_name)"),
        _col("color", pa.int64(), "memory space (LogicalBufferProto.color): 0 is device memory (HBM)"),
        _col("kind", _dict_str, "the allocation's kind as XProf names it: parameter, output, thread_local, constant or temp"),
        _col("allocation_index", pa.int64(), "BufferAllocationProto.index of the allocation the buffer is packed into"),
        _col("allocation_bytes", pa.int64(), "that allocation's size", "bytes"),
        _col("offset_bytes", pa.int64(), "the buffer's offset inside its allocation", "bytes"),
        _col("is_parameter", pa.bool_(), "the allocation holds an entry computation parameter"),
        _col("maybe_live_out", pa.bool_(), "the allocation may be live out of the module (an output)"),
        _col("is_thread_local", pa.bool_(), "the allocation is thread-local"),
        _col("is_constant", pa.bool_(), "the allocation holds a constant"),
        _col("is_tuple", pa.bool_(), "the allocation holds a tuple's index table"),
        _col("heap_trace", pa.int64(), "index of the heap simulator trace whose events include the buffer; null for buffers the simulator does not trace (parameters, constants, ...)"),
        _col("alloc_position", pa.int64(), "program order: index in that trace of the event that makes the buffer live (ALLOC, or SHARE_WITH)"),
        _col("free_position", pa.int64(), "program order: index of its FREE event; null when never freed"),
        _col("shares_with", pa.int64(), "the canonical buffer whose memory a SHARE_WITH event reuses (logical_buffer_id)"),
        _col("canonical_buffer_id", pa.int64(), "the buffer whose memory this one occupies, after every SHARE_WITH (itself when it shares none)"),
    ]),
    # Derived at ingest by sql/memory/_memory_events.sql: every allocation and free, on every source.
    "memory_events": pa.schema([
        _col("event_id", pa.int64(), "events.event_id of the allocation or free"),
        _col("device_id", pa.int32(), "devices.device_id of the plane or process that recorded it"),
        _col("allocator", pa.string(), "XSpace allocator_name (GPU_0_bfc), else index_on_host=N; Kineto cpu, cuda:N, hip:N"),
        _col("kind", _dict_str, "allocation or free"),
        _col("start_ps", pa.int64(), "when", "ps"),
        _col("bytes", pa.int64(), "bytes allocated or freed (positive)", "bytes"),
        _col("requested_bytes", pa.int64(), "bytes asked for (XSpace)", "bytes"),
        _col("address", pa.int64(), "the block's address"),
        _col("in_use_bytes", pa.int64(), "the allocator's bytes in use after the event", "bytes"),
        _col("reserved_bytes", pa.int64(), "the bytes the allocator holds after the event, at least in_use_bytes (Kineto Total Reserved; XSpace heap in use plus stack reserved)", "bytes"),
        _col("allocator_peak_bytes", pa.int64(), "the allocator's own peak in use so far (XSpace peak_bytes_in_use)", "bytes"),
        _col("fragmentation", pa.float64(), "the allocator's fragmentation after the event (XSpace)"),
        _col("op", pa.string(), "the op that asked for it (XSpace tf_op)"),
        _col("region_type", pa.string(), "XSpace region_type"),
        _col("data_type", pa.string(), "XSpace data_type"),
        _col("shape", pa.string(), "XSpace shape of the tensor"),
    ]),
    # Derived at ingest by sql/torch/_framework_op_kernels.sql: the PyTorch op each GPU activity of a Kineto
    # trace belongs to (the roofline, the bottleneck breakdown and framework_ops read it).
    "framework_op_kernels": pa.schema([
        _col("event_id", pa.int64(), "events.event_id of the kernel, copy or memset"),
        _col("device_id", pa.int32(), "devices.device_id of the GPU"),
        _col("activity", _dict_str, "kernel, memcpy or memset"),
        _col("start_ps", pa.int64(), "the activity's start", "ps"),
        _col("dur_ps", pa.int64(), "its duration", "ps"),
        _col("launch_id", pa.int64(), "events.event_id of the API call that launched it (same correlation id)"),
        _col("innermost_op_id", pa.int64(), "events.event_id of the innermost op (cpu_op) around the launch"),
        _col("around_op_ids", pa.list_(pa.int64()), "every op around the launch, innermost first"),
        _col("op_event_id", pa.int64(), "events.event_id of the op call it belongs to: the nearest op around the launch with costs of its own, else the innermost"),
        _col("op", _dict_str, "that op's name, e.g. aten::mm"),
        _col("input_shapes", pa.string(), "its Input Dims as recorded (JSON)"),
        _col("input_dtypes", pa.string(), "its Input type as recorded (JSON)"),
        _col("precision", _dict_str, "dtype class of its math: fp8, bf16, fp16, fp32, fp64, int8, int"),
        _col("cost_source", _dict_str, "declared (a compiled kernel's kernel_flop / kernel_num_gb args), trace (the trace's flops arg), shapes (xprosql.models.torch_costs), operand_bytes (a compiled kernel's tensor arguments: bytes only) or null (no cost data)"),
        _col("first_of_call", pa.bool_(), "the call's first activity on this device: it carries the call's costs"),
        _col("flops", pa.float64(), "the call's FLOPs on its first activity, 0 on the others, null without cost data", "FLOP"),
        _col("bytes_accessed", pa.float64(), "the call's bytes like flops", "bytes"),
    ]),
    # Derived at ingest by sql/torch/_framework_op_stats.sql: PyTorch ops per device and input signature.
    "framework_op_stats": pa.schema([
        _col("device_id", pa.int32(), "devices.device_id of the GPU its subtree's activities ran on, else of the host"),
        _col("op", pa.string(), "op name, e.g. aten::mm"),
        _col("input_shapes", pa.string(), "Input Dims as recorded (JSON); null without record_shapes"),
        _col("input_dtypes", pa.string(), "Input type as recorded (JSON)"),
        _col("precision", _dict_str, "dtype class of the op's math: fp8, bf16, fp16, fp32, fp64, int8, int"),
        _col("cost_source", _dict_str, "declared, trace, shapes, operand_bytes (see framework_op_kernels), nested (the costed ops inside it) or null (none)"),
        _col("cost_rule", _dict_str, "the rule of an op costed by its own shapes: gemm, conv, attention, unary, ..."),
        _col("occurrences", pa.int64(), "calls"),
        _col("costed_occurrences", pa.int64(), "calls with cost data (FLOPs or bytes)"),
        _col("cpu_total_time_ps", pa.int64(), "CPU time of the calls, including the ops they call", "ps"),
        _col("cpu_self_time_ps", pa.int64(), "CPU time less that of the ops and API calls directly inside", "ps"),
        _col("kernel_time_ps", pa.int64(), "per call, the union of its subtree's GPU activities, summed over calls", "ps"),
        _col("costed_kernel_time_ps", pa.int64(), "kernel_time_ps of the calls with cost data", "ps"),
        _col("self_kernel_time_ps", pa.int64(), "GPU activities whose launch's innermost op is this op", "ps"),
        _col("kernels", pa.int64(), "GPU activities (kernels, copies, memsets) in the calls' subtrees"),
        _col("flops", pa.float64(), "FLOPs of the calls with cost data", "FLOP"),
        _col("bytes_accessed", pa.float64(), "bytes of the calls with cost data", "bytes"),
    ]),
    # Derived at ingest by sql/ops/_op_stats.sql from the tables above: what the roofline reads.
    "op_stats": pa.schema([
        _col("device_id", pa.int32(), "devices.device_id the op ran on"),
        _col("device_kind", _dict_str, "tpu, gpu or cpu (host planes running XLA:CPU programs)"),
        _col("program_id", pa.uint64(), "XLA program id; null for ops without one"),
        _col("op", pa.string(), "HLO op (events.hlo_op); for Kineto traces the PyTorch op of framework_op_kernels; else the event name (a GPU kernel)"),
        _col("input_shapes", pa.string(), "a PyTorch op's Input Dims (JSON); null for other ops"),
        _col("input_dtypes", pa.string(), "a PyTorch op's Input type (JSON)"),
        _col("precision", _dict_str, "a PyTorch op's dtype class (fp8, bf16, fp16, fp32, ...): which FLOP/s roof applies"),
        _col("module", pa.string(), "HLO module name, when known"),
        _col("category", pa.string(), "HLO category from the profile, else the HLO opcode; PyTorch ops: cpu_op"),
        _col("cost_source", _dict_str, "where flops and bytes came from: profile (op stats); hlo, declared, triton_gemm, library or operand_bytes (hlo_ops.derived_cost_source); declared, trace, shapes or operand_bytes (PyTorch ops: framework_op_kernels.cost_source); or null (none)"),
        _col("occurrences", pa.int64(), "executions"),
        _col("total_time_ps", pa.int64(), "time including nested ops", "ps"),
        _col("self_time_ps", pa.int64(), "total_time_ps minus the time of ops nested in it on the same line", "ps"),
        _col("async_window_ps", pa.int64(), "async pairs (copy-start .. copy-done, ...): start-to-done windows, summed; null otherwise", "ps"),
        _col("bandwidth_time_ps", pa.int64(), "the time bytes move in: async windows, else the ops' time", "ps"),
        _col("flops", pa.float64(), "FLOPs, summed over occurrences", "FLOP"),
        _col("bytes_accessed", pa.float64(), "bytes read and written, summed over occurrences", "bytes"),
        _col("has_breakdown", pa.bool_(), "some occurrence has a memory_access_breakdown stat"),
        _col("breakdown_hbm_bytes", pa.float64(), "HBM bytes of the breakdowns (memory space 1); 0 without one", "bytes"),
        _col("vmem_read_bytes", pa.float64(), "VMEM bytes read (breakdown memory space 3); 0 without a breakdown", "bytes"),
        _col("vmem_write_bytes", pa.float64(), "VMEM bytes written", "bytes"),
        _col("cmem_read_bytes", pa.float64(), "CMEM bytes read (breakdown memory space 2)", "bytes"),
        _col("cmem_write_bytes", pa.float64(), "CMEM bytes written", "bytes"),
        _col("xla_devices", pa.int64(), "XLA devices of this plane the op ran on: 1, or on a host plane running several (JAX on CPU), the device_ordinal values of its events"),
        _col("device_start_ps", pa.int64(), "the device's first op start (the same on every row of the device)", "ps"),
        _col("device_end_ps", pa.int64(), "the device's last op end", "ps"),
        _col("device_time_ps", pa.int64(), "the device's time: first op start to last op end of each of its XLA devices, summed (the same on every row of the device)", "ps"),
        _col("op_key", pa.string(), "the op's identity across runs, what fleet analyses join on: 16 hex digits (xprosql_op_key) of op_key_source, the op, its shapes and dtypes and op_key_context; null in files written before it (analyses then make it from the row)"),
        _col("op_key_source", _dict_str, "what op_key is made of: hlo (HLO module fingerprint + instruction), hlo_name (module name + instruction: no HLO proto), torch (op, input shapes, dtypes, nn.Module path), kernel (kernel name normalised, grid)"),
        _col("op_key_context", pa.string(), "op_key's part beyond the op's name, shapes and dtypes: the HLO module fingerprint, the module name (hlo_name), a PyTorch op's nn.Module path, or a kernel's grid x,y,z"),
    ]),
    # The rows of the steps analysis (sql/steps/steps.sql, default parameters), stored by compaction for the
    # profiles it compacts; empty for profiles not compacted yet: run.steps() computes theirs from their events.
    "stored_steps": pa.schema([
        _col("device_id", pa.int32(), "devices.device_id of the busy device"),
        _col("device", pa.string(), "device name, e.g. /device:TPU:0"),
        _col("device_kind", pa.string(), "tpu, gpu, or host (a profile without accelerators)"),
        _col("step_index", pa.int64(), "0-based position of the step on its device, by start"),
        _col("step", pa.int64(), "step number as recorded (step_num, group_id, N of ProfilerStep#N)"),
        _col("step_name", pa.string(), "step name as recorded"),
        _col("source", pa.string(), "where the step came from: steps_line, group_id, step_annotation, profiler_step, profile"),
        _col("start_ps", pa.int64(), "step start", "ps"),
        _col("end_ps", pa.int64(), "step end: the step marker's own end", "ps"),
        _col("wall_ps", pa.int64(), "end_ps - start_ps", "ps"),
        _col("busy_ps", pa.int64(), "time inside the step when at least one op of the device runs", "ps"),
        _col("idle_ps", pa.int64(), "wall_ps - busy_ps", "ps"),
        _col("busy_fraction", pa.float64(), "busy_ps / wall_ps (XProf's duty cycle)"),
        _col("complete", pa.bool_(), "false for a step XProf's overview drops as incomplete (first or last of more than 5)"),
    ]),
    # The rows of sql/steps/_bottleneck_steps.sql (default parameters), stored by compaction for the profiles it
    # compacts; empty for profiles not compacted yet, whose bottlenecks are computed from their events.
    "stored_bottleneck_steps": pa.schema([
        _col("device_id", pa.int32(), "devices.device_id"),
        _col("device", pa.string(), "device name"),
        _col("device_kind", pa.string(), "tpu, gpu or host"),
        _col("step_index", pa.int64(), "steps.step_index"),
        _col("step", pa.int64(), "steps.step (the recorded step number)"),
        _col("source", pa.string(), "steps.source"),
        _col("steps", pa.int32(), "steps in the row (1)"),
        _col("devices", pa.int32(), "devices in the row (1)"),
        _col("start_ps", pa.int64(), "step start", "ps"),
        _col("end_ps", pa.int64(), "step end", "ps"),
        _col("step_ps", pa.int64(), "wall time", "ps"),
        _col("busy_ps", pa.int64(), "time some op of the device runs (steps.busy_ps)", "ps"),
        _col("compute_bound_ps", pa.int64(), "an op runs that the roofline calls compute-bound", "ps"),
        _col("memory_bound_ps", pa.int64(), "an op runs that the roofline calls memory-bound", "ps"),
        _col("other_compute_ps", pa.int64(), "an op runs without cost data or known peaks", "ps"),
        _col("exposed_collective_ps", pa.int64(), "no compute runs, a collective does", "ps"),
        _col("exposed_host_offload_ps", pa.int64(), "no compute or collective; a host-offload copy window is open", "ps"),
        _col("exposed_dma_ps", pa.int64(), "no compute or collective; another copy window is open or a GPU copy runs", "ps"),
        _col("launch_overhead_ps", pa.int64(), "the device is idle while work it will run has been launched", "ps"),
        _col("input_wait_ps", pa.int64(), "the device is idle while the host reads input, or an infeed op runs", "ps"),
        _col("host_wait_ps", pa.int64(), "the device is idle and more of its work follows in the step", "ps"),
        _col("idle_ps", pa.int64(), "the device is idle and nothing more runs in the step", "ps"),
        _col("flops", pa.float64(), "FLOPs of the ops starting in the step", "FLOP"),
        _col("bytes_accessed", pa.float64(), "bytes of the ops starting in the step", "bytes"),
        _col("flop_capacity", pa.float64(), "devices.peak_flops_per_s x step time", "FLOP"),
        _col("byte_capacity", pa.float64(), "devices.peak_hbm_bytes_per_s x step time", "bytes"),
    ]),
    # The rows of sql/jobs/_collective_calls.sql, stored by compaction: the job analyses match them across ranks
    # instead of finding every profile's collectives in its events again.
    "stored_collective_calls": pa.schema([
        _col("event_id", pa.int64(), "events.event_id of the call"),
        _col("device_id", pa.int32(), "devices.device_id it ran on"),
        _col("stream_id", pa.int64(), "the GPU stream of a kernel (kernels.stream_id); NULL for other sources"),
        _col("source", pa.string(), "gpu_kernel, host_annotation or xla_op"),
        _col("kind", pa.string(), "all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce, send_recv, collective_permute, ..."),
        _col("name", pa.string(), "the event's name, or for an XLA op its HLO op"),
        _col("process_group", pa.string(), "process group name, else 0; XLA: the HLO module"),
        _col("seq", pa.int64(), "the collective's sequence number in its group, when recorded"),
        _col("group_size", pa.int64(), "ranks in the communicator, when recorded"),
        _col("in_elements", pa.int64(), "elements of the input"),
        _col("dtype_bytes", pa.int64(), "bytes per element of its dtype", "bytes"),
        _col("bytes", pa.int64(), "the message NCCL's tests measure", "bytes"),
        _col("step", pa.int64(), "the step (steps.step) its launch, or itself, starts in"),
        _col("start_ps", pa.int64(), "start", "ps"),
        _col("end_ps", pa.int64(), "end", "ps"),
    ]),
    # The rows of sql/memory/memory_peaks.sql (default parameters: one row per allocator), stored by compaction:
    # a fleet's peaks are read, not found again in every profile's memory events.
    "stored_memory_peaks": pa.schema([
        _col("device_id", pa.int32(), "devices.device_id of the plane or process that recorded the events"),
        _col("allocator", pa.string(), "memory_events.allocator"),
        _col("step_index", pa.int64(), "NULL (the whole profile)"),
        _col("step", pa.int64(), "NULL (the whole profile)"),
        _col("peak_in_use_bytes", pa.int64(), "the highest in-use total of the profile's events", "bytes"),
        _col("peak_ps", pa.int64(), "when it was first reached", "ps"),
        _col("xprof_peak_offset_ps", pa.int64(), "XProf's peakStatsTimePs (XSpace)", "ps"),
        _col("reserved_at_peak_bytes", pa.int64(), "bytes the allocator held then", "bytes"),
        _col("fragmentation_at_peak", pa.float64(), "the allocator's fragmentation then (XSpace), 0..1"),
        _col("allocator_peak_bytes", pa.int64(), "the allocator's own peak so far, at the profile's end (XSpace)", "bytes"),
        _col("live_at_peak", pa.list_(pa.struct([("op", pa.string()), ("shape", pa.string()), ("blocks", pa.int64()),
                                                ("bytes", pa.int64())])),
             "the blocks live at the peak, summed by op and shape, the 5 largest first"),
        _col("unattributed_at_peak_bytes", pa.int64(), "bytes in use at the peak no allocation of the profile accounts for", "bytes"),
        _col("allocations", pa.int64(), "allocations of the profile"),
        _col("frees", pa.int64(), "frees of the profile"),
        _col("unfreed", pa.int64(), "allocations whose block is not freed later in the profile"),
        _col("unfreed_bytes", pa.int64(), "their bytes", "bytes"),
        _col("capacity_bytes", pa.int64(), "the device's memory", "bytes"),
        _col("peak_capacity_share", pa.float64(), "peak_in_use_bytes / capacity_bytes, 0..1"),
    ]),
    # Job-level stored tables (JOB_DERIVED_TABLES): one job's rows under the job's first profile (its smallest
    # profile_id), for the jobs the compaction that wrote them listed (Snapshot.stored_jobs). A job's id is the hash of
    # its members, so a member arriving later makes a new job, computed at query time until the next compaction.
    # The rows of xprosql.queries.job_critical_path.job_critical_path() without changes:
    "stored_job_critical_path": pa.schema([
        _col("job_id", pa.string(), "the job (jobs.jobs.job_id)"),
        _col("job", pa.string(), "its key (jobs.jobs.job)"),
        _col("job_tag", pa.string(), "its tags['job'], when tagged"),
        _col("step", pa.int64(), "the step number"),
        _col("ranks", pa.int64(), "members with a window of the step"),
        _col("measured_ps", pa.int64(), "the job's step as measured: from the latest end of the previous step's windows to the latest end of its own", "ps"),
        _col("longest_wall_ps", pa.int64(), "the longest member window of the step", "ps"),
        _col("baseline_ps", pa.int64(), "the graph replayed unchanged", "ps"),
        _col("length_ps", pa.int64(), "the graph replayed with the changes (none here: baseline_ps)", "ps"),
        _col("saving_ps", pa.int64(), "baseline_ps - length_ps, at least 0", "ps"),
        _col("saving_share", pa.float64(), "saving_ps / baseline_ps, 0..1"),
        *[_col(f"{category}_ps", pa.int64(), f"time of the path's {category} edges", "ps") for category in _JOB_PATH_CATEGORIES],
        *[_col(f"{category}_share", pa.float64(), f"{category}_ps / the path's timed edges, 0..1")
          for category in _JOB_PATH_CATEGORIES],
        _col("path_ranks", pa.list_(pa.int64()), "the ranks the path runs through, in order"),
        _col("rank_switches", pa.int64(), "len(path_ranks) - 1"),
        _col("held_by_member", pa.string(), "the member with most time on the path"),
        _col("held_by_rank", pa.int64(), "its rank"),
        _col("held_by_share", pa.float64(), "its share of the path, 0..1"),
        _col("held_by_op", pa.string(), "the op or annotation with most time on the path"),
        _col("held_by_op_rank", pa.int64(), "the rank it ran on"),
        _col("held_by_op_ps", pa.int64(), "its time on the path", "ps"),
        _col("collectives_on_path", pa.int64(), "collective instances whose last arrival the path waits for"),
        _col("changed", pa.list_(pa.string()), "the changes applied, as text (none here)"),
        _col("path_edges", pa.int64(), "edges of the path"),
        _col("graph_edges", pa.int64(), "edges of the step's windows"),
        _col("missing_edges", pa.list_(pa.string()), "what the members' traces lack, 'rank N:' before each"),
    ]),
    # The rows of xprosql.queries.job_critical_path.job_what_if() (run.what_if()) with default parameters:
    "stored_job_what_if": pa.schema([
        _col("job_id", pa.string(), "the job (jobs.jobs.job_id)"),
        _col("scope", pa.string(), "step or job (its steps summed)"),
        _col("step", pa.int64(), "step number; NULL for scope job"),
        _col("steps", pa.int64(), "steps in the row"),
        _col("ranks", pa.int64(), "ranks with matched collectives in the step(s)"),
        _col("job_step_ps", pa.int64(), "the job's step time", "ps"),
        _col("worst_member", pa.string(), "the member that imposed the most delay"),
        _col("worst_rank", pa.int64(), "its rank"),
        _col("worst_delay_ps", pa.int64(), "the delay it imposed", "ps"),
        _col("median_delay_ps", pa.int64(), "the median delay the step's ranks imposed", "ps"),
        _col("what_if_step_ps", pa.int64(), "the step time with the worst rank running like the median", "ps"),
        _col("saving_ps", pa.int64(), "job_step_ps - what_if_step_ps", "ps"),
        _col("saving_share", pa.float64(), "saving_ps / job_step_ps, 0..1"),
        _col("method", pa.string(), "replay (over the job's critical-path graph), subtraction, or mixed (scope job)"),
    ]),
    # The findings of the per-profile rules (sql/diagnose/_profile_findings.sql, default thresholds), stored by
    # compaction; empty for profiles not compacted yet, whose findings are computed from their events.
    # Every rule of sql/diagnose/ returns exactly these columns (tests/test_diagnose.py checks).
    "stored_findings": pa.schema([
        _col("job", pa.string(), "the job (jobs.jobs) of a finding about a job's ranks; NULL otherwise"),
        _col("rank", pa.int64(), "the rank the finding names (a straggler); NULL otherwise"),
        _col("device", pa.string(), "the device most affected; NULL when the finding is about the whole profile"),
        _col("step", pa.int64(), "steps.step of the step most affected; NULL when about every step"),
        _col("rule", pa.string(), "the rule: the name of its module sql/diagnose/<rule>.sql"),
        _col("severity", pa.string(), "high (the fix saves at least 20% of step time), medium (at least 5%), low"),
        _col("title", pa.string(), "one line a person reads"),
        _col("evidence", pa.string(), "the numbers behind the finding, as a sentence"),
        _col("measures", pa.map_(pa.string(), pa.float64()), "the same numbers by name; a name ends in its unit (_ps, _share, _bytes, _count)"),
        _col("subjects", pa.list_(pa.string()), "the ops, kernels, calls, ranks or profiles the finding names, the worst first"),
        _col("expected_saving_ps", pa.int64(), "step time a fix would save over the profile's complete steps (diagnose._profile_steps)", "ps"),
        _col("expected_saving_share", pa.float64(), "expected_saving_ps / the profile's step time, 0..1"),
        _col("saving_method", pa.string(), "how expected_saving_ps is estimated"),
        _col("fix", pa.string(), "what to change: the action, with the API or flag to try"),
        _col("reference", pa.string(), "the documentation or paper behind the rule"),
    ]),
}

# Table -> the SQL module (sql/<area>/<name>.sql) whose rows it stores, run with its default parameters.
# Written at ingest from the profile's decoded tables:
# (in this order: each reads the tables derived before it).
INGEST_DERIVED_TABLES: dict[str, str] = {"memory_events": "memory._memory_events",
                                         "framework_op_kernels": "torch._framework_op_kernels",
                                         "framework_op_stats": "torch._framework_op_stats",
                                         "op_stats": "ops._op_stats"}
# Written by compaction for the profiles it sees the first time, from their other tables:
PACK_DERIVED_TABLES: dict[str, str] = {"stored_steps": "steps.steps", "stored_bottleneck_steps": "steps._bottleneck_steps",
                                       "stored_collective_calls": "jobs._collective_calls",
                                       "stored_memory_peaks": "memory.memory_peaks",
                                       "stored_findings": "diagnose._profile_findings"}
# Written by compaction for the jobs whose rows it has not stored (see the schemas above):
JOB_DERIVED_TABLES = ("stored_job_critical_path", "stored_job_what_if")


def table_schema(name: str) -> pa.Schema:
    """Arrow schema of a warehouse table (without the ``profile_id`` partition column)."""
    if name not in TABLES:
        raise KeyError(f"unknown table {name!r}; tables are {sorted(TABLES)}")
    return TABLES[name]


def column_unit(table: str, column: str) -> str | None:
    """Unit of a column, or None when it has none (names, ids, counts)."""
    field = table_schema(table).field(column)
    meta = field.metadata or {}
    unit = meta.get(b"unit")
    return unit.decode() if unit else None


def tables_markdown() -> str:
    """The table reference as Markdown (``docs/tables.md`` is this text)."""
    lines = [
        "# Warehouse tables",
        "",
        "Generated from `xprosql/models/tables.py`; a test checks it is current. Regenerate with",
        "`python -c 'from xprosql.models.tables import tables_markdown as t; print(t(), end=\"\")' > docs/tables.md`.",
        "Each table is a Delta Lake table `<root>/<table>/` (read it with `deltalake`, `pl.scan_delta`, DuckDB, Spark);",
        "its Parquet files hold `profile_id` as a column, and compaction packs small files ordered by it;",
        "times are integer picoseconds relative to `profiles.start_ns`.",
    ]
    for name, schema in TABLES.items():
        lines += ["", f"## {name}", "", "| column | type | unit | description |", "|---|---|---|---|"]
        lines.append("| profile_id | string | | the profile: first 16 hex digits of the file's SHA-256 |")
        for field in schema:
            meta = field.metadata or {}
            type_name = "string (dictionary)" if pa.types.is_dictionary(field.type) else str(field.type)
            unit = meta.get(b"unit", b"").decode()
            lines.append(f"| {field.name} | {type_name} | {unit} | {meta.get(b'description', b'').decode()} |")
    return "\n".join(lines) + "\n"

