"""Attribution that adds up (issue 35): each node's first-order share of the error of each of
the whole model's outputs and input (parameter) gradients, and the closure of the shares
against the measured error.

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

Gradients.  The emulated reverse sweep adds errors of its own: node k's pullback, on the
run's values and the run's cotangents of k's outputs, gives contributions that differ from
the exact pullback on those reads by epsilon_{k,i}; and where a value's contributions (and
its seed, for an output) are added, the run's sum differs from their exact sum by eta_r.
Telescoping over the forward nodes, then the pullbacks and sums in the sweep's order, the
measured error of an input's gradient is, to first order, the sum over the nodes of

- the forward error delta_k carried through the nodes after k and then the whole reverse
  sweep: the second derivative of the model along delta_k.  There is no forward-over-reverse
  map in the table, so it is the difference of two reverse sweeps under the reference
  backend, with node k's outputs x_k and x_k + 2**-STEP_BITS delta_k (the nodes after k
  evaluated again), times 2**STEP_BITS: a derivative by a finite difference whose
  second-order term is 2**-STEP_BITS of the first, taken 2 * STEP_BITS bits above the
  trace's precision so that the difference keeps more bits than the trace itself
  (GraphRule.taped, perturbed);
- epsilon_{k,i} carried back from argument i through the nodes before k (linear), and the
  eta_r of k's own outputs carried back through k's pullback and the nodes before it
  (GraphRule.reverse_from): a sum belongs to the node that makes the value (the sum is the
  cotangent its pullback reads), a graph input's sum to the first node that reads it (the
  last addition of the sweep), which adds it to that input's gradient as it is.

Each is taken at the exact values (the error the run's values make there is O(u^2)), so a
node's share of a gradient's error is one number per element, like its share of an output's.
On a chain that is linear in each rounding the shares add up to the measured error exactly
(tests/engine/test_attribution.py, against exact rationals).

Sizes (engine/rows.py): a share smaller than 2**-prec of its target (the trace's
precision: what the finite difference leaves of an exact 0) is 0; a ``share`` row has ``norm_rel`` = ||share_{o,k}||_2 / ||y_o||_2,
``norm_rel_max`` = max |share| / max |y_o| and ``bits`` = -log2(norm_rel), the tensor being
every element of every sample (as every model row's).

Closure of output o: ``closure`` = ||sum_k share_{o,k}||_2 / ||y_hat_o - y_o||_2 over the
samples, the 2-norm ratio of the summed first-order prediction to the measured propagated
error; ``closure_by_sample`` the same ratio per sample (null where the measured error is 0).
A ratio alone could be 1 with the prediction pointing elsewhere, so ``closure_misfit`` =
||sum_k share_{o,k} - (y_hat_o - y_o)||_2 / ||y_hat_o - y_o||_2 says how far the
prediction is from the measurement itself.  First order misses (|closure - 1| > 0.1) only
through the terms it leaves out: where the model is not linear in its rounding (a softmax
that saturates, a division by a small norm, a value whose error is not small against
itself) and where a rounding flips a branch: a max or a max pool that picks another element,
a relu on the other side of its kink.  A flipped branch sends a gradient to another element
(an error of the gradient's own size that no derivative predicts): the CNN of the tests
closes its forward output on 20 of 20 samples in bfloat16 but its convolution's gradients on
13 of 20 (README: "Where the error comes from").

Accuracy: the tangent sweep runs at the exact trace's precision on mpmath numbers; a share
errs by about 2**-prec of its size times the conditioning of the nodes after k, far below
the O(u^2) of the first-order model itself.  Norms are taken in binary64 on shares rounded
once to binary64.

Cost: per sample, node k's sweep linearizes the nodes of k's cone, so at most n(n-1)/2
node linearizations for n nodes; on the gradient route, per node a forward sweep of its cone
and two reverse sweeps.  ``POLICY_WORK`` and ``GRADIENT_POLICY_WORK`` bound the graphs on
which ``auto`` does it.
Scaled formats and recipes (their local errors hold a quantizer's storage, engine/model.py)
are not attributed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from roundoff_coverage import numerics
from roundoff_coverage.routes.errors import RouteError
from roundoff_coverage.routes.graph import INPUT, GraphRule, Ref

from . import rows as row_fields
from .samples import is_float_port

SHARE = "share"
# ``attribution`` option of a model run: ``share`` always, ``none`` never, ``auto`` where
# the work is small: a sample's sweeps cost about (nodes) x (elements of every node's
# outputs) element operations on mpmath numbers (each node's sweep runs over its cone),
# the forward route up to POLICY_WORK of them, the gradient route (a cone's forward sweep
# and two reverse sweeps per node, 2 * STEP_BITS bits higher) up to GRADIENT_POLICY_WORK.
# Measured: the tests' 68-node transformer (2.3e5) took 29 s a sample for both routes, a
# 58-node ViT (5e5) 37 s for the forward route alone.
CHOICES = ("auto", "share", "none")
POLICY_WORK = 2 ** 18
GRADIENT_POLICY_WORK = 2 ** 16
# |closure - 1| beyond this: first order does not explain the measured error.
CLOSURE_TOLERANCE = 0.1
# A forward error's first-order effect on the gradients: the reverse sweep again with the
# node's outputs moved by 2**-STEP_BITS of its error, the difference scaled back up (module
# docstring); taken 2 * STEP_BITS above the trace's precision, so that the difference, about
# 2**-STEP_BITS * u of the gradients, keeps more bits than the trace itself.
STEP_BITS = 40


def wanted(choice, graph, routes, special) -> tuple:
    """The routes a model run attributes (of forward and gradient): ``choice`` one of
    CHOICES; ``special``: a scaled format or a recipe (never attributed)."""
    if choice not in CHOICES:
        raise ValueError(f"attribution must be one of {', '.join(CHOICES)} (got {choice!r})")
    if special or "forward" not in routes or choice == "none":
        return ()
    work = work_of(graph)
    return tuple(r for r, most in (("forward", POLICY_WORK), ("gradient", GRADIENT_POLICY_WORK))
                 if r in routes and (choice == SHARE or work <= most))


def work_of(graph) -> int:
    """(nodes) x (elements of the nodes' value outputs): the size of a sample's sweeps."""
    size = sum(int(np.prod(p.shape)) for node in graph.nodes for p in node.op.outputs
               if p.kind == "value")
    return len(graph.nodes) * size


@dataclass(frozen=True)
class Target:
    """A whole-model quantity whose error is attributed: ``label`` (``output:<name>`` or
    ``input:<name>``, the ``output`` field of its share rows), its ``route`` and where its
    values are in a trace (``where``, ``ref``: as engine.sites.Site)."""

    label: str
    route: str
    where: str
    ref: Ref


def targets(g, routes) -> list:
    """The model's value outputs (forward) and, on the gradient route, the gradients of its
    value inputs."""
    out = [Target(f"output:{n}", "forward", "values", r)
           for r, p, n in zip(g.output_refs, g.outputs, g.output_names) if p.kind == "value"]
    if "gradient" in routes:
        out += [Target(f"input:{n}", "gradient", "cotangents", Ref(INPUT, i))
                for i, (n, p) in enumerate(zip(g.input_names, g.inputs)) if p.kind == "value"]
    return out


@dataclass
class Local:
    """One sample's local errors of the emulated run (module docstring): ``values`` {Ref:
    delta} of node outputs, ``contributions`` {(node, argument): epsilon} of pullbacks,
    ``sums`` {Ref: eta} of the roundings that joined a value's contributions."""

    values: dict
    contributions: dict
    sums: dict


