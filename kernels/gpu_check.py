"""Measure every kernel on a real GPU against the exact reference; write a results file.

    python -m roundoff_coverage.kernels.gpu_check --out results/gpu.json [--size N] [--formats a,b] [--seed S]

For every kernel of the table, every format asked for and every route the kernel has, one
operator instance at a realistic size (``instance``: ``--size`` elements for elementwise
operators, rows of 64 for reductions and normalizations, 64 x 64 x 64 products at the
default size; other operators at their default attributes, drawn repeatedly up to
``--size`` output elements) runs on the device with ordinary and special samples of the
operator (routes' samplers), and the file records per
(operator, route, format): the largest ulp error against
``o.rule(numerics.reference(200))`` (numerics.metrics), the contract's claim, the elements
that differ from numerics.emulated where the contract claims agreement, and whether the
contract held.  The device field says which GPU ran it; progress goes to stderr.  Without
a GPU the script exits 2 with one line: simulator results are never presented as GPU
accuracy (``measure`` itself runs anywhere ``kernels.run`` does: the tests call it in the
simulator).

Exit status: 0 every contract held, 1 some contract failed, 2 bad usage or no GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from roundoff_coverage import formats, kernels, numerics
from roundoff_coverage.numerics import metrics

DEFAULT_FORMATS = ("binary32", "binary64", "bfloat16", "binary16", "float8_e4m3fn")
SCHEMA = "roundoff-coverage/kernels-gpu-check/1"


class _Parser(argparse.ArgumentParser):
    def error(self, message):                       # one line, exit 2 (no usage dump)
        raise SystemExit(f"kernels.gpu_check: {message}")


def parse(argv=None) -> argparse.Namespace:
    """The command line; SystemExit with a one-line message (status 2) on bad usage."""
    p = _Parser(prog="python -m roundoff_coverage.kernels.gpu_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="the results file to write (JSON)")
    p.add_argument("--size", type=int, default=4096,
                   help="elements per elementwise instance (default 4096)")
    p.add_argument("--formats", default=",".join(DEFAULT_FORMATS),
                   help="comma-separated format names")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.size < 1:
        raise SystemExit(f"kernels.gpu_check: --size must be >= 1 (got {args.size})")
    if args.seed < 0:
        raise SystemExit(f"kernels.gpu_check: --seed must be >= 0 (got {args.seed})")
    names = [f.strip() for f in args.formats.split(",") if f.strip()]
    if not names:
        raise SystemExit("kernels.gpu_check: --formats names no format")
    for name in names:
        try:
            formats.get(name)
        except Exception as exc:                      # noqa: BLE001 (reported in one line)
            raise SystemExit(f"kernels.gpu_check: --formats: {exc}") from None
    args.formats = tuple(names)
    return args


def instance(name: str, size: int):
    """The operator instance measured for kernel ``name`` at about ``size`` elements: the
    kernel's own (Kernel.at_size: rows of 64 for reduce, mean, softmax and the
    normalizations, (n x 64) (64 x n) products, ``size`` elements for the elementwise kernels,
    the operator's default instance for the others, drawn repeatedly, see ``draws``)."""
    return kernels.of_op(name).at_size(size)


