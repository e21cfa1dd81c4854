"""Time ``formats.round_to`` into bfloat16 and binary16 against the usual alternatives.

    python benchmarks/bench_round.py [--n 10000000] [--repeat 5] [--gmpy2-n 20000] [--seed 0]

Alternatives: ml_dtypes' float64 -> bfloat16 cast, numpy's float64 -> float16 cast, and MPFR
through gmpy2 one element at a time (timed on a subset and scaled per element).  Times are
best of ``--repeat`` runs after a warm-up that compiles the numba kernel.  Also printed: the
peak memory ``round_to`` allocates (tracemalloc sees numpy's allocations), and how many
results of each alternative differ from ``round_to``: ml_dtypes rounds float64 -> bfloat16
through float32 (two roundings, shared/FACTS.md), so it gets a few per million wrong.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tracemalloc

import gmpy2
import ml_dtypes
import numba
import numpy as np

from roundoff_coverage import formats
from timing import best_of


def typical(n: int, seed: int) -> np.ndarray:
    """n float64 values as in ML tensors: normal draws times scales 10**[-3, 3]."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n) * 10.0 ** rng.uniform(-3.0, 3.0, n)


def sample(n: int, seed: int) -> np.ndarray:
    """n float64 values: normal draws times log-uniform scales over bfloat16's range (half)
    and binary16's range (half, with a margin for overflow and underflow), plus 0.1% specials
    (signed zeros, infinities, NaN, the formats' extremes and rounding ties)."""
    rng = np.random.default_rng(seed)
    half = n // 2
    x = np.empty(n)
    x[:half] = rng.standard_normal(half) * np.exp2(rng.uniform(-136.0, 130.0, half))
    x[half:] = rng.standard_normal(n - half) * np.exp2(rng.uniform(-26.0, 17.0, n - half))
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 65520.0, 2.0**-24,
                         2.0**-25, 3 * 2.0**-26, 1 + 2.0**-8, 1 + 2.0**-11, 1 + 3 * 2.0**-11,
                         3.3895313892515355e38, 2.0**-133, 2.0**-134, 2.0**-1074])
    k = max(n // 1000, 1)
    where = rng.choice(n, size=min(k, n), replace=False)
    x[where] = rng.choice(specials, size=where.size) * rng.choice([-1.0, 1.0], size=where.size)
    return x




def mpfr_rounder(fmt):
    """A per-element rounding by MPFR into ``fmt`` (an IEEE format fitting binary64): MPFR
    writes x = m * 2**E with 1/2 <= m < 1, so the format's 2**qmin has E = qmin + 1 and its
    top binade [2**emax, 2**(emax+1)) has E = emax + 1."""
    ctx = gmpy2.context(precision=fmt.precision, emin=fmt.qmin + 1, emax=fmt.emax + 1,
                        subnormalize=True, round=gmpy2.RoundToNearest)
    plus = ctx.plus

    def run(values):
        return np.array([float(plus(v)) for v in values.tolist()])

    return run


def mismatches(a: np.ndarray, b: np.ndarray) -> int:
    """How many elements differ in value or in the sign of zero (NaN equals NaN)."""
    same = (a == b) & (np.signbit(a) == np.signbit(b))
    return int(np.count_nonzero(~(same | (np.isnan(a) & np.isnan(b)))))


def peak_extra_bytes(fn) -> int:
    """Peak bytes allocated (numpy's included) while ``fn`` runs, above what was live before."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        result = fn()
        peak = tracemalloc.get_traced_memory()[1]
        del result
    finally:
        tracemalloc.stop()
    return peak - before


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10_000_000, help="elements (default 1e7)")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs, best kept (default 5)")
    ap.add_argument("--gmpy2-n", type=int, default=20_000,
                    help="elements MPFR rounds one by one; its time is scaled to --n")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.n < 1 or args.repeat < 1 or args.gmpy2_n < 1:
        ap.error("--n, --repeat and --gmpy2-n must be positive")

    print(f"machine: nproc {len(os.sched_getaffinity(0))} (cpu_count {os.cpu_count()}), "
          f"numba threads {numba.get_num_threads()} ({numba.threading_layer()}), "
          f"{platform.machine()}, python {platform.python_version()}, numpy {np.__version__}, "
          f"numba {numba.__version__}, ml_dtypes {ml_dtypes.__version__}, gmpy2 "
          f"{gmpy2.version()} (MPFR {gmpy2.mpfr_version().split()[-1]}); n = {args.n}, "
          f"best of {args.repeat}")
    for label, x in (("typical values (normal x 10**[-3, 3])", typical(args.n, args.seed)),
                     ("full-range mix (half beyond binary16, 0.1% specials)",
                      sample(args.n, args.seed))):
        print(f"\n== {label}")
        run(x, args)
    return 0


def run(x, args):
    """Time and check every method on one input array; print the tables."""
    sub = x[:min(args.gmpy2_n, args.n)]
    formats.round_to(x[:1000], "bfloat16")            # warm-up: compile or load the kernel
    formats.round_to(x[:1000], "binary16")

    cases = [
        ("bfloat16", "ml_dtypes x.astype(bfloat16)", lambda: x.astype(ml_dtypes.bfloat16)),
        ("binary16", "numpy x.astype(float16)", lambda: x.astype(np.float16)),
    ]
    rows, wrong = [], []
    np.seterr(over="ignore")          # the casts warn on overflow to inf, which is expected
    for name, label, alternative in cases:
        fmt = formats.get(name)
        t_ours = best_of(lambda: formats.round_to(x, fmt), args.repeat)
        buf = np.empty_like(x)
        t_out = best_of(lambda: formats.round_to(x, fmt, out=buf), args.repeat)
        t_enc = best_of(lambda: formats.round_encode(x, fmt), args.repeat)
        t_alt = best_of(alternative, args.repeat)
        mpfr = mpfr_rounder(fmt)
        t_mpfr = best_of(lambda: mpfr(sub), args.repeat) * args.n / sub.size
        rows += [(f"round_to(x, {name!r})", t_ours, t_ours, t_out, ""),
                 (f"round_to(x, {name!r}, out=buf)", t_out, t_ours, t_out, ""),
                 (f"round_encode(x, {name!r}) (2-byte patterns)", t_enc, t_ours, t_out, ""),
                 (label, t_alt, t_ours, t_out, f"(= {t_alt / t_enc:.2f} x round_encode)"),
                 (f"gmpy2 per element, {name}", t_mpfr, t_ours, t_out,
                  f"(from {sub.size} elements)")]
        ours = formats.round_to(x, fmt)
        theirs = alternative().astype(np.float64)
        wrong.append(f"{label}: {mismatches(theirs, ours)} of {args.n} results differ from "
                     f"round_to")
        wrong.append(f"gmpy2 {name}: {mismatches(mpfr(sub), ours[:sub.size])} of {sub.size} "
                     f"results differ from round_to")
        del ours, theirs

    print()
    print(f"{'method':<46} {'seconds for n':>13} {'ns/element':>11} {'speed ratio':>12} "
          f"{'ratio, out=':>12}")
    for label, seconds, t_ours, t_out, note in rows:
        print(f"{label:<46} {seconds:>13.4f} {seconds / args.n * 1e9:>11.2f} "
              f"{seconds / t_ours:>12.2f} {seconds / t_out:>12.2f}  {note}".rstrip())
    print("speed ratio: time of the method / time of round_to allocating its output (> 1: "
          "round_to is faster);\nratio, out=: the same against round_to writing into a reused "
          "buffer.  round_to writes float64 (8 bytes per element), the casts 2-byte arrays.")

    print()
    for name in ("bfloat16", "binary16"):
        extra = peak_extra_bytes(lambda: formats.round_to(x, name))
        print(f"peak extra memory of round_to(x, {name!r}): {extra / 2**20:.1f} MiB = "
              f"{extra / x.nbytes:.3f} x the input ({x.nbytes / 2**20:.1f} MiB)")
    print()
    for line in wrong:
        print(line)


if __name__ == "__main__":
    sys.exit(main())
