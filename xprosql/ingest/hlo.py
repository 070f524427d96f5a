"""XLA HLO modules embedded in profiles: one module row, one row per instruction.

XSpace profiles carry each compiled program as a serialized ``xla.HloProto``
(plane ``/host:metadata``). :func:`parse_hlo_proto` flattens one into rows whose
text columns read like XLA's own HLO text, so they join against profile stats
such as ``hlo_op`` and ``shape_with_layout``.

Example:
    >>> module, ops = parse_hlo_proto(blob, program_id=0)       # doctest: +SKIP
    >>> module["module"], ops[0]["computation"], ops[0]["shape"]  # doctest: +SKIP
    ('jit_step', 'region_0.1', 'f32[]')
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa
from google.protobuf.message import DecodeError

from xprosql.ingest import hlo_cost
from xprosql.models.tables import TABLES
from xprosql.protos import hlo_pb2

__all__ = [
    "HLO_MODULE_COLUMNS",
    "HLO_OP_COLUMNS",
    "buffer_assignment_rows",
    "format_convolution_dims",
    "format_shape",
    "format_window",
    "parse_hlo_proto",
    "primitive_type_name",
]

_UINT64_MASK = (1 << 64) - 1
# XLA's marker for an unbounded dynamic dimension and for a "combined" tile dim.
_INT64_MIN = -(1 << 63)
# XLA annotates every fifth tuple element with its index.
_TUPLE_INDEX_INTERVAL = 5

_PT = hlo_pb2.PrimitiveType
_TYPE_NAMES: dict[int, str] = {
    number: ("opaque" if name == "OPAQUE_TYPE" else name.lower())
    for name, number in _PT.items()
}
_INTEGRAL_TYPES = frozenset(
    getattr(_PT, name)
    for name in ("S1", "S2", "S4", "S8", "S16", "S32", "S64", "U1", "U2", "U4", "U8", "U16", "U32", "U64")
)
_NON_ARRAY_TYPES = frozenset((_PT.TUPLE, _PT.TOKEN, _PT.OPAQUE_TYPE, _PT.BUFFER, _PT.PRIMITIVE_TYPE_INVALID))

# The row layouts are the warehouse tables (program_id unsigned, as device stats carry it).
HLO_MODULE_COLUMNS: pa.Schema = TABLES["hlo_modules"]
HLO_OP_COLUMNS: pa.Schema = TABLES["hlo_ops"]
BUFFER_COLUMNS: pa.Schema = TABLES["memory_buffers"]


# ---------------------------------------------------------------------------
# Text forms, following XLA's printers so strings compare equal to XLA's.
# ---------------------------------------------------------------------------


def primitive_type_name(element_type: int) -> str:
    """XLA's lowercase name of a ``PrimitiveType`` value (``f32``, ``bf16``, ``opaque``)."""
    name = _TYPE_NAMES.get(element_type)
    # Types newer than our enum still get a stable, recognisable name.
    return name if name is not None else f"primitive_type_{element_type}"


def _join(values: Iterable[int]) -> str:
    return ",".join(str(v) for v in values)


def _format_layout(layout: hlo_pb2.LayoutProto) -> str:
    parts: list[str] = []
    if layout.tiles:
        tiles = "".join(
            "(" + ",".join("*" if d == _INT64_MIN else str(d) for d in tile.dimensions) + ")"
            for tile in layout.tiles
        )
        parts.append("T" + tiles)
    # A stored 0 means the default alignment of 1, which XLA does not print.
    if layout.tail_padding_alignment_in_elements not in (0, 1):
        parts.append(f"L({layout.tail_padding_alignment_in_elements})")
    for marker, ptype in (("#", layout.index_primitive_type), ("*", layout.pointer_primitive_type)):
        if ptype != _PT.PRIMITIVE_TYPE_INVALID:
            parts.append(f"{marker}({primitive_type_name(ptype) if ptype in _INTEGRAL_TYPES else 'invalid'})")
    if layout.element_size_in_bits:
        parts.append(f"E({layout.element_size_in_bits})")
    if layout.memory_space:
        parts.append(f"S({layout.memory_space})")
    if layout.split_configs:
        parts.append(
            "SC" + "".join(f"({sc.dimension}:{_join(sc.split_indices)})" for sc in layout.split_configs)
        )
    if layout.HasField("physical_shape"):
        parts.append(f"P({format_shape(layout.physical_shape)})")
    if layout.dynamic_shape_metadata_prefix_bytes > 0:
        parts.append(f"M({layout.dynamic_shape_metadata_prefix_bytes})")
    body = _join(layout.minor_to_major)
    return "{" + body + (":" + "".join(parts) if parts else "") + "}"


