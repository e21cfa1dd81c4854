"""The model run: a captured graph (routes.Graph, from routes.from_torch or an artifact)
measured node by node against exact values (issue: "Measuring a model").

One unit of work is a configuration (format, mode, policy) over every sample.  Per sample:

- inputs: the graph's example inputs (sample 0) or draws around them (value inputs
  x + 0.1 * std(x) * N(0, 1), seeded; index, Boolean and frozen inputs kept), or the user's
  arrays (``--inputs``); every float input and float constant rounded once (to nearest
  even) into the format: the model's numbers are format values, and the exact run starts
  from the same values, so what is measured is the computation's roundoff;
- cotangents: 1 for a scalar output (a loss), else N(0, 1) rounded into the format; tangents:
  N(0, 1) per value input, rounded into the format;
- the exact run: GraphRule.trace at format precision + 64 bits and at a higher precision
  (both in double-double arithmetic where the format is narrow enough, the second at 106
  bits; then numerics.reference at twice and four times the first: engine/reference.py
  ladder) until every recorded value agrees to 2**-32 ulp, at no less than 2**-p of its
  tensor's scale (numerics.settle: agreement is evidence, not proof);
- the emulated run: the same trace under numerics.emulated(format, mode, policy);
- per node and route, two errors against the exact trace:
  **propagated**: the node's value (forward), its pullback's output for each argument
  (gradient) or its output tangent (tangent) in the emulated run;
  **local**: the node alone under the format on the exact values of its arguments (and the
  exact cotangents of its outputs, the exact tangents of its arguments) rounded to nearest
  into the format, against the exact value of the node on those same rounded values: the
  error this node adds (its own roundings: a correctly rounded primitive's local error is
  at most 0.5 ulp in round-to-nearest; the rounding of what it reads is its producer's
  error, which propagates);
- the whole model: its outputs (forward, tangent) and the gradients of its inputs and
  parameters, rows with node ``output:<name>`` / ``input:<name>``, attribution propagated.

Rows are the results schema's (engine/rows.py) with ``node``, ``module``, ``node_index``
and ``attribution``; statistics over every element of every sample (measuring.measure_port);
``worst`` names the sample and the element.

Tensor measures (engine/tensor_measures.py): every row also measures its tensor as a whole
-- ``norm_rel`` (||y_hat - y||_2 / ||y||_2), ``norm_rel_max``, ``bits``, ``sqnr_db``,
``cosine``, ``scale_ulp`` (max |y_hat - y| in ulps at the tensor's scale max |y|) -- and
its componentwise ulp statistics cover only the elements whose exact magnitude is at least
2**-p of that scale: the others (exact zeros, cancellation) are counted in ``cancelled``,
their largest absolute error in ``cancelled_error`` and the row's ``reason``.

The summary (``summarize``): the nodes whose local error is largest per route, by
``norm_rel``, and the effect of keeping one node, or one module, in binary32: the emulated
run again with those nodes evaluated by emulated binary32 (same mode and policy) and their
results rounded once into the format as the next node reads them ("compute in binary32,
store in the format"), the whole model's errors before and after: per route the largest
``norm_rel`` over its tensors (outputs, input gradients) with its bits, and the max and
mean ulps of their elements that do not cancel (against binary64 roundings of the exact
values: a summary figure, not a measurement); ranked by the change of that ``norm_rel``.
Every node and module is tried in a graph of at most KEEP_ALL of them; a larger one tries
the KEEP_NODES nodes with the largest local errors and the modules holding them
(_keep_groups), and ``keep_note`` says so.

Scaled formats (``mxfp8_e4m3``, ``nvfp4``, ``fp8_e4m3_tensor``...; class ``Scaled``): the
scheme is the storage format of the tensors between the nodes, and the nodes compute in
binary32 (the policy compute:FORMAT chooses another: task.compute_format), as the
coverage run does (engine/samples.py, engine/evaluate.py):

- every float input, parameter and constant is rounded to binary32, then quantized with
  the scheme and dequantized, and the result rounded to binary32 (exact for MX; within
  2**-24 relative for binary32 scales, as a kernel that dequantizes into FP32 reads it);
  its blocks run along its natural axis: the contraction axis (quantize.scale_axis, from the
  operator's declaration: routes' Op.product_operands) of the first product (matmul,
  linear, conv, contract, attention...) that reads it, else its last axis; rank-0 numeric
  constants (an epsilon) stay binary32, indices and Booleans as they are.  Tangents are
  quantized like their input, the cotangents of the outputs (1 for a scalar loss too) like
  an output, along the last axis;
- the emulated run is numerics.emulated(binary32, mode, policy) whose node outputs, output
  tangents and pullback outputs (each node's contribution to its arguments' gradients)
  pass through the quantizer along their last axis before any later node reads them
  (GraphRule.trace's ``post``): values, tangents and contributions alike.  A value read
  by several nodes receives the binary32 sum of their quantized contributions;
- the exact run is the graph's on the same quantized inputs, constants, tangents and
  cotangents, with nothing quantized between the nodes: a propagated error holds every
  quantization and every binary32 rounding upstream;
- local errors: the node alone under emulated binary32 on what it reads in the exact run
  stored as the emulated run stores it -- a graph input or constant as it is, another
  node's output (and its tangent) quantized with the forward scheme along the last axis,
  each output's cotangent as the consumers' exact contributions quantized with the
  gradient scheme plus the output's own cotangent, summed exactly and rounded once to
  binary32 -- its outputs quantized as above, against the exact node on those same
  values: the node's own binary32 roundings and the quantization of its outputs;
- errors are in ulps of the element format at the exact value's block scale
  (measuring.measure_scaled_port; the exact value blocked along its last axis), as the
  coverage run's scaled rows: rows add ``scheme`` (the route's), ``scale_axis`` (the
  node's quantized arguments and its port: ``x:-1, weight:-1; y:-1``), ``error_unit``, and
  ``blocks``, ``clipped``, ``zero_blocks``, ``nan_blocks``, ``scale_exponents`` of the
  quantizations that made the measured values (over the samples; an input's gradient: its
  contributions');  the summary adds ``scaled_inputs``, the same counts per quantized input
  and constant;
- keeping a node "in binary32" means its outputs (values and contributions) are not
  quantized: every node computes in binary32 already.

A scaled format with delayed scaling (an amax history), one whose dequantized values do
not fit binary64, and ``fp8_recipe`` on a scheme without FP8 elements are ModelErrors.

Assignments (``model --assignment FILE``, the precision advisor's answer: engine/assignment.py):
each node computes in its unit's format (or under its unit's recipe) as autocast does, in a
binary32 model; the configuration's format label is ``assigned``, measured in ulps of
binary32, and a node's local error includes the rounding of what it reads into its own
format (its cast); no keep experiments (which to keep is the advisor's question).

Recipes (``scaled_recipe``, ``fp8_recipe``: numerics.policy.RECIPES; engine/model_recipe.py,
class ``RecipeRun``): the model runs in the recipe's storage format (bfloat16) with its
accumulation, and only the products' operands are quantized, each product node computing
in binary32 (GraphRule.trace's ``pre`` and ``override``); the exact run reads the
unquantized stored values.

Each of these runs through the same sweeps, the storage kind (engine/storage.py: element,
scaled, recipe, assigned) giving the interpreter's hooks for each run and sample.
"""