def draws(o, size: int) -> int:
    """Draws of ``o`` per sample kind: enough for about ``size`` output elements (at most
    64: each draw is one launch and one exact evaluation)."""
    n = sum(int(np.prod(p.shape, dtype=np.int64)) for p in o.outputs) or 1
    return int(min(64, max(1, size // n)))


def measure(name, fmt, route, size, rng) -> dict:
    """One results row: kernel ``name``, route, format (nearest even)."""
    o = instance(name, size)
    k = kernels.of_op(o)
    claim = k.claim(route, fmt)
    kinds = [kd for kd in ("ordinary", "special") if kd in o.decl.samples] or \
        list(o.decl.samples)[:1]
    worst, differ, samples, dev = 0.0, 0, 0, None
    ref_rule, emu_rule = o.rule(numerics.reference(200)), o.rule(numerics.emulated(fmt))
    for kind in kinds:
        for _ in range(draws(o, size)):
            xs = o.samples(rng, fmt, kind)
            cots = None
            if route == "gradient":
                cots = tuple(formats.round_to(rng.uniform(-2, 2, p.shape), fmt)
                             .reshape(p.shape) if p.differentiable else None
                             for p in o.outputs)
            out, dev = kernels.run(o, xs, fmt, route=route, cotangents=cots)
            if route == "forward":
                exact, emu = ref_rule.forward(xs), emu_rule.forward(xs)
            else:
                exact, emu = ref_rule.backward(xs, cots), emu_rule.backward(xs, cots)
            for c, e, m, port in zip(out, exact, emu,
                                     o.outputs if route == "forward" else o.inputs):
                if c is None:
                    continue
                c = np.asarray(c, dtype=np.float64).reshape(-1)
                m = np.asarray(m, dtype=np.float64).reshape(-1)
                same = (c.view(np.int64) == m.view(np.int64)) | (np.isnan(c) & np.isnan(m))
                differ += int(np.sum(~same))
                samples += c.size
                if port.scalar:
                    e = metrics.clamp_exact(np.asarray(e, dtype=object).reshape(-1),
                                            formats.get(fmt))
                    err = np.abs(metrics.ulp_error(c, e, fmt))
                    if np.any(~np.isnan(err)):
                        worst = max(worst, float(np.nanmax(err)))
    held = (claim.max_ulp is None or worst <= claim.max_ulp) and \
        (claim.agreement not in ("bitwise", "screened") or differ == 0)
    return {"op": name, "attrs": {k2: list(v) if isinstance(v, tuple) else v
                                  for k2, v in dict(o.attrs).items()},
            "route": route, "format": fmt, "mode": "nearest_even", "device": dev,
            "samples": samples, "max_ulp": worst, "claimed_max_ulp": claim.max_ulp,
            "agreement": claim.agreement, "differ_from_emulated": differ,
            "order": k.contract.order, "fma": k.contract.fma, "ftz": k.contract.ftz,
            "held": held}


def main(argv=None) -> int:
    args = parse(argv)
    try:
        dev = kernels.device()
    except kernels.KernelError as exc:
        print(f"kernels.gpu_check: no GPU here: {exc}", file=sys.stderr)
        return 2
    if dev == "simulator":
        print("kernels.gpu_check: needs a real GPU; the CUDA simulator is on "
              "(NUMBA_ENABLE_CUDASIM) and its results are not GPU accuracy", file=sys.stderr)
        return 2
    rng = np.random.default_rng(args.seed)
    rows = []
    todo = [(n, f, r) for n in kernels.names() for f in args.formats
            for r in kernels.of_op(n).routes]
    start = time.monotonic()
    for done, (name, fmt, route) in enumerate(todo, 1):
        try:
            rows.append(measure(name, fmt, route, args.size, rng))
        except kernels.KernelError as exc:           # a format outside the kernel's range
            rows.append({"op": name, "route": route, "format": fmt, "device": dev,
                         "status": "unsupported", "reason": str(exc)})
        except Exception as exc:                      # noqa: BLE001 (a row, not a crash)
            rows.append({"op": name, "route": route, "format": fmt, "device": dev,
                         "status": "error", "reason": f"{type(exc).__name__}: {exc}",
                         "held": False})
        print(f"kernels.gpu_check: {done}/{len(todo)} {name} {route} {fmt} "
              f"({time.monotonic() - start:.0f} s)", file=sys.stderr, flush=True)
    doc = {"schema": SCHEMA, "device": dev, "seed": args.seed, "size": args.size,
           "rows": rows}
    folder = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(folder, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, sort_keys=True, default=str)
    failed = [r for r in rows if r.get("held") is False]
    print(f"kernels.gpu_check: {len(rows)} rows on {dev}, {len(failed)} contracts failed; "
          f"wrote {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
