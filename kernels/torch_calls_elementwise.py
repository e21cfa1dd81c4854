"""The torch table's elementwise entries (kernels/torch_calls.py describes the table):
arithmetic, transcendental functions, extrema, activations, comparisons, logic, casts and
integer words.  Imported by kernels/torch_calls.py, which registers them first."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .torch_table import (Convention, add_exact, as_number, fraction_of, object_array, register,
                          scaled_exact)


def _where(mask, value, ports, at=(0,)):
    """A convention's exact function: where ``mask(a, xs)`` holds, the ports ``at`` (of the
    route's side, ``ports`` of them) take ``value(xs, vs)`` (per element arrays of floats:
    NaN, inf, or format values passed through exactly)."""
    def exact(t, a, xs, vs):
        xs = [np.asarray(v, np.float64) if np.asarray(v).dtype.kind == "f" else np.asarray(v)
              for v in xs]
        m = mask(a, xs)
        if not m.any():
            return None
        vals = np.broadcast_to(np.asarray(value(xs, vs), np.float64), m.shape)
        out = [None] * ports
        for j in at:
            o = object_array(m.shape)
            o[m] = [fraction_of(v) for v in vals[m]]
            out[j] = o
        return tuple(out)
    return exact


def _nan(xs, vs):
    return np.nan


def _passes(xs, vs):
    """The cotangent (or tangent) itself."""
    return np.asarray(vs[0], np.float64)


# ----- elementwise arithmetic --------------------------------------------------------------------

register("add", lambda t, a, x, y: t.add(x, y))
register("sub", lambda t, a, x, y: t.sub(x, y))
register("mul", lambda t, a, x, y: t.mul(x, y))
register("div", lambda t, a, x, y: t.div(x, y, rounding_mode=None if a.rounding_mode == "none"
                                      else a.rounding_mode))
register("neg", lambda t, a, x: t.neg(x))
register("abs", lambda t, a, x: t.abs(x))


def _sqrt_clamp(route):
    """clampNegative: torch's sqrt(clamp(x, min=0)) passes g through the clamp at x = 0
    (inclusive at its bound) and divides it by 2 sqrt(0): +-inf (NaN for g = 0); below 0 and
    at NaN its tangent is the clamp's 0 over sqrt's 2 sqrt(x), NaN (its gradient there is 0,
    as the rule's: the clamp's pullback selects).  The rule gives 0 (the flat side)."""
    def exact(t, a, xs, vs):
        if a.mode == "raw":
            return None
        x, v = np.asarray(xs[0], np.float64), np.asarray(vs[0], np.float64)
        at = x == 0
        below = (x < 0) | np.isnan(x) if route == "tangent" else np.zeros(x.shape, bool)
        if not (at | below).any():
            return None
        out = object_array(x.shape)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[at] = [float(q) for q in (v[at] / x[at])]     # x = +-0: sqrt(+-0) = +-0
        out[below] = math.nan
        return (out,)
    return exact


register("sqrt", lambda t, a, x: t.sqrt(x) if a.mode == "raw" else t.sqrt(t.clamp(x, min=0)),
      conventions=(Convention("gradient", "sqrt at clampNegative: torch's sqrt(clamp(x, "
                              "min=0)) gives x = 0 the gradient g/0 = +-inf (the rule: 0, the "
                              "flat side)", _sqrt_clamp("gradient")),
                   Convention("tangent", "sqrt at clampNegative: torch's tangent is t/0 = "
                              "+-inf at x = 0 and NaN below 0 and at NaN (the rule: 0)",
                              _sqrt_clamp("tangent"))))
register("rsqrt", lambda t, a, x: t.rsqrt(x))
register("reciprocal", lambda t, a, x: t.reciprocal(x))
register("square", lambda t, a, x: t.square(x))
register("pow", lambda t, a, x, y: t.pow(x, y))
register("scale", lambda t, a, x, c: t.mul(x, c))
register("fmod", lambda t, a, x, y: t.fmod(x, y),
      conventions=(Convention("gradient", "fmod at an infinite x: torch's gradient at y is NaN "
                              "(the rule: -trunc(x/y) g, infinite)",
                              _where(lambda a, xs: np.isinf(xs[0]), _nan, 2, (1,))),
                   Convention("tangent", "fmod at an infinite x: torch's tangent is NaN",
                              _where(lambda a, xs: np.isinf(xs[0]), _nan, 1))))
register("remainder", lambda t, a, x, y: t.remainder(x, y))


def _hypot_nan(a, xs):
    """The origin (0/0) and a NaN operand against a finite one (NaN result)."""
    x, y = xs
    return ((x == 0) & (y == 0)) | np.isnan(np.hypot(x, y))


register("hypot", lambda t, a, x, y: t.hypot(x, y),
      conventions=(Convention("gradient", "hypot at the origin and at a NaN operand: torch's "
                              "gradient x/hypot is NaN (the rule: the subgradient 0)",
                              _where(_hypot_nan, _nan, 2, (0, 1))),
                   Convention("tangent", "hypot at the origin and at a NaN operand: torch's "
                              "tangent is NaN (the rule: 0)", _where(_hypot_nan, _nan, 1))))
register("copysign", lambda t, a, x, y: t.copysign(x, y),
      conventions=tuple(Convention(r, "copysign at an infinite or NaN x: torch's derivative "
                                      "result/x is NaN (the rule: +-1 at inf, 0 at NaN)",
                                   _where(lambda a, xs: ~np.isfinite(xs[0]), _nan,
                                          2 if r == "gradient" else 1))
                        for r in ("gradient", "tangent")))
register("nextafter", lambda t, a, x, y: t.nextafter(x, y))
def _lerp_inf(xs, vs):
    """torch's lerp with an infinite endpoint, in IEEE arithmetic (exact: the results are
    infinities or NaN): x + w (y - x) for |w| < 0.5, y - (y - x)(1 - w) otherwise."""
    x, y, w = xs
    with np.errstate(invalid="ignore", over="ignore"):
        return np.where(np.abs(w) < 0.5, x + w * (y - x), y - (y - x) * (1 - w))


register("lerp", lambda t, a, x, y, w: t.lerp(x, y, w),
      conventions=(Convention("forward", "lerp with an infinite endpoint: torch's formula "
                              "switches to y - (y - x)(1 - w) at w >= 0.5, so it gives inf "
                              "where x + w (y - x) is inf - inf = NaN (and the other way)",
                              _where(lambda a, xs: np.isinf(xs[0]) | np.isinf(xs[1]),
                                     _lerp_inf, 1)),))
register("addcmul", lambda t, a, x, t1, t2, c: t.addcmul(x, t1, t2, value=as_number(c)))
register("addcdiv", lambda t, a, x, t1, t2, c: t.addcdiv(x, t1, t2, value=as_number(c)))
register("nanToNum", lambda t, a, x, nan, pos, neg: t.nan_to_num(
    x, nan=as_number(nan), posinf=as_number(pos), neginf=as_number(neg)))
register("fullLike", lambda t, a, x, c: t.full_like(x, as_number(c)))

# ----- transcendental functions ------------------------------------------------------------------

for _name, _fn in (("exp", "exp"), ("exp2", "exp2"), ("expm1", "expm1"), ("log", "log"),
                   ("log2", "log2"), ("log10", "log10"), ("log1p", "log1p"), ("sin", "sin"),
                   ("cos", "cos"), ("tan", "tan"), ("asin", "asin"), ("acos", "acos"),
                   ("atan", "atan"), ("sinh", "sinh"), ("cosh", "cosh"), ("asinh", "asinh"),
                   ("acosh", "acosh"), ("atanh", "atanh"), ("erf", "erf"),
                   ("floor", "floor"), ("ceil", "ceil"), ("round", "round"),
                   ("trunc", "trunc"), ("frac", "frac")):
    register(_name, (lambda f: lambda t, a, x: getattr(t, f)(x))(_fn))
# atan2's first port is the numerator, as torch.atan2(input, other).
register("atan2", lambda t, a, x, y: t.atan2(x, y))


def _sign_nan(t, a, xs, vs):
    """torch.sign(NaN) is 0 (the rule: NaN)."""
    x = np.asarray(xs[0], np.float64)
    at = np.isnan(x)
    if not at.any():
        return None
    out = object_array(x.shape)
    out[at] = Fraction(0)
    return (out,)


register("sign", lambda t, a, x: t.sign(x),
      conventions=(Convention("forward", "sign(NaN): torch gives 0 (the rule: NaN)",
                              _sign_nan),))

# ----- extrema ----------------------------------------------------------------------------------

def _max_conv(route):
    """maximum/minimum where torch's convention differs from the rule's: a NaN operand (torch
    gives both operands the whole cotangent, and the tangent ty; the rule splits both in
    half) and a tie of signed zeros (torch splits it in half, where the rule orders -0 below
    +0 and gives the larger zero everything)."""
    def exact(t, a, xs, vs):
        if a.element != "scalar":
            return None
        x, y = (np.asarray(v, np.float64) for v in xs)
        nan = np.isnan(x) | np.isnan(y)
        zeros = (x == y) & (np.signbit(x) != np.signbit(y))
        if not (nan | zeros).any():
            return None
        if route == "gradient":
            g = np.asarray(vs[0], np.float64)
            gx = object_array(x.shape)
            gx[nan] = [fraction_of(v) for v in g[nan]]
            gx[zeros] = [scaled_exact(Fraction(1, 2), v) for v in g[zeros]]
            return (gx, gx.copy())
        tx, ty = (np.asarray(v, np.float64) for v in vs)
        out = object_array(x.shape)
        out[nan] = [fraction_of(v) for v in ty[nan]]
        out[zeros] = [scaled_exact(Fraction(1, 2), add_exact(p, q))
                      for p, q in zip(tx[zeros], ty[zeros])]
        return (out,)
    return exact


def _fmax_tie(name, route):
    """fmax/fmin where the operands compare equal (+0 and -0 included) or are both NaN:
    torch's gradient gives x the whole cotangent (the rule splits it in half, or orders the
    zeros); its tangent is ty at an fmax tie, tx at an fmin tie and tx where both are NaN
    (the rule: the half sum)."""
    def exact(t, a, xs, vs):
        x, y = (np.asarray(v, np.float64) for v in xs)
        tie, both = x == y, np.isnan(x) & np.isnan(y)
        at = tie | both
        if not at.any():
            return None
        if route == "tangent":
            tx, ty = (np.asarray(v, np.float64) for v in vs)
            pick = np.where(tie & (name == "fmax"), ty, tx)
            out = object_array(x.shape)
            out[at] = [fraction_of(v) for v in pick[at]]
            return (out,)
        first, second = object_array(x.shape), object_array(x.shape)
        first[at] = [fraction_of(v) for v in np.asarray(vs[0], np.float64)[at]]
        second[at] = Fraction(0)
        return (first, second)
    return exact


for _name, _fn in (("max", "maximum"), ("min", "minimum")):
    register(_name, (lambda f: lambda t, a, x, y: getattr(t, f)(x, y))(_fn),
          conventions=tuple(Convention(r, f"{_name} with a NaN operand: torch gives both "
                                          f"operands the whole cotangent and the tangent ty "
                                          f"(the rule: half each, the half sum); at a tie of "
                                          f"-0 and +0 torch splits in half (the rule orders "
                                          f"the zeros)", _max_conv(r))
                            for r in ("gradient", "tangent")))
for _name in ("fmax", "fmin"):
    register(_name, (lambda f: lambda t, a, x, y: getattr(t, f)(x, y))(_name),
          conventions=(
              Convention("gradient", f"{_name} at a tie (x == y, -0 == +0, or both NaN): torch "
                                     f"gives x the whole cotangent (the rule splits it in "
                                     f"half)", _fmax_tie(_name, "gradient")),
              Convention("tangent", f"{_name} at a tie: torch's tangent is "
                                    f"{'ty' if _name == 'fmax' else 'tx'} (tx where both are "
                                    f"NaN; the rule: the half sum)",
                         _fmax_tie(_name, "tangent"))))
register("clamp", lambda t, a, x, lo, hi: t.clamp(x, min=as_number(lo), max=as_number(hi)))

# ----- activations -----------------------------------------------------------------------------

def _threshold_nan(name, rule, ports):
    """relu and elu at NaN: torch's threshold test (x <= 0 is false at NaN) passes the
    cotangent (tangent) through; the rule gives ``rule``."""
    return tuple(Convention(r, f"{name} at NaN: torch's threshold test passes the "
                               f"{'cotangent' if r == 'gradient' else 'tangent'} through "
                               f"(the rule: {rule})",
                            _where(lambda a, xs: np.isnan(xs[0]), _passes,
                                   ports if r == "gradient" else 1))
                 for r in ("gradient", "tangent"))


register("relu", lambda t, a, x: t.nn.functional.relu(x),
         conventions=_threshold_nan("relu", "0", 1))
register("elu", lambda t, a, x, alpha: t.nn.functional.elu(x, alpha=as_number(alpha)),
      conventions=_threshold_nan("elu", "NaN", 2))
register("sigmoid", lambda t, a, x: t.sigmoid(x))
register("tanh", lambda t, a, x: t.tanh(x))
register("softplus", lambda t, a, x, beta, th: t.nn.functional.softplus(
    x, beta=as_number(beta), threshold=as_number(th)))
register("silu", lambda t, a, x: t.nn.functional.silu(x))
register("gelu", lambda t, a, x: t.nn.functional.gelu(x, approximate=a.approximate))
register("leakyReLU", lambda t, a, x, s: t.nn.functional.leaky_relu(x, negative_slope=as_number(s)))

# ----- comparisons, logic, casts ---------------------------------------------------------------

for _name, _fn in (("eq", "eq"), ("ne", "ne"), ("lt", "lt"), ("le", "le"), ("gt", "gt"),
                   ("ge", "ge"), ("logicalAnd", "logical_and"), ("logicalOr", "logical_or"),
                   ("logicalXor", "logical_xor")):
    register(_name, (lambda f: lambda t, a, x, y: getattr(t, f)(x, y))(_fn))
for _name, _fn in (("isNaN", "isnan"), ("isInf", "isinf"), ("isFinite", "isfinite"),
                   ("logicalNot", "logical_not")):
    register(_name, (lambda f: lambda t, a, x: getattr(t, f)(x))(_fn))
register("select", lambda t, a, c, x, y: t.where(c, x, y))
# The dtype argument ``d`` of a conversion: the value ports' dtype (the format's).
register("cast", lambda t, a, x, d=None: x.to(d))

# ----- integer words ---------------------------------------------------------------------------

for _name, _fn in (("bitwiseAnd", "bitwise_and"), ("bitwiseOr", "bitwise_or"),
                   ("bitwiseXor", "bitwise_xor"), ("bitwiseLeftShift", "bitwise_left_shift")):
    register(_name, (lambda f: lambda t, a, x, y: getattr(t, f)(x, y))(_fn))
register("bitwiseNot", lambda t, a, x: t.bitwise_not(x))
register("shiftRightArithmetic", lambda t, a, x, n: t.bitwise_right_shift(x, n),
      refuses=lambda a: None if a.element.startswith("int") else
      "torch shifts unsigned words right logically (no arithmetic shift of a uint pattern)")
register("shiftRightLogical", lambda t, a, x, n: t.bitwise_right_shift(x, n),
      refuses=lambda a: None if a.element.startswith("uint") else
      "torch shifts signed words right arithmetically (no logical shift of an int pattern)")


def _bitcast(t, a, x, d=None):
    words = {"int8": t.int8, "int16": t.int16, "int32": t.int32, "int64": t.int64,
             "uint8": t.uint8, "uint16": t.uint16, "uint32": t.uint32, "uint64": t.uint64}
    to = d if a.target == "scalar" else words[a.target]
    if x.element_size() != t.empty((), dtype=to).element_size():
        raise ValueError(f"bitcast: {x.dtype} words and {to} differ in width")
    return x.view(to)


register("bitcast", _bitcast)
register("encodeIndex", lambda t, a, i, d=None: i.to(_word(t, a.element)))
register("decodeIndex", lambda t, a, w, d=None: w.to(t.int64))


def _word(t, name):
    return getattr(t, name)
