"""The Perfetto export (xprosql/queries/export_trace.py, `xprosql export`, `run.export_trace`): the file parses
with Perfetto's own protobuf definitions (the `perfetto` wheel), follows the TrackEvent rules, and read back
gives the warehouse's events: names, start and end times to the nanosecond, tracks by name, args, flows,
counters and the memory timeline. Real samples: the TPU v6e, V100 and MI300 XSpace files and the A100 Kineto
trace."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import GPU_SAMPLE, TEST_DATA, TPU_SAMPLE

import xprosql
from xprosql.cli import main
from xprosql.queries import export_trace as export

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2",
                         reason="the perfetto wheel (test extra) has Perfetto's protobuf definitions")
from google.protobuf import unknown_fields  # noqa: E402  (after the skip: protobuf comes with perfetto)

A100 = TEST_DATA / "kineto" / "a100_nccl_rank0.json.gz"
MI300 = TEST_DATA / "xspace" / "mi300_jax_conv.xplane.pb"
SAMPLES = {"tpu": TPU_SAMPLE, "v100": GPU_SAMPLE, "a100": A100, "mi300": MI300}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> xprosql.Run:
    root = tmp_path_factory.mktemp("export") / "run"
    report = xprosql.ingest(list(SAMPLES.values()), into=root)
    assert report.ok, str(report)
    return xprosql.load(root)


def pid_of(run: xprosql.Run, sample: str) -> str:
    return run.sql("SELECT profile_id FROM profiles WHERE source_path LIKE $p",
                   {"p": f"%{SAMPLES[sample].name}"}).rows()[0][0]


@dataclass
class Read:
    """A trace read back the way trace_processor reads TrackEvent: descriptors, then slices by BEGIN/END."""

    tracks: dict[int, Any] = field(default_factory=dict)                 # uuid -> TrackDescriptor
    slices: list[tuple[int, str, int, int, dict[str, Any]]] = field(default_factory=list)  # (uuid, name, ts, end, args)
    counters: dict[int, list[tuple[int, float]]] = field(default_factory=lambda: defaultdict(list))
    flow_starts: Counter[int] = field(default_factory=Counter)
    flow_ends: Counter[int] = field(default_factory=Counter)
    slice_flows: list[tuple[str, str]] = field(default_factory=list)    # (source slice name, destination name)

    def path(self, uuid: int) -> str:
        track = self.tracks[uuid]
        return track.process.process_name if track.HasField("process") else track.name


def no_unknown_fields(message: Any, where: str = "packet") -> None:
    """Every byte is a field Perfetto defines (the definitions of its own wheel), recursively."""
    assert len(unknown_fields.UnknownFieldSet(message)) == 0, where
    for descriptor, value in message.ListFields():
        if descriptor.message_type is None:
            continue
        for item in value if descriptor.is_repeated else [value]:
            no_unknown_fields(item, f"{where}.{descriptor.name}")


def read(path: Path) -> Read:
    trace = pb.Trace.FromString(path.read_bytes())
    out, names = Read(), {}
    stacks: dict[int, list[tuple[str, int, dict[str, Any]]]] = defaultdict(list)
    last_ts: dict[int, int] = {}
    flow_slice: dict[int, str] = {}
    pending_flows: list[tuple[int, str]] = []
    assert trace.packet[0].sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    for packet in trace.packet:
        no_unknown_fields(packet)
        assert packet.trusted_packet_sequence_id == 1
        if packet.HasField("track_descriptor"):
            descriptor = packet.track_descriptor
            assert descriptor.uuid not in out.tracks, "a track declared twice"
            assert not descriptor.HasField("parent_uuid") or descriptor.parent_uuid in out.tracks, "parent declared first"
            out.tracks[descriptor.uuid] = descriptor
            continue
        for entry in packet.interned_data.event_names:
            names[entry.iid] = entry.name
        assert packet.HasField("track_event")
        event = packet.track_event
        assert event.track_uuid in out.tracks, "an event on an undeclared track"
        assert packet.timestamp >= last_ts.get(event.track_uuid, 0), "a track's packets in time order"
        last_ts[event.track_uuid] = packet.timestamp
        if event.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            assert packet.sequence_flags & pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
            name = names[event.name_iid]  # interned before (or in) the packet that uses it
            args = {a.name: next(v for _, v in a.ListFields() if _.name != "name") for a in event.debug_annotations}
            stacks[event.track_uuid].append((name, packet.timestamp, args))
            for fid in event.flow_ids:
                out.flow_starts[fid] += 1
                flow_slice[fid] = name
            pending_flows += [(fid, name) for fid in event.terminating_flow_ids]
            for fid in event.terminating_flow_ids:
                out.flow_ends[fid] += 1
        elif event.type == pb.TrackEvent.TYPE_SLICE_END:
            name, ts, args = stacks[event.track_uuid].pop()
            out.slices.append((event.track_uuid, name, ts, packet.timestamp, args))
        else:
            assert event.type == pb.TrackEvent.TYPE_COUNTER
            assert out.tracks[event.track_uuid].HasField("counter")
            value = event.double_counter_value if event.HasField("double_counter_value") else event.counter_value
            out.counters[event.track_uuid].append((packet.timestamp, value))
    assert not any(stacks.values()), "every slice ends"
    out.slice_flows = [(flow_slice[fid], name) for fid, name in pending_flows if fid in flow_slice]
    return out


def warehouse_slices(run: xprosql.Run, pid: str, where: str = "true") -> Counter[tuple[str, str, int, int]]:
    rows = run.sql(f"""
        SELECT t.name, e.name, p.start_ns + e.start_ps // 1000, p.start_ns + (e.start_ps + e.dur_ps) // 1000
        FROM events e JOIN tracks t USING (profile_id, device_id, track_id) JOIN profiles p USING (profile_id)
        WHERE e.profile_id = $p AND e.start_ps IS NOT NULL AND ({where})""", {"p": pid}).rows()
    return Counter(rows)


def exported_slices(trace: Read) -> Counter[tuple[str, str, int, int]]:
    def line(uuid: int) -> str:  # an overlap track is a child of its line: its slices belong to that line
        track = trace.tracks[uuid]
        parent = trace.tracks.get(track.parent_uuid)
        return parent.name if parent is not None and not parent.HasField("process") else track.name
    return Counter((line(uuid), name, ts, end) for uuid, name, ts, end, _ in trace.slices)


def test_field_numbers_are_perfettos() -> None:
    """The hand-written encoder's field numbers, against the descriptors of Perfetto's own definitions."""
    fields = {
        pb.TracePacket: {"timestamp": export._P_TIMESTAMP, "trusted_packet_sequence_id": export._P_SEQ,
                         "track_event": export._P_TRACK_EVENT, "interned_data": export._P_INTERNED,
                         "sequence_flags": export._P_FLAGS, "track_descriptor": export._P_TRACK_DESCRIPTOR},
        pb.TrackDescriptor: {"uuid": export._TD_UUID, "name": export._TD_NAME, "process": export._TD_PROCESS,
                             "parent_uuid": export._TD_PARENT, "counter": export._TD_COUNTER,
                             "child_ordering": export._TD_CHILD_ORDERING, "sibling_order_rank": export._TD_RANK},
        pb.TrackEvent: {"debug_annotations": export._TE_ANNOTATIONS, "type": export._TE_TYPE,
                        "name_iid": export._TE_NAME_IID, "track_uuid": export._TE_TRACK,
                        "categories": export._TE_CATEGORIES, "counter_value": export._TE_INT_VALUE,
                        "double_counter_value": export._TE_DOUBLE_VALUE, "flow_ids": export._TE_FLOW_IDS,
                        "terminating_flow_ids": export._TE_TERMINATING_FLOW_IDS},
        pb.DebugAnnotation: {"bool_value": export._DA_BOOL, "uint_value": export._DA_UINT, "int_value": export._DA_INT,
                             "double_value": export._DA_DOUBLE, "string_value": export._DA_STRING, "name": export._DA_NAME},
    }
    for message, numbers in fields.items():
        for name, number in numbers.items():
            assert message.DESCRIPTOR.fields_by_name[name].number == number, (message.DESCRIPTOR.name, name)
    assert pb.Trace.DESCRIPTOR.fields_by_name["packet"].number == export._TRACE_PACKET
    assert (pb.TrackEvent.TYPE_SLICE_BEGIN, pb.TrackEvent.TYPE_SLICE_END, pb.TrackEvent.TYPE_COUNTER) == (
        export._BEGIN, export._END, export._COUNTER)
    assert pb.CounterDescriptor.UNIT_SIZE_BYTES == export._UNIT_BYTES


@pytest.mark.parametrize("sample", ["tpu", "v100", "a100"])
@pytest.mark.slow
def test_round_trip_gives_the_same_events(run: xprosql.Run, sample: str, tmp_path: Path) -> None:
    pid = pid_of(run, sample)
    summary = run.export_trace(tmp_path / "x.perfetto-trace", profiles=[pid])
    trace = read(summary.path)
    expected = warehouse_slices(run, pid)
    assert sum(expected.values()) > 10_000  # the whole profile, not a few events
    assert exported_slices(trace) == expected
    assert summary.slices == len(trace.slices) == sum(expected.values())
    # every slice track is a line of the profile or an overlap lane of one; one process per device
    processes = [t for t in trace.tracks.values() if t.HasField("process")]
    assert len(processes) == run.sql("SELECT count(*) FROM devices WHERE profile_id = $p", {"p": pid}).rows()[0][0]


def test_tpu_track_names_equal_the_warehouse_tracks(run: xprosql.Run, tmp_path: Path) -> None:
    pid = pid_of(run, "tpu")
    trace = read(run.export_trace(tmp_path / "tpu.perfetto-trace", profiles=[pid]).path)
    by_process: dict[str, list[str]] = defaultdict(list)
    for track in trace.tracks.values():
        parent = trace.tracks.get(track.parent_uuid)
        if parent is not None and parent.HasField("process") and not track.HasField("counter"):
            by_process[parent.process.process_name.split(" (")[0]].append(track.name)
    expected: dict[str, list[str]] = defaultdict(list)
    for device, name in run.sql("""SELECT d.name, t.name FROM tracks t JOIN devices d USING (profile_id, device_id)
                                   WHERE profile_id = $p""", {"p": pid}).rows():
        expected[device].append(name)
    assert {d: sorted(n) for d, n in by_process.items()} == {d: sorted(n) for d, n in expected.items()}
    assert "XLA Ops" in by_process["/device:TPU:0"]
    # lines whose slices overlap without nesting get child tracks, and say so in their name
    overlap = [t for t in trace.tracks.values() if "(overlap" in t.name]
    assert overlap and all(trace.tracks[t.parent_uuid].name in t.name for t in overlap)


def test_args_are_the_events_stats(run: xprosql.Run, tmp_path: Path) -> None:
    pid = pid_of(run, "tpu")
    trace = read(run.export_trace(tmp_path / "tpu.perfetto-trace", profiles=[pid]).path)
    ops = Counter((name, args.get("hlo_op"), args.get("flops")) for uuid, name, _, _, args in trace.slices
                  if trace.tracks[uuid].name == "XLA Ops")
    stored = Counter(run.sql("""SELECT e.name, e.hlo_op, e.flops FROM events e JOIN tracks t USING (profile_id, device_id, track_id)
                                WHERE profile_id = $p AND t.name = 'XLA Ops'""", {"p": pid}).rows())
    assert sum(ops.values()) > 1000 and ops == stored
    # a stat that is not promoted to a column comes from event_stats, with its type
    stat, value_type, raw = run.sql("""SELECT stat, value_type, coalesce(CAST(int_value AS VARCHAR), CAST(uint_value AS VARCHAR),
                                          CAST(double_value AS VARCHAR), str_value) FROM event_stats WHERE profile_id = $p
                                       AND value_type IN ('int64', 'uint64', 'str') LIMIT 1""", {"p": pid}).rows()[0]
    seen = [args[stat] for *_, args in trace.slices if stat in args]
    assert seen and (raw in seen if value_type == "str" else int(raw) in seen)


def test_launches_flow_to_their_kernels(run: xprosql.Run, tmp_path: Path) -> None:
    pid = pid_of(run, "a100")
    summary = run.export_trace(tmp_path / "a100.perfetto-trace", profiles=[pid])
    trace = read(summary.path)
    linked = run.sql("""SELECT count(DISTINCT a.correlation_id) FROM api_calls a
                        JOIN (SELECT correlation_id FROM kernels UNION ALL SELECT correlation_id FROM memcpys) k
                        USING (correlation_id) WHERE a.profile_id = $p""", {"p": pid}).rows()[0][0]
    fwdbwd = run.sql("SELECT count(*) FROM flows WHERE profile_id = $p AND category = 'fwdbwd' AND phase = 's'",
                     {"p": pid}).rows()[0][0]
    assert linked > 1000 and fwdbwd > 0
    assert len(trace.flow_starts) == linked + fwdbwd
    assert set(trace.flow_ends) <= set(trace.flow_starts)  # no arrow ends nowhere
    launches = Counter(src for src, dst in trace.slice_flows if src.startswith("cuda"))
    assert launches["cudaLaunchKernel"] > 1000


def test_counters_and_memory_timeline(run: xprosql.Run, tmp_path: Path) -> None:
    pid = pid_of(run, "mi300")
    trace = read(run.export_trace(tmp_path / "mi300.perfetto-trace", profiles=[pid]).path)
    start_ns = run.sql("SELECT start_ns FROM profiles WHERE profile_id = $p", {"p": pid}).rows()[0][0]
    timeline = run.memory_timeline(profiles=[pid]).pl()
    assert timeline.height > 100
    for allocator in timeline["allocator"].unique().to_list():
        rows = timeline.filter(timeline["allocator"] == allocator).sort("start_ps")
        uuid = next(u for u, t in trace.tracks.items() if t.name == f"memory in use: {allocator}")
        assert trace.tracks[uuid].counter.unit == pb.CounterDescriptor.UNIT_SIZE_BYTES
        assert trace.counters[uuid] == [(start_ns + ts // 1000, v) for ts, v in zip(rows["start_ps"], rows["in_use_bytes"])]


def test_selection_by_where_and_window(run: xprosql.Run, tmp_path: Path) -> None:
    pid = pid_of(run, "v100")
    t0, t1 = run.sql("SELECT CAST(quantile_disc(start_ps, 0.4) AS BIGINT), CAST(quantile_disc(start_ps, 0.6) AS BIGINT) "
                     "FROM events WHERE profile_id = $p", {"p": pid}).rows()[0]  # the middle fifth of the events
    summary = run.export_trace(tmp_path / "w.perfetto-trace", profiles=[pid], where="dur_ps > 1000000",
                               start_ps=t0, end_ps=t1)
    expected = warehouse_slices(run, pid, f"e.dur_ps > 1000000 AND e.start_ps <= {t1} AND e.start_ps + e.dur_ps >= {t0}")
    assert 0 < sum(expected.values()) < 20_000
    assert exported_slices(read(summary.path)) == expected
    with pytest.raises(xprosql.XprosqlError, match="before it starts"):
        run.export_trace(tmp_path / "bad", profiles=[pid], start_ps=t1, end_ps=t0)
    with pytest.raises(xprosql.QueryError):
        run.export_trace(tmp_path / "bad", profiles=[pid], where="no_such_column = 1")
    assert not (tmp_path / "bad").exists() and not list(tmp_path.glob(".*partial"))


def test_cli_export(run: xprosql.Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pid = pid_of(run, "tpu")
    out = tmp_path / "cli.perfetto-trace"
    assert main(["export", str(run.path), "--profile", pid[:8], "--from", "1ms", "--to", "2.5ms", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert str(out) in printed and "slices" in printed
    start_ns = run.sql("SELECT start_ns FROM profiles WHERE profile_id = $p", {"p": pid}).rows()[0][0]
    trace = read(out)
    assert trace.slices and all(end >= start_ns + 1_000_000 and ts <= start_ns + 2_500_000 for _, _, ts, end, _ in trace.slices)
    assert exported_slices(trace) == warehouse_slices(run, pid, "e.start_ps <= 2500000000 AND e.start_ps + e.dur_ps >= 1000000000")
    assert main(["export", str(run.path), "--profile", "nosuch", "--out", str(out)]) == 2
    assert "error:" in capsys.readouterr().err


@pytest.mark.slow
def test_ranks_side_by_side_on_the_job_clock(tmp_path: Path) -> None:
    """Two ranks of one job (real Kineto traces): with job_clock each rank's slices move by the correction
    jobs.clock_offsets derives from the collectives' ends, and its process says which rank it is."""
    root = tmp_path / "run"
    assert xprosql.ingest([TEST_DATA / "kineto" / f"sampled_rank{r}.json.gz" for r in (0, 1)], into=root).ok
    ranks = xprosql.load(root)
    if "jobs.clock_offsets" not in {m.id for m in ranks.engine.library.public()}:
        pytest.skip("the job clock (sql/jobs/clock_offsets.sql) is not in this tree")
    offsets = ranks.analysis("jobs.clock_offsets").pl()
    correction = dict(zip(offsets["profile_id"], offsets["offset_ps"] - offsets["wall_offset_ps"]))
    assert len(correction) == 2 and any(correction.values())  # the collectives moved one rank
    trace = read(ranks.export_trace(tmp_path / "job.perfetto-trace", job_clock=True).path)
    starts = dict(ranks.sql("SELECT profile_id, start_ns FROM profiles").rows())
    for pid, shift in correction.items():
        expected = Counter((t, n, (starts[pid] * 1000 + s + shift) // 1000, (starts[pid] * 1000 + s + d + shift) // 1000)
                           for t, n, s, d in ranks.sql("""SELECT t.name, e.name, e.start_ps, e.dur_ps FROM events e
                                JOIN tracks t USING (profile_id, device_id, track_id) WHERE e.profile_id = $p""", {"p": pid}).rows())
        names = {t.process.process_name for t in trace.tracks.values() if t.HasField("process") and pid in t.process.process_name}
        assert names and all("rank" in n for n in names)
        mine = {u for u, t in trace.tracks.items() if t.parent_uuid in
                {v for v, x in trace.tracks.items() if x.HasField("process") and pid in x.process.process_name}}
        assert Counter((trace.tracks[u].name, n, ts, end) for u, n, ts, end, _ in trace.slices if u in mine) == expected
