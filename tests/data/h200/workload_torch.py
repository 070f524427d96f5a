"""The PyTorch workload of the H200 captures: two transformer blocks' training steps in bf16.

Run as it is under ``xprosql record`` (CUPTI activity, NVTX ranges ``step N`` around the
measured steps), or with ``--kineto DIR`` to write a torch.profiler (Kineto) trace of the
same steps instead. ``--graph`` captures one training step (forward, backward, AdamW) as a
CUDA graph and replays it for each measured step; its Kineto trace holds the capture
(ProfilerStep#0) and the replays (ProfilerStep#1-3).
"""

from __future__ import annotations

import argparse
import gzip
import shutil
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

D_MODEL, HEADS, SEQ, BATCH, LAYERS = 2048, 16, 1024, 8, 2
WARMUP, MEASURED = 3, 3


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D_MODEL), nn.LayerNorm(D_MODEL)
        self.qkv, self.proj = nn.Linear(D_MODEL, 3 * D_MODEL), nn.Linear(D_MODEL, D_MODEL)
        self.fc1, self.fc2 = nn.Linear(D_MODEL, 4 * D_MODEL), nn.Linear(4 * D_MODEL, D_MODEL)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kineto", help="write a torch.profiler trace (gzipped Kineto JSON) into this directory")
    parser.add_argument("--graph", action="store_true", help="replay the training step as one CUDA graph")
    parser.add_argument("--dry-run", action="store_true", help="on the CPU, small: checks the script without a GPU")
    args = parser.parse_args()
    device = "cpu" if args.dry_run else "cuda"
    batch, seq = (1, 64) if args.dry_run else (BATCH, SEQ)
    torch.manual_seed(0)
    model = nn.Sequential(*[Block() for _ in range(LAYERS)]).to(device, torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, capturable=args.graph)
    x = torch.randn(batch, seq, D_MODEL, device=device, dtype=torch.bfloat16)
    synchronize = (lambda: None) if args.dry_run else torch.cuda.synchronize
    nvtx_push, nvtx_pop = ((lambda _: None), (lambda: None)) if args.dry_run else (torch.cuda.nvtx.range_push,
                                                                                     torch.cuda.nvtx.range_pop)

    def train_step() -> torch.Tensor:
        loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        return loss

    def eager_step() -> None:
        opt.zero_grad(set_to_none=True)
        train_step()

    def capture() -> Callable[[], None]:
        """One training step captured as a CUDA graph (after PyTorch's docs: warm-up on a side stream first)."""
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            train_step()
        return graph.replay

    def measured(step: Callable[[], None], i: int) -> None:
        nvtx_push(f"step {i}")
        step()
        synchronize()  # each step ends on the host, so a step's kernels are its own
        nvtx_pop()

    if args.graph:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP):
                eager_step()
        torch.cuda.current_stream().wait_stream(side)
    else:
        for _ in range(WARMUP):
            eager_step()
    synchronize()

    if not args.kineto:
        step = capture() if args.graph else eager_step
        for i in range(MEASURED):
            measured(step, i)
        return
    out = Path(args.kineto)
    out.mkdir(parents=True, exist_ok=True)
    activities = [torch.profiler.ProfilerActivity.CPU] + ([] if args.dry_run else [torch.profiler.ProfilerActivity.CUDA])
    # Graph: the capture in the trace too (ProfilerStep#0, no warm-up step), so its ops name the replayed kernels.
    warmup = 0 if args.graph else 1
    schedule = torch.profiler.schedule(wait=0, warmup=warmup, active=1 - warmup + MEASURED, repeat=1)
    with torch.profiler.profile(activities=activities, schedule=schedule, record_shapes=True,
                                profile_memory=True) as prof:
        if args.graph:
            step = capture()
            synchronize()
            prof.step()
        else:
            step = eager_step
        for i in range(warmup + MEASURED):
            measured(step, i)
            prof.step()
    prof.export_chrome_trace(str(out / "trace.json"))
    name = f"h200_{'graph' if args.graph else 'eager'}_train.json.gz"
    with open(out / "trace.json", "rb") as src, gzip.open(out / name, "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    (out / "trace.json").unlink()


if __name__ == "__main__":
    main()
