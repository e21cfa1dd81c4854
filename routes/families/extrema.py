"""Extrema (spec: "Extrema, of which max and min propagate a NaN, fmax and fmin ignore one,
and clamp reads its bounds at frozen ports"): max and clamp so far."""

from __future__ import annotations

import numpy as np

from roundoff_coverage import formats

from .. import attributes as A
from .. import words as W
from ..certs import convention, roundoff
from ..helpers import binary_elementwise
from ..ports import frozen, value
from ..registry import Float64, define
from ..rules import shown
from ..samples import Domain, into, special, target, uniform

CONVENTIONS = "tests/routes/test_routes_conventions.py"


def _share(xp, x, y, v):
    """x's share of v in max(x, y): all of v where x > y, none where x < y, half at a tie or
    a NaN (neither operand larger).  v/2 is exact unless it falls below the normal range."""
    return xp.where(xp.greater(x, y), v,
                    xp.where(xp.less(x, y), xp.zeros_like(v),
                             xp.multiply(v, xp.full_like(v, "0.5"))))


def _neighbour(rng, x, fmt):
    """The next value of the format above or below each x (at random)."""
    f = target(fmt)
    return np.where(rng.random(np.shape(x)) < 0.5, formats.next_up(x, f), formats.next_down(x, f))


def _ties(rng, fmt, n):
    """Ties x == y (both zeros, equal values) and neighbours one ulp of the format apart."""
    x = into(rng.uniform(-4, 4, n), fmt)
    y = np.where(rng.random(n) < 0.6, x, _neighbour(rng, x, fmt))
    zeros = rng.random(n) < 0.2
    return (np.where(zeros, rng.choice([0.0, -0.0], n), x),
            np.where(zeros, rng.choice([0.0, -0.0], n), y))


def _extremum(name, larger):
    """max (``larger``) or min: IEEE 754-2019 maximum / minimum, the gradient shared as the
    spec's rule says (the chosen operand takes the whole cotangent; at a tie or a NaN each
    operand takes half)."""
    ieee, word, pick = ("maximum", W.maximum, max) if larger else ("minimum", W.minimum, min)
    wins = (lambda a, b: a > b) if larger else (lambda a, b: a < b)

    def float64(x, y, g):
        """numpy's own reading of the spec's convention, for the float64 comparison."""
        share = lambda a, b: np.where(wins(a, b), g, np.where(wins(b, a), 0.0, g / 2))
        return share(x, y), share(y, x)
    first, second = ("larger", "fmax") if larger else ("smaller", "fmin")
    binary_elementwise(
        name, "extrema",
        f=lambda xp, x, y: getattr(xp, ieee)(x, y),
        # _share(xp, a, b, v): the cotangent where a > b; min(x, y) is chosen where y > x.
        dx=lambda xp, x, y, out, v: _share(xp, *((x, y) if larger else (y, x)), v),
        dy=lambda xp, x, y, out, v: _share(xp, *((y, x) if larger else (x, y)), v),
        words=word, word_oracle=pick,
        oracle=lambda ctx, x, y: ctx.nan if ctx.isnan(x) or ctx.isnan(y) else pick(x, y),
        float64=(getattr(np, ieee), float64),
        domain=Domain(ordinary=uniform(-4, 4, 2), edges=_ties,
                      special=special(uniform(-4, 4, 2), 2),
                      kinks=lambda x, y: np.abs(x - y) < 2.0 ** -20),
        notes=(f"IEEE 754-2019 {ieee}: a NaN operand gives NaN ({second} ignores it); "
               f"-0 < +0.",
               f"Gradient: the {first} operand takes the whole cotangent; at a tie or a NaN "
               f"each operand takes half (the spec's rule; PyTorch gives both the whole "
               f"gradient at a NaN).",
               f"element bool: {'or' if larger else 'and'}; element int*/uint*: the {first} "
               f"word; no gradient."),
        certificates=("derivative", "prepared",
                      convention(f"{CONVENTIONS}::test_{name}_splits_a_tie_in_half",
                                 "at x == y each operand receives half of the cotangent"),
                      convention(f"{CONVENTIONS}::test_{name}_propagates_nan_and_splits_its_"
                                 f"gradient",
                                 "a NaN operand gives a NaN value and half of the cotangent "
                                 "to each operand"),
                      roundoff(0, statement="exact: the output is one of the operands")),
    )


