"""The precision advisor (issue 39): which units of a captured graph -- its modules, or its
nodes -- to keep in a higher precision so that the whole model's outputs and gradients meet
an error budget against exact values, at the least cost (engine/cost.py).

An **assignment** gives every unit a candidate format; how a model computes under it is
engine/assignment.py's (autocast: a unit in F reads its arguments rounded into F and
computes in F).  The exact run starts from the model's binary32 values.  Candidates are
element formats at most as precise as binary32 and recipes on products
(``scaled_recipe@mxfp8_e4m3``: the unit's products on quantized operands, the rest in
bfloat16).

The **budget** (``parse_budget``): a largest normwise relative error ||y_hat - y||_2 /
||y||_2 (engine/tensor_measures.py's ``norm_rel``; or an SQNR in dB, 20 log10 of its
inverse) for every output (``out``), every input and parameter gradient (``grad``), or one
of them by name (``out[logits]``, ``grad[fc.weight]``), each tensor joined over the samples.

The **search** measures before it predicts: the exact run once on the samples; the
emulated run of every unit alone at each lower candidate (the rest in the highest): how much
each unit grows each budgeted tensor's squared error (``singles``).  Taking the errors of
different units as independent (first order: their squared norms add), a greedy descent
from everything in the highest candidate lowers the unit that saves the most cost per share
of the budget it uses while the predicted errors stay within the budget times ``margin``
(MARGIN: room for the samples the search has not seen).  The chosen assignment is then
**confirmed**: measured as a whole against exact values.  Where it misses (errors that
compound or correlate), the descent is repeated within a budget scaled down by the miss, up
to ROUNDS times; everything in the highest candidate, measured first, is the fallback.  A
confirmed assignment is then **refined**, measured: each unit still above the cheapest
candidate is tried one step cheaper (the largest savings first, at most REFINE runs), kept
where the errors stay within the budget times the margin.  A hand rule (below) that does so
at a lower cost replaces the answer.  ``met``: the answer's errors on the samples are within
the budget (the margin aside).  The answer is **validated** on held-back samples: draws
around the first sample with another seed, their own exact run.

Beside the answer, the two rules users apply by hand, measured the same way: the first and
the last product (the first and last layers) in the highest candidate, the rest in the
lowest; every normalization and softmax in the highest, the rest in the lowest.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from roundoff_coverage import formats, numerics
from roundoff_coverage.routes.graph import GraphRule

from . import cost as costs
from .results import ADVICE_SCHEMA
from .assignment import (BASE, TOP_LEVEL, UNIT_KINDS, AssignmentError, RecipeCandidate,
                         by_node, candidate, hooks, units_of)
from .model import exact_traces
from .samples import ModelError, prepared, sample_inputs
from .sites import nearest64, sites, value_at, whole_name

ROUNDS = 6                          # confirmation rounds before falling back
REFINE = 24                         # measured one-unit lowerings after the confirmation
MARGIN = 0.9                        # the share of the budget the search fills on the samples
HELD_BACK_SEED = 0x686C64           # the held-back draws' seed offset ("hld")
NORMALIZING = ("layerNorm", "batchNorm", "batchNormRunning", "softmax", "logSoftmax",
               "maskedSoftmax")
_LIMIT = re.compile(r"^(out|grad)(?:\[([^\]]+)\])?:(.+)$")


class AdviseError(ValueError):
    """Bad input to the advisor (one-line message)."""


# ----- the budget --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Limit:
    """One item of a budget: ``kind`` ``out`` (outputs) or ``grad`` (input and parameter
    gradients), ``name`` one tensor of that kind or None for all, ``rel`` the largest
    normwise relative error allowed."""

    kind: str
    name: str | None
    rel: float

    @property
    def text(self) -> str:
        return f"{self.kind}{f'[{self.name}]' if self.name else ''}:{self.rel:.3g}"


def parse_budget(text: str) -> tuple[Limit, ...]:
    """The Limits of ``--budget`` (``out:1e-2,grad:5e-2``, ``out:40dB``,
    ``grad[fc.weight]:0.1``); AdviseError (one line) on anything else."""
    out = []
    for item in (t.strip() for t in (text or "").split(",")):
        if not item:
            continue
        m = _LIMIT.match(item)
        if not m:
            raise AdviseError(f"--budget: {item!r} is not KIND:VALUE (KIND out or grad, "
                              f"optionally one tensor as out[NAME] or grad[NAME]; VALUE a "
                              f"relative error such as 1e-2 or an SQNR such as 40dB)")
        kind, name, value = m.group(1), m.group(2), m.group(3).strip()
        try:
            if value.lower().endswith("db"):
                rel = 10.0 ** (-float(value[:-2]) / 20.0)
            else:
                rel = float(value)
        except (ValueError, OverflowError):
            rel = float("nan")
        if not (math.isfinite(rel) and rel > 0):
            raise AdviseError(f"--budget: {item!r}: the value must be a positive relative "
                              f"error (1e-2) or an SQNR in dB (40dB)")
        if any(x.kind == kind and x.name == name for x in out):
            raise AdviseError(f"--budget: {kind}{f'[{name}]' if name else ''} is given twice")
        out.append(Limit(kind, name, rel))
    if not out:
        raise AdviseError("--budget: empty (give e.g. out:1e-2,grad:5e-2)")
    return tuple(out)


def _limits(budget, tensors) -> dict:
    """{tensor label: its allowed relative error} (``tensors``: output:NAME / input:NAME);
    a named limit replaces its kind's."""
    out = {}
    for t in tensors:
        kind, name = ("out" if t.startswith("output:") else "grad"), t.split(":", 1)[1]
        own = [x for x in budget if x.kind == kind and x.name == name]
        every = [x for x in budget if x.kind == kind and x.name is None]
        if own or every:
            out[t] = (own or every)[0].rel
    return out


