"""``roundoff-coverage model TARGET``: a model measured node by node against exact values
(engine/model.py, engine/model_run.py), then optionally its HTML report and its gate; with
``--list-unsupported``, the capture's refusals listed instead (exit 1 when there are
some)."""

from __future__ import annotations

import os
import shlex
import sys

from roundoff_coverage import formats

from ...engine import assignment, implementations, model_run
from ...engine.attribution import CHOICES as ATTRIBUTION, GRADIENT_POLICY_WORK, POLICY_WORK
from ...engine.model import Config, check
from ...engine.samples import ModelError, sample_inputs
from ...engine.model_run import ModelSelection
from .common import (EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, PROG, UsageError,
                     add_units, add_modes_routes, add_seed_out, check_jobs, empty_list,
                     executor_options, modes_of,
                     name_list, path_arg, routes_of, seed_of, text_table, user_formats,
                     writable)
from .gate import check_gate_baseline, gate_after_run
from .report import check_report_dir, write_report
from .run import policy_names

# The options that decide a model run's results (--jobs, --executor, --scheduler, --quiet,
# --html, --gate and --resume do not): the command its results file records, so a resumed
# run writes the bytes an uninterrupted one does, and the base of the resume command an
# interrupted run prints.
RESULT_OPTIONS = ("formats_file", "formats", "modes", "policies", "routes", "implementations",
                  "samples", "inputs", "seed", "out", "artifact", "attribution", "assignment")
MODES = ("nearest_even", "nearest_away", "toward_zero", "upward", "downward", "odd",
         "stochastic")


def add(sub, shared):
    p = sub.add_parser("model", parents=[shared], help="measure a model node by node: local "
                       "and propagated errors of every node's forward value, tangent and "
                       "gradient against exact values",
                       description="Measure a captured model (a graph artifact, or "
                                   "file.py:factory returning (torch model, example args) "
                                   "or (model, args, kwargs)) "
                                   "under each format, mode and policy against the exact "
                                   "graph: every node's local error (the node alone on exact "
                                   "inputs rounded into the format) and propagated error "
                                   "(the full emulated run), forward, tangent and gradient; "
                                   "the whole model's outputs and parameter gradients; which "
                                   "node or module to keep in binary32.  Lists are "
                                   "comma-separated.")
    p.add_argument("target", metavar="TARGET",
                   help="a graph artifact (.json, graph.save), or file.py:factory / "
                        "module:factory")
    p.add_argument("--formats", metavar="LIST", help="formats (default: bfloat16)")
    add_modes_routes(p)
    p.add_argument("--policies", metavar="LIST",
                   help="accumulation policies (default: fp32_accumulate)")
    p.add_argument("--implementations", metavar="LIST",
                   help="emulated (always measured) and torch (eager PyTorch: every node's "
                        "value, the outputs and gradients) and/or torch_compile "
                        "(torch.compile: the outputs and gradients); torch runs the model's "
                        "own code in the format's dtype (file.py:factory targets)")
    p.add_argument("--attribution", choices=ATTRIBUTION,
                   help="each node's first-order share of the error of each output "
                        "(forward route) and input gradient (gradient route), and their "
                        "closure: share, none, or auto (default: the forward route on graphs "
                        f"whose nodes x output elements is at most {POLICY_WORK}, the "
                        f"gradient route at most {GRADIENT_POLICY_WORK})")
    p.add_argument("--samples", metavar="N", type=int,
                   help="samples: the example inputs and draws around them (default: 2)")
    p.add_argument("--inputs", metavar="NPZ", type=path_arg,
                   help="input arrays by input name (.npz); a stack with one more leading "
                        "axis gives several samples")
    add_units(p, jobs="worker processes, one configuration each (default: all cores)")
    add_seed_out(p, "results/model.json")
    p.add_argument("--artifact", metavar="PATH", type=path_arg,
                   help="where a captured model's graph artifact is written (default "
                        "<out>.graph.json)")
    p.add_argument("--assignment", metavar="FILE", type=path_arg,
                   help="measure the model under a format per module (or node): the "
                        "answer `roundoff-coverage advise --out FILE` writes; the rows' "
                        "format is 'assigned' (instead of --formats)")
    p.add_argument("--html", metavar="DIR", type=path_arg,
                   help="also write the HTML report (with the model page) into DIR")
    p.add_argument("--gate", metavar="BASELINE", type=path_arg,
                   help="then gate the results against the model results file BASELINE")
    p.add_argument("--list-unsupported", action="store_true",
                   help="measure nothing: list every aten operator of the torch model "
                        "(file.py:factory) that the capture cannot translate, one line each "
                        "(operator, node, source line, reason), all at once; exit 0 when "
                        "there is none, 1 when there are some")
    p.set_defaults(handler=cmd_model)


