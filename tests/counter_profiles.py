"""Hand-built XSpace files with TPU performance counters, and XProf's tools run on them.

No public profile with TPU counters exists, so these files are the real TPU v6e
sample (``tpu_v6e_inference.xplane.pb``: its planes, ops, modules and times are
real) with counter samples added the way XProf's ``perf_counters`` and
``utilization_viewer`` read them (openxla/xprof
``xprof/convert/xplane_to_perf_counters.cc``, ``xplane_to_utilization_viewer.cc``):

* each ``/device:TPU:N`` plane gets the plane stats those tools key on:
  ``device_id`` (utilization_viewer's Device) and, on TPU:0 and TPU:2,
  ``global_chip_id`` (perf_counters' Chip prefers it);
* one extra line per sample: the line name is the kernel (the XLA module that
  ran, at the time it ran), the line id the sample number;
* one event per counter on that line, spanning the sample, with a
  ``counter_value`` stat (uint64), named by the counter's enum name from the
  xprof wheel's ``tpu_counter_ids_<chip>.h``, with ``performance_counter_id``
  on the event (TPU:1, TPU:2) or its metadata (TPU:0); on TPU:3 the events have
  no name and no id stat, and the metadata id is the counter id (the
  fallback of XProf's utilization tool); on TPU:1 one kernel's events have an
  id but no name (named from the dictionary);
* every counter of the chip's dictionary, with values a busy chip could give
  (cycles = sample length x clock, busy cycles partitioning cycles, HBM and
  interconnect traffic below peak), a few all-ones "could not read" values on
  counters no utilization metric uses, and two counters the dictionary does not
  know, with their own description and set;
* a ``_counters_`` line of PM-sampling style time series on TPU:0.

``generation="v7x"`` also relabels the planes ``TPU v7x`` (the sample is v6e)
so XProf's v7x path (two dies, HBM per die) runs on the same file.

Example:
    >>> manifest = build_counter_profile(tmp_path / "c.xplane.pb", generation="v6e")   # doctest: +SKIP
    >>> rows = run_xprof_tool(tmp_path / "c.xplane.pb", "perf_counters", tmp_path / "x")  # doctest: +SKIP
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xprosql.protos import xplane_pb2

__all__ = ["UNREADABLE", "Manifest", "build_counter_profile", "run_xprof_tool", "xprof_dictionary"]

UNREADABLE = 0xFFFFFFFFFFFFFFFF
FREQUENCY_HZ = {"v6e": 1.75e9, "v7x": 1.9e9}
DEVICE_TYPE = {"v6e": "TPU v6 Lite", "v7x": "TPU v7x"}
# Counters no utilization metric reads: where the unreadable values go.
_UNUSED_FOR_UTILIZATION = re.compile(
    r"(_rd_req_ps0|_wr_resp_ps1|bn_rd_req_0_empty_count|_count_dma_descriptor|_dma_words_to_hbm)$")
_EXTRA_COUNTERS = (  # not in the dictionary: XProf shows their own description and set
    (42, "HOST_DMA_QUEUE_DEPTH", "Depth of the host DMA queue, sampled.", "host dma"),
    (43, "SPARE_EVENT_COUNT", "Spare event counter.", "spare"),
)


def xprof_dictionary(generation: str) -> dict[str, int]:
    """Enum name (upper case, as the header spells it) -> counter id, through XProf's own extractor."""
    from xprof.convert import counter_extractor  # pure Python: reads the header from the wheel

    return {c["name"].upper(): c["val"] for c in counter_extractor.get_all_counters(generation)}


@dataclass
class Manifest:
    """What the builder put where: for the tests' own bookkeeping, not for expected values."""

    generation: str
    samples: dict[tuple[str, int], str] = field(default_factory=dict)  # (plane name, line id) -> kernel
    unreadable: int = 0
    counter_events: int = 0
    series_events: int = 0
    unnamed: set[tuple[str, int]] = field(default_factory=set)  # (plane, line id) whose events have no name
    chip: dict[str, int] = field(default_factory=dict)  # plane -> perf_counters' Chip
    device: dict[str, int] = field(default_factory=dict)  # plane -> utilization_viewer's Device


class _Plane:
    """Adds stats, metadata and lines to one plane, interning names as XProf's builders do."""

    def __init__(self, plane: xplane_pb2.XPlane) -> None:
        self.plane = plane
        self._stat_ids = {md.name: sid for sid, md in plane.stat_metadata.items()}
        self._next_md = max(plane.event_metadata, default=0) + 1

    def stat_id(self, name: str) -> int:
        if name not in self._stat_ids:
            sid = max(self.plane.stat_metadata, default=0) + 1
            self.plane.stat_metadata[sid].id = sid
            self.plane.stat_metadata[sid].name = name
            self._stat_ids[name] = sid
        return self._stat_ids[name]

    def set_plane_stat(self, name: str, **value: Any) -> None:
        sid = self.stat_id(name)
        for stat in self.plane.stats:
            if stat.metadata_id == sid:
                stat.Clear()
                stat.metadata_id = sid
                break
        else:
            stat = self.plane.stats.add(metadata_id=sid)
        for key, v in value.items():
            setattr(stat, key, v)

    def metadata(self, name: str, *, metadata_id: int | None = None) -> xplane_pb2.XEventMetadata:
        if metadata_id is None:
            metadata_id = self._next_md
            self._next_md += 1
        md = self.plane.event_metadata[metadata_id]
        md.id = metadata_id
        md.name = name
        return md