# ----- units and candidates ----------------------------------------------------------------------

def check_candidates(names, known=None) -> list:
    """The candidate formats of ``names``, cheapest first (narrowest, then least precise);
    ``known``: a --formats-file's formats by name; AdviseError for one the advisor cannot
    assign."""
    out = []
    for name in names:
        try:
            out.append(candidate(name, known))        # FormatError: an unknown name
        except AssignmentError as exc:
            raise AdviseError(f"candidate {exc}") from None
    if len({f.label for f in out}) != len(out):
        raise AdviseError("--candidates: a format is named twice")
    if len(out) < 2:
        raise AdviseError("--candidates: give at least two formats (e.g. "
                          "binary32,bfloat16)")
    return sorted(out, key=lambda f: (f.bits, f.precision, f.emax))


# ----- measuring an assignment -------------------------------------------------------------------

class Errors:
    """The whole model's errors under assignments on one set of samples: the exact run once
    (engine/model.py's exact_traces), then an emulated run per assignment."""

    def __init__(self, graph, samples, seed, mode, policy, want_grad, log):
        base = formats.get(BASE)
        g, self.xs, self.dirs = prepared(graph, base, samples, seed)
        self.g = g
        self.want_grad, self.mode, self.policy, self.seed = want_grad, mode, policy, seed
        exact, _, _, pieces = exact_traces(g, base, self.xs, self.dirs, want_grad, False,
                                           *((log,) if log else ()))
        routes = ("forward", "gradient") if want_grad else ("forward",)
        self.whole = [s for s in sites(g, routes) if s.node < 0]
        ref = numerics.reference(64)
        self.exact = {}
        for site in self.whole:
            parts = [value_at(tr, site) for tr in exact]
            if all(p is not None for p in parts):
                self.exact[whole_name(site)] = np.concatenate(
                    [nearest64(p, c, ref) for p, c in zip(parts, pieces)])
        self.base = numerics.emulated(base, mode, policy, seed=seed)
        self._backends = {}
        self.runs = 0

    @property
    def tensors(self) -> list:
        return list(self.exact)

    def __call__(self, by_node: dict) -> dict:
        """{tensor: normwise relative error} with node k computing in ``by_node[k]`` (a
        format; binary32 where absent)."""
        g = self.g
        override, pre, post = hooks(g, by_node, self.mode, self.policy, self.seed,
                                    self._backends)
        rule = GraphRule(g, self.base)
        got = {t: [] for t in self.exact}
        for x, (c, _) in zip(self.xs, self.dirs):
            tr = rule.trace([self.base.asarray(a) if p.scalar else a
                             for a, p in zip(x, g.inputs)],
                            c if self.want_grad else None, None, override, post=post, pre=pre)
            for site in self.whole:
                name = whole_name(site)
                if name in got:
                    got[name].append(np.asarray(value_at(tr, site),
                                                dtype=np.float64).reshape(-1))
        self.runs += 1
        return {t: norm_rel(np.concatenate(v), self.exact[t]) for t, v in got.items()}


