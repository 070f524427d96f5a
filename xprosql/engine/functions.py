"""SQL functions and helper tables that every :class:`xprosql.Run` connection has.

* ``xprosql_memory_access(BLOB)`` decodes the ``memory_access_breakdown`` stat
  (a serialized ``tensorflow.profiler.MemoryAccessBreakdown``: repeated
  ``memory_accessed = 1`` of ``{operation_type = 1 (1 read, 2 write),
  memory_space = 2 (1 HBM, 2 CMEM, 3 VMEM), bytes_accessed = 3}``, field numbers
  as in XProf's ``op_metrics.proto``) into a list of
  ``STRUCT(operation_type INTEGER, memory_space BIGINT, bytes BIGINT)``.
* ``xprosql_collective(name VARCHAR, category VARCHAR)``: the kind of collective an event
  is (``all_reduce``, ``all_gather``, ``reduce_scatter``, ``all_to_all``, ``collective_permute``,
  ``broadcast``, ``reduce``, ``send``, ``recv``, ``send_recv``, ``barrier``, ``gather``,
  ``scatter``, or ``other``), NULL when it is none, on every backend: XLA ops by their HLO
  opcode (``category``) or an op named after it (``all-reduce.3``, ``all-gather-start``),
  NCCL / RCCL / HCCL kernels, PyTorch process-group annotations (``gloo:all_reduce``,
  ``nccl:broadcast``), ``c10d::`` ops and ``record_param_comms``. One definition, so every
  analysis counts the same events as communication.
* ``xprosql_launch_kind(name VARCHAR)``: ``kernel`` or ``memory`` when an API call of that name
  launches GPU work HTA's launch statistics count (CUDA: ``cudaLaunchKernel``,
  ``cudaLaunchKernelExC``, MTIA's ``runFunction``; ``cudaMemcpyAsync``, ``cudaMemsetAsync``) or
  its ROCm counterpart (``hip[Ext][Module]LaunchKernel``, ``hipGraphLaunch``; ``hipMemcpy*``,
  ``hipMemset*``), else NULL (docs/reference.md, AMD GPUs). One list for every analysis.
* ``xprosql_gpu_work(category VARCHAR)``: whether an event on a GPU's line is work the GPU ran (a kernel,
  copy, memset, an XSpace stream op) rather than an annotation, a stream wait, a host event sharing the GPU's
  pid, or a CUPTI counter range (which spans the replays that collect its metrics, not the kernel's run). One
  definition, so ops.roofline, ops.top_ops and the steps count the same GPU work.
* ``xprosql_torch_cost(op, input_dims, input_types, concrete_inputs VARCHAR)``: FLOPs, bytes, rule and
  dtype class of one call of a PyTorch op from the shapes Kineto records (JSON text of its ``Input Dims``,
  ``Input type`` and ``Concrete Inputs`` args), by the rules of :mod:`xprosql.models.torch_costs`, and whether
  the op is a composite whose callee carries the cost; NULL when no rule applies.
* ``xprosql_tensor_bytes(input_dims, input_types VARCHAR)``: bytes of the tensor arguments of one call (each
  once: what a compiled kernel moves at the least), :func:`xprosql.models.torch_costs.tensor_bytes`; NULL when
  none is a tensor of a known dtype.
* ``xprosql_kernel_name(name VARCHAR)``: a kernel's name as the same kernel is named in another run: a demangled
  C++ name without its parameter list, addresses (``0x...``) as ``0x``, whitespace runs as one space, and a Triton or
  XLA fusion kernel's trailing instance number dropped (``triton_poi_fused_add_3``, ``loop_add_fusion_2``: numbers
  the compiler hands out in order, which shift when other kernels come and go).
* ``xprosql_op_key(source, op, input_shapes, input_dtypes, context VARCHAR)``: an op's identity across runs
  (``op_stats.op_key``): the first 16 hex digits of the MD5 of its parts, the op name normalised by
  ``xprosql_kernel_name`` when ``source`` is ``kernel``. One definition for ops._op_stats and the fleet analyses
  reading files written before op_key.
* ``hardware_models``: the published chip peaks of
  :mod:`xprosql.models.hardware`, one row per chip.

The stat stays as recorded in the warehouse (``metadata_stats.bytes_value``);
it is decoded at query time because it is small (one per op per device) and
the decoded form is a query concern, not a storage one.

Example:
    >>> decode_memory_access_breakdown(bytes.fromhex("0a0a08021001188080808014"))
    [(2, 1, 5368709120)]
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

from xprosql.models.hardware import hardware_models_sql
from xprosql.models.torch_costs import op_costs, tensor_bytes_of_json

__all__ = [
    "MEMORY_ACCESS_TYPE",
    "decode_memory_access_breakdown",
    "register_functions",
]

MEMORY_ACCESS_TYPE = pa.list_(
    pa.struct([("operation_type", pa.int32()), ("memory_space", pa.int64()), ("bytes", pa.int64())])
)
_SQL_TYPE = "STRUCT(operation_type INTEGER, memory_space BIGINT, bytes BIGINT)[]"
TORCH_COST_TYPE = pa.struct([("flops", pa.int64()), ("bytes_accessed", pa.int64()), ("rule", pa.string()),
                             ("precision", pa.string()), ("composite", pa.bool_())])
_TORCH_COST_SQL_TYPE = "STRUCT(flops BIGINT, bytes_accessed BIGINT, rule VARCHAR, precision VARCHAR, composite BOOLEAN)"
_INT64_MAX = (1 << 63) - 1


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of a protobuf message; unknown wire types raise."""
    out: list[tuple[int, int, int | bytes]] = []
    pos = 0
    value: int | bytes
    while pos < len(data):
        key, pos = _varint(data, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise ValueError("truncated field")
            value, pos = data[pos:pos + length], pos + length
        elif wire == 1:
            value, pos = int.from_bytes(data[pos:pos + 8], "little"), pos + 8
        elif wire == 5:
            value, pos = int.from_bytes(data[pos:pos + 4], "little"), pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if pos > len(data):
            raise ValueError("truncated field")
        out.append((field, wire, value))
    return out


def decode_memory_access_breakdown(data: bytes | None) -> list[tuple[int, int, int]] | None:
    """``[(operation_type, memory_space, bytes), ...]`` of a MemoryAccessBreakdown; None if not one."""
    if data is None:
        return None
    try:
        entries = []
        for field, wire, value in _fields(bytes(data)):
            if field != 1 or wire != 2:
                continue
            entry = {1: 0, 2: 0, 3: 0}
            for inner, inner_wire, inner_value in _fields(value):  # type: ignore[arg-type]
                if inner in entry and inner_wire == 0:
                    entry[inner] = inner_value  # type: ignore[assignment]
            entries.append((entry[1], min(entry[2], _INT64_MAX), min(entry[3], _INT64_MAX)))
        return entries
    except ValueError:
        return None


def _memory_access_udf(blobs: pa.Array | pa.ChunkedArray) -> pa.Array:
    decoded = [decode_memory_access_breakdown(b) for b in blobs.to_pylist()]
    return pa.array(
        [None if d is None else [{"operation_type": o, "memory_space": m, "bytes": n} for o, m, n in d] for d in decoded],
        MEMORY_ACCESS_TYPE,
    )


def _torch_cost_udf(ops: pa.Array, dims: pa.Array, types: pa.Array, concrete: pa.Array) -> pa.Array:
    costs = op_costs(ops.to_pylist(), dims.to_pylist(), types.to_pylist(), concrete.to_pylist())
    return pa.array([None if c is None else {"flops": c.flops, "bytes_accessed": c.bytes_accessed, "rule": c.rule,
                                             "precision": c.precision, "composite": c.composite} for c in costs],
                    TORCH_COST_TYPE)


def _tensor_bytes_udf(dims: pa.Array, types: pa.Array) -> pa.Array:
    return pa.array(tensor_bytes_of_json(dims.to_pylist(), types.to_pylist()), pa.int64())


# The process groups' backends, whose annotations are named BACKEND:collective (nccl:all_reduce, gloo:all_reduce).
_PROCESS_GROUPS = ("gloo", "nccl", "mpi", "ucc", "xccl")
# Tested by prefix: DuckDB compares these without a regular expression per event.
_PROCESS_GROUP_ANNOTATION = " OR ".join(f"name LIKE '{backend}:%'" for backend in _PROCESS_GROUPS)
_XLA_COLLECTIVES = ("all-reduce|all-gather|reduce-scatter|collective-permute|all-to-all|ragged-all-to-all"
                    "|collective-broadcast")
# The name of the collective, as written by its source (letters only, lowercased below).
_COLLECTIVE_NAME = f"""coalesce(
    nullif(regexp_extract(lower(coalesce(category, '')), '^({_XLA_COLLECTIVES}|send|recv)(-start|-done)?$', 1), ''),
    nullif(regexp_extract(coalesce(name, ''), '^({_XLA_COLLECTIVES})(-start|-done)?([.][0-9]+)?$', 1), ''),
    nullif(regexp_extract(coalesce(name, ''), '^({'|'.join(_PROCESS_GROUPS)}):([A-Za-z_]+)', 2), ''),
    CASE WHEN regexp_matches(coalesce(name, ''), '^(nccl|rccl|hccl)|ncclKernel', 'i')
         THEN coalesce(nullif(regexp_extract(name, 'Kernel_([A-Za-z]+)', 1), ''), 'other') END,
    nullif(regexp_extract(coalesce(name, ''), '^c10d::(.+)$', 1), ''),
    CASE WHEN name = 'record_param_comms' THEN 'other' END
)"""
_COLLECTIVE_KINDS = """CASE
    WHEN raw IS NULL THEN NULL
    WHEN raw LIKE 'allreduce%' THEN 'all_reduce'
    WHEN raw LIKE 'allgather%' THEN 'all_gather'
    WHEN raw LIKE 'reducescatter%' THEN 'reduce_scatter'
    WHEN raw LIKE 'alltoall%' OR raw = 'raggedalltoall' THEN 'all_to_all'
    WHEN raw = 'collectivepermute' THEN 'collective_permute'
    WHEN raw LIKE 'broadcast%' OR raw = 'collectivebroadcast' THEN 'broadcast'
    WHEN raw = 'sendrecv' THEN 'send_recv'
    WHEN raw IN ('send', 'recv', 'barrier', 'gather', 'scatter') THEN raw
    WHEN raw LIKE 'reduce%' THEN 'reduce'
    ELSE 'other'
END"""


# HTA's CUDA launch names (its kernel launch statistics), then HIP's, which HTA lists only in part.
_LAUNCH_KIND = """CASE
    WHEN name IN ('cudaLaunchKernel', 'cudaLaunchKernelExC', 'runFunction - job_prep_and_submit_for_execution')
      OR regexp_matches(name, '^hip(Ext)?(Module)?LaunchKernel$') OR name = 'hipGraphLaunch' THEN 'kernel'
    WHEN name IN ('cudaMemcpyAsync', 'cudaMemsetAsync') OR regexp_matches(name, '^hipMem(cpy|set)') THEN 'memory'
END"""


# Kineto categories of events on a GPU's lines that are no GPU work (xprosql_gpu_work).
_NOT_GPU_WORK = ", ".join(f"'{c}'" for c in (
    "gpu_user_annotation", "cuda_sync", "python_function", "cpu_op", "user_annotation", "cpu_instant_event",
    "cuda_runtime", "cuda_driver", "cuda_profiler_range", "pm_sampling"))


# A finding's severity from the share of step time a fix would save (sql/diagnose): one scale for every rule.
_SEVERITY = "CASE WHEN share >= 0.2 THEN 'high' WHEN share >= 0.05 THEN 'medium' ELSE 'low' END"
# A duration in ps as a person reads it in a sentence: 1.234 s, 12.345 ms, 5.6 us, 789 ns.
_DURATION = """CASE
    WHEN ps IS NULL THEN '-'
    WHEN abs(ps) >= 1e12 THEN printf('%.3f s', ps / 1e12)
    WHEN abs(ps) >= 1e9 THEN printf('%.3f ms', ps / 1e9)
    WHEN abs(ps) >= 1e6 THEN printf('%.1f us', ps / 1e6)
    ELSE printf('%.0f ns', ps / 1e3)
END"""
_KERNEL_NAME = r"""regexp_replace(trim(regexp_replace(regexp_replace(
    CASE WHEN regexp_matches(name, '::|<') THEN regexp_replace(trim(name), '\([^()]*\)$', '') ELSE trim(name) END,
    '0x[0-9a-fA-F]+', '0x', 'g'), '\s+', ' ', 'g')),
    '^((triton_|fusion|loop_|input_|wrapped_).*?)[_.][0-9]+$', '\1')"""
_OP_KEY = r"""substr(md5(concat_ws(chr(31), source, CASE WHEN source = 'kernel' THEN xprosql_kernel_name(op) ELSE op END,
    coalesce(input_shapes, ''), coalesce(input_dtypes, ''), coalesce(context, ''))), 1, 16)"""


def register_functions(con: duckdb.DuckDBPyConnection) -> None:
    """Add ``xprosql_memory_access``, ``xprosql_collective``, ``xprosql_launch_kind``,
    ``xprosql_process_group_annotation``, ``xprosql_gpu_work``,
    ``xprosql_severity``, ``xprosql_duration``, ``xprosql_kernel_name``, ``xprosql_op_key``, ``xprosql_torch_cost``,
    ``xprosql_tensor_bytes`` and ``hardware_models`` to a DuckDB connection."""
    # The name goes to the kinds' CASE through a lambda, so that it is bound once: a macro's parameter stands for its
    # argument's whole expression, and the CASE's eleven uses of `raw` bound the name's seven regular expressions
    # eleven times, 15 ms at the creation and again at each query that names xprosql_collective.
    con.execute("CREATE MACRO xprosql_collective(name, category) AS list_transform("
                f"[lower(regexp_replace({_COLLECTIVE_NAME}, '[^A-Za-z]', '', 'g'))], lambda raw: {_COLLECTIVE_KINDS})[1]")
    con.execute(f"CREATE MACRO xprosql_launch_kind(name) AS {_LAUNCH_KIND}")
    con.execute(f"CREATE MACRO xprosql_process_group_annotation(name) AS ({_PROCESS_GROUP_ANNOTATION})")
    con.execute(f"CREATE MACRO xprosql_gpu_work(category) AS coalesce(category, '') NOT IN ({_NOT_GPU_WORK})")
    con.execute(f"CREATE MACRO xprosql_severity(share) AS {_SEVERITY}")
    con.execute(f"CREATE MACRO xprosql_duration(ps) AS {_DURATION}")
    con.execute(f"CREATE MACRO xprosql_kernel_name(name) AS {_KERNEL_NAME}")
    con.execute(f"CREATE MACRO xprosql_op_key(source, op, input_shapes, input_dtypes, context) AS {_OP_KEY}")
    con.create_function(  # type: ignore[call-overload]  # duckdb's stubs know no arrow UDF
        "xprosql_memory_access", _memory_access_udf, ["BLOB"], _SQL_TYPE, type="arrow", side_effects=False
    )
    con.create_function(  # type: ignore[call-overload]
        "xprosql_torch_cost", _torch_cost_udf, ["VARCHAR"] * 4, _TORCH_COST_SQL_TYPE, type="arrow", side_effects=False,
        null_handling="special",
    )
    con.create_function(  # type: ignore[call-overload]
        "xprosql_tensor_bytes", _tensor_bytes_udf, ["VARCHAR"] * 2, "BIGINT", type="arrow", side_effects=False,
        null_handling="special",
    )
    con.execute(f"CREATE VIEW hardware_models AS {hardware_models_sql()}")
