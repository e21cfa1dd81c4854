"""Elementwise arithmetic, the guarded forms (spec: "Elementwise arithmetic"): nanToNum and
safeDiv, safeInv, safeLog, smoothAbs.  The spec defines no formula for the guarded forms;
here they are guards at a frozen eps > 0: safeDiv(x, y) = x / max(y, eps), safeInv(x) =
1 / max(x, eps), safeLog(x) = log(max(x, eps)) (for non-negative quantities such as norms,
variances, counts and probabilities that may be 0), and smoothAbs(x) = sqrt(x^2 + eps), a
smooth |x|.  The family is elementwise.py's."""

from __future__ import annotations


import numpy as np

from .. import attributes as A
from ..certs import convention, roundoff
from ..ports import frozen, value
from ..registry import Float64, define
from ..rules import shown
from ..samples import into, target

from .elementwise import CONVENTIONS


def _finite_replacements(rng, fmt, kind):
    f = target(fmt)
    top = float(f.max_finite)
    if kind == "edges":
        return 0.0, top, -top
    return tuple(float(into(v, fmt)) for v in (rng.uniform(-1, 1), rng.uniform(1, 4),
                                               rng.uniform(-4, -1)))


def _nan_to_num_sampler(kind):
    def sampler(rng, fmt, op):
        n = int(np.prod(op.attrs.shape, dtype=np.int64))
        x = into(rng.uniform(-4, 4, n), fmt)
        if kind != "ordinary":
            specials = into([np.nan, np.inf, -np.inf, 0.0], fmt)
            x = np.where(rng.random(n) < 0.5, specials[rng.integers(0, 4, n)], x)
        reps = _finite_replacements(rng, fmt, kind)
        return (x.reshape(op.attrs.shape),) + tuple(np.asarray(v) for v in reps)
    return sampler


def _nan_to_num(xp, a, x, nan, posinf, neginf):
    out = xp.where(xp.isnan(x), nan, x)
    inf = xp.isinf(x)
    return xp.where(inf & xp.greater(x, xp.zeros_like(x)), posinf,
                    xp.where(inf, neginf, out))


def _nan_to_num_d(xp, x, v):
    """v where x is finite, 0 where it was replaced (a constant there; PyTorch's masking)."""
    return xp.where(xp.isfinite(x), v, xp.zeros_like(v))


def _nan_to_num_oracle(ctx, a, x, nan, posinf, neginf):
    def one(v):
        return nan[()] if ctx.isnan(v) else posinf[()] if v == ctx.inf else \
            neginf[()] if v == -ctx.inf else v
    return (np.asarray(np.frompyfunc(one, 1, 1)(x), dtype=object),)


define(
    "nanToNum", "elementwise",
    attributes=(A.shape(),),
    ports=lambda a: ({"x": value(a.shape), "nan": frozen(), "posinf": frozen(),
                      "neginf": frozen()}, {"y": value(a.shape)}),
    forward=_nan_to_num,
    backward=lambda xp, a, xs, ys, gs, needs: (
        _nan_to_num_d(xp, xs[0], gs[0]) if needs[0] else None, None, None, None),
    jvp=lambda xp, a, xs, ys, ts: _nan_to_num_d(xp, xs[0], ts[0]),
    samples={k: _nan_to_num_sampler(k) for k in ("ordinary", "edges", "special")},
    oracle=_nan_to_num_oracle,
    float64=Float64(lambda a, x, nan, posinf, neginf: np.nan_to_num(
        x, nan=float(nan), posinf=float(posinf), neginf=float(neginf)),
        lambda a, xs, gs: (np.where(np.isfinite(xs[0]), gs[0], 0.0), None, None, None)),
    examples={"": {}, "2x3": {"shape": (2, 3)}},
    notes=("nanToNum(x, nan, posinf, neginf): NaN, +inf and -inf replaced by the frozen "
           "scalars (torch.nan_to_num's defaults are 0 and the format's +-max_finite: pass "
           "them); finite x unchanged (selection: no rounding).",
           "Gradient: g where x is finite, 0 where it was replaced (the output is a constant "
           "there), selected, so an infinite cotangent gives 0 there."),
    certificates=("derivative", "prepared", roundoff(0, statement="exact: a selection")),
)


