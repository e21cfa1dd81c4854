"""Screening throughput of ``roundoff-coverage measure`` for libm's expf in binary32, per core.

    python benchmarks/bench_measure.py [--chunks 16] [--mpmath-n 20000]

One process (one core) runs engine.measure.run_chunk on --chunks chunks of the exhaustive
binary32 enumeration spread over the whole range (every 1024/chunks-th chunk of 2**22 inputs,
so overflow, underflow, tiny and NaN inputs get their share): input generation, expf itself,
the compiled binary64 screen, candidates for the maximum and the exact recomputation of the
undecided inputs -- everything a measurement does per input.  In the same run, on the same
inputs: numpy evaluating exp in binary64 alone (the bare cost of the screen's reference, with
no comparison), and mpmath computing exp at 64 bits per input (timed on --mpmath-n inputs,
scaled), the naive exact reference.
"""

from __future__ import annotations

import argparse
import sys
import time

import mpmath
import numba
import numpy as np

from roundoff_coverage.engine import measure


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunks", type=int, default=16)
    ap.add_argument("--mpmath-n", type=int, default=20_000)
    args = ap.parse_args(argv)
    if not 1 <= args.chunks <= 1024 or args.mpmath_n < 1:
        ap.error("--chunks must be in 1..1024 and --mpmath-n positive")
    numba.set_num_threads(1)
    m = measure.Measurement("libm:expf", "binary32", "exp", 1, None, 0)
    t = measure.target("libm:expf", "binary32")
    measure.run_chunk(m, t, 1)                             # compile everything first
    picks = [j * (1024 // args.chunks) for j in range(args.chunks)]
    spent, n, numpy_s = 0.0, 0, 0.0
    for j in picks:
        t0 = time.perf_counter()
        s = measure.run_chunk(m, t, j)
        spent += time.perf_counter() - t0
        n += s["n"]
        x = measure.inputs(m, j)[0].copy()
        t0 = time.perf_counter()
        with np.errstate(all="ignore"):
            np.exp(x)
        numpy_s += time.perf_counter() - t0
    x = measure.inputs(m, picks[len(picks) // 2])[0][:args.mpmath_n].copy()
    ctx = mpmath.MPContext()
    ctx.prec = 64
    t0 = time.perf_counter()
    for v in x:
        if np.isfinite(v):
            ctx.exp(ctx.mpf(float(v)))
    mp_per = (time.perf_counter() - t0) / x.size
    rate = n / spent
    print(f"libm:expf, binary32, {n} inputs in {args.chunks} chunks across the range, one core")
    print(f"measure (screen + exact recomputation): {rate / 1e6:.1f} M inputs/s per core "
          f"(target >= 30); an exhaustive scan on 2 cores: {2 ** 32 / (2 * rate):.0f} s")
    print(f"numpy exp in binary64 alone: {n / numpy_s / 1e6:.1f} M inputs/s "
          f"(measure / numpy time: {spent / numpy_s:.2f})")
    print(f"mpmath exp at 64 bits, per input: {1 / mp_per / 1e6:.3f} M inputs/s "
          f"(measure is {mp_per * rate:.0f}x faster)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