def format_shape(shape: hlo_pb2.ShapeProto) -> str:
    """XLA's human-readable shape with layout, e.g. ``f32[8,128]{1,0}``.

    Tuples print as ``(f32[8]{0}, u32[]{:S(2)})`` with XLA's ``/*index=N*/``
    marks; scalars omit an empty ``{}``; tiles print as ``T(8,128)`` and memory
    spaces as ``S(n)``. Matches the ``shape_with_layout`` stat of XProf profiles.
    """
    etype = shape.element_type
    if etype == _PT.TUPLE:
        pieces: list[str] = []
        for i, element in enumerate(shape.tuple_shapes):
            if i == 0:
                pieces.append(format_shape(element))
            elif i % _TUPLE_INDEX_INTERVAL == 0:
                pieces.append(f", /*index={i}*/{format_shape(element)}")
            else:
                pieces.append(", " + format_shape(element))
        return "(" + "".join(pieces) + ")"
    if etype == _PT.BUFFER:
        inner = format_shape(shape.tuple_shapes[0]) if shape.tuple_shapes else ""
        return f"b({inner})"
    text = primitive_type_name(etype)
    if etype in _NON_ARRAY_TYPES or not shape.dimensions:
        text += "[]"
    else:
        dynamic = shape.is_dynamic_dimension
        dims: list[str] = []
        for i, size in enumerate(shape.dimensions):
            if i < len(dynamic) and dynamic[i]:
                dims.append("?" if size == _INT64_MIN else f"<={size}")
            else:
                dims.append(str(size))
        text += "[" + ",".join(dims) + "]"
    if etype in _NON_ARRAY_TYPES or not shape.HasField("layout"):
        return text
    layout = _format_layout(shape.layout)
    # XLA drops an empty "{}" on scalars but keeps e.g. "{:S(2)}".
    if not shape.dimensions and layout == "{}":
        return text
    return text + layout


def format_window(window: hlo_pb2.Window) -> str | None:
    """XLA's window text, e.g. ``size=3x3 stride=2x2 pad=1_1x1_1``; None when empty."""
    dims = window.dimensions
    if not dims:
        return None
    fields = [("size", lambda d: str(d.size))]
    if any(d.stride != 1 for d in dims):
        fields.append(("stride", lambda d: str(d.stride)))
    if any(d.padding_low or d.padding_high for d in dims):
        fields.append(("pad", lambda d: f"{d.padding_low}_{d.padding_high}"))
    if any(d.base_dilation != 1 for d in dims):
        fields.append(("lhs_dilate", lambda d: str(d.base_dilation)))
    if any(d.window_dilation != 1 for d in dims):
        fields.append(("rhs_dilate", lambda d: str(d.window_dilation)))
    if any(d.window_reversal for d in dims):
        fields.append(("rhs_reversal", lambda d: "1" if d.window_reversal else "0"))
    return " ".join(f"{name}=" + "x".join(fmt(d) for d in dims) for name, fmt in fields)


def _dim_labels(first: int, first_label: str, second: int, second_label: str, spatial: Iterable[int]) -> str:
    spatial = list(spatial)
    size = max([first, second, *spatial]) + 1
    labels = ["?"] * size
    labels[first] = first_label
    labels[second] = second_label
    for i, dim in enumerate(spatial):
        labels[dim] = str(i)
    return "".join(labels)


def format_convolution_dims(dnums: hlo_pb2.ConvolutionDimensionNumbers) -> str:
    """XLA's ``dim_labels`` text, e.g. ``b01f_01io->b01f``."""
    lhs = _dim_labels(dnums.input_batch_dimension, "b", dnums.input_feature_dimension, "f",
                      dnums.input_spatial_dimensions)
    rhs = _dim_labels(dnums.kernel_input_feature_dimension, "i", dnums.kernel_output_feature_dimension, "o",
                      dnums.kernel_spatial_dimensions)
    out = _dim_labels(dnums.output_batch_dimension, "b", dnums.output_feature_dimension, "f",
                      dnums.output_spatial_dimensions)
    return f"{lhs}_{rhs}->{out}"


# ---------------------------------------------------------------------------
# Rows
# ---------------------------------------------------------------------------


def _or_none(text: str) -> str | None:
    return text or None