def _values(generation: str, names: list[str], cycles: int, rng: random.Random) -> dict[str, int]:
    """Plausible counts for one sample of `cycles` TensorCore cycles."""
    seconds = cycles / FREQUENCY_HZ[generation]
    values: dict[str, int] = {}
    busy = rng.uniform(0.2, 0.9)
    two = int(cycles * busy * rng.uniform(0.3, 0.8))
    one = int(cycles * busy) - two
    xlu_two = int(cycles * rng.uniform(0.01, 0.2))
    xlu_one = int(cycles * rng.uniform(0.01, 0.2))
    hbm_bytes = rng.uniform(0.1, 0.8) * 1637.993152512e9 * seconds * (2.1 if generation == "v7x" else 1.0)
    oci_bytes = rng.uniform(0.0, 0.4) * 294947368421.0526 * (cycles / 1e9)
    hbm = [n for n in names if "_HBMC_" in n and re.search(r"_(RD_RESP|WR_REQ|PARTIAL_WRITE_REQ)_PS[01]$", n)]
    oci = [n for n in names if "INSERTION_COUNT" in n and "_OCI_" in n]
    for name in names:
        key = name.rsplit("UNPRIVILEGED_", 1)[-1]
        if key in ("COUNT_CYCLES", "CYCLE_COUNT"):
            value = cycles
        elif key == "COUNT_MXU_BUSY_0":
            value = cycles - one - two
        elif key == "COUNT_MXU_BUSY_1":
            value = one
        elif key == "COUNT_MXU_BUSY_2":
            value = two
        elif key == "COUNT_XLU_BUSY_0":
            value = cycles - xlu_one - xlu_two
        elif key == "COUNT_XLU_BUSY_1":
            value = xlu_one
        elif key == "COUNT_XLU_BUSY_2":
            value = xlu_two
        elif key.startswith("COUNT_MATMUL_"):
            value = int(cycles * busy / 64 * rng.uniform(0.1, 1.0))
        elif "XLU_" in key:
            value = int(cycles / 16 * rng.uniform(0.0, 1.0))
        elif key.startswith("COUNT_VPU_VALU_"):
            value = int(cycles / 5 * rng.uniform(0.0, 1.0))
        elif "CLOCKS_SKIPPED" in key:
            value = int(cycles * rng.uniform(0.0, 0.02))
        elif name in hbm:
            value = int(hbm_bytes / 32 / len(hbm) * rng.uniform(0.5, 1.5))
        elif name in oci:
            value = int(oci_bytes / 128 / max(1, len(oci) // 2) * rng.uniform(0.5, 1.5))
        else:
            value = int(cycles * rng.uniform(0.0, 1.0))
        values[name] = value
    return values


def build_counter_profile(
    dest: Path, *, generation: str = "v6e", base: Path | None = None, seed: int = 8, samples_per_kernel: int = 2
) -> Manifest:
    """Write the real TPU sample plus counter samples (see the module docstring) to ``dest``."""
    if base is None:
        from conftest import TPU_SAMPLE

        base = TPU_SAMPLE
    dictionary = xprof_dictionary(generation)
    names = sorted(dictionary)
    rng = random.Random(seed)
    space = xplane_pb2.XSpace()
    space.ParseFromString(Path(base).read_bytes())
    manifest = Manifest(generation=generation)
    tpu_planes = [p for p in space.planes if re.fullmatch(r"/device:TPU:\d+", p.name)]
    for ordinal, plane in enumerate(tpu_planes):
        b = _Plane(plane)
        b.set_plane_stat("device_type_string", str_value=DEVICE_TYPE[generation])
        b.set_plane_stat("device_id", int64_value=ordinal)
        manifest.device[plane.name] = ordinal
        manifest.chip[plane.name] = ordinal
        if ordinal % 2 == 0:
            b.set_plane_stat("global_chip_id", uint64_value=4 + ordinal)
            manifest.chip[plane.name] = 4 + ordinal
        value_stat, id_stat = b.stat_id("counter_value"), b.stat_id("performance_counter_id")
        desc_stat, set_stat = b.stat_id("performance_counter_description"), b.stat_id("performance_counter_sets")
        ids_on_metadata, keyed_by_id = ordinal == 0, ordinal == 3
        metadata: dict[str, int] = {}
        for name in names:
            md = b.metadata("" if keyed_by_id else name, metadata_id=dictionary[name] if keyed_by_id else None)
            if ids_on_metadata:
                md.stats.add(metadata_id=id_stat, uint64_value=dictionary[name])
            metadata[name] = md.id
        extra = {}
        for counter_id, name, description, counter_set in _EXTRA_COUNTERS:
            md = b.metadata(name)
            md.stats.add(metadata_id=desc_stat, str_value=description)
            md.stats.add(metadata_id=set_stat, ref_value=b.stat_id(counter_set))  # an interned string
            extra[name] = (md.id, counter_id)
        unnamed: dict[str, int] = {}
        if ordinal == 1:
            unnamed = {name: b.metadata("").id for name in names}

        modules = next(line for line in plane.lines if line.name == "XLA Modules")
        by_kernel: dict[str, list[xplane_pb2.XEvent]] = {}
        for event in modules.events:
            by_kernel.setdefault(plane.event_metadata[event.metadata_id].name, []).append(event)
        kernels = sorted(by_kernel, key=lambda k: -len(by_kernel[k]))[:2]
        sample_id = 1000
        for k, kernel in enumerate(kernels):
            for event in by_kernel[kernel][1 : 1 + samples_per_kernel]:
                line = plane.lines.add(id=sample_id, display_id=sample_id, name=kernel, display_name=kernel)
                line.timestamp_ns = modules.timestamp_ns + event.offset_ps // 1000
                line.duration_ps = event.duration_ps
                manifest.samples[(plane.name, sample_id)] = kernel
                use_unnamed = bool(unnamed) and k == 1
                if use_unnamed or keyed_by_id:
                    manifest.unnamed.add((plane.name, sample_id))
                cycles = max(1000, int(event.duration_ps * 1e-12 * FREQUENCY_HZ[generation]))
                values = _values(generation, names, cycles, rng)
                bad = rng.sample([n for n in names if _UNUSED_FOR_UTILIZATION.search(n.lower())], 2)
                for name in names:
                    e = line.events.add(metadata_id=unnamed[name] if use_unnamed else metadata[name],
                                        offset_ps=0, duration_ps=event.duration_ps)
                    e.stats.add(metadata_id=value_stat, uint64_value=UNREADABLE if name in bad else values[name])
                    if not ids_on_metadata and not keyed_by_id:
                        e.stats.add(metadata_id=id_stat, uint64_value=dictionary[name])
                    manifest.counter_events += 1
                manifest.unreadable += len(bad)
                for md_id, _counter_id in extra.values():
                    e = line.events.add(metadata_id=md_id, offset_ps=0, duration_ps=event.duration_ps)
                    e.stats.add(metadata_id=value_stat, uint64_value=rng.randrange(1, 10**6))
                    e.stats.add(metadata_id=id_stat, uint64_value=counter_id)
                    manifest.counter_events += 1
                sample_id += 1

        if ordinal == 0:  # PM-sampling style time series: one event per metric and interval
            series = plane.lines.add(id=99, name="_counters_", timestamp_ns=modules.timestamp_ns)
            for metric in ("hbm_bandwidth_gbps", "tensorcore_power_w"):
                md = b.metadata(metric)
                sid = b.stat_id(metric)
                for i in range(5):
                    e = series.events.add(metadata_id=md.id, offset_ps=i * 10**9, duration_ps=0)
                    e.stats.add(metadata_id=sid, double_value=round(rng.uniform(10, 900), 3))
                    manifest.series_events += 1
    Path(dest).write_bytes(space.SerializeToString())
    return manifest


_TOOL = (
    "import sys\n"
    "from xprof.convert.raw_to_tool_data import xspace_to_tool_data\n"
    "data, _ = xspace_to_tool_data([sys.argv[1]], sys.argv[2], {'use_saved_result': False})\n"
    "sys.stdout.write(data.decode() if isinstance(data, bytes) else data)\n"
)


def run_xprof_tool(path: Path, tool: str, work: Path) -> list[dict[str, Any]]:
    """Rows of an XProf tool's DataTable, run in its own process on a copy of ``path``.

    Own process: the xprof wheel's native Arrow breaks pyarrow.compute when
    loaded beside it. A copy: the tools write caches beside their input. A
    ``Value`` cell keeps its exact hex text (``f``): its ``v`` is a lossy double.
    """
    work.mkdir(parents=True, exist_ok=True)
    copy = work / Path(path).name
    shutil.copy(path, copy)
    done = subprocess.run([sys.executable, "-c", _TOOL, str(copy), tool], check=True, capture_output=True,
                          timeout=600)
    table = json.loads(done.stdout)
    labels = [c["id"] for c in table["cols"]]
    rows = []
    for row in table["rows"]:
        cells = []
        for label, cell in zip(labels, row["c"]):
            if cell is None:
                cells.append(None)
            elif label == "Value" and cell.get("f") is not None:
                cells.append(int(cell["f"], 16))
            else:
                cells.append(cell.get("v"))
        rows.append(dict(zip(labels, cells)))
    return rows