_extremum("max", larger=True)
_extremum("min", larger=False)


def _inside(xp, x, lo, hi):
    # Inclusive: a value at a bound keeps its gradient (PyTorch's clamp_backward); NaN fails
    # both comparisons and gets none.
    return xp.greater_equal(x, lo) & xp.less_equal(x, hi)


def _clamp_validate(xp, a, x, lo, hi):
    if xp.isnan(lo) or xp.isnan(hi):
        return f"bounds must not be NaN (got lo {shown(xp, lo)}, hi {shown(xp, hi)})"
    if xp.greater(lo, hi):
        return f"lo must not exceed hi (got lo {shown(xp, lo)} > hi {shown(xp, hi)})"
    return None


def _clamp_sampler(kind):
    """Samples of clamp: ``ordinary`` x away from both bounds, ``edges`` x at or next to a
    bound (and lo == hi), ``special`` NaN/inf x and infinite bounds (one-sided clamps)."""
    def sampler(rng, fmt, op):
        n = int(np.prod(op.attrs.shape, dtype=np.int64))
        lo, hi = into(rng.uniform(-2, 0), fmt), into(rng.uniform(0.5, 2), fmt)
        x = into(rng.uniform(-4, 4, n), fmt)
        if kind == "ordinary":
            while True:
                near = (np.abs(x - lo) < 2.0 ** -20) | (np.abs(x - hi) < 2.0 ** -20)
                if not near.any():
                    break
                x = np.where(near, into(rng.uniform(-4, 4, n), fmt), x)
        elif kind == "edges":
            hi = lo if rng.random() < 0.25 else hi
            at = np.where(rng.random(n) < 0.5, lo, hi)
            x = np.where(rng.random(n) < 0.5, at, _neighbour(rng, at, fmt))
        else:
            f = target(fmt)
            specials = into([np.nan, np.inf, -np.inf, 0.0, -0.0, float(f.max_finite)], fmt)
            x = np.where(rng.random(n) < 0.6, specials[rng.integers(0, 6, n)], x)
            far = np.inf if f.has_inf else float(f.max_finite)   # no inf: widest bounds
            lo = into(-far, fmt) if rng.random() < 0.5 else lo
            hi = into(far, fmt) if rng.random() < 0.5 else hi
        return into(x, fmt).reshape(op.attrs.shape), np.asarray(lo), np.asarray(hi)
    return sampler


