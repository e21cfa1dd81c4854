"""Tightness of the a priori sum bounds: measured max error / bound for sums of 16, 256, 4096.

    python benchmarks/bench_tightness.py [--draws 8]

The coverage run's growth instances (reduce: sum over 16, 256 and 4096 values uniform in
[-2, 2], 4 sums each), forward route, emulated implementation, under three policies and
three formats: the largest measured |error| over the sums divided by the a priori bound of
the same sum (routes/apriori.py; bound_ratio in the results), and the largest bound in ulps.
A ratio of 1 would be a bound reached; the worst-case bounds grow like n u while typical
errors grow like sqrt(n) u (errors of random sign), so the ratio falls with n.  Where
(n - 1) u >= 1 (bfloat16 and binary16 sums of 4096 in their own format) gamma_(n-1) is
undefined and there is no classical bound.
"""

from __future__ import annotations

import argparse
import sys

from roundoff_coverage.engine import evaluate, runner


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draws", type=int, default=8)
    args = ap.parse_args(argv)
    if args.draws < 1:
        ap.error("--draws must be positive")
    print("| format | policy | n = 16 | n = 256 | n = 4096 |")
    print("|---|---|---:|---:|---:|")
    for fmt in ("bfloat16", "binary16", "binary32"):
        for policy in ("strict", "pairwise", "fp32_accumulate"):
            if policy == "fp32_accumulate" and fmt == "binary32":
                continue
            sel = runner.Selection(ops=("reduce",), formats=(fmt,), routes=("forward",),
                                   policies=(policy,), draws=args.draws)
            cells = []
            for n in (16, 256, 4096):
                task = next(t for t in runner.plan(sel) if t.instance == f"sum-n{n}")
                task = evaluate.Task(**{**task.__dict__, "draws": args.draws})
                (row,) = evaluate.evaluate(task)[0]
                cells.append("no bound ((n - 1) u >= 1)" if row["bound"] is None else
                             f"{row['bound_ratio']:.3g} ({row['bound']:.3g} ulp)")
            print(f"| {fmt} | {policy} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