def _eps_sampler(draws):
    """Value inputs drawn by ``draws[kind](rng, n)``; the frozen eps positive: 2**-k for k in
    [2, 12], at least the format's least normal (at ``edges`` sometimes that least normal)."""
    def make(kind):
        def sampler(rng, fmt, op):
            n = int(np.prod(op.attrs.shape, dtype=np.int64))
            xs = [into(x, fmt).reshape(op.attrs.shape) for x in draws[kind](rng, n)]
            least = float(target(fmt).min_normal)
            eps = max(2.0 ** -int(rng.integers(2, 13)), least)
            if kind == "edges" and rng.random() < 0.3:
                eps = least
            return tuple(xs) + (np.asarray(into(eps, fmt)),)
        return sampler
    return {k: make(k) for k in draws}


def _eps_valid(xp, eps):
    """The guard must be a positive finite number."""
    ok = xp.greater(eps, xp.zeros_like(eps)) & xp.isfinite(eps)
    return None if ok else f"eps must be positive and finite (got {shown(xp, eps)})"


def _specials_mixed(base):
    """``base`` with 40% of the entries replaced by +-0, +-inf or NaN."""
    def draw(rng, n):
        vals = np.array([0.0, -0.0, np.inf, -np.inf, np.nan])
        return tuple(np.where(rng.random(n) < 0.4, vals[rng.integers(0, 5, n)], x)
                     for x in base(rng, n))
    return draw


def _above(xp, d, eps, v):
    """The derivative of max(d, eps) applied to v: v where d > eps, 0 where d <= eps (the
    flat side of the guard, also at d = eps) and at NaN."""
    return xp.where(xp.greater(d, eps), v, xp.zeros_like(v))


def _safe_denominator(xp, d, eps):
    """d with the guarded entries (d <= eps, NaN) replaced by 1: a denominator for
    derivative formulas whose value ``_above`` discards there."""
    return xp.where(xp.greater(d, eps), d, xp.ones_like(d))


def _safe_f64_d(d, eps, v):
    return np.where(d > eps, v, 0.0)


_EDGE_VALUES = (0.0, 2.0 ** -12, 2.0 ** -2, -1.0, 1e-30, 2.0 ** -7)


def _eps_oracle(f):
    """An elementwise oracle ``f(ctx, *values, eps)`` with the frozen eps read once."""
    def oracle(ctx, a, *xs):
        eps = xs[-1][()]
        out = np.frompyfunc(lambda *v: f(ctx, *v, eps), len(xs) - 1, 1)(*xs[:-1])
        return (np.asarray(out, dtype=object),)
    return oracle


def _safe_log_d(xp, x, eps, v):
    return _above(xp, x, eps, xp.divide(v, _safe_denominator(xp, x, eps)))


define(
    "safeLog", "elementwise",
    attributes=(A.shape(),),
    ports=lambda a: ({"x": value(a.shape), "eps": frozen()}, {"y": value(a.shape)}),
    forward=lambda xp, a, x, eps: xp.log(xp.maximum(x, eps)),
    backward=lambda xp, a, xs, ys, gs, needs: (
        _safe_log_d(xp, xs[0], xs[1], gs[0]) if needs[0] else None, None),
    jvp=lambda xp, a, xs, ys, ts: _safe_log_d(xp, xs[0], xs[1], ts[0]),
    validate=lambda xp, a, x, eps: _eps_valid(xp, eps),
    samples=_eps_sampler({
        "ordinary": lambda rng, n: (rng.uniform(0.5, 4, n),),
        "edges": lambda rng, n: (rng.choice(_EDGE_VALUES, n),),
        "special": _specials_mixed(lambda rng, n: (rng.uniform(-4, 4, n),))}),
    oracle=_eps_oracle(lambda ctx, x, eps: x if ctx.isnan(x) else ctx.log(max(x, eps))),
    float64=Float64(lambda a, x, eps: np.log(np.maximum(x, eps)),
                    lambda a, xs, gs: (_safe_f64_d(xs[0], xs[1], gs[0] / np.where(
                        xs[0] > xs[1], xs[0], 1.0)), None)),
    examples={"": {}, "2x3": {"shape": (2, 3)}},
    bad_inputs=(({"shape": (1,)}, ([1.0], 0.0), "eps must be positive and finite (got 0)"),
                ({"shape": (1,)}, ([1.0], np.inf), "eps must be positive and finite (got inf)")),
    notes=("safeLog(x, eps) = log(max(x, eps)), eps > 0 a frozen scalar (validate refuses "
           "0, negative, inf or NaN eps): log never sees a value below eps, so 0 and "
           "negative x give log(eps); NaN x stays NaN (IEEE maximum propagates it).",
           "Gradient g / x where x > eps, 0 where x <= eps (the flat side of the guard, also "
           "at x = eps) and at NaN."),
    certificates=("derivative", "prepared",
                  convention(f"{CONVENTIONS}::test_guarded_forms_below_the_guard",
                             "at and below the guard the guarded input's gradient is 0"),
                  roundoff(0.5, statement="the guard is exact, then one log rounded once: "
                                          "within 0.5 ulp in round to nearest")),
)