def _selection(args, user):
    modes = modes_of(args, MODES)
    policies = policy_names(args.policies) if args.policies else ("fp32_accumulate",)
    fmts, schemes = _formats(args.formats, user, policies)
    routes = routes_of(args, ("forward", "tangent", "gradient"))
    impls = name_list(args.implementations, "implementation",
                      implementations.names(graphs=True), ("emulated",), "--implementations")
    impls = ("emulated",) + tuple(i for i in impls if i != "emulated")
    samples = 2 if args.samples is None else args.samples
    if samples < 1:
        raise UsageError(f"--samples must be >= 1 (got {samples})")
    seed = seed_of(args)
    return ModelSelection(target=args.target, artifact="", artifact_hash="", formats=fmts,
                          modes=modes, policies=policies, routes=routes, samples=samples,
                          seed=seed, inputs=args.inputs, implementations=impls,
                          argv=_argv(args), schemes=schemes,
                          attribution=args.attribution or "auto")


def _argv(args) -> list:
    """The arguments of ``model`` that decide its results (RESULT_OPTIONS), as given."""
    argv = [args.target]
    for name in RESULT_OPTIONS:
        value = getattr(args, name, None)
        if value is not None:
            argv += ["--" + name.replace("_", "-"), str(value)]
    return argv


def _formats(text, user, policies) -> tuple:
    """(labels, user schemes) of --formats: catalog (or --formats-file) element formats that
    fit binary64, and scaled formats with their options (``mxfp8_e4m3:rceil``, under their
    labels; engine/model.py class Scaled), each measurable under every policy; the
    --formats-file schemes as (label, ScaledFormat) pairs, which travel with the run."""
    names = set(formats.CATALOG) | set(user)
    out, schemes = [], {}
    for name in (n.strip() for n in ("bfloat16" if text is None else text).split(",")):
        base = name.split(":", 1)[0].strip()
        if not name:
            continue
        if base.lower() in formats.SCALED or isinstance(user.get(base), formats.ScaledFormat):
            fmt = formats.get(name, known=user)             # FormatError: a bad option
            label = fmt.label
            if fmt.name in user or fmt.name not in formats.SCALED:
                schemes[label] = fmt               # a user-defined scheme travels with the run
        else:
            label = name_list(name, "format", names, (), "--formats")[0]
            fmt = formats.get(user.get(label, label))
            if not fmt.fits_binary64:
                raise UsageError(f"format {label}: model runs measure formats that fit "
                                 f"binary64")
        for policy in policies:
            try:
                check(Config(label, "nearest_even", policy), fmt)
            except ModelError as exc:
                raise UsageError(str(exc)) from None
        if label not in out:
            out.append(label)
    if not out:
        raise UsageError(empty_list("--formats", "format"))
    return tuple(out), tuple(schemes.items())