define(
    "clamp", "extrema",
    attributes=(A.shape(),),
    ports=lambda a: ({"x": value(a.shape), "lo": frozen(), "hi": frozen()},
                     {"y": value(a.shape)}),
    forward=lambda xp, a, x, lo, hi: xp.minimum(xp.maximum(x, lo), hi),
    backward=lambda xp, a, xs, ys, gs, needs: (
        xp.where(_inside(xp, *xs), gs[0], xp.zeros_like(gs[0])), None, None),
    jvp=lambda xp, a, xs, ys, ts: xp.where(_inside(xp, *xs), ts[0], xp.zeros_like(ts[0])),
    validate=_clamp_validate,
    samples={k: _clamp_sampler(k) for k in ("ordinary", "edges", "special")},
    oracle=lambda ctx, a, x, lo, hi: (np.asarray(np.frompyfunc(
        lambda v: v if ctx.isnan(v) else min(max(v, lo[()]), hi[()]), 1, 1)(x), dtype=object),),
    float64=Float64(lambda a, x, lo, hi: np.clip(x, lo, hi),
                    lambda a, xs, gs: (np.where((xs[0] >= xs[1]) & (xs[0] <= xs[2]), gs[0], 0.0),
                                       None, None)),
    examples={"": {}, "rank0": {"shape": ()}, "2x3": {"shape": (2, 3)}},
    notes=("clamp(x, lo, hi) = minimum(maximum(x, lo), hi) with IEEE maximum/minimum: NaN x "
           "gives NaN; the bounds are frozen scalars (no gradient) and may be infinite.",
           "validate refuses NaN bounds and lo > hi (PyTorch returns hi everywhere then).",
           "Gradient: the cotangent where lo <= x <= hi (inclusive at the bounds, as PyTorch), "
           "0 outside and at NaN."),
    bad_inputs=(({}, ([0.0, 1.0, 2.0], np.nan, 1.0),
                 "clamp: bounds must not be NaN (got lo nan, hi 1)"),
                ({}, ([0.0, 1.0, 2.0], 2.0, 1.0),
                 "clamp: lo must not exceed hi (got lo 2 > hi 1)")),
    certificates=("derivative", "prepared",
                  convention(f"{CONVENTIONS}::test_clamp_passes_the_gradient_at_the_bounds",
                             "x at a bound receives the whole cotangent; NaN x none",
                             inputs=(0,)),
                  roundoff(0, statement="exact: the output is x or a bound")),
)




def _fshare(xp, x, y, v, share):
    """x's share of v in fmax/fmin: all of v where only y is NaN, none where only x is NaN,
    half where both are; otherwise ``share`` (the max or min rule: ties split)."""
    nx, ny = xp.isnan(x), xp.isnan(y)
    half = xp.multiply(v, xp.full_like(v, "0.5"))
    return xp.where(ny, xp.where(nx, half, v),
                    xp.where(nx, xp.zeros_like(v), share(xp, x, y, v)))


def _fext_f64(pick):
    def grads(x, y, g):
        def share(a, b):
            na, nb = np.isnan(a), np.isnan(b)
            inner = np.where(pick(a, b), g, np.where(pick(b, a), 0.0, g / 2))
            return np.where(nb, np.where(na, g / 2, g), np.where(na, 0.0, inner))
        return share(x, y), share(y, x)
    return grads


def _f_oracle(better):
    def oracle(ctx, x, y):
        if ctx.isnan(x):
            return y
        if ctx.isnan(y):
            return x
        return better(x, y)
    return oracle


for _name, _prim, _np, _better, _pick, _share_of in (
        ("fmax", "fmax", np.fmax, max, np.greater, lambda xp, a, b, v: _share(xp, a, b, v)),
        ("fmin", "fmin", np.fmin, min, np.less, lambda xp, a, b, v: _share(xp, b, a, v))):
    binary_elementwise(
        _name, "extrema",
        f=(lambda p: lambda xp, x, y: getattr(xp, p)(x, y))(_prim),
        dx=(lambda s: lambda xp, x, y, out, v: _fshare(xp, x, y, v, s))(_share_of),
        dy=(lambda s: lambda xp, x, y, out, v: _fshare(xp, y, x, v, s))(_share_of),
        oracle=_f_oracle(_better),
        float64=(_np, _fext_f64(_pick)),
        domain=Domain(ordinary=uniform(-4, 4, 2), edges=_ties,
                      special=special(uniform(-4, 4, 2), 2),
                      kinks=lambda x, y: np.abs(x - y) < 2.0 ** -20),
        notes=(f"IEEE 754 {_name} (maximumNumber / minimumNumber): a NaN operand is ignored, "
               "two NaNs give NaN; -0 and +0 ordered as in max/min.",
               "Gradient: the non-NaN operand takes the whole cotangent where the other is "
               "NaN; otherwise as max/min (ties split in half); both NaN: half each."),
        certificates=("prepared",
                      convention(f"{CONVENTIONS}::test_{_name}_ignores_nan_in_value_and_gradient",
                                 "a NaN operand is ignored: the other takes the value and the "
                                 "whole cotangent; ties split in half"),
                      roundoff(0, statement="exact: the output is one of the operands")),
    )