def _safe_inv_d(xp, x, y, eps, v):
    """-v y^2 where x > eps (y = 1/x), 0 at and below the guard."""
    return _above(xp, x, eps, xp.negative(xp.multiply(v, xp.square(y))))


define(
    "safeInv", "elementwise",
    attributes=(A.shape(),),
    ports=lambda a: ({"x": value(a.shape), "eps": frozen()}, {"y": value(a.shape)}),
    forward=lambda xp, a, x, eps: xp.reciprocal(xp.maximum(x, eps)),
    backward=lambda xp, a, xs, ys, gs, needs: (
        _safe_inv_d(xp, xs[0], ys[0], xs[1], gs[0]) if needs[0] else None, None),
    jvp=lambda xp, a, xs, ys, ts: _safe_inv_d(xp, xs[0], ys[0], xs[1], ts[0]),
    validate=lambda xp, a, x, eps: _eps_valid(xp, eps),
    samples=_eps_sampler({
        "ordinary": lambda rng, n: (rng.uniform(0.5, 4, n),),
        "edges": lambda rng, n: (rng.choice(_EDGE_VALUES, n),),
        "special": _specials_mixed(lambda rng, n: (rng.uniform(-4, 4, n),))}),
    oracle=_eps_oracle(lambda ctx, x, eps: x if ctx.isnan(x) else 1 / max(x, eps)),
    float64=Float64(lambda a, x, eps: 1 / np.maximum(x, eps),
                    lambda a, xs, gs: (_safe_f64_d(xs[0], xs[1], -(gs[0] * np.square(
                        1 / np.maximum(xs[0], xs[1])))), None)),
    examples={"": {}, "2x3": {"shape": (2, 3)}},
    bad_inputs=(({"shape": (1,)}, ([1.0], -1.0), "eps must be positive and finite (got -1)"),),
    notes=("safeInv(x, eps) = 1 / max(x, eps), eps > 0 a frozen scalar: for a non-negative "
           "quantity (a norm, a variance, a count) that may be 0; at most 1/eps; "
           "safeInv(inf) = 0; NaN stays NaN.",
           "Gradient -g / x^2 (as -g y^2) where x > eps, 0 at and below the guard."),
    certificates=("derivative", "prepared",
                  convention(f"{CONVENTIONS}::test_guarded_forms_below_the_guard",
                             "at and below the guard the guarded input's gradient is 0"),
                  roundoff(0.5, statement="the guard is exact, then one division rounded "
                                          "once: within 0.5 ulp in round to nearest")),
)


def _safe_div_dx(xp, x, y, out, eps, v):
    """v / max(y, eps)."""
    return xp.divide(v, xp.maximum(y, eps))


def _safe_div_dy(xp, x, y, out, eps, v):
    """-(v out) / y where y > eps, 0 at and below the guard."""
    return _above(xp, y, eps, xp.negative(xp.divide(xp.multiply(v, out),
                                                    _safe_denominator(xp, y, eps))))


def _safe_div_jvp(xp, a, xs, ys, ts):
    x, y, eps = xs
    return xp.add(_safe_div_dx(xp, x, y, ys[0], eps, ts[0]),
                  _safe_div_dy(xp, x, y, ys[0], eps, ts[1]))


def _safe_div_f64_bwd(a, xs, gs):
    x, y, eps = xs
    d = np.maximum(y, eps)
    return gs[0] / d, _safe_f64_d(y, eps, -(gs[0] * (x / d)) / np.where(y > eps, y, 1.0)), None


