"""``roundoff-coverage bound --ops LIST --box=LO,HI``: each route's error bound over an input
box (routes.bounds.domain) with the sampled maximum over points of the same box next to it
(engine/bound.py); rows in the results schema with ``domain_bound`` and ``box``."""

from __future__ import annotations

import math
import sys

from roundoff_coverage import formats, routes
from roundoff_coverage.numerics import policy
from roundoff_coverage.routes.bounds import IBP_ARMS
from roundoff_coverage.routes.bounds.domain import snap

from ...engine import bound, results
from .common import (EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, PROG, UsageError,
                     add_modes_routes, add_seed_out, add_units, check_jobs, empty_list, in_range,
                     interrupted, modes_of, name_list, routes_of, seed_of, text_table,
                     user_formats, writable)
from .run import policy_names

MAX_BUDGET, MAX_SAMPLES = 65536, 1_000_000


def add(sub, shared):
    p = sub.add_parser("bound", parents=[shared], help="bound each route's error over an "
                       "input box, next to the sampled maximum over the same box",
                       description="For each operator (its first example's attributes), "
                                   "format, mode and policy: a bound on the error in ulps of "
                                   "the forward, tangent and gradient routes of the emulated "
                                   "model for EVERY input whose value entries are format "
                                   "values in the box (interval propagation of the exact "
                                   "value, the computed value and their difference, the box "
                                   "bisected into at most --budget pieces), printed next to "
                                   "the largest error measured at --samples points drawn in "
                                   "the box; a sample above its bound is reported and exits "
                                   "1.  Operators with an IBP arm (roundoff-coverage ops, "
                                   "column bounds).  Lists are comma-separated.")
    p.add_argument("--ops", metavar="LIST", required=True,
                   help="operators with an IBP arm")
    p.add_argument("--box", metavar="LO,HI", required=True,
                   help="the box of every value input, e.g. --box=-4,4 (write it with '=' "
                        "when LO is negative)")
    p.add_argument("--format", metavar="LIST", dest="formats",
                   help="formats that fit binary64 (default: bfloat16)")
    add_modes_routes(p)
    p.add_argument("--policies", metavar="LIST",
                   help="accumulation policy presets (default: strict)")
    p.add_argument("--budget", metavar="N", type=int,
                   help="pieces the box may be bisected into, per route (default 64)")
    p.add_argument("--samples", metavar="N", type=int,
                   help="points drawn in the box to measure (default 256, plus its two "
                        "corners)")
    add_units(p, resume="continue an interrupted bound run from <out>.partial.jsonl",
              quiet="no progress bar", executor=False)
    add_seed_out(p, "results/bound.json")
    p.set_defaults(handler=cmd_bound)


def parse_box(text) -> tuple:
    """``LO,HI`` as two finite floats with LO <= HI; UsageError (one line) otherwise."""
    parts = [t.strip() for t in str(text).split(",")]
    if len(parts) != 2:
        raise UsageError(f"--box {text!r}: give LO,HI (two numbers, e.g. --box=-4,4)")
    try:
        lo, hi = (float(t) for t in parts)
    except ValueError:
        raise UsageError(f"--box {text!r}: LO and HI must be numbers (e.g. --box=-4,4)") \
            from None
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise UsageError(f"--box {text!r}: LO and HI must be finite")
    if lo > hi:
        raise UsageError(f"--box {text!r}: LO {lo!r} exceeds HI {hi!r} (give LO,HI with "
                         f"LO <= HI)")
    return lo, hi


def _ops(text) -> tuple:
    """--ops checked: registered names (close matches otherwise), each with an IBP arm."""
    names = name_list(text, "operator", routes.names(), (), "--ops")
    missing = [n for n in names if n not in IBP_ARMS]
    if missing:
        armed = ", ".join(n for n in routes.names() if n in IBP_ARMS)
        raise UsageError(f"--ops: {', '.join(missing)} has no IBP arm, which the domain bound "
                         f"builds on; operators with one: {armed}")
    return names


def _formats(text, user) -> tuple:
    """--format: element formats that fit binary64 (catalog names, compact specs or
    --formats-file names), by their labels."""
    out = []
    for name in (n.strip() for n in (text or "bfloat16").split(",")):
        if not name:
            continue
        fmt = formats.get(name, known=user)
        if isinstance(fmt, formats.ScaledFormat) or not fmt.fits_binary64:
            raise UsageError(f"format {name}: the domain bound is for element formats that "
                             f"fit binary64 (not scaled formats, whose blocks share a scale "
                             f"the box does not fix)")
        label = fmt.name if fmt.name in formats.CATALOG else fmt.spec
        if label not in out:
            out.append(label)
    if not out:
        raise UsageError(empty_list("--format", "format"))
    return tuple(out)


