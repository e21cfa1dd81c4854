"""Attribution that adds up (issue 35): each node's first-order share of the error of each of
the whole model's outputs, and the closure of the shares against the measured error.

Per sample s, node k's local error in the emulated run is delta_k = (the output node k
computed in that run) - (node k exact on the same reads: the run's values of its
arguments).  Telescoping over the nodes, with F_k the exact rest of the graph after node k,
the measured error is exactly sum_k [F_k(x_k + delta_k) - F_k(x_k)] (x_k the exact node on
the run's reads), so to first order in the roundings (Wilkinson's forward analysis;
Higham 2002, ch. 3)

    y_hat_o - y_o  =  sum_k  J_{o,k} delta_k  +  O(u^2),

where J_{o,k} is the Jacobian of output o with respect to node k's outputs, the nodes after
k taken exactly (the graph's forward-mode map at the exact values).  ``share_{o,k}`` =
J_{o,k} delta_k is node k's share of output o's error: one tangent sweep of the graph under
the reference backend at the exact trace's values, starting at node k with delta_k as the
tangent of its outputs (routes.graph's GraphRule.sweep_from).  The sweep visits
only the nodes after k that read a tangent (the cone of k); the others carry no tangent.

Why not the ``local`` rows' error (the node alone on the exact reads rounded into the
format): where the emulated run reads values more than half an ulp from the exact ones, a
node rounds other numbers than the rounded exact reads, and its rounding errors there are
other numbers of the same size.  Carried with those, the shares add up in size only: on the
README's MLP test (bfloat16, 20 samples) their sum is 0.95 of the measured error's norm
but ||sum - measured|| / ||measured|| = 0.97, and only 10 of 20 samples close within 0.1.
With the run's own local errors the same model closes to 0.9999 (misfit 0.003), every
sample within 0.001.  The two local errors have the same size; the ``local`` rows keep
theirs (a reproducible error of the node on exact data, the ranking's measure).

Sizes (engine/rows.py): a ``share`` row has ``norm_rel`` = ||share_{o,k}||_2 / ||y_o||_2,
``norm_rel_max`` = max |share| / max |y_o| and ``bits`` = -log2(norm_rel), the tensor being
every element of every sample (as every model row's).

Closure of output o: ``closure`` = ||sum_k share_{o,k}||_2 / ||y_hat_o - y_o||_2 over the
samples, the 2-norm ratio of the summed first-order prediction to the measured propagated
error; ``closure_by_sample`` the same ratio per sample (null where the measured error is 0).
A ratio alone could be 1 with the prediction pointing elsewhere, so ``closure_misfit`` =
||sum_k share_{o,k} - (y_hat_o - y_o)||_2 / ||y_hat_o - y_o||_2 says how far the
prediction is from the measurement itself.  First order misses (|closure - 1| > 0.1) only
through the O(u^2) terms: where the model is nonlinear in its rounding (a softmax that
saturates, a division by a small norm, a value whose error is not small against itself).

Accuracy: the tangent sweep runs at the exact trace's precision on mpmath numbers; a share
errs by about 2**-prec of its size times the conditioning of the nodes after k, far below
the O(u^2) of the first-order model itself.  Norms are taken in binary64 on shares rounded
once to binary64.

Cost: per sample, node k's sweep linearizes the nodes of k's cone, so at most n(n-1)/2
node linearizations for n nodes; ``POLICY_NODES`` bounds the graphs on which ``auto`` does it.
Scaled formats and recipes (their local errors hold a quantizer's storage, engine/model.py)
are not attributed.
"""

from __future__ import annotations

import numpy as np

from roundoff_coverage import numerics
from roundoff_coverage.routes.graph import GraphRule, Ref

from . import rows as row_fields

SHARE = "share"
# ``attribution`` option of a model run: ``share`` always, ``none`` never, ``auto`` on the
# forward route of graphs of at most POLICY_NODES nodes (n(n-1)/2 linearizations per sample).
CHOICES = ("auto", "share", "none")
POLICY_NODES = 64
# |closure - 1| beyond this: first order does not explain the measured error.
CLOSURE_TOLERANCE = 0.1


def wanted(choice, graph, routes, special) -> bool:
    """Whether a model run attributes: ``choice`` one of CHOICES; ``special``: a scaled
    format or a recipe (never attributed)."""
    if choice not in CHOICES:
        raise ValueError(f"attribution must be one of {', '.join(CHOICES)} (got {choice!r})")
    if special or "forward" not in routes or choice == "none":
        return False
    return choice == SHARE or len(graph.nodes) <= POLICY_NODES


def local_errors(g, emulated, prec) -> list:
    """Per sample {Ref: delta} of every node output of the emulated run: the output the node
    computed in that run minus the exact node on the same reads (the emulated run's values
    of its arguments), at ``prec`` bits (reference numbers).  Module docstring: why these
    reads and not the ``local`` rows' rounded exact ones."""
    rule = GraphRule(g, numerics.reference(prec))
    ref = rule.xp
    out = []
    for em in emulated:
        reads = [([em.values[r] for r in node.args], (False,) * len(node.args), None, None)
                 for node in g.nodes]
        ex = rule.alone(reads)
        deltas = {}
        for k, node in enumerate(g.nodes):
            for j, p in enumerate(node.op.outputs):
                r = Ref(k, j)
                c, e = em.values.get(r), ex.values.get(r)
                if p.kind != "value" or not p.differentiable or c is None or e is None:
                    continue
                deltas[r] = ref.subtract(ref.asarray(np.asarray(c, dtype=np.float64)),
                                         np.asarray(e, dtype=object))
        out.append(deltas)
    return out