def norm_rel(c, e) -> float:
    """||c - e||_2 / ||e||_2 of binary64 arrays (elements NaN in both, or the same infinity
    in both -- an attention mask's fill -- left out; inf where the difference is not
    finite; 0 where both are 0, inf where only e is): the tensor measure of
    engine/tensor_measures.py on the binary64 roundings of the exact values (2**-53
    relative: far below any budget)."""
    both = (np.isnan(c) & np.isnan(e)) | (np.isinf(e) & (c == e))
    c, e = c[~both], e[~both]
    d = c - e
    if not np.all(np.isfinite(d)):
        return float("inf")
    s = float(np.max(np.abs(e))) if e.size else 0.0
    if s == 0.0:
        return 0.0 if not np.any(d) else float("inf")
    return float(np.linalg.norm(d / s) / np.linalg.norm(e / s))


# ----- the search --------------------------------------------------------------------------------

@dataclass
class Advice:
    """What ``advise`` found (``document`` writes it as JSON data)."""

    units: list
    candidates: list
    limits: dict
    assignment: dict                        # unit name -> format label
    confirmed: dict                         # tensor -> error on the samples
    held_back: dict                         # tensor -> error on the held-back samples
    costs: dict                             # assignment, all_highest, all_lowest
    unit_costs: dict                        # unit name -> {format label: seconds}
    rules: list = field(default_factory=list)
    front: list = field(default_factory=list)
    alone: dict = field(default_factory=dict)   # unit -> {format: usage, lowered alone}
    met: bool = False
    met_held_back: bool = False
    reason: str = ""
    runs: int = 0
    margin: float = MARGIN
    high: str = BASE                        # the highest candidate's label