from __future__ import annotations

import itertools
import math
import time

import numpy as np

from roundoff_coverage import formats, numerics
from roundoff_coverage.numerics.resolve import Compact, agree, compact
from roundoff_coverage.routes.graph import GraphRule, Ref

from . import assignment as assigned
from . import attribution as shares_of
from . import implementations as registry
from . import reference
from . import rows as row_fields
from . import storage
from . import tensor_measures
from .executors import one_line
from .lazy_exact import flat_exact, joined_exact
from .measuring import measure_port
from .model_recipe import RecipeRun
from .model_scaled import Scaled
from .samples import ModelError, is_float_port, prepared
from .sites import (LOCAL, PROPAGATED, ROUTES, Config, compact_of, compacts_of,
                    exact_numbers, nearest64, rounder_of, sites, value_at)

# The exact run settles by the reference policy (engine/reference.py: format precision + 64
# bits, then double-double or twice that, at most two steps more); rows whose values still
# moved at the last step say so in ``reason``.
KEEP_FORMAT = "binary32"           # the precision a user may keep one node in
TOP = 10                           # nodes listed per route in the summary
KEEP_ALL = 48                      # keep experiments: all of them up to this many
KEEP_NODES = 16                    # ... else this many nodes and the modules holding them
# What the summary lists of each of the nodes adding the most error (rows' fields).
LOCAL_FIELDS = ("node", "module", "op", "port", "norm_rel", "bits", "sqnr_db", "scale_ulp",
                "max_ulp", "mean_ulp", "cancelled", "cancelled_error")
# The exceptional class of values NaN in both the exact and the computed run (_row).
NAN_IN_BOTH = "nan_in_both"


# ----- one configuration -------------------------------------------------------------------------