def shares(g, exact, deltas, prec) -> list:
    """Per sample {(node k, output index o): share_{o,k} as binary64} of every node with a
    local error and every value output the node reaches (module docstring)."""
    rule = GraphRule(g, numerics.reference(prec))
    outs = [(o, r) for o, (r, p) in enumerate(zip(g.output_refs, g.outputs))
            if p.kind == "value"]
    result = []
    for tr, delta in zip(exact, deltas):
        per = {}
        for k in range(len(g.nodes)):
            start = {r: d for r, d in delta.items() if r.node == k}
            if not start:
                continue
            tans = rule.sweep_from(tr.values, k, start)
            for o, r in outs:
                if r in tans:
                    per[(k, o)] = rule.xp.to_float64(tans[r])
        result.append(per)
    return result


def _norm(v) -> float:
    v = np.asarray(v, dtype=np.float64).reshape(-1)
    s = float(np.max(np.abs(v))) if v.size else 0.0
    return 0.0 if s == 0 or not np.isfinite(s) else s * float(np.linalg.norm(v / s))


def _ratio(a, b):
    return None if b == 0 else a / b


def share_rows(g, site_label, exact, per_sample, prec) -> list:
    """The ``share`` rows of every (node, output) pair: their sizes against the output's
    exact tensor over the samples (module docstring)."""
    ref = numerics.reference(prec)
    out = []
    for o, (r, p) in enumerate(zip(g.output_refs, g.outputs)):
        if p.kind != "value":
            continue
        ys = [ref.to_float64(tr.values[r]).reshape(-1) for tr in exact]
        y = np.concatenate(ys) if ys else np.zeros(0)
        ny, my = _norm(y), float(np.max(np.abs(y))) if y.size else 0.0
        for k in range(len(g.nodes)):
            parts = [per.get((k, o)) for per in per_sample]
            if all(part is None for part in parts):
                continue
            d = np.concatenate([np.zeros(y_.size) if part is None else part.reshape(-1)
                                for part, y_ in zip(parts, ys)])
            rel = _ratio(_norm(d), ny)
            row = site_label(k) | {
                "output": f"output:{g.output_names[o]}", "samples": int(d.size),
                "ref_prec": prec, "norm_rel": rel,
                "norm_rel_max": _ratio(float(np.max(np.abs(d))) if d.size else 0.0, my),
                "bits": None if rel is None else
                (float("inf") if rel == 0 else -float(np.log2(rel)))}
            out.append(row_fields.empty(**row))
    return out


def closure(g, exact, emulated, per_sample, prec, output) -> dict:
    """``closure``, ``closure_misfit`` and ``closure_by_sample`` of whole-model output
    ``output`` (its index) and a reason where first order does not explain the measured
    error (module docstring)."""
    ref = numerics.reference(prec)
    r = g.output_refs[output]
    predicted, measured, by_sample = [], [], []
    for tr, em, per in zip(exact, emulated, per_sample):
        y = np.asarray(tr.values[r], dtype=object)
        m = ref.to_float64(ref.subtract(ref.asarray(np.asarray(em.values[r],
                                                               dtype=np.float64)), y))
        m = m.reshape(-1)
        total = np.zeros(m.size)
        for (k, o), part in per.items():
            if o == output:
                total = total + part.reshape(-1)
        predicted.append(total)
        measured.append(m)
        by_sample.append(_ratio(_norm(total), _norm(m)))
    p, m = np.concatenate(predicted), np.concatenate(measured)
    c = _ratio(_norm(p), _norm(m))
    fields = {"closure": c, "closure_misfit": _ratio(_norm(p - m), _norm(m)),
              "closure_by_sample": by_sample}
    if c is not None and abs(c - 1) > CLOSURE_TOLERANCE:
        fields["reason"] = (f"the nodes' first-order shares add up to {c:.3g} times the "
                            f"measured error (|closure - 1| > {CLOSURE_TOLERANCE}): the model "
                            f"is nonlinear in its rounding here (engine/attribution.py)")
    return fields


def ranking(rows) -> dict:
    """{output: the share rows of that output, largest norm_rel first} (the summary's
    ``largest_share``: node, module, op, port, norm_rel, bits)."""
    out = {}
    for row in rows:
        if row["attribution"] == SHARE and row["norm_rel"] is not None:
            out.setdefault(row["output"], []).append(row)
    return {o: [{k: r[k] for k in ("node", "module", "op", "port", "norm_rel", "bits")}
                for r in sorted(rs, key=lambda r: (-r["norm_rel"], r["node_index"]))]
            for o, rs in out.items()}
