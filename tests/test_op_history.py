"""One op across runs (op_stats.op_key) and the change point of its time per occurrence (sql/fleet/op_history.sql).

A small fleet made by benchmarks/make_corpus.py from the real samples: 12 jobs of 5 runs, one profile a run (the
script's 10 hosts a run cut to 1 to keep the test short), seed 2, so the jobs with the injected regression (every
fourth: job00, job04, job08, from run 3 on the longest op runs 30% longer) are one of each kind: V100 XSpace
kernels, A100 Kineto (PyTorch ops), TPU v6e XSpace (HLO ops). Only those three jobs and two others are written.
What was injected, and where, is found here from the raw sample files (the script's rule: the event name with the
most time on device op lines; Kineto: the kernel with the most time), not from xprosql's tables.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import TEST_DATA

import xprosql
from xprosql.protos import xplane_pb2

pytestmark = pytest.mark.slow  # writes and ingests 25 profiles (a minute or more on the 2-core machine)

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
AFFECTED = ("job00", "job04", "job08")
UNAFFECTED = ("job01", "job02")


def _injected_xspace(path: Path) -> str:
    """The event name with the most time on XLA Ops and GPU stream lines of device planes."""
    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    totals: dict[str, int] = defaultdict(int)
    for plane in space.planes:
        if plane.name.startswith("/device:"):
            for line in plane.lines:
                if line.name == "XLA Ops" or line.name.startswith("Stream #"):
                    for event in line.events:
                        totals[plane.event_metadata[event.metadata_id].name] += event.duration_ps
    return max(totals, key=totals.__getitem__)


def _injected_kineto(path: Path) -> tuple[str, set[str]]:
    """The kernel with the most time, and the cpu_ops around its launches (same correlation) on their thread."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    totals: dict[str, float] = defaultdict(float)
    for e in events:
        if e.get("cat") == "kernel":
            totals[e["name"]] += e.get("dur", 0)
    kernel = max(totals, key=totals.__getitem__)
    correlations = {e["args"]["correlation"] for e in events if e.get("cat") == "kernel" and e["name"] == kernel}
    launches = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and e.get("args", {}).get("correlation") in correlations]
    ops = [e for e in events if e.get("cat") == "cpu_op" and e.get("ph") == "X"]
    around = {o["name"] for launch in launches for o in ops if o["tid"] == launch["tid"] and o["pid"] == launch["pid"]
              and o["ts"] <= launch["ts"] and launch["ts"] + launch["dur"] <= o["ts"] + o["dur"]}
    return kernel, around


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[xprosql.Run, dict[str, dict[str, Any]]]:
    sys.path.insert(0, str(BENCHMARKS))
    import make_corpus

    out = tmp_path_factory.mktemp("op_history")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(make_corpus, "PROFILES_PER_RUN", 1)
        patch.setattr(make_corpus, "HOSTS_PER_RUN", 1)
        items = [i for i in make_corpus.plan(60, jobs=12, seed=2) if i["job"] in AFFECTED + UNAFFECTED]
        for item in items:
            job_dir = out / "corpus" / str(item["job"])
            run_dir = job_dir / f"run{int(item['run']):03d}"
            run_dir.mkdir(parents=True, exist_ok=True)
            (job_dir / "xprosql.json").write_text(json.dumps({"tags": {"job": item["job"], "model": item["sample"]}}))
            (run_dir / "xprosql.json").write_text(json.dumps({"tags": {"run": str(item["run"])}}))
            make_corpus._write((item, str(out / "corpus"), 1))
    jobs = {str(i["job"]): {"sample": str(i["sample"])} for i in items}
    assert {jobs[j]["sample"] for j in AFFECTED} == {"gpu_v100_tf_bert", "a100_nccl", "tpu_v6e_inference"}
    assert {int(i["run"]) for i in items if i["regress"]} == {3, 4} and {i["job"] for i in items if i["regress"]} == set(AFFECTED)
    report = xprosql.ingest(out / "corpus", into=out / "run", compact=False)
    assert report.ok and len(report.ingested) == len(items), str(report)
    return xprosql.load(out / "run"), jobs


