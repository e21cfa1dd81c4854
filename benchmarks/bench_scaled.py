"""Time ``formats.quantize`` into scaled formats against ``formats.round_to`` into the element
format alone.

    python benchmarks/bench_scaled.py [--n 10000000] [--repeat 5] [--seed 0]

Input: n binary32 values as in ML tensors (normal draws times 10**[-3, 3] per row of 1024),
shape (n / 1024, 1024), blocks along the last axis.  Both sides take the float32 array as
given (round_to converts it to float64 first, as it does for any float32 input).  The
quantizer computes every block's amax and scale, rounds each element of the exact quotient
and writes the element values (float64), their codes (uint8) and the scales; round_to only
rounds.  Target: quantize within 3 x round_to.  Times are best of ``--repeat`` runs after a
warm-up that compiles or loads the kernels.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys

import numba
import numpy as np

from roundoff_coverage import formats
from timing import best_of

CASES = [("mxfp8_e4m3", "float8_e4m3fn"), ("nvfp4", "float4_e2m1fn"),
         ("mxfp8_e4m3:stochastic", "float8_e4m3fn"), ("nvfp4:stochastic", "float4_e2m1fn"),
         ("fp8_e4m3_block128", "float8_e4m3fn"), ("fp8_e4m3_tensor", "float8_e4m3fn")]


def typical(n: int, seed: int) -> np.ndarray:
    """n binary32 values, rows of 1024 with their own magnitude 10**[-3, 3]."""
    rng = np.random.default_rng(seed)
    rows = max(n // 1024, 1)
    x = rng.standard_normal((rows, 1024)) * 10.0 ** rng.uniform(-3.0, 3.0, (rows, 1))
    return x.astype(np.float32)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10_000_000, help="elements (default 1e7)")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs, best kept (default 5)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.n < 1024 or args.repeat < 1:
        ap.error("--n must be at least 1024 and --repeat positive")
    x = typical(args.n, args.seed)
    print(f"machine: nproc {len(os.sched_getaffinity(0))} (cpu_count {os.cpu_count()}), "
          f"numba threads {numba.get_num_threads()} ({numba.threading_layer()}), "
          f"{platform.machine()}, python {platform.python_version()}, numpy {np.__version__}, "
          f"numba {numba.__version__}; n = {x.size} binary32 values, shape {x.shape}, "
          f"best of {args.repeat}")
    print(f"\n{'scheme':<24} {'quantize s':>11} {'ns/elem':>8} {'element':<14} "
          f"{'round_to s':>11} {'ratio':>6}")
    for scheme, element in CASES:
        mode = "stochastic" if scheme.endswith(":stochastic") else "nearest_even"
        formats.quantize(x[:4], scheme)                 # warm-up: compile or load
        formats.round_to(x[0, :8], element, mode)
        t_q = best_of(lambda: formats.quantize(x, scheme), args.repeat)
        t_r = best_of(lambda: formats.round_to(x, element, mode), args.repeat)
        print(f"{scheme:<24} {t_q:>11.4f} {t_q / x.size * 1e9:>8.2f} {element:<14} "
              f"{t_r:>11.4f} {t_q / t_r:>6.2f}")
    print("\nratio: quantize time / round_to time into the element format alone, same "
          "rounding mode (target <= 3).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