def advise(graph, budget, candidates, unit_kind="module", samples=None, seed=0,
           held_back=2, mode="nearest_even", policy="fp32_accumulate", log=None,
           margin=MARGIN) -> Advice:
    """The cheapest assignment found whose measured errors meet ``budget`` (Limits) on
    ``samples`` (sample_inputs' lists) within ``margin`` of it, validated on ``held_back``
    draws (module docstring); ``candidates``: check_candidates' formats; ``log(phase,
    done, total, where)``: progress (orchestrate.Phases) or None."""
    say = log or (lambda *a, **k: None)
    if unit_kind not in UNIT_KINDS:
        raise AdviseError(f"--unit {unit_kind}: give module or node")
    if not 0 < margin <= 1:
        raise AdviseError(f"--margin {margin}: give a share of the budget in (0, 1]")
    _check_names(graph, budget)
    want_grad = any(x.kind == "grad" for x in budget)
    samples = samples if samples is not None else sample_inputs(graph, 2, seed)
    measure = Errors(graph, samples, seed, mode, policy, want_grad, log)
    s = _Search(graph, units_of(graph, unit_kind), list(candidates), budget, measure, say,
                margin)
    high, low = s.high, s.low
    every = {f.label: s.uniform(f) for f in s.cands}
    say("everything in each candidate")
    whole = {label: s.run(a, f"all {label}") for label, a in every.items()}
    best, best_errs = every[high.label], whole[high.label]
    met = s.usage(best_errs) <= 1.0
    reason = ""
    if not met:
        reason = (f"the budget cannot be met: even every unit in {high.label} misses it "
                  f"({_worst_text(best_errs, s.limits)}); the assignment is all {high.label}")
    elif s.usage(whole[low.label]) <= margin:
        best, best_errs = every[low.label], whole[low.label]
    else:
        best, best_errs = s.refine(*s.search(whole[high.label], best, best_errs))
    rules = []
    for text, kept in _hand_rules(graph, s.units, high):
        assign = {u.name: (high if u.name in kept else low) for u in s.units}
        errs = s.run(assign, text)
        rules.append({"rule": text, "keep": sorted(kept), "cost": s.cost(assign),
                      "errors": errs, "met": s.usage(errs) <= 1.0})
        if met and s.usage(errs) <= margin and s.cost(assign) < s.cost(best):
            best, best_errs = assign, errs          # a hand rule did better: it is the answer
    s.front.append({"source": "chosen", "cost": s.cost(best), "usage": s.usage(best_errs)})
    say("held-back samples")
    held = sample_inputs(graph, held_back + 1, seed + HELD_BACK_SEED, around=samples[0])[1:]
    check = Errors(graph, held, seed + HELD_BACK_SEED, mode, policy, want_grad, log)
    held_errs = check(by_node(s.units, best))
    return Advice(units=s.units, candidates=[f.label for f in s.cands], limits=s.limits,
                  assignment={u: f.label for u, f in best.items()}, confirmed=best_errs,
                  held_back=held_errs,
                  costs={"assignment": s.cost(best), "all_highest": s.cost(every[high.label]),
                         "all_lowest": s.cost(every[low.label])},
                  unit_costs=s.unit_cost, rules=rules, front=s.front, alone=s.alone,
                  met=met,
                  met_held_back=met and all(held_errs[t] <= lim
                                            for t, lim in s.limits.items()),
                  reason=reason, runs=measure.runs + check.runs, margin=margin,
                  high=high.label)