def measure(graph, config: Config, samples: list, seed: int, routes=ROUTES,
            others=(), target=None, scheme=None, attribution="auto",
            log=None, assignment=None) -> tuple[list, dict, dict]:
    """(rows, summary, phase seconds) of ``graph`` under one configuration on ``samples``
    (sample_inputs' lists); ``others``: implementations beside emulated that run the model
    from ``target`` (its factory) on the same samples (engine/implementations/: those whose
    ``graphs`` is set);
    ``scheme``: the ScaledFormat ``config.format`` labels, for a user-defined one;
    ``attribution``: whether the forward route adds each node's share of each output's error
    and the outputs' closure (engine/attribution.py: ``auto``, ``share`` or ``none``);
    ``log``: called as the work goes, ``log(phase, done, total, where)``
    (orchestrate.Phases), or None; ``assignment``: {node index: format}, each node
    computing in its own format (engine/assignment.py) under ``scheme`` binary32 (the
    rows' format is ``config.format``, ``assigned``)."""
    log = log or _quiet
    fmt = formats.get(config.format) if scheme is None else scheme
    scaled = recipe = None
    if isinstance(fmt, formats.ScaledFormat) and numerics.policy.recipe(config.policy):
        recipe = _recipe(fmt, config, seed)
        fmt = recipe.storage
    elif isinstance(fmt, formats.ScaledFormat):
        scaled = _scaled(fmt, config, seed)
        fmt = scaled.compute
    if scaled is not None:
        g, xs, dirs = scaled.prepare(graph, samples)
    else:
        if recipe is None:
            check(config, fmt)
        g, xs, dirs = prepared(graph, fmt, samples, seed)
    want_grad, want_tan = "gradient" in routes, "tangent" in routes
    emu = numerics.emulated(fmt, config.mode, config.policy, seed=seed)
    phases = {}
    t0 = time.perf_counter()
    exact, precs, moving, pieces = exact_traces(g, fmt, xs, dirs, want_grad, want_tan, log)
    phases["reference"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    log("emulated run")
    rule = GraphRule(g, emu)
    store = scaled or recipe or (storage.Assigned(g, assignment, config.mode, config.policy,
                                                  seed) if assignment else storage.ELEMENT)
    emulated = []
    for s, (x, (c, t)) in enumerate(zip(xs, dirs)):
        override, pre, post = store.hooks(g, "emulated", s)
        emulated.append(rule.trace([emu.asarray(a) if is_float_port(p) else a
                                    for a, p in zip(x, g.inputs)],
                                   c if want_grad else None, t if want_tan else None,
                                   override, post=post, pre=pre))
    reads = [_rounded(g, fmt, tr, want_grad, want_tan, p) if scaled is None else
             scaled.reads(g, tr, c, want_grad, want_tan) for tr, (c, _), p in
             zip(exact, dirs, pieces)]
    local = []
    for s, r in enumerate(reads):
        override, pre, post = store.hooks(g, "local", s)
        local.append(rule.alone(r, override, post=post, pre=pre))
    phases["emulation"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    local_exact, local_pieces = _local_exact(g, reads, fmt, max(precs), log)
    phases["reference"] += time.perf_counter() - t0
    t0 = time.perf_counter()
    log("errors of every node")
    out = []
    for site in sites(g, routes):
        out += _rows(g, config, fmt, site, exact, emulated, local, local_exact, max(precs),
                     sorted(s for s, sites_ in moving.items() if site in sites_), scaled,
                     recipe, pieces, local_pieces)
    if others:
        out += _others(g, config, fmt, routes, exact, max(precs), xs, dirs, others, target,
                       pieces)
    phases["measurement"] = time.perf_counter() - t0
    ranked = None
    attributed = shares_of.wanted(attribution, g, routes,
                                  scaled is not None or recipe is not None)
    if attributed:
        t0 = time.perf_counter()
        log("attribution")
        ranked = _attribute(g, config, out, xs, dirs, exact, emulated, max(precs), attributed)
        phases["attribution"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    summary = summarize(g, config, fmt, xs, dirs, exact, emulated, out, routes, emu, scaled,
                        recipe, log, pieces)
    if ranked is not None:
        summary["largest_share"] = ranked
    phases["summary"] = time.perf_counter() - t0
    return out, summary, phases


def _attribute(g, config, out, xs, dirs, exact, emulated, prec, attributed) -> dict:
    """Add the share rows of the ``attributed`` routes to ``out`` and the closure to its
    propagated rows of the whole model's outputs and input gradients
    (engine/attribution.py); the summary's ranking of the shares."""
    wanted = shares_of.targets(g, attributed)
    seeds = [c for c, _ in dirs] if "gradient" in attributed else None
    local = shares_of.local_errors(g, emulated, prec, seeds)
    per_sample = [f | b for f, b in zip(
        shares_of.shares(g, exact, local, prec, wanted),
        shares_of.gradient_shares(g, xs, seeds, local, prec, wanted))]

    def label(k, target):
        node, module, op, attrs = _node_label(g, k)
        ports = ",".join(n for n, p in zip(g.nodes[k].op.output_names, g.nodes[k].op.outputs)
                         if p.kind == "value")
        return {"op": op, "attrs": attrs, "route": target.route, "port": ports,
                "format": config.format, "mode": config.mode, "policy": config.policy,
                "implementation": "emulated", "status": "ok", "node": node,
                "module": module, "node_index": k, "attribution": shares_of.SHARE}
    share_rows = shares_of.share_rows(g, label, exact, per_sample, prec, wanted)
    for target in wanted:
        row = next((x for x in out if x["node"] == target.label and
                    x["route"] == target.route and x["attribution"] == PROPAGATED and
                    x["implementation"] == "emulated"), None)
        if row is None or row["status"] != "ok":
            continue
        fields = shares_of.closure(exact, emulated, per_sample, prec, target)
        why = fields.pop("reason", None)
        row.update(fields)
        if why:
            row["reason"] = (f"{row['reason']}; " if row["reason"] else "") + why
    out += share_rows
    return shares_of.ranking(share_rows)


def _quiet(*_args, **_kw):
    """measure's ``log`` when nobody listens."""


def _node_log(g, log, phase, alone=False):
    """A GraphRule.trace (``alone``: GraphRule.alone) ``pre`` hook passing what it reads
    through unchanged and telling ``log`` how far the sweeps of ``phase`` are: each sweep's
    share done weighed by the elements the nodes compute (forward and tangent from the first
    node, reverse from the last; ``alone``: one pass, node by node)."""
    if log is _quiet:
        return None
    n = len(g.nodes)
    cost = np.cumsum([1 + sum(math.prod(p.shape) for p in node.op.outputs if p.kind == "value")
                      for node in g.nodes])
    total = float(cost[-1])
    sweeps = {"argument": "forward", "argument_tangent": "tangent", "cotangent": "reverse"}

    def pre(kind, k, j, v):
        if alone and j == 0 and kind == "argument":
            log(phase, float(cost[k - 1] if k else 0), total, f"node {k + 1}/{n}")
        elif not alone and j == 0 and kind in sweeps:
            done = total - cost[k] if kind == "cotangent" else (cost[k - 1] if k else 0)
            log(f"{phase}, {sweeps[kind]} sweep", float(done), total, f"node {k + 1}/{n}")
        return v
    return pre


def exact_traces(g, fmt, xs, dirs, want_grad, want_tan, log=_quiet):
    """(traces, precisions, {sample: the sites whose values still moved at the last
    doubling}, the compact copies of each trace's sites (sites.compacts_of)) of every sample
    by numerics.settle over the samples.  Only the last trace of a sample is kept; settle
    compares the precisions on compact copies of its sites' values (numerics.resolve.compact:
    two binary64 pieces a value), so a model's exact run holds one trace and the pieces of
    the one before, not two traces of mpf values; the last copies are the stand-ins the
    rows and the rounded reads take."""
    kept, before, last = {}, {}, {}
    what = sites(g, ROUTES if want_grad and want_tan else
                 tuple(r for r in ROUTES if r == "forward" or
                       (r == "gradient" and want_grad) or (r == "tangent" and want_tan)))

    def fn(prec, items):
        # Double-double where the ladder puts it (engine/reference.py: sweep).
        fast = reference.sweep(fmt, prec)
        slow, out = numerics.reference(prec), []
        for i, s in enumerate(items):
            cots, tans = dirs[s]
            hook = _node_log(g, log, f"exact run at {prec} bits, sample {i + 1}/{len(items)}")
            kept.pop(s, None)                            # the last trace only

            def trace(bk):
                return GraphRule(g, bk).trace([bk.asarray(a) if is_float_port(p) else a
                                               for a, p in zip(xs[s], g.inputs)],
                                              cots if want_grad else None,
                                              tans if want_tan else None, pre=hook)
            tr = None
            if fast is not None:
                try:
                    tr = trace(fast)
                except Exception:         # noqa: BLE001 -- what double-double cannot hold
                    tr = None
            if tr is None:
                tr = trace(slow)
            kept[s] = tr
            if s in last:
                before[s] = last[s]
            last[s] = tuple(compact(value_at(tr, site)) for site in what)
            out.append(last[s])
        return out
    settled = reference.settle(fn, len(xs), fmt, graph=True)
    moving = {s: {site for site, a, b in zip(what, before[s], last[s])
                  if not agree(a, b, fmt, floor=reference.floor(fmt))}
              for s, ok in enumerate(settled.settled) if not ok and s in before}
    traces, pieces = [], []
    for s in range(len(xs)):
        # A double-double trace's exact values, on the Compacts settle compared.
        tr, copies = exact_numbers(kept[s], {id(value_at(kept[s], site)): c
                                             for site, c in zip(what, last[s])
                                             if isinstance(c, Compact)})
        traces.append(tr)
        pieces.append(copies | compacts_of(tr, what, last[s]))
    return traces, settled.precs, moving, pieces


def _rounded(g, fmt, tr, want_grad, want_tan, pieces=None) -> list:
    """Per node, what it reads in ``tr`` rounded to nearest into fmt: (arguments, gradient
    flags, output cotangents, argument tangents); from the compact copies ``pieces``
    (sites.compacts_of) where they hold a value."""
    rnd = rounder_of(fmt)
    out = []
    for k, node in enumerate(g.nodes):
        op = node.op
        flags = tuple(want_grad and p.differentiable and (k, i) in tr.contributions
                      for i, p in enumerate(op.inputs))
        cts = [rnd(tr.cotangents.get(Ref(k, j)), pieces) for j in range(len(op.outputs))] \
            if any(flags) else None
        ts = [rnd(tr.tangents.get(r), pieces) if p.differentiable else None
              for r, p in zip(node.args, op.inputs)] if want_tan else None
        out.append(([rnd(tr.values[r], pieces) for r in node.args], flags, cts, ts))
    return out


def _local_exact(g, reads, fmt, prec, log=_quiet) -> tuple[list, list]:
    """(traces, their compact copies as exact_traces gives them) of the exact values of
    every node alone on its rounded reads (the local errors' reference), per sample, at
    ``prec`` bits: the precision the exact trace settled at, in double-double arithmetic
    where the trace's double-double sweep is the evidence (engine/reference.py, ``alone``);
    a node double-double cannot evaluate, or a sample, by mpmath."""
    slow = GraphRule(g, numerics.reference(prec))
    dd = reference.alone(fmt, prec)
    fast = GraphRule(g, dd) if dd is not None else None
    traces, pieces = [], []
    for s, r in enumerate(reads):
        hook = _node_log(g, log, f"exact nodes alone (local errors), sample "
                                 f"{s + 1}/{len(reads)}", alone=True)
        tr = None
        if fast is not None:
            try:
                tr = fast.alone(r, pre=hook, fallback=slow)
            except Exception:         # noqa: BLE001 -- what double-double cannot hold
                tr = None
        if tr is None:
            tr = slow.alone(r, pre=hook)
        tr, copies = exact_numbers(tr)
        traces.append(tr)
        pieces.append(copies)
    return traces, pieces


def _node_label(g, k) -> tuple:
    """(node, module, op, attrs) of node k; the whole model's for k = -1."""
    if k < 0:
        return None, "", "model", {}
    node = g.nodes[k]
    names = [a.name for a in node.op.decl.attributes]
    attrs = {n: f[1] for n, f in zip(names, node.op.record()["fields"])}
    return g.node_names[k], node.module, node.op.name, attrs


def _rows(g, config, fmt, site, exact, emulated, local, local_exact, prec,
          moving=(), scaled=None, recipe=None, pieces=None, local_pieces=None) -> list:
    """The propagated and (for a node) local rows of ``site`` (``scaled``: a Scaled;
    ``recipe``: a RecipeRun, whose product nodes' rows say what their operands took;
    ``pieces``, ``local_pieces``: the compact copies of the exact traces and of the nodes
    alone, exact_traces and _local_exact)."""
    pairs = ((PROPAGATED, emulated, exact, pieces),) + \
        (((LOCAL, local, local_exact, local_pieces),) if site.node >= 0 else ())
    out = []
    for a, traces, ex, copies in pairs:
        row = _row(g, config, fmt, site, a, traces, ex, prec, moving, scaled=scaled,
                   pieces=copies)
        if row is not None and recipe is not None:
            recipe.annotate(g, row, site, a, range(len(traces)))
        if row is not None:
            out.append(row)
    return out


def _row(g, config, fmt, site, attribution, traces, exact, prec, moving=(),
         implementation="emulated", policy=None, scaled=None, pieces=None) -> dict | None:
    """One row: ``traces``' values at ``site`` against ``exact``'s over the samples; None
    where no sample has an exact value there (a constant's argument, a value no cotangent
    reaches); ``pieces``: ``exact``'s compact copies (exact_traces) or None."""
    node, module, op, attrs = _node_label(g, site.node)
    if node is None:
        node = whole_name(site)
    row = row_fields.empty(op=op, attrs=attrs, route=site.route, port=site.port,
                           format=config.format, mode=config.mode,
                           policy=policy or config.policy, implementation=implementation,
                           status="ok", node=node, module=module,
                           node_index=site.node if site.node >= 0 else None,
                           attribution=attribution, ref_prec=prec)
    comps, exacts, stands, where = [], [], [], []
    for s, (tr, ex) in enumerate(zip(traces, exact)):
        c, e = value_at(tr, site), value_at(ex, site)
        if e is None:
            continue
        if c is None:
            return row | {"status": "error", "reason": f"sample {s}: the {attribution} run "
                                                       f"of {implementation} has no value "
                                                       f"here (the node failed)"}
        comps.append(np.asarray(c, dtype=np.float64).reshape(-1))
        exacts.append(flat_exact(e))
        p = compact_of(pieces[s], e) if pieces else None
        if p is not None:
            stands.append((p.hi.reshape(-1), p.lo.reshape(-1)))
        else:
            y, raws = tensor_measures.stand_ins(exacts[-1])
            stands.append((y, raws.lo))
        where.append(s)
    if not comps:
        return None
    comp, ex = np.concatenate(comps), joined_exact(exacts)
    # The exact values' nearest binary64 numbers (NaN where NaN; the compact copies' where
    # the exact run kept them) and their raw mpfs, which the NaN tests, the tensor measures
    # and the ulps read.
    y, mpfs = tensor_measures.stand_ins(ex, *(np.concatenate(part) for part in zip(*stands)))
    computed_nan, exact_nan = np.isnan(comp), np.isnan(y)
    missed = exact_nan & ~computed_nan
    if missed.any():
        # The model's values are ordinary draws: an exact NaN beside a computed number is
        # the reference failing (an operation outside its domain on exact values), never a
        # measurement of the computed value.
        return row | {"status": "error", "samples": int(comp.size),
                      "reason": f"the exact value is NaN at {int(missed.sum())} of "
                                f"{comp.size} elements where the {attribution} run of "
                                f"{implementation} has a number: the reference failed "
                                f"there, nothing is measured"}
    both = exact_nan & computed_nan
    if both.all():
        return row | {"status": "error", "samples": int(comp.size),
                      "unmeasured": int(comp.size), "exceptional": {NAN_IN_BOTH: int(comp.size)},
                      "reason": f"every value is NaN in both the exact run and the "
                                f"{attribution} run of {implementation}: nothing to measure"}
    keep = ~both
    # The same infinity in both runs (an attention mask's -inf) is exact, but has no place in
    # a norm: the normwise measures are over the other elements, the ulps over all.
    matched = keep & np.isinf(comp) & (y == comp)
    for i in np.flatnonzero(matched):        # a finite exact value beyond binary64's range
        matched[i] = bool(ex[i] == comp[i])
    normed = keep & ~matched
    tensor, cancelled = tensor_measures.measures(comp[normed], ex[normed], fmt,
                                                 scaled is None, _subset(y, mpfs, normed))
    kept = keep.copy()
    kept[normed] = ~cancelled
    ulp = measure_port(row, comp[kept], ex[kept], fmt, None,
                       stand=_subset(y, mpfs, kept)) if scaled is None else \
        scaled.measure(g, row, site, attribution, comp, ex,
                       [value_at(exact[s], site) for s in where], where, keep)
    row.update(tensor)
    if both.any():
        _unmeasured_nan(row, int(both.sum()))
    if ulp is not None:
        full = np.full(comp.shape, np.nan)
        full[kept] = ulp
        row["worst"] = _worst(full, comp, ex, [len(c) for c in comps], where)
    if matched.any():
        row["reason"] = (f"{row['reason']}; " if row["reason"] else "") + (
            f"{int(matched.sum())} of {int(keep.sum())} elements are the same infinity in "
            f"both runs: exact (0 ulp), left out of the normwise measures")
    if row.get("cancelled"):
        row["reason"] = (f"{row['reason']}; " if row["reason"] else "") + \
            tensor_measures.cancel_text(row["cancelled"], int(keep.sum()), fmt,
                                        row["cancelled_error"])
    if moving:
        row["reason"] = (f"{row['reason']}; " if row["reason"] else "") + (
            f"the exact values of sample(s) {', '.join(map(str, moving))} still moved at "
            f"{prec} bits (kept: an exact 0 reached by cancellation does; see "
            f"engine/model.py)")
    return row


def _subset(y, mpfs, mask) -> tuple:
    """The stand-ins (tensor_measures.stand_ins) of the elements of ``mask``."""
    return y[mask], mpfs.subset(mask)


def _unmeasured_nan(row, count) -> None:
    """Count ``count`` elements NaN in both runs into ``row``, measured over the others: a
    NaN that meets a NaN is no error of 0 ulp (numerics.metrics' convention for the coverage
    run's special inputs), it is a value the model does not have."""
    row["samples"] += count
    row["unmeasured"] = (row["unmeasured"] or 0) + count
    if isinstance(row.get("buckets"), list):
        row["buckets"][-1] += count                          # the unmeasurable bucket
    row["exceptional"] = dict(row.get("exceptional") or {}, **{NAN_IN_BOTH: count})
    row["reason"] = (f"{count} of {row['samples']} values are NaN in both the exact and the "
                     f"computed run: unmeasured, left out of the statistics")


def _others(g, config, fmt, routes, exact, prec, xs, dirs, implementations, target,
            pieces=None) -> list:
    """The rows of the implementations beside emulated (engine/implementations/, their
    graph seam): the whole model's outputs and gradients, and every node value they expose,
    against the same exact traces; one no_rule row for an implementation that cannot run."""
    out = []
    for impl in implementations:
        cls = registry.named(impl)
        why = cls.graph_problem(target, config)
        traces = None
        if why is None:
            try:
                traces = cls.graph_traces(target, g, config, xs, [c for c, _ in dirs],
                                          "gradient" in routes)
            except Exception as exc:                        # noqa: BLE001 (data)
                why = f"{impl} failed: {one_line(exc)}"
        if traces is None:
            out.append(row_fields.empty(op="model", route="forward", port="*",
                                        format=config.format, mode=config.mode,
                                        policy=cls.graph_policy, implementation=impl,
                                        status="no_rule", reason=why, node="model",
                                        attribution=PROPAGATED))
            continue
        for site in sites(g, tuple(r for r in routes if r != "tangent")):
            if site.node >= 0 and (site.where == "contributions" or not cls.node_values):
                continue                  # compiled kernels keep no node values
            row = _row(g, config, fmt, site, PROPAGATED, traces, exact, prec,
                       implementation=impl, policy=cls.graph_policy, pieces=pieces)
            if row is not None and not (site.node >= 0 and row["status"] == "error"):
                out.append(row)
    return out


def _worst(ulp, comp, exact, sizes, samples) -> dict | None:
    """The sample and element of the largest |error|, with both values."""
    i = row_fields.worst_index(ulp)
    if i is None:
        return None
    ends = np.cumsum(sizes)
    s = int(np.searchsorted(ends, i, side="right"))
    return {"sample": samples[s], "element": i - (int(ends[s - 1]) if s else 0),
            "computed": repr(float(comp[i])), "exact": row_fields.decimal_text(exact[i]),
            "ulp": float(ulp[i])}


# ----- the summary -------------------------------------------------------------------------------

def summarize(g, config, fmt, xs, dirs, exact, emulated, measured, routes, emu,
              scaled=None, recipe=None, log=_quiet, pieces=None) -> dict:
    """The nodes with the largest local errors per route, and the effect of keeping each node
    (and each module) in binary32 on the whole model's errors; for a scaled format
    (``scaled``), what quantizing the inputs did, and keeping a node means leaving its
    outputs unquantized; under a recipe (``recipe``), keeping a product means leaving its
    operands unquantized too.  ``pieces``: the exact traces' compact copies
    (exact_traces)."""
    top, ranked = {}, {}
    for route in routes:
        local = [r for r in measured if r["attribution"] == LOCAL and r["route"] == route
                 and r["status"] == "ok" and r["samples"] + (r["cancelled"] or 0)]
        local.sort(key=_local_rank)
        top[route] = [{k: r[k] for k in LOCAL_FIELDS} for r in local[:TOP]]
        ranked[route] = [r["node_index"] for r in local]
    summary = {"largest_local": top}
    if scaled is not None:
        summary["scaled_inputs"] = scaled.input_fields(g)
        summary["keep_note"] = (f"{config.format}: every node computes in "
                                f"{scaled.compute.label}; "
                                f"keeping a node leaves its outputs (values and gradient "
                                f"contributions) unquantized")
    elif recipe is not None:
        summary["keep_note"] = (f"{config.policy} on {config.format}: keeping a product "
                                f"leaves its operands unquantized; any kept node computes "
                                f"in {KEEP_FORMAT}, its results stored in {fmt.label}")
    elif config.format == assigned.ASSIGNED:
        summary["keep_binary32"] = None
        summary["keep_note"] = ("an assignment of formats to modules: which to keep in "
                                "binary32 is roundoff-coverage advise's question")
        return summary
    elif fmt.precision >= formats.get(KEEP_FORMAT).precision:
        summary["keep_binary32"] = None
        summary["keep_note"] = f"{config.format} is at least as precise as {KEEP_FORMAT}"
        return summary
    groups, note = _keep_groups(g, ranked)
    if note:
        summary["keep_note"] = "; ".join(n for n in (summary.get("keep_note"), note) if n)
    summary["keep_binary32"] = _keep(g, config, xs, dirs, exact, emulated, routes, emu,
                                     groups, scaled, recipe, log, pieces)
    return summary


def _keep_groups(g, ranked) -> tuple[list, str | None]:
    """The keep-in-binary32 experiments to run, (label, module, node indices) each, and a
    note when not all of them: every node with a value output and every module of more than
    one node while there are at most KEEP_ALL of them (each experiment is a whole emulated
    run, so trying them all costs the graph's size squared); else the KEEP_NODES nodes with
    the largest local errors (``ranked``: per route, node indices largest first, the routes
    taken in turn) and then the modules holding them, innermost first, up to KEEP_ALL."""
    nodes = [(g.node_names[k], g.node_modules[k], (k,)) for k, n in enumerate(g.nodes)
             if any(p.kind == "value" for p in n.op.outputs)]
    members = {}
    for k, m in enumerate(g.node_modules):
        parts = m.split(".") if m else []
        for d in range(1, len(parts) + 1):
            members.setdefault(".".join(parts[:d]), []).append(k)
    modules = {m: ks for m, ks in members.items() if len(ks) > 1}
    every = nodes + [(f"module:{m}", m, tuple(ks)) for m, ks in modules.items()]
    if len(every) <= KEEP_ALL:
        return every, None
    valued = {ks[0] for _, _, ks in nodes}
    chosen = []
    for k in (k for row in itertools.zip_longest(*ranked.values()) for k in row):
        if k is not None and k in valued and k not in chosen:
            chosen.append(k)
    chosen = chosen[:KEEP_NODES]
    out = [(g.node_names[k], g.node_modules[k], (k,)) for k in chosen]
    named = []
    for k in chosen:
        parts = g.node_modules[k].split(".") if g.node_modules[k] else []
        named += [m for m in (".".join(parts[:d]) for d in range(len(parts), 0, -1))
                  if m in modules and m not in named]
    out += [(f"module:{m}", m, tuple(modules[m])) for m in named][:KEEP_ALL - len(out)]
    return out, (f"{len(out)} of {len(every)} nodes and modules tried: the {len(chosen)} "
                 f"nodes with the largest local errors and the modules holding them "
                 f"(every one is tried in graphs of at most {KEEP_ALL})")


def _local_rank(r) -> tuple:
    """Largest normwise local error first (tensor_measures: norm_rel); a node whose exact
    value is 0 but whose computed one is not (no relative error) after every other, by its
    absolute error; then by execution order."""
    rel = r.get("norm_rel")
    if rel is None:
        return (1, -_finite(r.get("cancelled_error") or 0.0), r["node_index"] or 0)
    return (0, -_finite(rel), r["node_index"] or 0)


def _finite(v):
    return float("inf") if isinstance(v, str) else float(v)


def _whole(g, routes):
    return [s for s in sites(g, tuple(r for r in routes if r != "tangent")) if s.node < 0]


def _errors(g, fmt, traces, exact64, whole, scaled=None) -> dict:
    """{route: (largest norm_rel, its tensor, ulp errors)} of the whole model's values in
    ``traces`` against binary64 roundings of the exact values: the largest normwise relative
    error over the route's tensors (each output, each input gradient, joined over the samples:
    tensor_measures; tensors with no relative error -- an exact 0 computed nonzero -- left
    out, None where none is left) and the componentwise |ulp| errors of their elements that
    are not cancelled (``scaled``: in ulps of its element format at their block scale)."""
    acc, rel = {}, {}
    for site in whole:
        comps = []
        for tr, ex in zip(traces, exact64):
            c, e = value_at(tr, site), ex.get(site)
            if c is None or e is None:
                continue
            shape = np.shape(c)
            c = np.asarray(c, dtype=np.float64).reshape(-1)
            both = np.isnan(c) & np.isnan(e)
            ulp = np.abs(c - e) / formats.ulp(e, fmt) if scaled is None else \
                np.abs(scaled.ulps64(c, e, shape, site.route))
            comps.append((c[~both], e[~both], ulp[~both]))
        if not comps:
            continue
        c, e, ulp = (np.concatenate(parts) for parts in zip(*comps))
        measured, cancelled = tensor_measures.measures(c, e, fmt, scaled is None)
        ulp = ulp[~cancelled]
        acc.setdefault(site.route, []).append(ulp[np.isfinite(ulp)])
        if measured["norm_rel"] is not None and \
                measured["norm_rel"] >= rel.get(site.route, (-1.0, None))[0]:
            rel[site.route] = (measured["norm_rel"], whole_name(site))
    return {r: rel.get(r, (None, None)) + (np.concatenate(v),) for r, v in acc.items()}


def whole_name(site) -> str:
    """A whole-model site's node label in the rows: output:<name> or input:<name>."""
    return f"{'input' if site.where == 'cotangents' else 'output'}:{site.port}"


def _keep(g, config, xs, dirs, exact, emulated, routes, emu, groups, scaled=None,
          recipe=None, log=_quiet, pieces=None) -> list:
    """The keep-in-binary32 entries (module docstring) of the nodes and modules ``groups``
    (_keep_groups), per route, the largest reduction of the route's normwise error first."""
    fmt = emu.fmt
    whole = _whole(g, routes)
    if not whole:
        return []
    ref = numerics.reference(64)
    exact64 = [{s: nearest64(value_at(tr, s), p, ref) for s in whole
                if value_at(tr, s) is not None}
               for tr, p in zip(exact, pieces or [None] * len(exact))]
    before = _errors(g, fmt, emulated, exact64, whole, scaled)
    wide = numerics.emulated(KEEP_FORMAT, config.mode, config.policy, seed=emu.seed)
    want_grad = "gradient" in routes
    out = []
    store, rule = scaled or recipe or storage.ELEMENT, GraphRule(g, emu)
    # An element format rounding deterministically: each experiment evaluates again only
    # the kept nodes and those reading what they changed (GraphRule.rerun), from one tape
    # per sample; its results are those of a whole run.
    tapes = None
    if store is storage.ELEMENT and config.mode != "stochastic":
        needs = tuple(want_grad and p.differentiable for p in g.inputs)
        tapes = [rule.taped([emu.asarray(a) if is_float_port(p) else a
                             for a, p in zip(x, g.inputs)], needs) for x in xs]
    for i, (label, module, ks) in enumerate(groups):
        log("keep in binary32", float(i), float(len(groups)), f"{i + 1}/{len(groups)} {label}")
        try:
            traces = []
            for s, (x, (c, _)) in enumerate(zip(xs, dirs)):
                if tapes is not None:
                    traces.append(rule.rerun(tapes[s], dict.fromkeys(ks, wide),
                                             c if want_grad else None))
                    continue
                override, pre, post = store.hooks(g, "emulated", s, ks, wide, record=False)
                traces.append(rule.trace([emu.asarray(a) if is_float_port(p) else a
                                          for a, p in zip(x, g.inputs)],
                                         c if want_grad else None, None, override,
                                         post=post, pre=pre))
        except Exception:                                   # noqa: BLE001
            continue
        after = _errors(g, fmt, traces, exact64, whole, scaled)
        for route, errors in after.items():
            out.append({"keep": label, "module": module, "nodes": len(ks), "route": route}
                       | _keep_fields(before.get(route, (None, None, np.zeros(0))), errors))
    out.sort(key=lambda e: (e["route"], _gain(e), e["mean_ulp_after"] - e["mean_ulp_before"]))
    return out


def _keep_fields(before, after) -> dict:
    """One keep entry's numbers: the whole route's largest normwise relative error, the
    tensor that has it and its bits of agreement, the max and mean |ulp| of its elements
    that are not cancelled, before and after (tensor_measures)."""
    out = {}
    for when, (rel, name, ulp) in (("before", before), ("after", after)):
        out[f"norm_rel_{when}"] = rel
        out[f"tensor_{when}"] = name
        out[f"bits_{when}"] = None if rel is None else \
            (float("inf") if rel == 0 else -float(np.log2(rel)))
        out[f"max_ulp_{when}"] = float(np.max(ulp)) if ulp.size else 0.0
        out[f"mean_ulp_{when}"] = float(np.mean(ulp)) if ulp.size else 0.0
    return out


def _gain(e) -> float:
    """How much keeping a node changes the route's normwise error: log2(after / before),
    most negative for the largest reduction; 0 where either is not defined or both are 0."""
    b, a = e["norm_rel_before"], e["norm_rel_after"]
    if b is None or a is None or (a == 0 and b == 0):
        return 0.0
    if a == 0 or b == 0:
        return float("-inf") if a == 0 else float("inf")
    return math.log2(a) - math.log2(b)          # no underflow of a / b (1e-300 / 1e10)


# ----- scaled formats ----------------------------------------------------------------------------


def check(config, fmt=None) -> None:
    """ModelError (one line) when a model run cannot measure ``config``: an element format
    that does not fit binary64 or under a recipe policy, a scaled format Scaled refuses.
    ``fmt``: the format, where ``config.format`` names one of a --formats-file."""
    fmt = formats.get(config.format) if fmt is None else fmt
    recipe = numerics.policy.recipe(config.policy)
    if isinstance(fmt, formats.ScaledFormat):
        (_scaled if recipe is None else _recipe)(fmt, config, 0)
        return
    if recipe is not None:
        raise ModelError(f"policy {config.policy} ({recipe.doc}) quantizes into a scaled "
                         f"format; {config.format} is an element format (give --formats "
                         f"mxfp8_e4m3, fp8_e4m3_tensor...)")
    if not fmt.fits_binary64:
        raise ModelError(f"model runs measure formats that fit binary64 ({config.format} "
                         f"does not)")


def _recipe(fmt, config, seed):
    """The RecipeRun of a recipe policy on a scaled format (engine/model_recipe.py)."""
    return RecipeRun(fmt, config, seed)


def _scaled(fmt, config, seed):
    """The Scaled of a scaled format (engine/model_scaled.py)."""
    return Scaled(fmt, config, seed)