def local_errors(g, emulated, prec, cotangents=None) -> list:
    """Per sample the Local errors of every node of the emulated run against the exact node
    on the same reads (the run's values of its arguments and, with ``cotangents`` -- the
    run's cotangents of the outputs per sample --, the run's cotangents of its outputs), at
    ``prec`` bits (reference numbers).  Module docstring: why these reads and not the
    ``local`` rows' rounded exact ones."""
    rule = GraphRule(g, numerics.reference(prec))
    ref = rule.xp

    def minus(c, e):
        return ref.subtract(ref.asarray(np.asarray(c, dtype=np.float64)),
                            np.asarray(e, dtype=object))
    out = []
    for s, em in enumerate(emulated):
        reads = []
        for k, node in enumerate(g.nodes):
            flags = tuple(cotangents is not None and em.contributions.get((k, i)) is not None
                          for i in range(len(node.args)))
            cts = [em.cotangents.get(Ref(k, j)) for j in range(len(node.op.outputs))] \
                if any(flags) else None
            reads.append(([em.values[r] for r in node.args], flags, cts, None))
        ex = rule.alone(reads)
        deltas = {}
        for k, node in enumerate(g.nodes):
            for j, p in enumerate(node.op.outputs):
                r = Ref(k, j)
                c, e = em.values.get(r), ex.values.get(r)
                if p.kind == "value" and p.differentiable and c is not None and e is not None:
                    deltas[r] = minus(c, e)
        eps = {key: minus(c, ex.contributions[key]) for key, c in em.contributions.items()
               if c is not None and key in ex.contributions}
        out.append(Local(deltas, eps, {} if cotangents is None else
                         _sums(g, em, cotangents[s], ref)))
    return out