def cmd_model(args) -> int:
    """``model``: exit 0 when every configuration ran (error rows are data), 130 when
    interrupted (the checkpoint is kept for --resume); with --gate, 1 on a regression."""

    if args.list_unsupported:
        return list_unsupported(args.target)
    if args.assignment and (args.formats or args.formats_file):
        raise UsageError("--assignment gives every module its format: leave out --formats "
                         "and --formats-file")
    sel = _selection(args, user_formats(args))
    if args.assignment and sel.implementations != ("emulated",):
        raise UsageError("--assignment: the emulated implementation only (torch runs the "
                         "model in one dtype); leave out --implementations")
    out = writable(args.out or "results/model.json", "output file",
                   "the run keeps its checkpoint (and by default the graph artifact) beside "
                   "its results file")
    artifact = writable(args.artifact or out + ".graph.json", "artifact file",
                        "every configuration of the run reads the graph back from it")
    if os.path.isfile(args.target) and _same_file(args.target, out):
        raise UsageError(f"--out {out} is the graph artifact being measured: the results "
                         f"would overwrite it; give the results another path")
    if _same_file(artifact, out):
        raise UsageError(f"--artifact {artifact} is the results file (--out {out}): the "
                         f"results would overwrite the graph; give the artifact another path "
                         f"(default: {out}.graph.json)")
    if args.gate:
        check_gate_baseline(args.gate, out)
    if args.html:
        check_report_dir(args.html)
    executor, scheduler = executor_options(args)
    check_jobs(args.jobs, executor, scheduler)
    try:
        given = model_run.read_inputs(args.inputs) if args.inputs else None
        # Each local worker measures one configuration at a time (model_run.run); a remote
        # cluster's memory is not this machine's.
        workers = 0 if scheduler is not None else \
            min(args.jobs or os.cpu_count() or 1, len(sel.configs()))

        def fits(graph):
            count = sel.samples if given is None else \
                len(sample_inputs(graph, sel.samples, sel.seed, given))
            model_run.check_memory(graph, count, sel.routes, workers)
        graph, sel.artifact = model_run.load_target(args.target, artifact, fits)
        sel.artifact_hash = model_run.artifact_hash(sel.artifact)
        if args.assignment:
            _assign(sel, args.assignment, graph)
        # The units read the graph through model_run.graph_of (the captured graph itself in
        # this process, the artifact in a worker): no second copy here while they run (a
        # language model's weights).
        nodes = len(graph.nodes)
        del graph
        outcome = model_run.run(sel, out, jobs=args.jobs, resume=args.resume,
                                progress=not args.quiet, executor=executor,
                                scheduler=scheduler)
    except (ModelError, assignment.AssignmentError) as exc:
        raise UsageError(str(exc)) from None
    except ValueError as exc:                      # a checkpoint of another run
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot write {exc.filename or out}: {exc.strerror or exc}") from None
    if outcome.interrupted:
        print(interrupted_line(sel, out, outcome), file=sys.stderr)
        return EXIT_INTERRUPTED
    if not args.quiet:
        print(summary_text(outcome))
        print(f"{nodes} nodes, {outcome.total} configurations, "
              f"{len(outcome.rows)} rows in {outcome.wall:.1f} s: {out} (graph: "
              f"{sel.artifact})")
    if args.html:
        write_report(out, args.html, None, args.quiet)
    if args.gate:
        return gate_after_run(args.gate, out)
    return EXIT_OK


def _assign(sel, path, graph) -> None:
    """``sel`` measuring the assignment file ``path`` (engine/assignment.py): one format,
    ASSIGNED, computed under binary32 with each node's own format."""
    _, by_node = assignment.read(path, graph)
    sel.assignment_file = path
    sel.assignment = tuple((k, f.label) for k, f in sorted(by_node.items())
                           if f.label != assignment.BASE)
    sel.formats = (assignment.ASSIGNED,)
    sel.schemes = ((assignment.ASSIGNED, formats.get(assignment.BASE)),)


def list_unsupported(target) -> int:
    """``model --list-unsupported``: every refusal of the capture, one line each (tab
    separated: aten operator, node, source line, reason) then a count; exit 0 when the model
    captures, 1 when something does not map, 2 (UsageError) when the target is not a
    factory of a torch model or torch.export cannot capture it."""
    try:
        refusals = model_run.unsupported(target)
    except ModelError as exc:
        raise UsageError(str(exc)) from None
    for operator, node, source, reason in refusals:
        print(f"{operator}\t{node}\t{source}\t{reason}")
    operators = sorted({r[0] for r in refusals})
    print(f"{len(refusals)} nodes of {len(operators)} aten operators do not map"
          + (f": {', '.join(operators)}" if operators else "; the model captures"))
    return EXIT_FAILED if refusals else EXIT_OK


def _same_file(a, b) -> bool:
    """Whether the paths ``a`` and ``b`` name one file (links and ``..`` resolved)."""
    return os.path.realpath(a) == os.path.realpath(b)


def interrupted_line(sel, out, outcome) -> str:
    """One line for an interrupted run: what is missing, what is kept where, and the command
    that resumes it."""
    missing = [k.replace("|", " ") for k in outcome.missing]
    shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
    resume = shlex.join(["roundoff-coverage", "model", *sel.argv, "--resume"])
    return (f"{PROG}: interrupted: {out} not written; {len(missing)} of {outcome.total} "
            f"configurations missing ({shown}), the other {outcome.total - len(missing)} kept "
            f"in {out}.partial.jsonl; resume with: {resume}")


