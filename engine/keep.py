"""A model run's summary (engine/model.py measure): which nodes add the most error, and
what keeping one of them in binary32 would change.

``summarize``: the nodes whose local error is largest per route, by
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
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from roundoff_coverage import formats, numerics
from roundoff_coverage.routes.graph import GraphRule

from . import assignment as assigned
from . import spill
from . import storage
from . import tensor_measures
from .lazy_exact import joined, picked
from .samples import is_float_port
from .sites import LOCAL, nearest64, sites, value_at, whole_name

KEEP_FORMAT = "binary32"           # the precision a user may keep one node in
TOP = 10                           # nodes listed per route in the summary
KEEP_ALL = 48                      # keep experiments: all of them up to this many
KEEP_NODES = 16                    # ... else this many nodes and the modules holding them
# What the summary lists of each of the nodes adding the most error (rows' fields).
LOCAL_FIELDS = ("node", "module", "op", "port", "norm_rel", "bits", "sqnr_db", "scale_ulp",
                "max_ulp", "mean_ulp", "cancelled", "cancelled_error")


def summarize(g, config, fmt, xs, dirs, exact, emulated, measured, routes, emu,
              scaled=None, recipe=None, log=None, pieces=None, release=None,
              stream=None) -> dict:
    """The nodes with the largest local errors per route, and the effect of keeping each node
    (and each module) in binary32 on the whole model's errors; for a scaled format
    (``scaled``), what quantizing the inputs did, and keeping a node means leaving its
    outputs unquantized; under a recipe (``recipe``), keeping a product means leaving its
    operands unquantized too.  ``pieces``: the exact traces' compact copies
    (exact_traces); ``log``: as engine/model.py measure's, or None; ``release``: called
    after each keep experiment (engine/spill.py Spill.release), or None; ``stream``: the
    run's spill.Spill where its sweeps were stored as they were made (the keep experiments'
    tapes are stored there, each experiment's values in a file of its own), or None."""
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
                                     groups, scaled, recipe, log, pieces, release, stream)
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
    """{route: (largest norm_rel, its tensor, (max, sum, count) of the ulp errors)} of the
    whole model's values in
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
            other = ~(np.isnan(c) & np.isnan(e))
            ulp = np.abs(c - e) / formats.ulp(e, fmt) if scaled is None else \
                np.abs(scaled.ulps64(c, e, shape, site.route))
            # No copies where nothing is NaN in both and there is one sample: the whole
            # model's tensors here can hold tens of millions of elements.
            comps.append((picked(c, other), picked(e, other), picked(ulp, other)))
        if not comps:
            continue
        c, e, ulp = (joined(parts) for parts in zip(*comps))
        measured, cancelled = tensor_measures.measures(c, e, fmt, scaled is None)
        del c, e, comps
        # The max, sum and count of the route's ulps, not the ulps themselves: a GPT-2's
        # parameter gradients are 124 M of them.
        kept = ulp[~cancelled & np.isfinite(ulp)]
        most, total, count = acc.get(site.route, (0.0, 0.0, 0))
        if kept.size:
            acc[site.route] = (max(most, float(np.max(kept))), total + math.fsum(
                np.add.reduceat(kept, np.arange(0, kept.size, 1 << 16))), count + kept.size)
        else:
            acc[site.route] = (most, total, count)
        del ulp, kept, cancelled              # before the next site's arrays are made
        if measured["norm_rel"] is not None and \
                measured["norm_rel"] >= rel.get(site.route, (-1.0, None))[0]:
            rel[site.route] = (measured["norm_rel"], whole_name(site))
    return {r: rel.get(r, (None, None)) + (v,) for r, v in acc.items()}


def _keep(g, config, xs, dirs, exact, emulated, routes, emu, groups, scaled=None,
          recipe=None, log=None, pieces=None, release=None, stream=None) -> list:
    """The keep-in-binary32 entries (module docstring) of the nodes and modules ``groups``
    (_keep_groups), per route, the largest reduction of the route's normwise error first;
    ``stream`` as in ``summarize``."""
    fmt = emu.fmt
    whole = _whole(g, routes)
    if not whole:
        return []
    ref = numerics.reference(64)
    exact64 = [{s: nearest64(value_at(tr, s), p, ref) for s in whole
                if value_at(tr, s) is not None}
               for tr, p in zip(exact, pieces or [None] * len(exact))]
    before = _errors(g, fmt, emulated, exact64, whole, scaled)
    if release is not None:
        release()                          # the pages of the traces read so far
    wide = numerics.emulated(KEEP_FORMAT, config.mode, config.policy, seed=emu.seed)
    want_grad = "gradient" in routes
    out = []
    store, rule = scaled or recipe or storage.ELEMENT, GraphRule(g, emu)
    # An element format rounding deterministically: each experiment evaluates again only
    # the kept nodes and those reading what they changed (GraphRule.rerun), from one tape
    # per sample; its results are those of a whole run.
    # Where the run's sweeps were stored as they were made, so are the tapes, and each
    # experiment's values go to a file of its own, let go (and its disk with it) once the
    # experiment is measured.
    tapes = None
    if store is storage.ELEMENT and config.mode != "stochastic":
        needs = tuple(want_grad and p.differentiable for p in g.inputs)
        tapes = [rule.taped([emu.asarray(a) if is_float_port(p) else a
                             for a, p in zip(x, g.inputs)], needs, stream) for x in xs]
        if release is not None:
            release()
    for i, (label, module, ks) in enumerate(groups):
        if log is not None:
            log("keep in binary32", float(i), float(len(groups)),
                f"{i + 1}/{len(groups)} {label}")
        try:
            traces, own = [], None if stream is None else spill.Spill()
            for s, (x, (c, _)) in enumerate(zip(xs, dirs)):
                if tapes is not None:
                    traces.append(rule.rerun(tapes[s], dict.fromkeys(ks, wide),
                                             c if want_grad else None, every=False,
                                             store=own))
                    continue
                override, pre, post = store.hooks(g, "emulated", s, ks, wide, record=False)
                traces.append(rule.trace([emu.asarray(a) if is_float_port(p) else a
                                          for a, p in zip(x, g.inputs)],
                                         c if want_grad else None, None, override,
                                         post=post, pre=pre, store=own))
        except Exception:                                   # noqa: BLE001
            continue
        after = _errors(g, fmt, traces, exact64, whole, scaled)
        del traces, own                    # this experiment's values, and their file
        if release is not None:
            release()
        for route, errors in after.items():
            out.append({"keep": label, "module": module, "nodes": len(ks), "route": route}
                       | _keep_fields(before.get(route, (None, None, (0.0, 0.0, 0))), errors))
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
        most, total, count = ulp
        out[f"max_ulp_{when}"] = most if count else 0.0
        out[f"mean_ulp_{when}"] = total / count if count else 0.0
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
