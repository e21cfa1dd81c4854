"""Time the tensor-core policies' matmul (numerics.tensor_core through numerics.emulated
under ``tc:GPU``) against numpy's float32 matmul in the same run.

    python benchmarks/bench_tensor_core.py [--sizes 256,512] [--repeat 5] [--seed 0]

Rows: an n x n matmul of operands in the run's format (bfloat16 under tc:h100 and tc:a100,
float8_e4m3fn under tc:h100 -- Hopper's FP8 path -- and tc:b200 -- Blackwell's, summed
exactly), emulated as the GPU's block FMAs compute it (results stored in the run's format),
and numpy's float32 ``a @ b`` on the same values.  Ratios are times divided by numpy's
(target <= 30).  Best of --repeat after a warm-up (the first call compiles the kernels);
numpy is timed first, best of 20.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from roundoff_coverage import formats, numerics
from timing import best_of

# fixed_point:14, the idealised alignment policy (numerics.products), for comparison in the
# same run.
CASES = (("bfloat16", "tc:h100"), ("bfloat16", "tc:a100"), ("float8_e4m3fn", "tc:h100"),
         ("float8_e4m3fn", "tc:b200"), ("bfloat16", "fixed_point:14"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="256,512")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    cases = []
    for n in (int(v) for v in args.sizes.split(",")):
        for fmt, policy in CASES:
            a, b = (formats.round_to(rng.standard_normal((n, n)), fmt) for _ in range(2))
            bk = numerics.emulated(fmt, "nearest_even", policy)
            got = bk.matmul(a, b)                                      # warm-up, compile
            # a broken build cannot look fast: near numpy's float64 product
            assert np.max(np.abs(a @ b - got)) <= 0.1 * np.max(np.abs(a @ b))
            a32, b32 = a.astype(np.float32), b.astype(np.float32)
            cases.append((n, fmt, policy, lambda bk=bk, a=a, b=b: bk.matmul(a, b),
                          lambda a32=a32, b32=b32: a32 @ b32))
    # numpy first, after numba's worker threads settle (they slow BLAS while they spin)
    time.sleep(0.5)
    numpy_s = [best_of(case[4], max(args.repeat, 20)) for case in cases]
    time.sleep(0.5)
    emulated_s = [best_of(case[3], args.repeat) for case in cases]
    print(f"{'n':>5} {'format':>14} {'policy':>15} {'emulated s':>11} {'numpy f32 s':>12} "
          f"{'ratio':>7}")
    for (n, fmt, policy, _, _), t, t32 in zip(cases, emulated_s, numpy_s):
        print(f"{n:>5} {fmt:>14} {policy:>15} {t:>11.4f} {t32:>12.5f} {t / t32:>7.1f}")


if __name__ == "__main__":
    main()
