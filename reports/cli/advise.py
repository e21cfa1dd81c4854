"""``roundoff-coverage advise TARGET --budget SPEC``: which modules (or nodes) of a model to
keep in higher precision so that its outputs and gradients meet an error budget against
exact values, at the least cost (engine/advise.py, engine/cost.py)."""

from __future__ import annotations

import json
import math
import sys

from ...engine import advise, model_run, orchestrate, results
from ...engine.samples import ModelError, sample_inputs
from .common import (EXIT_FAILED, add_seed_out, EXIT_INTERRUPTED, EXIT_OK, PROG, UsageError, name_list,
                     path_arg, seed_of, text_table, user_formats, writable)
from ..html import HtmlError, build_advice
from .model import MODES
from .report import check_report_dir
from .run import policy_names


def add(sub, shared):
    p = sub.add_parser("advise", parents=[shared],
                       help="which modules to keep in higher precision under an error "
                            "budget, at the least cost",
                       description="Choose a format per module (or node) of a model among "
                                   "the candidates so that its outputs and gradients meet "
                                   "the error budget against exact values at the least cost "
                                   "(an H100 roofline: bytes moved and products); the "
                                   "choice is measured as a whole, validated on held-back "
                                   "samples, and compared with two hand rules.")
    p.add_argument("target", metavar="TARGET",
                   help="a graph artifact (.json, graph.save), or file.py:factory / "
                        "module:factory")
    p.add_argument("--budget", metavar="SPEC", required=True,
                   help="largest normwise relative error ||y_hat - y|| / ||y|| of every "
                        "output (out) and every input and parameter gradient (grad), or of "
                        "one of them (out[NAME], grad[NAME]); a value like 1e-2 or an SQNR "
                        "like 40dB; e.g. out:1e-2,grad:5e-2")
    p.add_argument("--candidates", metavar="LIST",
                   help="formats to choose from: element formats up to binary32, and "
                        "recipes on a module's products as POLICY@SCHEME "
                        "(scaled_recipe@mxfp8_e4m3, fp8_recipe@fp8_e4m3_tensor, "
                        "scaled_recipe@nvfp4); a --formats-file format is named by its spec "
                        "in the answer (default: binary32,bfloat16)")
    p.add_argument("--unit", choices=advise.UNIT_KINDS, default="module",
                   help="what gets one format: a module (its own nodes) or a node "
                        "(default: module)")
    p.add_argument("--mode", metavar="MODE", help="rounding mode (default: nearest_even)")
    p.add_argument("--policy", metavar="NAME",
                   help="accumulation policy of every candidate (default: fp32_accumulate)")
    p.add_argument("--samples", metavar="N", type=int,
                   help="samples the search measures: the example inputs and draws around "
                        "them (default: 2)")
    p.add_argument("--margin", metavar="F", type=float,
                   help="the share of the budget the search may fill on the samples, room "
                        f"for samples it has not seen (default {advise.MARGIN})")
    p.add_argument("--held-back", metavar="N", type=int,
                   help="held-back samples the answer is validated on: draws with another "
                        "seed (default: 2)")
    p.add_argument("--inputs", metavar="NPZ", type=path_arg,
                   help="input arrays by input name (.npz); a stack with one more leading "
                        "axis gives several samples")
    add_seed_out(p, "results/advice.json")
    p.add_argument("--artifact", metavar="PATH", type=path_arg,
                   help="where a captured model's graph artifact is written (default "
                        "<out>.graph.json)")
    p.add_argument("--html", metavar="DIR", type=path_arg,
                   help="also write the answer's page (advice.html) into DIR")
    p.add_argument("--quiet", action="store_true", help="no progress and no answer text")
    p.set_defaults(handler=cmd_advise)