def test_the_injected_op_changes_at_run_3_in_every_affected_job(fleet: tuple[xprosql.Run, dict[str, dict[str, Any]]]) -> None:
    run, jobs = fleet
    rows = run.analysis("fleet.op_history").pl()
    changes = rows.filter(pl.col("is_change_point"))
    for job in UNAFFECTED:
        assert changes.filter(pl.col("series") == job).is_empty(), job
    for job in AFFECTED:
        found = changes.filter(pl.col("series") == job)
        assert found.height >= 1, job
        assert set(found["run"]) == {"3"} and set(found["direction"]) == {"slower"}, job
        assert found["change"].min() > 0.2 and found["change"].max() < 0.31, job
        sample = jobs[job]["sample"]
        if sample.endswith("xplane.pb") or sample in ("tpu_v6e_inference", "gpu_v100_tf_bert"):
            injected = _injected_xspace(TEST_DATA / "xspace" / f"{sample}.xplane.pb")
            hlo = re.match(r"^%([^ ]+) = ", injected)  # TPU op names are the instruction's HLO text
            assert set(found["op"]) == {hlo.group(1) if hlo else injected}, job
        else:
            kernel, around = _injected_kineto(TEST_DATA / "kineto" / "a100_nccl_rank0.json.gz")
            assert set(found["op"]) <= around, (job, kernel, around)
        # Every row of the op says where it changed; its runs before are one level, those after another.
        history = rows.filter(pl.col("op_key").is_in(found["op_key"].to_list()) & (pl.col("series") == job))
        assert set(history["change_run"]) == {"3"} and history["runs"].max() == 5
        levels = history.group_by(pl.col("run_index") >= 3).agg(pl.col("time_per_occurrence_ps").n_unique())
        assert levels["time_per_occurrence_ps"].to_list() == [1, 1]


def test_one_op_followed_by_its_key(fleet: tuple[xprosql.Run, dict[str, dict[str, Any]]]) -> None:
    run, _ = fleet
    every = run.analysis("fleet.op_history").pl()
    key = every.filter(pl.col("is_change_point") & (pl.col("series") == "job08"))["op_key"][0]
    followed = run.analysis("fleet.op_history", op_key=key).pl()
    assert set(followed["op_key"]) == {key}
    # The same program runs in the other TPU job, unchanged: the key is the op's, whatever job runs it.
    tpu_jobs = set(every.filter(pl.col("device_kind") == "tpu")["series"])
    assert set(followed["series"]) == tpu_jobs and len(tpu_jobs) >= 2
    one = followed.filter(pl.col("series") == "job08")
    assert one["run_index"].to_list() == [0, 1, 2, 3, 4]
    assert followed.filter(pl.col("is_change_point"))["run"].to_list() == ["3"]
    assert set(followed.filter(pl.col("is_change_point"))["series"]) == {"job08"}
    # compare joins two runs on the same key: the V100 job's kernel is one row, slower. compare sums self time,
    # which grows less than 30%: the longer kernels come to overlap the next ones on their stream line.
    kernel_key = every.filter(pl.col("is_change_point") & (pl.col("series") == "job00"))["op_key"][0]
    ids = lambda r: run.sql("SELECT profile_id FROM profiles WHERE tags['job'] = 'job00' AND tags['run'] = $r",  # noqa: E731
                            {"r": r}).pl()["profile_id"].to_list()
    compared = run.compare(baseline=ids("2"), candidate=ids("3")).pl().filter(pl.col("op_key") == kernel_key)
    row = compared.row(0, named=True)
    assert compared.height == 1 and row["baseline_occurrences_per_profile"] == row["candidate_occurrences_per_profile"] > 0
    assert 1.2 < row["time_ratio"] <= 1.3 + 1e-9
    changed = every.filter((pl.col("series") == "job00") & (pl.col("op_key") == kernel_key))
    assert changed["after_level_ps"][0] / changed["before_level_ps"][0] == pytest.approx(1.3, rel=1e-3)


def test_keys_of_rows_written_before_op_key_come_from_the_row(fleet: tuple[xprosql.Run, dict[str, dict[str, Any]]]) -> None:
    """op_stats files of an older xprosql lack op_key: fleet._op_keys makes it from the row (hlo_name, torch without
    module path, kernel without grid), the same in every profile, so a job's runs still join."""
    from xprosql.engine.library import library

    run, _ = fleet
    text, params = library().runnable("fleet._op_keys")
    older = text.replace("FROM op_stats AS s", "FROM (SELECT * REPLACE (NULL::VARCHAR AS op_key, NULL::VARCHAR AS "
                         "op_key_source, NULL::VARCHAR AS op_key_context) FROM op_stats) AS s")
    assert older != text
    rows = run.sql(older, params).pl().join(
        run.sql("SELECT profile_id, tags['job'] AS job FROM profiles").pl(), on="profile_id")
    assert set(rows["op_key_source"]) <= {"hlo_name", "torch", "kernel"} and rows["op_key"].null_count() == 0
    per_job = rows.group_by("job", "profile_id").agg(pl.col("op_key").sort()).group_by("job").agg(
        pl.col("op_key").n_unique())
    assert per_job["op_key"].to_list() == [1] * per_job.height  # every profile of a job has the same keys