class _SourceResolver:
    """Maps OpMetadata to (file, line): inline fields first, else the module's stack frames."""

    def __init__(self, index: hlo_pb2.StackFrameIndexProto) -> None:
        self._index = index

    def __call__(self, metadata: hlo_pb2.OpMetadata) -> tuple[str | None, int | None]:
        if metadata.source_file:
            return metadata.source_file, (metadata.source_line or None)
        frame_id = metadata.stack_frame_id
        index = self._index
        # Ids are 1-based; the frame named by the op is its innermost one.
        if not 0 < frame_id <= len(index.stack_frames):
            return None, (metadata.source_line or None)
        location_id = index.stack_frames[frame_id - 1].file_location_id
        if not 0 < location_id <= len(index.file_locations):
            return None, None
        location = index.file_locations[location_id - 1]
        name_id = location.file_name_id
        file_name = index.file_names[name_id - 1] if 0 < name_id <= len(index.file_names) else None
        return file_name, (location.line or None)


def _normalize_program_id(program_id: int | None) -> int | None:
    if program_id is None:
        return None
    if isinstance(program_id, bool) or not isinstance(program_id, int):
        raise TypeError(f"program_id must be an int or None, not {type(program_id).__name__}")
    if not -(1 << 63) <= program_id <= _UINT64_MASK:
        raise ValueError(f"program_id {program_id} does not fit in 64 bits")
    # XSpace stores the same fingerprint as a signed metadata id or an unsigned stat.
    return program_id & _UINT64_MASK


def _parse_module(data: bytes) -> hlo_pb2.HloModuleProto:
    return _parse_proto(data).hlo_module


def _parse_proto(data: bytes) -> hlo_pb2.HloProto:
    if not data:
        raise ValueError("empty HLO proto")
    proto = hlo_pb2.HloProto()
    try:
        proto.ParseFromString(data)
    except DecodeError as exc:
        raise ValueError(f"bytes are not a serialized xla.HloProto: {exc}") from None
    # Random bytes can decode as nothing but unknown fields; require real content.
    if not proto.HasField("hlo_module") or not proto.hlo_module.computations:
        raise ValueError("bytes are not a serialized xla.HloProto: no HLO module with computations")
    return proto


def _entry_name(module: hlo_pb2.HloModuleProto) -> str:
    if module.entry_computation_name:
        return module.entry_computation_name
    for computation in module.computations:
        if computation.id == module.entry_computation_id:
            return computation.name
    # XLA orders callees first, so the entry comes last.
    return module.computations[-1].name


def _derived_costs(module: hlo_pb2.HloModuleProto) -> dict[tuple[int, int], hlo_cost.Cost]:
    # A module the cost rules cannot read still ingests, without derived costs.
    try:
        return hlo_cost.instruction_costs(module)
    except (IndexError, KeyError, ValueError, ZeroDivisionError, AttributeError):
        return {}


