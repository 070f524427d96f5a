"""Differential test of TPU counters and utilization against XProf's perf_counters and utilization_viewer.

The counter part of these files is hand-built (tests/counter_profiles.py): no
public profile carries TPU performance counters, so the real TPU v6e sample gets
counter samples added in the layout XProf's tools read (a line per sample named
by its kernel, an event per counter with a counter_value stat, counter names
and ids from the xprof wheel's own dictionaries), once as v6e and once
relabelled v7x (two dies, per-die HBM) to drive both of XProf's code paths.
XProf runs in its own process on copies of the same files.

Where we differ from XProf on purpose, the test says so: we drop the all-ones
"could not read" values XProf lists; we name counter events that carry only an
id (XProf shows an empty name); XProf's descriptions of known counters come
from a table compiled into its binary, so descriptions are compared where the
file's own apply (counters the dictionary does not know).
"""

from __future__ import annotations

import importlib.util
from collections import Counter, defaultdict
from pathlib import Path

import polars as pl
import pytest
from counter_profiles import UNREADABLE, Manifest, build_counter_profile, run_xprof_tool, xprof_dictionary

import xprosql
from xprosql.ingest import profile_id_of

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("xprof") is None, reason="the xprof wheel (test extra) is not installed"
)
REL = 1e-3  # within 0.1%


class Case:
    def __init__(self, path: Path, manifest: Manifest, profile_id: str, perf: list[dict], util: list[dict]) -> None:
        self.path, self.manifest, self.profile_id, self.perf, self.util = path, manifest, profile_id, perf, util


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> tuple[xprosql.Run, dict[str, Case]]:
    work = tmp_path_factory.mktemp("counters")
    built = {}
    for generation in ("v6e", "v7x"):
        path = work / f"tpu_{generation}_counters.xplane.pb"
        manifest = build_counter_profile(path, generation=generation)
        perf = run_xprof_tool(path, "perf_counters", work / f"xprof_{generation}_perf")
        util = run_xprof_tool(path, "utilization_viewer", work / f"xprof_{generation}_util")
        built[generation] = Case(path, manifest, profile_id_of(path.read_bytes()), perf, util)
    report = xprosql.ingest([c.path for c in built.values()], into=work / "run")
    assert report.ok, str(report)
    return xprosql.load(work / "run"), built


GENERATIONS = ["v6e", "v7x"]


@pytest.mark.parametrize("generation", GENERATIONS)
@pytest.mark.slow
def test_counter_rows_match_perf_counters(cases: tuple[xprosql.Run, dict[str, Case]], generation: str) -> None:
    run, built = cases
    case = built[generation]
    assert len(case.perf) == case.manifest.counter_events > 10_000

    # XProf lists the all-ones values; we drop and count them.
    unreadable = [r for r in case.perf if r["Value"] == UNREADABLE]
    assert len(unreadable) == case.manifest.unreadable > 0
    reasons = run.sql("SELECT drop_reasons FROM profiles WHERE profile_id = $p", {"p": case.profile_id}).rows()[0][0]
    assert reasons == [f"{len(unreadable)} counter values 0xFFFFFFFFFFFFFFFF (could not be read)"]

    ours = run.sql(
        """SELECT d.name AS plane,
                  coalesce((SELECT any_value(coalesce(s.uint_value::BIGINT, s.int_value)) FROM device_stats s
                            WHERE s.profile_id = c.profile_id AND s.device_id = c.device_id AND s.stat = 'global_chip_id'),
                           (SELECT any_value(coalesce(s.uint_value::BIGINT, s.int_value)) FROM device_stats s
                            WHERE s.profile_id = c.profile_id AND s.device_id = c.device_id AND s.stat = 'device_id')) AS chip,
                  c.kernel, c.sample, c.counter, c.counter_id, c.value, c.description, c.counter_set
           FROM counters c JOIN devices d USING (profile_id, device_id)
           WHERE c.profile_id = $p AND c.event_id IS NOT NULL AND c.kernel <> '_counters_'""",
        {"p": case.profile_id},
    ).pl()
    unnamed_chips = {case.manifest.chip[plane] for plane, _ in case.manifest.unnamed}
    unnamed = {(case.manifest.chip[plane], sample) for plane, sample in case.manifest.unnamed}
    assert unnamed_chips, "the file has events without names"

    def key(chip: int, kernel: str, sample: int, counter: str, value: int) -> tuple:
        return (chip, kernel, sample, None if (chip, sample) in unnamed else counter, value)

    theirs = Counter(key(int(r["Chip"]), r["Kernel"], int(r["Sample"]), r["Counter"], r["Value"])
                     for r in case.perf if r["Value"] != UNREADABLE)
    mine = Counter(key(*row) for row in ours.select("chip", "kernel", "sample", "counter", "value").rows())
    assert mine == theirs
    # Their Counter is the lowercased event name; an unnamed event shows '' there, a name from the dictionary here.
    extras = ("host_dma_queue_depth", "spare_event_count")  # named in every sample
    assert {r["Counter"] for r in case.perf if (int(r["Chip"]), int(r["Sample"])) in unnamed} - set(extras) == {""}
    names = {v: k.lower() for k, v in xprof_dictionary(generation).items()}
    named_here = ours.filter(pl.struct("chip", "sample").map_elements(
        lambda s: (s["chip"], s["sample"]) in unnamed, return_dtype=pl.Boolean)).filter(~pl.col("counter").is_in(extras))
    assert named_here.height > 0
    assert all(names[i] == n for i, n in named_here.select("counter_id", "counter").rows())

    # Counters the dictionary does not know: XProf shows the file's description and set, as we do.
    extra = {(r["Counter"], r["Description"], r["Set"]) for r in case.perf if r["Counter"] in extras}
    assert extra == set(ours.filter(pl.col("counter").is_in(extras))
                        .select("counter", "description", "counter_set").unique().rows())
    assert len(extra) == 2


