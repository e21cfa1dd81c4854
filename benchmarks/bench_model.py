"""The model run's performance target (issue: "Models", Performance): a pre-norm
transformer block (d_model 64, 4 heads, sequence 32, MLP 256, batch 4) captured from
PyTorch, its forward values and every gradient in bfloat16 with binary32 accumulation
against exact values, with local and propagated errors per node, in under 60 s on 2 cores.

    python benchmarks/bench_model.py [--samples N] [--routes forward,gradient] [--jobs N]

Runs ``roundoff-coverage model benchmarks/bench_model.py:block`` (the CLI, as a user
would) and prints its wall time and phases; the target is the wall time of that command
(capture included).  Also times torch's own float32 forward and backward of the block, the
ratio being the cost of measuring against exact values."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time


def block():
    """(model, example args): the target's transformer block, seeded."""
    import torch
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, d=64, heads=4, hidden=256):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
            self.mlp = nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, d))

        def forward(self, x):
            y = self.ln1(x)
            x = x + self.attn(y, y, y, need_weights=False)[0]
            return x + self.mlp(self.ln2(x))

    torch.manual_seed(0)
    return Block().eval(), (torch.randn(4, 32, 64),)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=1)
    ap.add_argument("--routes", default="forward,gradient")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    here = os.path.abspath(__file__)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "model.json")
        cmd = [sys.executable, "-m", "roundoff_coverage", "model", f"{here}:block",
               "--formats", "bfloat16", "--policies", "fp32_accumulate", "--routes",
               args.routes, "--samples", str(args.samples), "--jobs", str(args.jobs),
               "--out", out]
        t0 = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if done.returncode != 0:
            sys.exit(f"model run failed ({done.returncode}): {done.stderr.strip()[-500:]}")
        import json
        with open(out) as fh:
            doc = json.load(fh)
    rows = doc["rows"]
    print(f"model run: {len(rows)} rows, {wall:.1f} s wall (target < 60 s on 2 cores); "
          f"command: {' '.join(cmd[2:])}")
    model, (x,) = block()
    x.requires_grad_(True)
    t0 = time.perf_counter()
    for _ in range(10):
        model(x).sum().backward()
    torch_s = (time.perf_counter() - t0) / 10
    print(f"torch float32 forward + backward: {torch_s * 1e3:.1f} ms; model run / torch = "
          f"{wall / torch_s:.0f}x")


if __name__ == "__main__":
    main()
