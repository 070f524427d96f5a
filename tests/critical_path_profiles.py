"""Oracles and generated profiles for tests/test_critical_path.py.

* :func:`hta_critical_path`: HTA 0.5's own critical path (``hta.analyzers.critical_path_analysis``) on a Kineto
  trace, per ``ProfilerStep`` instance or for the whole trace. HTA 0.5 was written for pandas 2; under pandas 3
  (copy-on-write always on, integer ``Series[a:b]`` by label) its critical-path module fails or, worse, goes
  silently wrong. :func:`hta_cp_module` loads that module's source with the four textual fixes below, each
  checked to apply, and nothing else changed: the oracle stays HTA's code.

  1. ``df.drop(axis=1, columns=...)`` -> ``df.drop(columns=...)`` (pandas 3 refuses both).
  2. ``df.col.fillna(v, inplace=True)`` -> ``df["col"] = df.col.fillna(v)`` (copy-on-write: the chained
     in-place fill no longer reaches ``df``; the event-record and stream-wait matching depend on it).
  3. ``annotations.ts[a : b]`` -> ``annotations.ts.iloc[a : b]`` (pandas 2 sliced integer indexes by position,
     pandas 3 by label: the step window came out NaN or wrong).
* :func:`sleep_job_profiles`: a small CPU PyTorch training job profiled with torch.profiler, with a known sleep
  inside a known ``record_function``, and the same job without the sleep (session fixture in the test module).
* :func:`make_sync_job_profiles`: a 2-rank gloo DDP job whose steps cycle through four known structures: a sleep
  in a known op on rank 0 before an added sync (``dist.barrier()``), the sync alone, work on both ranks on either
  side of the sync, and that work without the sync (:data:`SYNC_VARIANTS`), so that a what-if on one structure can
  be checked against the measured steps of another, in the same run.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
import re
import shutil
import sys
import textwrap
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

_FIXES: list[tuple[str, str, int]] = [
    # (pattern, replacement, how many times it must apply)
    (r"\.drop\(\s*axis=1,\s*columns=", ".drop(columns=", 7),
    (r"(\b[a-z_]+)\.([a-z_]+)\.fillna\(([^,()]+), inplace=True\)", r'\1["\2"] = \1.\2.fillna(\3)', 4),
    (r"annotations\.(ts|end_ts)\[instance_start : instance_end \+ 1\]", r"annotations.\1.iloc[instance_start : instance_end + 1]", 2),
]


@functools.cache
def hta_cp_module() -> ModuleType:
    """HTA 0.5's critical_path_analysis module with the pandas 3 fixes (see the module docstring)."""
    import hta.analyzers.critical_path_analysis as original

    source = Path(original.__file__).read_text()
    for pattern, replacement, count in _FIXES:
        source, n = re.subn(pattern, replacement, source)
        assert n == count, f"HTA source changed: {pattern!r} applied {n} times, expected {count}"
    name = "hta_critical_path_pandas3"
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__file__ = original.__file__
    sys.modules[name] = module
    exec(compile(source, original.__file__, "exec"), module.__dict__)
    return module