def summary_text(outcome) -> str:
    """The whole model's errors, the nodes adding the most error, what keeping one node or
    module in binary32 would buy: normwise (engine/tensor_measures.py: bits of agreement
    -log2 ||y_hat - y|| / ||y||, the relative error), the ulps over the elements that do not
    cancel beside."""
    parts = []
    whole = [r for r in outcome.rows if r.get("node_index") is None and r["status"] == "ok"]
    if whole:
        parts.append("whole model (propagated; bits of agreement = -log2 of the relative "
                     "error ||y_hat - y|| / ||y||):\n" + text_table(
                         ["config", "route", "value", "bits", "rel error", "SQNR dB",
                          "max ulp", "cancelled", "closure"],
                         [[f"{r['format']} {r['mode']} {r['policy']}", r["route"], r["node"],
                           _num(r.get("bits")), _num(r.get("norm_rel")),
                           _num(r.get("sqnr_db")), _num(r["max_ulp"]),
                           _num(r.get("cancelled")), _num(r.get("closure"))] for r in whole],
                         numeric=(3, 4, 5, 6, 7, 8)))
    errors = [r for r in outcome.rows if r["status"] == "error"]
    if errors:
        parts.append(f"{len(errors)} error rows, e.g. {errors[0]['node']}: "
                     f"{errors[0]['reason']}")
    for key, s in outcome.summaries.items():
        for route, top in (s.get("largest_local") or {}).items():
            if top:
                parts.append(f"{key}: nodes adding the most error ({route}, local, by "
                             f"relative error):\n"
                             + text_table(["node", "module", "op", "port", "bits",
                                           "rel error", "scale ulp", "max ulp"],
                                          [[t["node"], t["module"], t["op"], t["port"],
                                            _num(t.get("bits")), _num(t.get("norm_rel")),
                                            _num(t.get("scale_ulp")), _num(t["max_ulp"])]
                                           for t in top[:5]], numeric=(4, 5, 6, 7)))
        shown = _shown_shares(whole, key, s.get("largest_share") or {})
        for output, top in shown.items():
            if top:
                parts.append(f"{key}: nodes' shares of the error of {output} (first order, "
                             f"by relative size):\n"
                             + text_table(["node", "module", "op", "port", "bits",
                                           "rel share"],
                                          [[t["node"], t["module"], t["op"], t["port"],
                                            _num(t.get("bits")), _num(t.get("norm_rel"))]
                                           for t in [t for t in top if t["norm_rel"]][:5]],
                                          numeric=(4, 5)))
        keep = s.get("keep_binary32")
        if keep:
            parts.append(_keep_text(key, s, keep))
        elif s.get("keep_note"):
            parts.append(f"{key}: keep in binary32: {s['keep_note']}")
    return "\n\n".join(parts)


def _shown_shares(whole, key, shares) -> dict:
    """The shares printed for one configuration: every output's, and of the input gradients
    only the one with the largest relative error (the others are rows of the results file,
    ``output`` = ``input:<name>``)."""
    rel = {r["node"]: r.get("norm_rel") or 0.0 for r in whole if r["route"] == "gradient"
           and model_run.config_key(Config(r["format"], r["mode"], r["policy"])) == key}
    grads = [o for o in shares if o.startswith("input:")]
    worst = max(grads, key=lambda o: rel.get(o, 0.0), default=None)
    return {o: top for o, top in shares.items() if not o.startswith("input:") or o == worst}


def _keep_text(key, s, keep) -> str:
    """The keep-in-binary32 lines: the five largest reductions of a route's relative error
    (the summary's order), or a line saying that no node or module changes it."""
    note = f" ({s['keep_note']})" if s.get("keep_note") else ""   # scaled formats
    best = [e for e in keep if "norm_rel_after" in e and e["norm_rel_after"] is not None
            and e["norm_rel_before"] is not None
            and e["norm_rel_after"] < e["norm_rel_before"]]
    if not best:
        return (f"{key}: keeping one node or module in binary32{note}: none of the "
                f"{len({e['keep'] for e in keep})} candidates reduces the whole model's "
                f"relative error")
    best.sort(key=lambda e: e["norm_rel_after"] / e["norm_rel_before"])
    return (f"{key}: keeping one node or module in binary32{note} (the whole model's "
            f"largest relative error of the route, in bits of agreement, before -> after):\n"
            + text_table(["keep", "route", "bits before", "bits after", "rel error before",
                          "rel error after", "worst tensor after"],
                         [[e["keep"], e["route"], _num(e["bits_before"]),
                           _num(e["bits_after"]), _num(e["norm_rel_before"]),
                           _num(e["norm_rel_after"]), e.get("tensor_after") or "-"]
                          for e in best[:5]], numeric=(2, 3, 4, 5)))


def _num(v) -> str:
    return "-" if v is None else (v if isinstance(v, str) else f"{v:.4g}")