def _sums(g, em, seeds, ref) -> dict:
    """{Ref: eta}: the run's cotangent of each value minus the exact sum of what was added
    into it (its contributions, and its seed where it is an output)."""
    held = {}
    for r, c, p in zip(g.output_refs, seeds, g.outputs):
        if c is not None and p.differentiable and r in em.cotangents:
            held[r] = _plus(ref, held.get(r), np.asarray(c, dtype=np.float64))
    for (k, i), c in em.contributions.items():
        if c is not None:
            r = g.nodes[k].args[i]
            held[r] = _plus(ref, held.get(r), np.asarray(c, dtype=np.float64))
    return {r: ref.subtract(ref.asarray(np.asarray(em.cotangents[r], dtype=np.float64)), h)
            for r, h in held.items() if r in em.cotangents}


def _plus(ref, a, b):
    b = ref.asarray(b) if isinstance(b, np.ndarray) and b.dtype != object else b
    return b if a is None else ref.add(a, b)


def sum_owner(g, local) -> dict:
    """{Ref: node} that a value's summation error belongs to: the node that makes the value
    (the sum is its output's cotangent, which its pullback reads), for a graph input the
    first node that reads it (the last addition of the reverse sweep)."""
    first = {}
    for k, node in enumerate(g.nodes):
        for r in node.args:
            first.setdefault(r, k)
    return {r: (r.node if r.node != INPUT else first.get(r)) for s in local for r in s.sums}


def shares(g, exact, local, prec, wanted_targets) -> list:
    """Per sample {(node k, target label): share as binary64} of every node with a local
    error and every forward target the node reaches (module docstring)."""
    rule = GraphRule(g, numerics.reference(prec))
    outs = [t for t in wanted_targets if t.where == "values"]
    result = []
    for tr, loc in zip(exact, local):
        per = {}
        for k in range(len(g.nodes)):
            start = {r: d for r, d in loc.values.items() if r.node == k}
            if not start:
                continue
            tans = rule.sweep_from(tr.values, k, start)
            for t in outs:
                if t.ref in tans:
                    per[(k, t.label)] = rule.xp.to_float64(tans[t.ref])
        result.append(per)
    return result


def gradient_shares(g, xs, cotangents, local, prec, wanted_targets) -> list:
    """Per sample {(node k, target label): share as binary64} of the input gradients: node
    k's forward error carried through the rest of the forward sweep and the whole reverse
    sweep, plus its pullback's error and the summation error it owns carried through the
    reverse sweep from k (module docstring)."""
    grads = [t for t in wanted_targets if t.where == "cotangents"]
    if not grads:
        return [{} for _ in xs]
    rule = GraphRule(g, numerics.reference(prec + 2 * STEP_BITS))
    ref = rule.xp
    step, unstep = ref.asarray(np.float64(2.0 ** -STEP_BITS)), \
        ref.asarray(np.float64(2.0 ** STEP_BITS))
    owner = sum_owner(g, local)
    result = []
    for x, seeds, loc in zip(xs, cotangents, local):
        tape = rule.taped([ref.asarray(a) if is_float_port(p) else a
                           for a, p in zip(x, g.inputs)])
        base = rule.reverse(tape, seeds)
        per = {}
        for k, node in enumerate(g.nodes):
            total = {}

            def add(r, v):
                total[r] = _plus(ref, total.get(r), v)
            back = {}
            for (kk, i), e in loc.contributions.items():
                if kk == k:
                    back[node.args[i]] = _plus(ref, back.get(node.args[i]), e)
            for r, e in loc.sums.items():
                if owner.get(r) == k:
                    if r.node == INPUT:
                        add(r, e)              # joins the input's gradient as it is
                    else:
                        back[r] = _plus(ref, back.get(r), e)
            if back:
                reached = rule.reverse_from(tape, k, back)
                for t in grads:
                    if t.ref in reached:
                        add(t.ref, reached[t.ref])
            moved = {r: ref.add(tape.values[r], ref.multiply(d, step))
                     for r, d in loc.values.items() if r.node == k}
            if moved:
                try:
                    again = rule.perturbed(tape, k, moved, seeds)
                except RouteError:
                    again = None               # a check the moved values break: no share
                for t in grads if again is not None else ():
                    if t.ref in again and t.ref in base:
                        add(t.ref, ref.multiply(ref.subtract(again[t.ref], base[t.ref]),
                                                unstep))
            for t in grads:
                if t.ref in total:
                    per[(k, t.label)] = ref.to_float64(total[t.ref])
        result.append(per)
    return result