def cmd_advise(args) -> int:
    """``advise``: exit 0 when the answer meets the budget on the samples and on the held-back
    samples, 1 when it does not (the budget cannot be met, or fails on held-back samples)."""
    try:
        budget = advise.parse_budget(args.budget)
        names = [n.strip() for n in (args.candidates or "binary32,bfloat16").split(",")
                 if n.strip()]
        cands = advise.check_candidates(names, user_formats(args))
    except advise.AdviseError as exc:
        raise UsageError(str(exc)) from None
    mode = name_list(args.mode, "rounding mode", MODES, ("nearest_even",), "--mode")
    if len(mode) != 1:
        raise UsageError("--mode: give one rounding mode")
    policy = policy_names(args.policy or "fp32_accumulate")
    if len(policy) != 1:
        raise UsageError("--policy: give one policy")
    if args.margin is not None and not 0 < args.margin <= 1:
        raise UsageError(f"--margin {args.margin}: give a share of the budget in (0, 1]")
    for option, value in (("--samples", args.samples), ("--held-back", args.held_back)):
        if value is not None and value < 1:
            raise UsageError(f"{option} must be >= 1 (got {value})")
    seed = seed_of(args)
    out = writable(args.out or "results/advice.json", "output file")
    artifact = writable(args.artifact or out + ".graph.json", "artifact file")
    if args.html:
        check_report_dir(args.html)
    try:
        given = model_run.read_inputs(args.inputs) if args.inputs else None
        drawn = []

        def fits(graph):                   # before a captured model's artifact is written
            drawn.append(sample_inputs(graph, args.samples or 2, seed, given))
            model_run.check_memory(graph, len(drawn[0]), ("forward", "gradient"))
        graph, _ = model_run.load_target(args.target, artifact, fits)
        xs = drawn[0]
        log = None if args.quiet else orchestrate.Phases("advise", delay=0.0, every=30.0)
        found = advise.advise(graph, budget, cands, args.unit, xs, seed,
                              args.held_back or 2, mode[0], policy[0], log,
                              advise.MARGIN if args.margin is None else args.margin)
    except (advise.AdviseError, ModelError) as exc:
        raise UsageError(str(exc)) from None
    except KeyboardInterrupt:
        # one process and no checkpoint: the answer is all or nothing
        print(f"{PROG}: interrupted: {out} not written (the advice keeps no checkpoint); "
              f"run the same command again", file=sys.stderr)
        return EXIT_INTERRUPTED
    doc = advise.document(found, args.target, budget, args.unit, mode[0], policy[0],
                          len(xs), seed)
    try:
        results.write_data(out, doc)
    except OSError as exc:
        raise UsageError(f"cannot write {exc.filename or out}: {exc.strerror or exc}") from None
    if args.html:
        try:
            # the page of the file's data (keys sorted as written), as ``report`` draws it
            built = build_advice(json.loads(json.dumps(results.clean(doc), sort_keys=True)),
                                 args.html)
        except HtmlError as exc:
            raise UsageError(str(exc)) from None
    if not args.quiet:
        print(answer_text(found, doc))
        print(f"{found.runs} measured runs: {out}"
              + (f"; page: {built.index}" if args.html else ""))
    return EXIT_OK if found.met and found.met_held_back else EXIT_FAILED


def answer_text(found, doc) -> str:
    """The answer: the assignment per unit, the errors against the budget, the cost beside
    all-highest, all-lowest and the hand rules, the list to paste (filter_fqns)."""
    c = found.costs
    parts = [text_table(["unit", "nodes", "format", "cost us"],
                        [[u.name, str(len(u.nodes)), found.assignment[u.name],
                          _num(_unit_cost(found, u) * 1e6)] for u in found.units],
                        numeric=(1, 3))]
    parts.append("errors (normwise relative ||y_hat - y|| / ||y|| against exact values):\n"
                 + text_table(["tensor", "budget", "samples", "held-back"],
                              [[t, _num(found.limits.get(t)), _num(e),
                                _num(found.held_back.get(t))]
                               for t, e in found.confirmed.items()],
                              numeric=(1, 2, 3)))
    parts.append(text_table(["choice", "cost us", "meets budget"],
                            [["this assignment", _num(c["assignment"] * 1e6),
                              _yes(found.met)],
                             [f"all {doc['keep_format']}", _num(c["all_highest"] * 1e6),
                              _yes(_met(found, doc["keep_format"]))],
                             [f"all {found.candidates[0]}", _num(c["all_lowest"] * 1e6),
                              _yes(_met(found, found.candidates[0]))]]
                            + [[r["rule"], _num(r["cost"] * 1e6), _yes(r["met"])]
                               for r in found.rules], numeric=(1,)))
    if found.reason:
        parts.append(found.reason)
    elif not found.met_held_back:
        parts.append("the assignment meets the budget on the samples but not on the "
                     "held-back samples: give more --samples, or a tighter budget")
    parts.append(f"keep in {doc['keep_format']} (filter_fqns): {doc['keep']!r}")
    return "\n\n".join(parts)


def _unit_cost(found, u) -> float:
    return found.unit_costs[u.name][found.assignment[u.name]]


def _met(found, label) -> bool:
    """Whether every unit in ``label`` met the budget on the samples (the search's first
    measurements, in its front)."""
    return next(f["usage"] for f in found.front if f["source"] == f"all {label}") <= 1.0


def _yes(flag) -> str:
    return "yes" if flag else "no"


def _num(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return f"{v:.3g}"