def _pooled(rows: list[dict], key) -> dict:
    sums: dict = defaultdict(lambda: [0.0, 0.0])
    for r in rows:
        k = key(r)
        if k is not None:
            sums[k][0] += r["achieved"]
            sums[k][1] += r["peak"]
    return sums


@pytest.mark.parametrize("generation", GENERATIONS)
@pytest.mark.slow
def test_utilization_metrics_match_utilization_viewer(cases: tuple[xprosql.Run, dict[str, Case]], generation: str) -> None:
    run, built = cases
    case = built[generation]
    device_plane = {v: k for k, v in case.manifest.device.items()}
    plane_device = run.sql("SELECT name, device_id FROM devices WHERE profile_id = $p", {"p": case.profile_id}).rows()
    device_of = dict(plane_device)
    kernel_of = case.manifest.samples

    def device_id(r: dict) -> int:
        return device_of[device_plane[int(r["device"])]]

    ours = run.utilization(profiles=[case.profile_id], level="metrics").pl()
    whole = {(d, n, m): (a, p) for d, n, m, a, p in
             ours.filter(pl.col("kernel").is_null()).select("device_id", "node", "metric", "achieved", "peak").rows()}
    per_kernel = {(d, k, n, m): (a, p) for d, k, n, m, a, p in
                  ours.filter(pl.col("kernel").is_not_null())
                  .select("device_id", "kernel", "node", "metric", "achieved", "peak").rows()}

    theirs = _pooled(case.util, lambda r: (device_id(r), int(r["node"]), r["name"]))
    theirs_kernel = _pooled(case.util, lambda r: (device_id(r), kernel_of[(device_plane[int(r["device"])], int(r["sample"]))],
                                                  int(r["node"]), r["name"]))
    compared = 0
    for table, mine in ((theirs, whole), (theirs_kernel, per_kernel)):
        for k, (achieved, peak) in table.items():
            if peak == 0:  # XProf writes SparseCore rows without a cycle counter; we write none
                assert k not in mine or mine[k][1] == 0
                continue
            assert k in mine, f"XProf metric {k} missing"
            repeated = 2 if generation == "v7x" and k[-1].startswith("ICI") else 1  # XProf writes v7x ICI once per die
            assert mine[k][1] * repeated == pytest.approx(peak, rel=REL), k
            assert mine[k][0] / mine[k][1] == pytest.approx(achieved / peak, rel=REL, abs=1e-9), k
            compared += 1
        assert set(mine) <= set(table)
    expected_metrics = {"Avg MXU Busy", "Vector ALUs", "XLU0", "XLU1", "HBM Rd+Wr - core 0", "ICI (Read)", "VPU Utilization",
                        "MXU0", "SC Vector Issue", "SCS Scalar Issue"}
    assert expected_metrics <= {m for _, _, m in whole}
    assert compared > 400


@pytest.mark.parametrize("generation", GENERATIONS)
@pytest.mark.slow
def test_utilization_summary_matches_utilization_viewer(cases: tuple[xprosql.Run, dict[str, Case]], generation: str) -> None:
    run, built = cases
    case = built[generation]
    groups = {"mxu": lambda m: m == "Avg MXU Busy", "vector": lambda m: m == "Vector ALUs",
              "xlu": lambda m: m in ("XLU0", "XLU1"), "hbm": lambda m: m.startswith("HBM Rd+Wr - core "),
              "dma": lambda m: m in ("ICI (Read)", "ICI (Write)")}
    device_plane = {v: k for k, v in case.manifest.device.items()}
    summary = run.utilization(profiles=[case.profile_id]).pl()
    assert summary.height == 1 + 4 * 3  # per profile, per chip, and per chip and kernel (2 kernels)
    mean_of_ratios_differs = False
    for row in summary.iter_rows(named=True):
        rows = [r for r in case.util if row["device"] is None or (device_plane[int(r["device"])] == row["device"]
                and (row["kernel"] is None or case.manifest.samples[(row["device"], int(r["sample"]))] == row["kernel"]))]
        for group, belongs in groups.items():
            mine = [r for r in rows if belongs(r["name"])]
            per_sample = _pooled(mine, lambda r: (int(r["device"]), int(r["sample"])))
            total = _pooled(mine, lambda r: 0)[0]
            assert row[f"{group}_utilization"] == pytest.approx(total[0] / total[1], rel=REL), (row["device"], group)
            ratios = {s: a / p for s, (a, p) in per_sample.items()}
            busiest = max(ratios, key=ratios.get)
            assert row[f"{group}_busiest_utilization"] == pytest.approx(ratios[busiest], rel=REL)
            assert row[f"{group}_busiest_sample"] == busiest[1]
            mean = sum(ratios.values()) / len(ratios)
            mean_of_ratios_differs |= abs(mean - row[f"{group}_utilization"]) > REL * row[f"{group}_utilization"]
    assert mean_of_ratios_differs  # the samples differ in length: the test tells the two averages apart