def _norm(v) -> float:
    v = np.asarray(v, dtype=np.float64).reshape(-1)
    s = float(np.max(np.abs(v))) if v.size else 0.0
    return 0.0 if s == 0 or not np.isfinite(s) else s * float(np.linalg.norm(v / s))


def _ratio(a, b):
    return None if b == 0 else a / b


def _at(trace, target):
    return getattr(trace, target.where).get(target.ref)


def share_rows(g, site_label, exact, per_sample, prec, wanted_targets) -> list:
    """The ``share`` rows of every (node, target) pair: their sizes against the target's
    exact tensor over the samples (module docstring); ``site_label(k, target)``: the row's
    labels."""
    ref = numerics.reference(prec)
    out = []
    for t in wanted_targets:
        ys = [ref.to_float64(np.asarray(_at(tr, t), dtype=object)).reshape(-1)
              if _at(tr, t) is not None else np.zeros(0) for tr in exact]
        y = np.concatenate(ys) if ys else np.zeros(0)
        ny, my = _norm(y), float(np.max(np.abs(y))) if y.size else 0.0
        for k in range(len(g.nodes)):
            parts = [per.get((k, t.label)) for per in per_sample]
            if all(part is None for part in parts):
                continue
            d = np.concatenate([np.zeros(y_.size) if part is None else part.reshape(-1)
                                for part, y_ in zip(parts, ys)])
            rel = _ratio(_norm(d), ny)
            if rel is not None and rel < 2.0 ** -prec:
                d, rel = np.zeros_like(d), 0.0   # below the reference's resolution: none
            row = site_label(k, t) | {
                "output": t.label, "samples": int(d.size), "ref_prec": prec, "norm_rel": rel,
                "norm_rel_max": _ratio(float(np.max(np.abs(d))) if d.size else 0.0, my),
                "bits": None if rel is None else
                (float("inf") if rel == 0 else -float(np.log2(rel)))}
            out.append(row_fields.empty(**row))
    return out


def closure(exact, emulated, per_sample, prec, target) -> dict:
    """``closure``, ``closure_misfit`` and ``closure_by_sample`` of the whole-model
    quantity ``target`` and a reason where first order does not explain the measured error
    (module docstring)."""
    ref = numerics.reference(prec)
    predicted, measured, by_sample = [], [], []
    for tr, em, per in zip(exact, emulated, per_sample):
        y, c = _at(tr, target), _at(em, target)
        if y is None or c is None:
            continue
        m = ref.to_float64(ref.subtract(ref.asarray(np.asarray(c, dtype=np.float64)),
                                        np.asarray(y, dtype=object))).reshape(-1)
        total = np.zeros(m.size)
        for (k, label), part in per.items():
            if label == target.label:
                total = total + part.reshape(-1)
        predicted.append(total)
        measured.append(m)
        by_sample.append(_ratio(_norm(total), _norm(m)))
    if not measured:
        return {}
    p, m = np.concatenate(predicted), np.concatenate(measured)
    c = _ratio(_norm(p), _norm(m))
    fields = {"closure": c, "closure_misfit": _ratio(_norm(p - m), _norm(m)),
              "closure_by_sample": by_sample}
    if c is not None and abs(c - 1) > CLOSURE_TOLERANCE:
        counted = [b for b in by_sample if b is not None]
        within = sum(abs(b - 1) <= CLOSURE_TOLERANCE for b in counted)
        fields["reason"] = (
            f"the nodes' first-order shares add up to {c:.3g} times the measured error "
            f"(|closure - 1| > {CLOSURE_TOLERANCE}; within it on {within} of {len(counted)} "
            f"samples): the model is not linear in its rounding here -- a rounding that "
            f"flips a branch (which element a max or a pool picks, the side of a relu's "
            f"kink) or a value whose error is not small against itself "
            f"(engine/attribution.py)")
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
