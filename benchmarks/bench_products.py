"""Time the emulated backend's products (numerics.products) against numpy float32.

    python benchmarks/bench_products.py [--sizes 256,512] [--repeat 15] [--conv-repeat 5]

One thread each (comparable on a busy machine, where a parallel region waits for its slowest
thread): OPENBLAS_NUM_THREADS=1 NUMBA_NUM_THREADS=1 python benchmarks/bench_products.py

Each entry of ``ROWS`` is a function returning ``Case``s: an emulated computation and its
numpy float32 counterpart on the same values.  All cases are warmed up (the kernels compile),
then every numpy counterpart is timed, then every emulated computation (apart: numba's and
BLAS's worker threads each spin a while after their work and would slow the other down), and
the table prints both times and their ratio (emulated / numpy: how many times slower the
bit-exact emulation is) beside the case's target.  Best of --repeat.

- matmul, bfloat16 storage, binary32 accumulation (policy fp32_accumulate), sequential
  order, n x n x n: numpy's float32 ``@`` (BLAS) on the same values; target 10x.
- the same with bfloat16 accumulation (policy strict); target 30x.
- conv2d through the routes' conv rule under the emulated backend (fp32_accumulate): batch
  8, 64 channels in and out, 32 x 32, kernel 3 x 3, padding 1; numpy float32 im2col (the
  gather of the padded input's windows), one matmul, bias added.
- matmul as above under the accelerator policies fixed_point:14 (blocks of 32 aligned to
  14 bits), promote:128 (runs of 128 in e8m13, promoted to binary32) and split_k:4; no
  target set.
- cumsum through the routes' cumsum rule, bfloat16 (1024, 1024) along the last axis, under
  strict and fp32_accumulate: numpy's float32 cumsum on the same values; no target set.

To add rows, append a function ``(args) -> list[Case]`` to ``ROWS``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numba
import numpy as np

from roundoff_coverage import formats, numerics, routes
from timing import best_of


@dataclass(frozen=True)
class Case:
    """One line of the table: the emulated computation, its numpy float32 counterpart, how
    many times to time each, and the target ratio (None: none set)."""

    name: str
    emulated: Callable[[], object]
    numpy: Callable[[], object]
    repeat: int
    target: float | None = None


def _values(fmt, shape, rng):
    """Normal draws rounded into ``fmt`` (float64 arrays of format values)."""
    return formats.round_to(rng.standard_normal(shape), fmt)


def matmul_cases(args, policy: str, target: float | None) -> list[Case]:
    """Emulated bfloat16 matmul under ``policy`` against numpy float32, for each size."""
    cases = []
    rng = np.random.default_rng(0)
    for n in args.sizes:
        bk = numerics.emulated("bfloat16", "nearest_even", policy)
        a, b = _values("bfloat16", (n, n), rng), _values("bfloat16", (n, n), rng)
        a32, b32 = a.astype(np.float32), b.astype(np.float32)
        cases.append(Case(f"matmul bfloat16 {policy} n={n}",
                          lambda bk=bk, a=a, b=b: bk.matmul(a, b),
                          lambda a32=a32, b32=b32: a32 @ b32, args.repeat, target))
    return cases


def fp32_accumulate_cases(args) -> list[Case]:
    return matmul_cases(args, "fp32_accumulate", 10.0)


def strict_cases(args) -> list[Case]:
    return matmul_cases(args, "strict", 30.0)


def conv_cases(args) -> list[Case]:
    """conv2d through routes' conv rule (emulated bfloat16, fp32_accumulate) against numpy
    float32 im2col and matmul."""
    n, c, co, s, k = 8, 64, 64, 32, 3
    op = routes.op("conv", shape=(n, c, s, s), out_channels=co, kernel=(k, k), stride=(1, 1),
                   padding=(1, 1), dilation=(1, 1))
    rule = op.rule(numerics.emulated("bfloat16", "nearest_even", "fp32_accumulate"))
    rng = np.random.default_rng(1)
    x, w, b = (_values("bfloat16", shape, rng) for shape in ((n, c, s, s), (co, c, k, k), (co,)))
    x32, w32, b32 = x.astype(np.float32), w.astype(np.float32), b.astype(np.float32)
    # im2col: patch (n, oy, ox) holds x_padded[n, ci, oy + ky, ox + kx], channel-major.
    ci_, ky, kx, oy, ox = np.ix_(range(c), range(k), range(k), range(s), range(s))
    wmat = w32.reshape(co, c * k * k).T

    def numpy_conv():
        padded = np.pad(x32, ((0, 0), (0, 0), (1, 1), (1, 1)))
        cols = padded[:, ci_, oy + ky, ox + kx].reshape(n, c * k * k, s * s)
        return np.matmul(cols.transpose(0, 2, 1), wmat) + b32

    return [Case(f"conv2d bfloat16 fp32_accumulate {n}x{c}x{s}x{s} k{k}",
                 lambda: rule.forward((x, w, b)), numpy_conv, args.conv_repeat)]


def accelerator_cases(args) -> list[Case]:
    """Emulated bfloat16 matmul under the accelerator policies of numerics.policy."""
    return [case for policy in ("fixed_point:14", "promote:128", "split_k:4")
            for case in matmul_cases(args, policy, None)]


def cumsum_cases(args) -> list[Case]:
    """cumsum through routes' rule (emulated bfloat16, strict and fp32_accumulate) against
    numpy float32 cumsum, along the last axis of a (1024, 1024) array."""
    shape = (1024, 1024)
    x = _values("bfloat16", shape, np.random.default_rng(2))
    x32 = x.astype(np.float32)
    cases = []
    for policy in ("strict", "fp32_accumulate"):
        rule = routes.op("cumsum", shape=shape, axis=1).rule(
            numerics.emulated("bfloat16", "nearest_even", policy))
        cases.append(Case(f"cumsum bfloat16 {policy} 1024x1024",
                          lambda rule=rule: rule.forward([x]),
                          lambda: np.cumsum(x32, axis=1), args.repeat))
    return cases


# The table's rows, in order: each a function (args) -> list[Case].
ROWS = [fp32_accumulate_cases, strict_cases, conv_cases, accelerator_cases, cumsum_cases]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="256,512", help="matmul sizes n (comma-separated)")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--conv-repeat", type=int, default=5)
    args = ap.parse_args(argv)
    try:
        args.sizes = [int(v) for v in args.sizes.split(",")]
    except ValueError:
        ap.error(f"--sizes must be comma-separated integers (got {args.sizes!r})")
    if min(args.sizes) < 1 or args.repeat < 1 or args.conv_repeat < 1:
        ap.error("--sizes, --repeat and --conv-repeat must be positive")
    print(f"nproc {len(os.sched_getaffinity(0))}, numba threads {numba.get_num_threads()}, "
          f"best of {args.repeat} (conv {args.conv_repeat})")
    cases = [case for make in ROWS for case in make(args)]
    for case in cases:                                        # compile, fill caches
        case.emulated()
        case.numpy()
    time.sleep(0.5)                                           # let spinning workers settle
    numpy_s = [best_of(case.numpy, max(case.repeat, 20)) for case in cases]
    time.sleep(0.5)
    emulated_s = [best_of(case.emulated, case.repeat) for case in cases]
    print(f"{'computation':<46}{'emulated s':>12}{'numpy f32 s':>13}{'ratio':>9}{'target':>8}")
    for case, t_emu, t_np in zip(cases, emulated_s, numpy_s):
        target = f"{case.target:.0f}x" if case.target else "-"
        print(f"{case.name:<46}{t_emu:>12.5f}{t_np:>13.5f}{t_emu / t_np:>8.1f}x{target:>8}")
    print("\nratio: emulated seconds / numpy float32 seconds (bit-exact emulation, policy "
          "order, vs BLAS).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
