"""Time the emulated backend's multiply and exp against numpy float32 and per-element MPFR.

    python benchmarks/bench_numerics.py [--n 1000000] [--repeat 21] [--gmpy2-n 20000]

For bfloat16 and binary32 inputs (n values each, normal draws times 10**[-2, 2]), one run
times ``numerics.emulated(fmt).multiply`` and ``.exp`` (correctly rounded, exact-then-rounded
once), numpy's float32 ``*`` and ``np.exp`` (not correctly rounded for exp), and gmpy2 in a
context of the format, one element at a time (timed on a subset, scaled per element).
Ratios are times divided by the emulated backend's time: above 1 the emulated backend is
faster.  Best of --repeat after a warm-up that compiles the kernels.
"""

from __future__ import annotations

import argparse
import os
import sys

import gmpy2
import numba
import numpy as np

from roundoff_coverage import formats
from timing import best_of
from roundoff_coverage import numerics




def _np_exp(x):
    with np.errstate(over="ignore"):          # large inputs overflow to inf, as expected
        return np.exp(x)


def mpfr_context(fmt):
    """gmpy2 context rounding correctly into an IEEE format (MPFR exponent convention:
    2**qmin has exponent qmin + 1, the top binade emax + 1)."""
    return gmpy2.context(precision=fmt.precision, emin=fmt.qmin + 1, emax=fmt.emax + 1,
                         subnormalize=True, round=gmpy2.RoundToNearest)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=21)
    ap.add_argument("--gmpy2-n", type=int, default=20_000)
    args = ap.parse_args(argv)
    if args.n < 1 or args.repeat < 1 or args.gmpy2_n < 1:
        ap.error("--n, --repeat and --gmpy2-n must be positive")
    print(f"nproc {len(os.sched_getaffinity(0))}, numba threads {numba.get_num_threads()}, "
          f"n = {args.n}, best of {args.repeat}")
    rng = np.random.default_rng(0)
    for name in ("bfloat16", "binary32"):
        fmt = formats.get(name)
        bk = numerics.emulated(fmt)
        a = bk.asarray(rng.standard_normal(args.n) * 10.0 ** rng.uniform(-2, 2, args.n))
        b = bk.asarray(rng.standard_normal(args.n) * 10.0 ** rng.uniform(-2, 2, args.n))
        a32, b32 = a.astype(np.float32), b.astype(np.float32)
        ctx = mpfr_context(fmt)
        k = min(args.gmpy2_n, args.n)
        am = [gmpy2.mpfr(v, 53) for v in a[:k].tolist()]
        bm = [gmpy2.mpfr(v, 53) for v in b[:k].tolist()]
        bk.multiply(a[:10], b[:10])
        bk.exp(a[:10])
        rows = []
        for op, emu, np32, mp in (
                ("multiply", lambda: bk.multiply(a, b), lambda: a32 * b32,
                 lambda: [ctx.mul(x, y) for x, y in zip(am, bm)]),
                ("exp", lambda: bk.exp(a), lambda: _np_exp(a32),
                 lambda: [ctx.exp(x) for x in am])):
            t_emu = best_of(emu, args.repeat)
            t_np = best_of(np32, args.repeat)
            t_mp = best_of(mp, max(1, args.repeat // 2)) * args.n / k
            rows.append((op, t_emu, t_np, t_mp))
        # Agreement: the emulated results are MPFR's (exp on the subset).
        emu_exp = bk.exp(a[:k])
        mp_exp = np.array([float(ctx.exp(x)) for x in am])
        print(f"\n{name}: emulated exp equals MPFR on {int(np.sum(emu_exp == mp_exp))} of {k}")
        print(f"{'op':<10}{'emulated s':>12}{'numpy f32 s':>13}{'gmpy2 s':>11}"
              f"{'emulated/numpy32':>18}{'gmpy2/emulated':>16}")
        for op, t_emu, t_np, t_mp in rows:
            print(f"{op:<10}{t_emu:>12.4f}{t_np:>13.4f}{t_mp:>11.3f}{t_emu / t_np:>18.1f}"
                  f"{t_mp / t_emu:>16.0f}")
    print("\nemulated/numpy32: how many times slower than numpy's float32; gmpy2/emulated: how "
          "many times faster than per-element MPFR.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
