"""Time exact products (numerics.exact_products, the Ozaki scheme on float64 BLAS) against
numpy's float64 matmul in the same run.

    python benchmarks/bench_exact_products.py [--sizes 256,512] [--repeat 15] [--seed 0]
    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_exact_products.py    # one BLAS thread

Rows:
- matmul of n x n bfloat16 and binary32 matrices (normal draws, held as float64):
  ``exact_matmul`` (the exact entries), ``exact_matmul`` + ``to_float64`` (the correctly
  rounded binary64 product), and numpy's float64 ``a @ b`` (rounded at every step);
- conv2d, batch 8, 64 -> 64 channels, 32 x 32, 3 x 3 kernel, padding 1, through im2col: the
  (8*32*32) x (64*9) column matrix times the (64*9) x 64 weights, exact vs numpy float64 (the
  im2col gather, shared by both, is timed apart).
Ratios are times divided by numpy's float64 time: the cost of exactness (target <= 30).
Best of --repeat after a warm-up; the exact entries are checked against numpy's rounded
product (agreement within the float64 error bound) so a broken build cannot look fast.
"""

from __future__ import annotations

import argparse
import os
import sys

import ml_dtypes
import numpy as np

from roundoff_coverage.numerics.exact_products import exact_matmul, to_float64
from timing import best_of

FORMATS = {"bfloat16": ml_dtypes.bfloat16, "binary32": np.float32}


def draw(rng, shape, fmt, scale=1.0):
    """Normal draws times ``scale``, rounded into ``fmt`` (through float32: the double
    rounding of ml_dtypes' float64 cast does not matter for timing), held as float64."""
    x = (rng.standard_normal(shape) * scale).astype(np.float32)
    return x.astype(FORMATS[fmt]).astype(np.float64)


def im2col(x, kh, kw):
    """(N, C, H, W) -> (N*H*W, C*kh*kw) patches of a stride-1 convolution with zero padding
    (kh//2, kw//2): output pixel rows, (channel, ky, kx) columns."""
    n, c, h, w = x.shape
    p = np.pad(x, ((0, 0), (0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2)))
    win = np.lib.stride_tricks.sliding_window_view(p, (kh, kw), axis=(2, 3))  # N C H W kh kw
    return np.ascontiguousarray(win.transpose(0, 2, 3, 1, 4, 5)).reshape(n * h * w, c * kh * kw)


def check(exact, approx, a, b):
    """The correctly rounded product lies within float64's dot-product bound of numpy's."""
    k = a.shape[-1]
    bound = 2 * k * 2.0 ** -53 * (np.abs(a) @ np.abs(b)) + 1e-300
    if not np.all(np.abs(to_float64(exact) - approx) <= bound):
        raise SystemExit("bench_exact_products: exact product disagrees with numpy")


def row(label, t_np, t_exact, t_round):
    print(f"{label:<34}{t_np * 1e3:>11.2f}{t_exact * 1e3:>11.2f}{t_round * 1e3:>13.2f}"
          f"{t_exact / t_np:>9.1f}{t_round / t_np:>11.1f}")


def timed(a, b, repeat):
    """(the exact a @ b, checked against numpy; the best times of numpy's a @ b, of the exact
    product and of the exact product rounded to binary64)."""
    x = exact_matmul(a, b)
    check(x, a @ b, a, b)
    return x, (best_of(lambda: a @ b, repeat), best_of(lambda: exact_matmul(a, b), repeat),
               best_of(lambda: to_float64(exact_matmul(a, b)), repeat))


def bench_exact_matmul(rng, sizes, repeat):
    """Rows: exact matmul of bfloat16 and binary32 n x n matrices vs numpy float64."""
    for fmt in FORMATS:
        for n in sizes:
            a, b = draw(rng, (n, n), fmt), draw(rng, (n, n), fmt)
            x, times = timed(a, b, repeat)
            row(f"matmul {fmt} n={n} (limbs {x.limbs.shape[0]})", *times)


def bench_exact_conv2d(rng, repeat, batch=8, channels=64, size=32, kernel=3):
    """Rows: exact conv2d through im2col (batch 8, 64 channels, 32 x 32, 3 x 3) vs numpy."""
    for fmt in FORMATS:
        x = draw(rng, (batch, channels, size, size), fmt)
        w = draw(rng, (channels, channels * kernel * kernel), fmt, 0.05).T.copy()
        cols = im2col(x, kernel, kernel)
        t_cols = best_of(lambda: im2col(x, kernel, kernel), repeat)
        ex, times = timed(cols, w, repeat)
        row(f"conv2d {fmt} im2col (limbs {ex.limbs.shape[0]})", *times)
        print(f"{'':<34}(im2col gather {t_cols * 1e3:.2f} ms, both sides; "
              f"{cols.shape[0]}x{cols.shape[1]} @ {w.shape[0]}x{w.shape[1]})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="256,512")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.repeat < 1 or min(sizes) < 1:
        ap.error("--repeat and --sizes must be positive")
    threads = os.environ.get("OPENBLAS_NUM_THREADS", "default")
    print(f"nproc {len(os.sched_getaffinity(0))}, OPENBLAS_NUM_THREADS {threads}, "
          f"best of {args.repeat}")
    print(f"{'product':<34}{'numpy ms':>11}{'exact ms':>11}{'+round ms':>13}"
          f"{'exact/np':>9}{'+round/np':>11}")
    rng = np.random.default_rng(args.seed)
    bench_exact_matmul(rng, sizes, args.repeat)
    bench_exact_conv2d(rng, args.repeat)
    print("\nexact/np: exact_matmul time over numpy float64 matmul; +round/np: with "
          "to_float64 (the correctly rounded binary64 product) included.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