class _Search:
    """The search's state: the units, the candidates (cheapest first), the limits, the
    units' costs, every measured assignment (``front``) and each unit's usage of the budget
    lowered alone (``alone``)."""

    def __init__(self, graph, units, cands, budget, measure, log, margin):
        self.units, self.cands, self.measure, self.log = units, cands, measure, log
        self.margin = margin
        self.low, self.high = cands[0], max(cands, key=lambda f: (f.precision, f.emax, f.bits))
        self.limits = _limits(budget, measure.tensors)
        backward = measure.want_grad
        self.unit_cost = {u.name: {f.label: sum(costs.node_seconds(graph.nodes[k].op,
                                                                   _bits(f, graph.nodes[k].op),
                                                                   backward)
                                                for k in u.nodes) for f in cands}
                          for u in units}
        self.front, self.alone = [], {}
        # a recipe changes only products: a unit without any is not offered one (it would
        # be the recipe's storage format under another name)
        self.offered = {u.name: [f for f in cands if not isinstance(f, RecipeCandidate)
                                 or any(graph.nodes[k].op.product_operands for k in u.nodes)]
                        for u in units}

    def uniform(self, f) -> dict:
        return {u.name: f for u in self.units}

    def cost(self, assign) -> float:
        return sum(self.unit_cost[u][f.label] for u, f in assign.items())

    def usage(self, errs) -> float:
        """The largest error / its limit (at most 1: the budget is met)."""
        return max((errs[t] / lim for t, lim in self.limits.items()), default=0.0)

    def run(self, assign, source) -> dict:
        """The measured errors of ``assign``, kept in the front as ``source``."""
        errs = self.measure(by_node(self.units, assign))
        self.front.append({"source": source, "cost": self.cost(assign),
                           "usage": self.usage(errs)})
        return errs

    def search(self, base_errs, best, best_errs) -> tuple:
        """The greedy descent on the singles' predictions, confirmed (module docstring):
        (assignment, its measured errors); ``best`` (everything in the highest, measured)
        when no round's prediction is confirmed."""
        high, limits = self.high, self.limits
        singles = {}
        for i, u in enumerate(self.units):
            self.log("each unit alone", float(i), float(len(self.units)), u.name)
            for f in self.offered[u.name]:
                if f is high:
                    continue
                got = self.measure(by_node(self.units, self.uniform(high) | {u.name: f}))
                # errors of separate units add in quadrature to first order (independent
                # roundings): a unit's share is the growth of the squared error
                singles[(u.name, f.label)] = {t: max(0.0, got[t] ** 2 - base_errs[t] ** 2)
                                              for t in limits}
                self.alone.setdefault(u.name, {})[f.label] = self.usage(got)
        scale, tried = 1.0, set()
        for r in range(ROUNDS):
            self.log("confirming", float(r), float(ROUNDS), f"round {r + 1}")
            assign = self._descend(singles, base_errs, scale)
            key = tuple(sorted((u, f.label) for u, f in assign.items()))
            if key in tried:
                scale /= 2
                continue
            tried.add(key)
            errs = self.run(assign, f"confirmed round {r + 1}")
            worst = self.usage(errs) / self.margin
            if worst <= 1.0:
                return (assign, errs) if self.cost(assign) < self.cost(best) else \
                    (best, best_errs)
            scale /= max(worst, 1.25)
        return best, best_errs

    def _descend(self, singles, base_errs, scale) -> dict:
        """Greedy: from every unit in the highest candidate, lower one unit at a time to a
        cheaper candidate -- the move saving the most cost per share of the budget it adds
        -- while every predicted error, sqrt(base**2 + the lowered units' single squared
        growths), stays within ``scale`` times its limit."""
        limits = self.limits
        assign = self.uniform(self.high)
        grown = dict.fromkeys(limits, 0.0)
        zero = dict.fromkeys(limits, 0.0)
        while True:
            best = None
            for u in self.units:
                now = assign[u.name]
                here = singles.get((u.name, now.label), zero)
                for f in self.offered[u.name]:
                    saving = self.unit_cost[u.name][now.label] - self.unit_cost[u.name][f.label]
                    if saving <= 0:
                        continue
                    there = singles[(u.name, f.label)]
                    moved = {t: grown[t] - here[t] + there[t] for t in limits}
                    if any(math.sqrt(base_errs[t] ** 2 + moved[t]) > scale * self.margin * lim
                           for t, lim in limits.items()):
                        continue
                    added = max((max(0.0, there[t] - here[t]) / lim ** 2
                                 for t, lim in limits.items()), default=0.0)
                    merit = (saving / (added + 1e-30), saving)
                    if best is None or merit > best[0]:
                        best = (merit, u.name, f, moved)
            if best is None:
                return assign
            _, name, f, grown = best
            assign[name] = f

    def refine(self, assign, errs) -> tuple:
        """Measured: each unit still above the cheapest candidate, the largest savings
        first, tried one step cheaper at a time (at most REFINE runs); a trial that still
        meets the budget is kept.  (assignment, its measured errors)."""
        if self.usage(errs) > self.margin:
            return assign, errs
        runs = 0
        order = sorted(self.units, key=lambda u: -(self.unit_cost[u.name][assign[u.name].label]
                                                  - self.unit_cost[u.name][self.low.label]))
        for u in order:
            for f in self.offered[u.name]:           # cheapest first
                now = assign[u.name]
                if runs >= REFINE or \
                        self.unit_cost[u.name][f.label] >= self.unit_cost[u.name][now.label]:
                    continue
                self.log("refining", float(runs), float(REFINE), u.name)
                runs += 1
                trial = dict(assign) | {u.name: f}
                got = self.run(trial, "refined")
                if self.usage(got) <= self.margin:
                    assign, errs = trial, got
                    break
        return assign, errs