def hta_trace(source: Path, workdir: Path) -> Any:
    """HTA's Trace (rank 0) of one Kineto file, copied into a directory of its own."""
    from hta.trace_analysis import TraceAnalysis

    logging.getLogger("hta").setLevel(logging.CRITICAL)
    trace_dir = workdir / source.name.split(".")[0]
    trace_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(source, trace_dir / source.name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return TraceAnalysis(trace_dir=str(trace_dir)).t


def hta_critical_path(trace: Any, instance: int | None) -> dict[str, Any]:
    """HTA's critical path of ProfilerStep ``instance`` (None: the whole trace): its length, us, and its
    bound_by breakdown (us per category); ``ok`` False with ``error`` where HTA fails."""
    module = hta_cp_module()
    annotation = "" if instance is None else "ProfilerStep"
    try:
        with warnings.catch_warnings():  # HTA's pandas 2 idioms warn under pandas 3 at every call
            warnings.simplefilter("ignore")
            result = module.CriticalPathAnalysis.critical_path_analysis(trace, 0, annotation, instance or 0)
            breakdown = result[0].get_critical_path_breakdown() if result is not None and result[1] else None
    except Exception as error:  # HTA's own failures: no launched GPU work, AMD, ...
        return {"ok": False, "error": f"{type(error).__name__}: {error}"}
    if result is None or not result[1]:
        return {"ok": False, "error": "HTA found no critical path"}
    graph = result[0]
    by = breakdown.groupby("bound_by").duration.sum().to_dict()
    return {
        "ok": True,
        "length_us": float(breakdown.duration.sum()),
        "bound_by": {k: float(v) for k, v in by.items() if k},
        "n_nodes": len(graph.critical_path_nodes),
        "graph": graph,
    }


# --- a CPU PyTorch job with a known sleep in a known op ----------------------------------------

SLEEP_OP = "xprosql_cp::sleepy"  # a custom op (torch.library): a cpu_op in the trace, a node of HTA's graph
SLEEP_S = 0.04
SLEEP_SCHEDULE = {"wait": 1, "warmup": 1, "active": 12}
# Active steps alternate: even step numbers call the op with the sleep, odd ones without it (the control, in the
# same process and moments, so the machine's load moves both alike). The sleep waits busily: on a loaded machine a
# process waking from time.sleep runs ahead of the others for a while (the scheduler's credit to sleepers), which
# made the steps after a real sleep ~30% faster than the control steps here (2 cores, load 5).

# A custom op that waits busily for ``seconds`` (so that it is one profiled op with a known cost).
_SLEEPY_OP = textwrap.dedent(
    """
    @torch.library.custom_op("xprosql_cp::sleepy", mutates_args=())
    def sleepy(x: torch.Tensor, seconds: float) -> torch.Tensor:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
        return x.clone()

    @sleepy.register_fake
    def _(x, seconds):
        return torch.empty_like(x)

    sleepy.register_autograd(lambda ctx, grad: (grad, None))
    """
)

_SLEEP_PROGRAM = textwrap.dedent(
    """
    import json, sys, time
    import torch
    from torch import nn
    """
) + _SLEEPY_OP + textwrap.dedent(
    """
    torch.set_num_threads(1)
    torch.manual_seed(0)
    logdir, sleep_s, schedule = sys.argv[1], float(sys.argv[2]), json.loads(sys.argv[3])
    model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(768, 512), torch.randn(768, 512)
    steps = schedule["wait"] + schedule["warmup"] + schedule["active"]
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=torch.profiler.schedule(**schedule),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(logdir, worker_name="sleepy"),
    ) as prof:
        for step in range(steps):
            opt.zero_grad()
            h = model(x)
            with torch.profiler.record_function("sleepy_block"):
                h = torch.ops.xprosql_cp.sleepy(h, sleep_s if step % 2 == 0 else 0.0)
            loss = nn.functional.mse_loss(h, y)
            loss.backward()
            opt.step()
            prof.step()
    """
)


def make_sleep_job_profile(logdir: Path, *, timeout_s: float = 180.0) -> Path:
    """Profile the sleep job on the CPU; return its ``*.pt.trace.json`` (steps 2..13 of the schedule: even ones
    sleep :data:`SLEEP_S` inside :data:`SLEEP_OP`, odd ones do not)."""
    from wild_profiles import _require, _run, _torch_env

    _require("torch", "torch==2.13.0")
    logdir = Path(logdir)
    logdir.mkdir(parents=True, exist_ok=True)
    _run(_SLEEP_PROGRAM, [str(logdir), str(SLEEP_S), json.dumps(SLEEP_SCHEDULE)], label="PyTorch sleep job",
         timeout_s=timeout_s, env=_torch_env())
    found = sorted(logdir.glob("sleepy*.pt.trace.json"))
    if not found:
        raise RuntimeError(f"PyTorch wrote no *.pt.trace.json under {logdir}")
    return found[-1]


def hta_step_instances(trace: Any) -> dict[int | None, int | None]:
    """Step number -> HTA's instance_id of its ProfilerStep#N annotation on the CPU (HTA counts every event
    named ProfilerStep*, GPU annotations too); {None: None} (the whole trace) for a trace without steps."""
    df = trace.get_trace(0)
    table = trace.symbol_table.get_sym_table()
    ids = [i for i, name in enumerate(table) if "ProfilerStep" in name]
    annotations = df[df["name"].isin(ids)]
    found: dict[int | None, int | None] = {}
    for instance, (name, stream) in enumerate(zip(annotations["name"], annotations["stream"])):
        if stream == -1:
            found[int(table[name].split("#")[1])] = instance
    return found or {None: None}


# --- a 2-rank gloo job with a known sleep and an added sync ------------------------------------

SYNC_RANKS = 2
SYNC_SCHEDULE = {"wait": 1, "warmup": 1, "active": 12}
SYNC_BASE_S = 0.1   # every rank's forward sleeps this long (a stand-in for compute: steady against the 2 cores' noise)
SYNC_SLEEP_S = 0.15  # rank 0's busy wait inside SLEEP_OP, before the barrier, in "sleep" steps
SYNC_WORK_S = 0.15  # the busy wait of rank 0 before and of rank 1 after the barrier, in "work" steps (longer than
#                    the forward's sleep, so it is the top op of its segment of the path)
# Step N (ProfilerStep#N, N = 2..13) runs variant N % 4:
SYNC_VARIANTS = {0: "sleep", 1: "sync", 2: "work_sync", 3: "work"}
# sleep:      rank 0 sleeps SYNC_SLEEP_S in SLEEP_OP, then every rank enters dist.barrier()
# sync:       dist.barrier() alone (the control of "sleep": the sleep removed)
# work_sync:  rank 0 busy SYNC_WORK_S in SLEEP_OP, dist.barrier(), rank 1 busy SYNC_WORK_S in SLEEP_OP: the barrier
#             makes rank 1 wait for rank 0's work before its own (about 2 x SYNC_WORK_S)
# work:       the same work without the barrier (the control of "work_sync": the sync removed): the two ranks'
#             work overlaps until DDP's all-reduce joins them (about 1 x SYNC_WORK_S)

_SYNC_PROGRAM = textwrap.dedent(
    """
    import datetime, json, os, sys, time
    import torch
    from torch import nn
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    """
) + _SLEEPY_OP + textwrap.dedent(
    """
    class Paced(nn.Module):
        def __init__(self, inner, base_s):
            super().__init__()
            self.inner, self.base_s = inner, base_s

        def forward(self, x):
            time.sleep(self.base_s)
            return self.inner(x)

    logdir, schedule = sys.argv[1], json.loads(sys.argv[2])
    base_s, sleep_s, work_s = float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    try:
        torch.manual_seed(0)
        model = DistributedDataParallel(Paced(nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10)), base_s))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x, y = torch.randn(64, 128), torch.randn(64, 10)
        steps = schedule["wait"] + schedule["warmup"] + schedule["active"]
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU], schedule=torch.profiler.schedule(**schedule),
            on_trace_ready=torch.profiler.tensorboard_trace_handler(logdir, worker_name=f"rank{rank}"),
        ) as prof:
            for step in range(steps):
                variant = step % 4
                opt.zero_grad()
                h = model(x)
                before = after = 0.0
                if variant == 0 and rank == 0:
                    before = sleep_s
                if variant in (2, 3):
                    before, after = (work_s, 0.0) if rank == 0 else (0.0, work_s)
                h = torch.ops.xprosql_cp.sleepy(h, before)
                if variant in (0, 1, 2):
                    dist.barrier()
                h = torch.ops.xprosql_cp.sleepy(h, after)
                loss = nn.functional.mse_loss(h, y)
                loss.backward()
                opt.step()
                prof.step()
        dist.barrier()
    finally:
        dist.destroy_process_group()
    """
)


def make_sync_job_profiles(logdir: Path, *, timeout_s: float = 180.0) -> list[Path]:
    """Run the 2-rank gloo job of :data:`SYNC_VARIANTS` on the CPU; return its ranks' ``*.pt.trace.json``, rank 0
    first (steps 2..13 of :data:`SYNC_SCHEDULE`)."""
    from wild_profiles import _require, run_gloo_ranks

    _require("torch", "torch==2.13.0")
    return run_gloo_ranks(_SYNC_PROGRAM, [json.dumps(SYNC_SCHEDULE), str(SYNC_BASE_S), str(SYNC_SLEEP_S),
                                          str(SYNC_WORK_S)], Path(logdir), SYNC_RANKS, label="gloo sync job",
                          timeout_s=timeout_s)