define(
    "safeDiv", "elementwise",
    attributes=(A.shape(),),
    ports=lambda a: ({"x": value(a.shape), "y": value(a.shape), "eps": frozen()},
                     {"out": value(a.shape)}),
    forward=lambda xp, a, x, y, eps: xp.divide(x, xp.maximum(y, eps)),
    backward=lambda xp, a, xs, ys, gs, needs: (
        _safe_div_dx(xp, *xs[:2], ys[0], xs[2], gs[0]) if needs[0] else None,
        _safe_div_dy(xp, *xs[:2], ys[0], xs[2], gs[0]) if needs[1] else None, None),
    jvp=_safe_div_jvp,
    validate=lambda xp, a, x, y, eps: _eps_valid(xp, eps),
    samples=_eps_sampler({
        "ordinary": lambda rng, n: (rng.uniform(-4, 4, n), rng.uniform(0.5, 4, n)),
        "edges": lambda rng, n: (rng.uniform(-4, 4, n), rng.choice(_EDGE_VALUES, n)),
        "special": _specials_mixed(lambda rng, n: (rng.uniform(-4, 4, n),
                                                   rng.uniform(-4, 4, n)))}),
    oracle=_eps_oracle(lambda ctx, x, y, eps: ctx.nan if ctx.isnan(x) or ctx.isnan(y) else
                       (ctx.nan if ctx.isinf(x) and y == ctx.inf else x / max(y, eps))),
    float64=Float64(lambda a, x, y, eps: x / np.maximum(y, eps), _safe_div_f64_bwd),
    examples={"": {}, "2x3": {"shape": (2, 3)}},
    bad_inputs=(({"shape": (1,)}, ([1.0], [1.0], np.nan),
                 "eps must be positive and finite (got nan)"),),
    notes=("safeDiv(x, y, eps) = x / max(y, eps), eps > 0 a frozen scalar: a division by a "
           "non-negative quantity (a norm, a sum of weights, a count) that may be 0; "
           "x / 0 gives x / eps; NaN operands give NaN, inf / inf is NaN.",
           "Gradient g / max(y, eps) to x; -g out / y to y where y > eps, 0 at and below the "
           "guard."),
    certificates=("derivative", "prepared",
                  convention(f"{CONVENTIONS}::test_guarded_forms_below_the_guard",
                             "at and below the guard the denominator's gradient is 0"),
                  roundoff(0.5, statement="the guard is exact, then one division rounded "
                                          "once: within 0.5 ulp in round to nearest")),
)


def _smooth_abs_d(xp, x, y, v):
    """x / y v (y = sqrt(x^2 + eps) > 0)."""
    return xp.multiply(v, xp.divide(x, y))


def _smooth_abs_oracle(ctx, x, eps):
    if ctx.isnan(x):
        return x
    return ctx.inf if ctx.isinf(x) else ctx.sqrt(x * x + eps)


define(
    "smoothAbs", "elementwise",
    attributes=(A.shape(),),
    ports=lambda a: ({"x": value(a.shape), "eps": frozen()}, {"y": value(a.shape)}),
    forward=lambda xp, a, x, eps: xp.hypot(x, xp.sqrt(eps)),
    backward=lambda xp, a, xs, ys, gs, needs: (
        _smooth_abs_d(xp, xs[0], ys[0], gs[0]) if needs[0] else None, None),
    jvp=lambda xp, a, xs, ys, ts: _smooth_abs_d(xp, xs[0], ys[0], ts[0]),
    validate=lambda xp, a, x, eps: _eps_valid(xp, eps),
    samples=_eps_sampler({
        "ordinary": lambda rng, n: (rng.uniform(-4, 4, n),),
        "edges": lambda rng, n: (rng.choice([0.0, 2.0 ** -12, -(2.0 ** -6), 1e30, -1e30], n),),
        "special": _specials_mixed(lambda rng, n: (rng.uniform(-4, 4, n),))}),
    oracle=_eps_oracle(_smooth_abs_oracle),
    float64=Float64(lambda a, x, eps: np.sqrt(np.square(x) + eps),
                    lambda a, xs, gs: (gs[0] * (xs[0] / np.sqrt(np.square(xs[0]) + xs[1])),
                                       None), ulps=2),
    examples={"": {}, "2x3": {"shape": (2, 3)}},
    bad_inputs=(({"shape": (1,)}, ([1.0], 0.0), "eps must be positive and finite (got 0)"),),
    notes=("smoothAbs(x, eps) = sqrt(x^2 + eps), eps > 0 a frozen scalar: a smooth |x| "
           "(sqrt(eps) at 0, |x| + eps / (2|x|) + ... far from 0), computed as "
           "hypot(x, sqrt(eps)): no overflow of x^2 for large |x|; NaN stays NaN.",
           "Gradient x / y g: smooth everywhere, 0 at x = 0, +-g far from 0."),
    certificates=("derivative", "prepared",
                  roundoff(1, statement="hypot rounded once of x and sqrt(eps) rounded once "
                                        "(whose relative error reaches the result damped by "
                                        "eps / (x^2 + eps) <= 1): within 1 ulp in round to "
                                        "nearest")),
)