def selection(args, user):
    """The engine.bound.BoundSelection of the parsed options."""
    box = parse_box(args.box)
    budget = bound.DEFAULT_BUDGET if args.budget is None else \
        in_range("--budget", args.budget, 1, MAX_BUDGET)
    samples = bound.DEFAULT_SAMPLES if args.samples is None else \
        in_range("--samples", args.samples, 1, MAX_SAMPLES)
    return bound.BoundSelection(
        ops=_ops(args.ops), formats=_formats(args.formats, user), modes=modes_of(args),
        policies=_element_policies(args.policies), routes=routes_of(args, bound.ROUTES),
        box=box, budget=budget, samples=samples, seed=seed_of(args))


def _element_policies(text) -> tuple:
    """--policies of a bound run: its formats are element formats, which no recipe
    (numerics.policy.RECIPES: a scaled format's products) applies to."""
    names = policy_names(text)
    for n in names:
        if policy.recipe(n) is not None:
            raise UsageError(f"--policies: {n} quantizes the products' operands into a scaled "
                             f"format; bound takes element formats (give strict, "
                             f"fp32_accumulate...)")
        if n.startswith("tc:"):
            raise UsageError(f"--policies: {n}: bound has no enclosure of a tensor core's "
                             f"block FMAs over a box yet (run --policies {n} gives per-sample "
                             f"and a priori bounds)")
    return names


def _check_box(sel) -> None:
    """UsageError when the box holds no finite value of some format."""
    import numpy as np

    for name in sel.formats:
        lo, hi = snap(np.array([sel.box[0]]), np.array([sel.box[1]]), name)
        if not (lo[0] <= hi[0] and np.isfinite(lo[0]) and np.isfinite(hi[0])):
            raise UsageError(f"--box={sel.box[0]!r},{sel.box[1]!r} holds no finite value of "
                             f"{name}")


def _number(v) -> str:
    if v is None:
        return "-"
    v = float(v)
    if math.isinf(v):
        return "inf"
    return f"{v:.4g}" if abs(v) < 1e6 else f"{v:.3e}"


def cmd_bound(args) -> int:
    """``bound``: exit 0 when every sampled error lies within its bound, 1 on a violation
    (a bug of the bound or of the emulated backend), 2 on bad usage."""
    user = user_formats(args)
    sel = selection(args, user)
    _check_box(sel)
    check_jobs(args.jobs, "local", None)
    out = writable(args.out or "results/bound.json", "output file")
    try:
        outcome, outcomes = bound.run(sel, out, jobs=args.jobs, resume=args.resume,
                                      progress=not args.quiet)
    except ValueError as exc:                    # a checkpoint of another run
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot write {exc.filename or out}: {exc.strerror or exc}") from None
    if outcome.interrupted:
        if results.special_file(out):
            print(f"{PROG}: interrupted: nothing written ({out} is a stream, beside which no "
                  f"checkpoint is kept); run the command again", file=sys.stderr)
            return EXIT_INTERRUPTED
        return interrupted(outcome, out)
    rows = []
    for o in outcomes:
        r = o.row
        ratio = "-"
        if r["domain_bound"] is not None and r["max_ulp"] is not None \
                and 0 < r["domain_bound"] < math.inf:
            q = float(r["max_ulp"]) / float(r["domain_bound"])
            ratio = f"{q:.3f}" if q >= 0.001 or q == 0 else "<0.001"
        rows.append([r["op"], r["instance"], r["route"], str(r["port"]), r["format"],
                     r["mode"], r["policy"], _number(r["domain_bound"]), _number(r["max_ulp"]),
                     ratio, str(r["samples"]), str(o.pieces) if o.pieces else "-",
                     r["status"] if r["status"] == "ok" else f"{r['status']}: {r['reason']}"])
    print(text_table(("op", "instance", "route", "port", "format", "mode", "policy",
                      "bound_ulp", "sampled_max_ulp", "max/bound", "samples", "pieces",
                      "status"), rows, numeric=(7, 8, 9, 10, 11)))
    print(f"\nbound_ulp: max over the box [{sel.box[0]!r}, {sel.box[1]!r}] (every value input, "
          f"format values) of |computed - exact| / ulp(exact), each piece's error over the "
          f"ulp at its least |exact| (inf: no bound; huge where the exact value can be 0); "
          f"sampled_max_ulp: the largest error at the corners and {sel.samples} points drawn "
          f"in the box")
    print(f"{len(outcomes)} rows: {out}")
    bad = [o for o in outcomes if o.violations]
    for o in bad:
        r = o.row
        print(f"{PROG}: VIOLATION: {r['op']} {r['route']} {r['port']} {r['format']} "
              f"{r['mode']} {r['policy']}: {o.violations} sampled errors above the domain "
              f"bound (sampled max {_number(r['max_ulp'])} ulp, bound "
              f"{_number(r['domain_bound'])} ulp): a bug of the bound or of the emulated "
              f"backend", file=sys.stderr)
    return EXIT_FAILED if bad else EXIT_OK
