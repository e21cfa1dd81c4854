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

Memory: the exact and the emulated traces of every sample are held whole (the propagated
errors, the attribution and the summary read them): in memory, or, where they take more
than 1/spill.SPILL_SHARE of the memory available when the configuration starts, in a
temporary file read back through maps (engine/spill.py: the same bits).  Where two exact
traces in double-double would take more than that share (``_trace_bytes``), every sweep --
the exact ones, the emulated one, the keep experiments' tapes and reruns -- stores its
arrays in the file as it makes them (GraphRule.trace's ``store``: each node's values,
what its pullback keeps, each cotangent once complete, each contribution), so a sweep
holds about one node's work; else the exact traces' compact copies go there once settled
and the emulated traces once made.  The pages read are given back after each node's step
of a stored sweep, each site's comparison by settle, each site's rows, each run of local
errors, the attribution and each keep experiment.  The local errors are measured a run of consecutive nodes at a time
(``_chunks``, at most LOCAL_ELEMENTS elements of what the run's nodes read and make), so
what the nodes alone read and compute is held for one run only.
A graph within the limit is one run; the rows are the same either way, but under
stochastic rounding a graph of several runs draws its local runs' bits in another order
(one run's nodes for every sample, then the next run's).

Rows are the results schema's (engine/rows.py) with ``node``, ``module``, ``node_index``
and ``attribution``; statistics over every element of every sample (measuring.measure_port);
``worst`` names the sample and the element.

Tensor measures (engine/tensor_measures.py): every row also measures its tensor as a whole
-- ``norm_rel`` (||y_hat - y||_2 / ||y||_2), ``norm_rel_max``, ``bits``, ``sqnr_db``,
``cosine``, ``scale_ulp`` (max |y_hat - y| in ulps at the tensor's scale max |y|) -- and
its componentwise ulp statistics cover only the elements whose exact magnitude is at least
2**-p of that scale: the others (exact zeros, cancellation) are counted in ``cancelled``,
their largest absolute error in ``cancelled_error`` and the row's ``reason``.

The summary (engine/keep.py ``summarize``): the nodes with the largest local errors per
route and the effect of keeping one node, or one module, in binary32.

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

import math
import time

import numpy as np

from roundoff_coverage import formats, numerics
from roundoff_coverage.numerics.resolve import Compact, agree, compact
from roundoff_coverage.routes.graph import GraphRule

from . import attribution as shares_of
from . import budget
from . import implementations as registry
from . import reference
from . import spill
from . import rows as row_fields
from . import storage
from . import tensor_measures
from .executors import one_line
from .keep import summarize
from .lazy_exact import LazyExact, flat_exact, joined, joined_exact, picked
from .measuring import measure_port
from .model_recipe import RecipeRun
from .model_scaled import Scaled
from .samples import ModelError, is_float_port, prepared
from .sites import (LOCAL, PROPAGATED, ROUTES, TRACE_KINDS, Config, compact_of,
                    compacts_of, exact_numbers, node_reads, rounder_of, sites, value_at,
                    whole_name)

# The exact run settles by the reference policy (engine/reference.py: format precision + 64
# bits, then double-double or twice that, at most two steps more); rows whose values still
# moved at the last step say so in ``reason``.
# The exceptional class of values NaN in both the exact and the computed run (_row).
NAN_IN_BOTH = "nan_in_both"
# The local errors are measured a run of nodes at a time (_chunks), each run's arguments and
# outputs (over the samples and routes) at most this many elements: what the nodes alone
# read (binary64), compute (the format's values in binary64) and their exact values
# (double-double) cost some 40-60 bytes an element, so at most about 0.5 GB.
LOCAL_ELEMENTS = 1 << 23


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
        g, xs, dirs = scaled.prepare(graph, samples, "tangent" in routes)
    else:
        if recipe is None:
            check(config, fmt)
        g, xs, dirs = prepared(graph, fmt, samples, seed, "tangent" in routes)
    want_grad, want_tan = "gradient" in routes, "tangent" in routes
    emu = numerics.emulated(fmt, config.mode, config.policy, seed=seed)
    phases = {}
    # Traces that take more than their share of the memory go to a file (engine/spill.py):
    # the exact sweeps' as they are made where two of them would, else once settled.
    over = spill.Over(budget.available_memory() // spill.SPILL_SHARE)
    t0 = time.perf_counter()
    stream = over.need(2 * _trace_bytes(g, len(xs), want_grad, want_tan))
    if stream is not None:                 # the rounded inputs too (a model's parameters)
        xs = [stream.put(x) for x in xs]
    exact, precs, moving, pieces = exact_traces(g, fmt, xs, dirs, want_grad, want_tan, log,
                                                stream)
    held = spill.nbytes(a for p in pieces for _, c in p.values() for a in (c.hi, c.lo))
    if over.need(held) is not None:
        _spill_exact(over.file, pieces)
    over.release()                         # the pages the settling read
    phases["reference"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    log("emulated run")
    rule = GraphRule(g, emu)
    store = scaled or recipe or (storage.Assigned(g, assignment, config.mode, config.policy,
                                                  seed) if assignment else storage.ELEMENT)
    emulated = []
    # The emulated sweeps stored as they are made too where the exact ones were.
    for s, (x, (c, t)) in enumerate(zip(xs, dirs)):
        override, pre, post = store.hooks(g, "emulated", s)
        emulated.append(rule.trace([emu.asarray(a) if is_float_port(p) else a
                                    for a, p in zip(x, g.inputs)],
                                   c if want_grad else None, t if want_tan else None,
                                   override, post=post, pre=pre, store=stream))
    if over.need(held + spill.nbytes(a for tr in emulated for a in _arrays(tr))) is not None:
        for tr in emulated:
            _spill_trace(over.file, tr)
    release = over.release
    release()
    phases["emulation"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    log("errors of every node")
    prec, every = max(precs), sites(g, routes)
    moved = {site: sorted(s for s, sites_ in moving.items() if site in sites_)
             for site in every}
    found = {}
    for site in every:
        found[site] = _rows(g, config, fmt, site, exact, emulated, prec, moved[site], scaled,
                            recipe, pieces)
        release()
    phases["measurement"] = time.perf_counter() - t0
    # The local errors a run of nodes at a time (_chunks): what the nodes read, their
    # emulated and exact results alone, then their rows; the next run's replace them.
    for chunk in _chunks(g, len(xs), routes):
        t0 = time.perf_counter()
        reads = [_rounded(g, fmt, tr, want_grad, want_tan, p, chunk) if scaled is None else
                 scaled.reads(g, tr, c, want_grad, want_tan, chunk) for tr, (c, _), p in
                 zip(exact, dirs, pieces)]
        local = []
        for s, r in enumerate(reads):
            override, pre, post = store.hooks(g, "local", s)
            local.append(rule.alone(r, override, post=post, pre=pre, only=chunk))
        phases["emulation"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        local_exact, local_pieces = _local_exact(g, reads, fmt, prec, log, chunk)
        del reads
        phases["reference"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        for site in every:
            if site.node in chunk:
                found[site] += _rows(g, config, fmt, site, local_exact, local, prec,
                                     moved[site], scaled, recipe, local_pieces, LOCAL)
        del local, local_exact, local_pieces
        release()
        phases["measurement"] += time.perf_counter() - t0
    t0 = time.perf_counter()
    out = [row for site in every for row in found[site]]
    if others:
        out += _others(g, config, fmt, routes, exact, prec, xs, dirs, others, target, pieces)
    phases["measurement"] += time.perf_counter() - t0
    ranked = None
    attributed = shares_of.wanted(attribution, g, routes,
                                  scaled is not None or recipe is not None)
    if attributed:
        t0 = time.perf_counter()
        log("attribution")
        ranked = _attribute(g, config, out, xs, dirs, exact, emulated, max(precs), attributed)
        release()
        phases["attribution"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    summary = summarize(g, config, fmt, xs, dirs, exact, emulated, out, routes, emu, scaled,
                        recipe, log, pieces, release, stream)
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


def _trace_bytes(g, samples, want_grad, want_tan) -> int:
    """The bytes of the exact traces of ``g`` for ``samples`` samples in double-double (16
    bytes an element): the values, and for gradients a cotangent and a contribution, for
    tangents a tangent, of each value element (an estimate: not every value receives
    them)."""
    elements = sum(math.prod(p.array_shape) for p in (*g.inputs, *g.constant_ports)) + \
        sum(math.prod(p.array_shape) for node in g.nodes for p in node.op.outputs)
    return 16 * elements * samples * (1 + 2 * bool(want_grad) + bool(want_tan))


def exact_traces(g, fmt, xs, dirs, want_grad, want_tan, log=_quiet, stream=None):
    """(traces, precisions, {sample: the sites whose values still moved at the last
    doubling}, the compact copies of each trace's sites (sites.compacts_of)) of every sample
    by numerics.settle over the samples.  Only the last trace of a sample is kept; settle
    compares the precisions on compact copies of its sites' values (numerics.resolve.compact:
    two binary64 pieces a value), so a model's exact run holds one trace and the pieces of
    the one before, not two traces of mpf values; the last copies are the stand-ins the
    rows and the rounded reads take.  ``stream``: a spill.Spill the sweeps store their
    arrays in as they are made (GraphRule.trace's ``store``), each site's pages given back
    once settle has compared it."""
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
                                              tans if want_tan else None, pre=hook,
                                              store=stream)
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
            # One copy of an array several sites hold (a cotangent that is its only
            # consumer's contribution, an input's gradient): settle compares each once.
            made = {}
            last[s] = tuple(_compact_once(value_at(tr, site), made, stream) for site in what)
            out.append(last[s])
        return out

    def same(a, b) -> bool:
        """Whether two evaluations of a site agree (settle's test), the pages of a stored
        sweep given back after each."""
        ok = agree(a, b, fmt, floor=reference.floor(fmt))
        if stream is not None:
            stream.done(x for c in (a, b) if isinstance(c, Compact) for x in (c.hi, c.lo))
        return ok
    settled = reference.settle(fn, len(xs), fmt, graph=True,
                               agree=lambda a, b: all(same(x, y) for x, y in zip(a, b)))
    moving = {s: {site for site, a, b in zip(what, before[s], last[s]) if not same(a, b)}
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


def _spill_exact(file, pieces) -> None:
    """The exact traces' compact copies (exact_traces' ``pieces``) written to the spill
    file and read back from it: each LazyExact of the traces takes the spilled Compact, so
    the double-double arrays they were views of are let go (an exact array of binary64
    numbers, an exact zero gradient, stays as it is)."""
    for p in pieces:
        pairs = list(p.values())
        new = file.put([c.hi for _, c in pairs] + [c.lo for _, c in pairs])
        for (a, _), hi, lo in zip(pairs, new, new[len(pairs):]):
            c = Compact(hi, lo)
            if isinstance(a, LazyExact):
                a.compact = c
            p[id(a)] = (a, c)


def _arrays(tr) -> list:
    """Every value of trace ``tr`` (its four kinds)."""
    return [a for kind in TRACE_KINDS for a in getattr(tr, kind).values()]


def _spill_trace(file, tr) -> None:
    """The arrays of trace ``tr`` written to the spill file and read back from it."""
    keys = [(getattr(tr, kind), key) for kind in TRACE_KINDS for key in getattr(tr, kind)]
    for (part, key), a in zip(keys, file.put([part[key] for part, key in keys])):
        part[key] = a


def _compact_once(a, made, stream=None):
    """numerics.resolve.compact of ``a``, made once per array in ``made`` ({id: (array,
    Compact)}); ``stream``: the spill.Spill ``a`` may be stored in, told that the pages
    compact read (its finiteness test) may go."""
    if id(a) not in made:
        made[id(a)] = (a, compact(a))
        if stream is not None and a is not None:
            stream.done([a])
    return made[id(a)][1]


def _rounded(g, fmt, tr, want_grad, want_tan, pieces=None, only=None) -> list:
    """Per node, what it reads in ``tr`` rounded to nearest into fmt (sites.node_reads);
    from the compact copies ``pieces`` (sites.compacts_of) where they hold a value;
    ``only``: the nodes to read for."""
    rnd = rounder_of(fmt)
    return node_reads(g, tr, want_grad, want_tan, lambda r, v, kind: rnd(v, pieces),
                      lambda ref: rnd(tr.cotangents.get(ref), pieces), only)


def _local_exact(g, reads, fmt, prec, log=_quiet, only=None) -> tuple[list, list]:
    """(traces, their compact copies as exact_traces gives them) of the exact values of
    every node alone on its rounded reads (the local errors' reference), per sample, at
    ``prec`` bits: the precision the exact trace settled at, in double-double arithmetic
    where the trace's double-double sweep is the evidence (engine/reference.py, ``alone``);
    a node double-double cannot evaluate, or a sample, by mpmath; ``only``: the nodes to
    evaluate (GraphRule.alone)."""
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
                tr = fast.alone(r, pre=hook, fallback=slow, only=only)
            except Exception:         # noqa: BLE001 -- what double-double cannot hold
                tr = None
        if tr is None:
            tr = slow.alone(r, pre=hook, only=only)
        tr, copies = exact_numbers(tr)
        traces.append(tr)
        pieces.append(copies)
    return traces, pieces


def _chunks(g, samples, routes, limit=None) -> list:
    """The graph's nodes in consecutive runs (sets of node indices) whose local errors are
    measured together: each run's arguments and outputs, over the samples and routes, at
    most ``limit`` elements (LOCAL_ELEMENTS), or one node that alone exceeds it.  So the
    nodes alone hold what a run reads and computes, not what the whole graph does; a graph
    within the limit is one run."""
    limit = LOCAL_ELEMENTS if limit is None else limit
    out, size = [], 0
    for k, node in enumerate(g.nodes):
        op = node.op
        n = samples * len(routes) * sum(math.prod(p.shape) for p in op.inputs + op.outputs
                                        if p.scalar)
        if not out or size + n > limit:
            out.append(set())
            size = 0
        out[-1].add(k)
        size += n
    return out


def _node_label(g, k) -> tuple:
    """(node, module, op, attrs) of node k; the whole model's for k = -1."""
    if k < 0:
        return None, "", "model", {}
    node = g.nodes[k]
    names = [a.name for a in node.op.decl.attributes]
    attrs = {n: f[1] for n, f in zip(names, node.op.record()["fields"])}
    return g.node_names[k], node.module, node.op.name, attrs


def _rows(g, config, fmt, site, exact, traces, prec, moving=(), scaled=None, recipe=None,
          pieces=None, attribution=PROPAGATED) -> list:
    """The ``attribution`` row of ``site`` (none where no sample has an exact value there):
    ``traces`` (the emulated run, or the nodes alone) against ``exact`` (its exact traces,
    with their compact copies ``pieces``: exact_traces, _local_exact); ``scaled``: a Scaled;
    ``recipe``: a RecipeRun, whose product nodes' rows say what their operands took."""
    row = _row(g, config, fmt, site, attribution, traces, exact, prec, moving, scaled=scaled,
               pieces=pieces)
    if row is None:
        return []
    if recipe is not None:
        recipe.annotate(g, row, site, attribution, range(len(traces)))
    return [row]


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
    comp, ex = joined(comps), joined_exact(exacts)
    # The exact values' nearest binary64 numbers (NaN where NaN; the compact copies' where
    # the exact run kept them) and their raw mpfs, which the NaN tests, the tensor measures
    # and the ulps read.
    y, mpfs = tensor_measures.stand_ins(ex, *(joined(part) for part in zip(*stands)))
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
    tensor, cancelled = tensor_measures.measures(picked(comp, normed), picked(ex, normed),
                                                 fmt, scaled is None, _subset(y, mpfs, normed))
    kept = keep.copy()
    kept[normed] = ~cancelled
    exk = picked(ex, kept)
    ulp = measure_port(row, picked(comp, kept), exk, fmt, None,
                       stand=_subset(y, mpfs, kept, exk)) if scaled is None else \
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


def _subset(y, mpfs, mask, flat=None) -> tuple:
    """The stand-ins (tensor_measures.stand_ins) of the elements of ``mask``; ``flat``: the
    exact values of those elements, picked already."""
    return (y, mpfs) if mask.all() else (y[mask], mpfs.subset(mask, flat))


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