def parse_hlo_proto(data: bytes, *, program_id: int | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Flatten a serialized ``xla.HloProto`` into one module row and one row per instruction.

    ``program_id`` may be the signed XEventMetadata id or the unsigned
    ``program_id`` stat: both are stored as the unsigned 64-bit fingerprint.
    Rows follow :data:`HLO_MODULE_COLUMNS` and :data:`HLO_OP_COLUMNS`; every key
    is present, None where the instruction has no such attribute.
    Raises ValueError when the bytes are not an HloProto.
    """
    data = bytes(data)
    module = _parse_module(data)
    pid = _normalize_program_id(program_id)
    entry = _entry_name(module)
    source_of = _SourceResolver(module.stack_frame_index)

    computation_names = {c.id: c.name for c in module.computations}
    # One pass for (name, shape text) per instruction, so operands reuse the text.
    infos: list[dict[int, tuple[str, str | None]]] = []
    shapes: list[list[str | None]] = []
    # Ids are unique per module in current XLA; older protos only per computation,
    # so per-computation lookup comes first and the module map (unique ids only)
    # is the fallback.
    module_infos: dict[int, tuple[str, str | None] | None] = {}
    # Older protos lack is_fusion_computation: a computation a fusion calls is one.
    fused: set[int] = set()
    for computation in module.computations:
        local: dict[int, tuple[str, str | None]] = {}
        local_shapes: list[str | None] = []
        for instruction in computation.instructions:
            info = (
                instruction.name,
                format_shape(instruction.shape) if instruction.HasField("shape") else None,
            )
            local[instruction.id] = info
            local_shapes.append(info[1])
            module_infos[instruction.id] = None if instruction.id in module_infos else info
            if instruction.opcode == "fusion":
                fused.update(instruction.called_computation_ids)
        infos.append(local)
        shapes.append(local_shapes)

    costs = _derived_costs(module)
    rows: list[dict[str, Any]] = []
    for computation, local, local_shapes in zip(module.computations, infos, shapes):
        is_entry = computation.name == entry
        is_fusion = bool(computation.is_fusion_computation) or computation.id in fused
        for instruction, shape in zip(computation.instructions, local_shapes):
            operand_names: list[str] = []
            operand_shapes: list[str] = []
            for operand_id in instruction.operand_ids:
                operand = local.get(operand_id) or module_infos.get(operand_id)
                # Kept positional: an unresolvable operand reads as "".
                operand_names.append(operand[0] if operand is not None else "")
                operand_shapes.append((operand[1] or "") if operand is not None else "")

            opcode = instruction.opcode
            has_shape = instruction.HasField("shape")
            etype = instruction.shape.element_type
            is_array = has_shape and etype not in _NON_ARRAY_TYPES
            metadata = instruction.metadata
            source_file, source_line = source_of(metadata)

            is_dot = opcode == "dot" or instruction.HasField("dot_dimension_numbers")
            dot = instruction.dot_dimension_numbers
            has_conv = instruction.HasField("convolution_dimension_numbers")
            is_conv = opcode == "convolution" or has_conv
            cost = costs.get((computation.id, instruction.id))

            rows.append(
                {
                    "program_id": pid,
                    "module": module.name,
                    "computation": computation.name,
                    "is_entry_computation": is_entry,
                    "is_fusion_computation": is_fusion,
                    "instruction_id": instruction.id,
                    "hlo_op": instruction.name,
                    "opcode": opcode,
                    "shape": shape,
                    "element_type": primitive_type_name(etype) if has_shape else None,
                    "dimensions": list(instruction.shape.dimensions) if is_array else [],
                    "operand_names": operand_names,
                    "operand_shapes": operand_shapes,
                    "called_computations": [
                        computation_names.get(cid, "") for cid in instruction.called_computation_ids
                    ],
                    "fusion_kind": _or_none(instruction.fusion_kind),
                    "custom_call_target": _or_none(instruction.custom_call_target),
                    "op_type": _or_none(metadata.op_type),
                    "op_name": _or_none(metadata.op_name),
                    "source_file": source_file,
                    "source_line": source_line,
                    "dot_lhs_contracting_dims": list(dot.lhs_contracting_dimensions) if is_dot else None,
                    "dot_rhs_contracting_dims": list(dot.rhs_contracting_dimensions) if is_dot else None,
                    "dot_lhs_batch_dims": list(dot.lhs_batch_dimensions) if is_dot else None,
                    "dot_rhs_batch_dims": list(dot.rhs_batch_dimensions) if is_dot else None,
                    "window": format_window(instruction.window) if instruction.HasField("window") else None,
                    "convolution_dims": (
                        format_convolution_dims(instruction.convolution_dimension_numbers) if has_conv else None
                    ),
                    # XLA treats an unset group count as 1.
                    "feature_group_count": (instruction.feature_group_count or 1) if is_conv else None,
                    "batch_group_count": (instruction.batch_group_count or 1) if is_conv else None,
                    "instruction_dimensions": list(instruction.dimensions),
                    "parameter_number": instruction.parameter_number if opcode == "parameter" else None,
                    "tuple_index": instruction.tuple_index if opcode == "get-tuple-element" else None,
                    "derived_flops": cost.flops if cost else None,
                    "derived_transcendentals": cost.transcendentals if cost else None,
                    "derived_bytes_accessed": cost.bytes_accessed if cost else None,
                    "derived_cost_source": cost.source if cost else None,
                }
            )

    module_row = {
        "program_id": pid,
        "module": module.name,
        "entry_computation": entry,
        "n_computations": len(module.computations),
        "n_instructions": len(rows),
        "hlo_proto": data,
    }
    return module_row, rows


# ---------------------------------------------------------------------------
# Buffer assignment: what XProf's memory viewer reads.
# ---------------------------------------------------------------------------

# Bytes an element takes in a shape without layout (XLA's ByteWidth; sub-byte types take a byte).
_WIDE = {"s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4,
         "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}
_POINTER_BYTES = 8  # a tuple's index table holds a pointer an element


def _unpadded_bytes(shape: hlo_pb2.ShapeProto) -> int:
    etype = shape.element_type
    if etype == _PT.TUPLE:
        return _POINTER_BYTES * len(shape.tuple_shapes)
    if etype in _NON_ARRAY_TYPES:
        return 0
    elements = 1
    for size in shape.dimensions:
        elements *= size
    return elements * _WIDE.get(primitive_type_name(etype), 1)


def _buffer_shape(shape: hlo_pb2.ShapeProto, shape_index: Iterable[int]) -> hlo_pb2.ShapeProto:
    # XProf resolves a buffer's shape by the last index only, into the top-level tuple.
    index = list(shape_index)
    if index and index[-1] < len(shape.tuple_shapes):
        return shape.tuple_shapes[index[-1]]
    return shape


def _allocation_kind(allocation: hlo_pb2.BufferAllocationProto) -> str:
    # XProf's precedence (BufferAllocationStruct::category).
    if allocation.is_entry_computation_parameter:
        return "parameter"
    if allocation.maybe_live_out:
        return "output"
    if allocation.is_thread_local:
        return "thread_local"
    if allocation.is_constant:
        return "constant"
    return "temp"


def buffer_assignment_rows(data: bytes, *, program_id: int | None) -> list[dict[str, Any]]:
    """One row per logical buffer of a serialized ``xla.HloProto``'s buffer assignment (table
    ``memory_buffers``), with its place in the heap simulator's program order.

    An allocation no logical buffer is assigned to still has one row, its buffer columns null, so
    allocation totals count it. A module compiled without a buffer assignment has no rows.
    Raises ValueError when the bytes are not an HloProto.

    Example:
        >>> rows = buffer_assignment_rows(blob, program_id=7)        # doctest: +SKIP
        >>> rows[0]["instruction"], rows[0]["size_bytes"], rows[0]["kind"]  # doctest: +SKIP
        ('copy-start', 5368709120, 'temp')
    """
    proto = _parse_proto(bytes(data))
    module, assignment = proto.hlo_module, proto.buffer_assignment
    pid = _normalize_program_id(program_id)
    instructions = {i.id: i for c in module.computations for i in c.instructions}
    logical = {b.id: b for b in assignment.logical_buffers}

    # Program order: a buffer's events in the first heap simulator trace that has them.
    trace_of: dict[int, int] = {}
    alloc_at: dict[int, int] = {}
    free_at: dict[int, int] = {}
    shares: dict[int, int] = {}
    kinds = hlo_pb2.HeapSimulatorTrace.Event
    for trace_index, trace in enumerate(assignment.heap_simulator_traces):
        for position, event in enumerate(trace.events):
            if trace_of.setdefault(event.buffer_id, trace_index) != trace_index:
                continue
            if event.kind == kinds.FREE:
                free_at[event.buffer_id] = position
            else:
                alloc_at[event.buffer_id] = position
                if event.kind == kinds.SHARE_WITH:
                    shares[event.buffer_id] = event.share_with_canonical_id

    def canonical(buffer_id: int) -> int:
        seen = {buffer_id}
        while buffer_id in shares and shares[buffer_id] not in seen:
            buffer_id = shares[buffer_id]
            seen.add(buffer_id)
        return buffer_id

    rows: list[dict[str, Any]] = []
    for allocation in assignment.buffer_allocations:
        common = {
            "program_id": pid, "module": module.name, "kind": _allocation_kind(allocation),
            "allocation_index": allocation.index, "allocation_bytes": allocation.size,
            "is_parameter": allocation.is_entry_computation_parameter, "maybe_live_out": allocation.maybe_live_out,
            "is_thread_local": allocation.is_thread_local, "is_constant": allocation.is_constant,
            "is_tuple": allocation.is_tuple,
        }
        empty = dict.fromkeys(BUFFER_COLUMNS.names)
        if not allocation.assigned:
            rows.append({**empty, **common, "color": allocation.color})
            continue
        for assigned in allocation.assigned:
            buffer = logical.get(assigned.logical_buffer_id)
            instruction = instructions.get(buffer.defined_at.instruction_id) if buffer is not None else None
            if buffer is None or instruction is None:
                raise ValueError(f"module {module.name!r}: allocation {allocation.index} names logical buffer "
                                 f"{assigned.logical_buffer_id}, which the buffer assignment does not define")
            shape = _buffer_shape(instruction.shape, buffer.defined_at.shape_index)
            buffer_id = buffer.id
            rows.append({
                **empty, **common,
                "logical_buffer_id": buffer_id, "size_bytes": buffer.size, "unpadded_bytes": _unpadded_bytes(shape),
                "shape": format_shape(shape), "element_type": primitive_type_name(shape.element_type),
                "instruction": instruction.name, "shape_index": list(buffer.defined_at.shape_index),
                "opcode": instruction.opcode, "op_name": _or_none(instruction.metadata.op_name),
                "color": buffer.color, "offset_bytes": assigned.offset,
                "heap_trace": trace_of.get(buffer_id), "alloc_position": alloc_at.get(buffer_id),
                "free_position": free_at.get(buffer_id), "shares_with": shares.get(buffer_id),
                "canonical_buffer_id": canonical(buffer_id),
            })
    return rows
