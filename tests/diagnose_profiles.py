"""Real CPU PyTorch profiles for the step-breakdown findings (tests/test_diagnose_steps.py), written on this machine.

Like tests/wild_profiles.py (whose runner this module uses), each generator runs its program in a subprocess
with this interpreter and returns the trace it wrote; wrap it in a session-scoped fixture and mark its tests slow.

* :func:`make_dataloader_training_profile`: an MLP trained with SGD on the CPU, its batches read through a
  ``torch.utils.data.DataLoader`` (single process) inside the loop, under ``torch.profiler.profile`` with
  :data:`LOADER_SCHEDULE`; ``sleep_s`` > 0 makes the loader's ``Dataset.__getitem__`` sleep that long per batch
  (a slow input pipeline: decoding, reading files), 0 gives the same program with a fast loader (the fixed one).
  Each profiled step ``ProfilerStep#N`` starts at ``prof.step()`` and holds the loader's
  ``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`` then the forward, backward and optimizer step.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from wild_profiles import _new_files, _require, _run, _torch_env

__all__ = ["LOADER_SCHEDULE", "LOADER_SLEEP_S", "make_dataloader_training_profile"]

# wait=1, warmup=1, active=6: the trace holds ProfilerStep#2..#7 (the first and last complete steps are dropped
# by steps.steps as XProf does, leaving four).
LOADER_SCHEDULE = {"wait": 1, "warmup": 1, "active": 6}
# The slow loader's sleep per batch: about ten times the compute of a step on one CPU thread, so that the
# compute's own noise on a busy machine (the fast profile's steps taking twice as long) stays far from 25% of it.
LOADER_SLEEP_S = 0.05

_LOADER_PROGRAM = textwrap.dedent(
    """
    import json
    import sys
    import time

    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    logdir, worker, schedule, sleep_s = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), float(sys.argv[4])
    torch.set_num_threads(1)
    torch.manual_seed(0)

    class Batches(Dataset):
        # One item is a whole batch (batch_size=None below): the loader adds no collate work.
        def __init__(self, n):
            self.x, self.y = torch.randn(n, 128, 256), torch.randn(n, 128, 10)

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            if sleep_s > 0:
                time.sleep(sleep_s)  # a slow input pipeline: reading, decoding
            return self.x[i], self.y[i]

    steps = schedule["wait"] + schedule["warmup"] + schedule["active"]
    loader = DataLoader(Batches(steps), batch_size=None, shuffle=False, num_workers=0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.MSELoss()
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=torch.profiler.schedule(**schedule),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(logdir, worker_name=worker),
    ) as prof:
        for x, y in loader:
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            prof.step()
    """
)


def make_dataloader_training_profile(logdir: Path, *, sleep_s: float = LOADER_SLEEP_S, timeout_s: float = 120.0) -> Path:
    """Profile the DataLoader training loop of the module docstring, its loader sleeping ``sleep_s`` per batch;
    return the ``*.pt.trace.json`` written.

    Example:
        >>> make_dataloader_training_profile(tmp_path / "slow")            # doctest: +SKIP
        PosixPath('.../loader.1700000000000.pt.trace.json')
    """
    _require("torch", "torch==2.13.0")
    logdir = Path(logdir)
    logdir.mkdir(parents=True, exist_ok=True)
    before = set(logdir.rglob("*"))
    _run(_LOADER_PROGRAM, [str(logdir), "loader", json.dumps(LOADER_SCHEDULE), repr(float(sleep_s))],
         label="PyTorch DataLoader training", timeout_s=timeout_s, env=_torch_env())
    found = _new_files(logdir, "loader*.pt.trace.json", before)
    if len(found) != 1:
        raise RuntimeError(f"PyTorch wrote {len(found)} new traces under {logdir}, expected 1: {found}")
    return found[0]