def _bits(f, op) -> int:
    """The width a node computes and stores at under candidate ``f``: a recipe's products
    at their operands' element width, its other nodes at its storage format's."""
    if isinstance(f, RecipeCandidate) and not op.product_operands:
        return f.storage.bits
    return f.bits


def _hand_rules(g, units, high) -> list:
    """(text, names of the units kept in ``high``) of the rules users apply by hand."""
    products = [k for k, n in enumerate(g.nodes) if n.op.product_operands]
    ends = {products[0], products[-1]} if products else {0, len(g.nodes) - 1}
    norms = {k for k, n in enumerate(g.nodes) if n.op.name in NORMALIZING}
    return [(f"first and last layers in {high.label}",
             {u.name for u in units if ends & set(u.nodes)}),
            (f"normalizations and softmax in {high.label}",
             {u.name for u in units if norms & set(u.nodes)})]


def _check_names(graph, budget) -> None:
    outs = [n for n, p in zip(graph.output_names, graph.outputs) if p.kind == "value"]
    grads = [n for n, p in zip(graph.input_names, graph.inputs) if p.kind == "value"]
    for x in budget:
        known = outs if x.kind == "out" else grads
        if x.name is not None and x.name not in known:
            raise AdviseError(f"--budget {x.text}: the model has no "
                              f"{'output' if x.kind == 'out' else 'differentiable input'} "
                              f"{x.name!r} (it has: {', '.join(known) or 'none'})")
    if not outs:
        raise ModelError("the model has no float output to budget")


def _worst_text(errs, limits) -> str:
    t = max(limits, key=lambda t: errs[t] / limits[t])
    return f"{t} {errs[t]:.3g} against {limits[t]:.3g}"


def keep_list(advice, high_label) -> list:
    """The module names (or node names) left in the highest candidate: torchao's
    ``filter_fqns`` form (TOP_LEVEL is not a module and is left out)."""
    return [u.name for u in advice.units
            if advice.assignment[u.name] == high_label and u.name != TOP_LEVEL]


def document(advice, target, budget, unit_kind, mode, policy, samples, seed) -> dict:
    """The answer as JSON data (``advise --out``: ``assignment``, ``keep``, ``cost``,
    ``confirmed``, ``met``, and how it was found)."""
    high = advice.high
    return {
        "schema": ADVICE_SCHEMA,
        "target": target, "unit": unit_kind, "candidates": advice.candidates,
        "mode": mode, "policy": policy, "samples": samples, "seed": seed,
        "margin": advice.margin,
        "budget": [x.text for x in budget],
        "assignment": advice.assignment,
        "keep": keep_list(advice, high), "keep_format": high,
        "cost": dict(advice.costs, unit="seconds on the H100 SXM roofline (engine/cost.py)"),
        "confirmed": {t: {"budget": advice.limits.get(t), "samples": e,
                          "held_back": advice.held_back.get(t)}
                      for t, e in advice.confirmed.items()},
        "met": advice.met, "met_held_back": advice.met_held_back,
        "reason": advice.reason or None,
        "rules": advice.rules, "front": advice.front,
        "units": [{"unit": u.name, "nodes": len(u.nodes),
                   "format": advice.assignment[u.name],
                   "cost": advice.unit_costs[u.name][advice.assignment[u.name]],
                   "alone": advice.alone.get(u.name, {})} for u in advice.units],
        "runs": advice.runs,
    }
