"""One route port measured: computed values against exact values, bounds, reproducers.

``measure_port(row, computed, exact, fmt, ...)`` fills a row's metrics (numerics.metrics on
the exact mpmath values, clamped into [2**(qmin-64), 2**(emax+2)] in magnitude: exp(1e38)
has an exponent no rational can hold; the clamped value rounds alike, measures alike above,
and within 2**-64 ulp below; non-scalar outputs -- index, Boolean, integer -- compared
exactly, ``mismatches``); ``worst_case`` the reproducer of the largest error.

Given the sample kind of each element (``per_sample``), a row also gets its statistics per
kind (``by_kind``), so reports can show the ordinary domain apart from the edges, special
values and magnitudes; and for unary elementwise operators, each sample's error against its
input (``by_input``) and the range of inputs where the route overflowed or underflowed
inside (``inside``).  Every set of samples gets ``statistics``: ulps, bits of error
(engine/rows.py) and ``buckets``.

Bounds, for the emulated model: every sample's error against (a) the operator's roundoff
certificate -- a fixed number of ulps, or an a priori formula of the inputs (routes.apriori)
under the task's declared policy: ``bound`` (the largest, in ulps), ``bound_ratio`` (the
largest measured / bound), and (b) the rigorous bound of the same rule evaluated under
numerics.bounding (enclosures of the exact value and of every value the model allows the
implementation to compute): ``interval_bound``, ``interval_bound_ratio``.  A sample above
either bound is a violation (``violations``); samples without a finite bound (overflow,
NaN, an undecided comparison) are counted in ``unbounded`` / ``interval_unbounded``.
"""

from __future__ import annotations

import math

import numpy as np
from mpmath import libmp

from roundoff_coverage import formats, numerics, routes
from roundoff_coverage.numerics import metrics
from roundoff_coverage.numerics.metrics import clamp_exact

from . import rows
from .implementations.base import run_routes, subject_rule
from .lazy_exact import LazyExact
from .task import route_ports

REPRO_MAX_ELEMENTS = 256       # full input arrays in a reproducer up to this many elements

def computed_values(y, fmt, backend):
    """Computed values as float64 (object arrays for formats wider than binary64)."""
    a = np.asarray(y)
    if a.dtype.kind in "biu" and not fmt.fits_binary64:
        return a
    if fmt.fits_binary64:
        return np.asarray(a, dtype=np.float64) if a.dtype != object else \
            np.asarray(backend.to_float64(a), dtype=np.float64)
    return a


# ----- measuring -------------------------------------------------------------------------------

def route_bound(task, route):
    """The certified forward bound in ulps for this task, or None: a fixed-ulp roundoff
    certificate of the operator covering the format and mode, under the emulated backend's
    strict policy."""
    if route != "forward" or task.implementation != "emulated" or task.policy != "strict":
        return None
    for c in routes.certificates(task.op):
        if c.kind == "roundoff" and c.bound and "ulps" in c.bound \
                and task.format in c.bound["formats"] and task.mode in c.bound["modes"]:
            return float(c.bound["ulps"])
    return None


class Bounds:
    """The bounds of one route's rows: ``ulps`` (a fixed-ulp certificate), ``apriori`` and
    ``interval`` (per draw, a tuple of absolute bounds per measured port, or None)."""

    def __init__(self, ulps=None, apriori=None, interval=None):
        self.ulps, self.apriori, self.interval = ulps, apriori, interval

    def port(self, j):
        """(a priori, interval) absolute bounds of the route's j-th measured port, flattened
        and joined over draws as concat_draws joins values (None where absent)."""
        def joined(per_draw):
            if per_draw is None:
                return None
            return np.concatenate([np.ravel(np.asarray(b[j], dtype=np.float64))
                                   for b in per_draw])
        return joined(self.apriori), joined(self.interval)


def apriori_bounds(task, d, fmt):
    """Per draw, the forward output's a priori bound (routes.apriori) under the task's
    declared policy, or None (no formula, another implementation, not applicable)."""
    if task.implementation != "emulated" or task.op not in routes.apriori.FORMULAS:
        return None
    policy = task.accumulation          # the declared policy, resolved at planning
    out = []
    for xs in d.inputs:
        b = routes.apriori.bound(d.op, xs, fmt, task.mode, policy)
        if b is None:
            return None
        out.append((b,))
    return out


def concat_draws(per_draw, i, fmt, backend, scalar=True):
    """Port ``i`` of every draw, flattened and joined; with (draw, element) of each entry.
    Computed values (``backend`` given) at scalar ports as computed_values gives them; words,
    indices and Booleans unchanged (a uint64 word does not survive float64)."""
    parts, where = [], []
    for k, ys in enumerate(per_draw):
        a = computed_values(ys[i], fmt, backend) if backend is not None and scalar else \
            np.asarray(ys[i], dtype=object) if _is_objects(ys[i]) else np.asarray(ys[i])
        parts.append(np.asarray(a).reshape(-1))
        where += [(k, j) for j in range(parts[-1].size)]
    if not parts:
        return np.zeros(0), []
    return np.concatenate(parts), where


def _is_objects(a):
    return np.asarray(a).dtype == object


# The fields measure_port fills (a remeasured row resets them first: torch's conventions,
# engine/implementations/torch.py).
METRIC_FIELDS = ("samples", "max_ulp", "p99_ulp", "mean_ulp", "min_signed_ulp",
                 "max_signed_ulp", "max_bits", "mean_bits", "max_rel", "exceptional",
                 "unmeasured", "mismatches", "histogram", "by_magnitude", "buckets", "by_kind",
                 "inside", "by_input", "worst")


def measure_port(row, comp, exact, fmt, bound, apriori=None, interval=None, kinds=None,
                 inputs=None, stand=None):
    """Fill ``row``'s metrics from computed values and exact values of one port; returns the
    ulp errors (None for non-scalar ports).  ``bound``: a fixed bound in ulps; ``apriori``,
    ``interval``: absolute bounds per element (routes.apriori, numerics.bounding);
    ``kinds``, ``inputs``: the sample kind of each element and a unary elementwise
    operator's (input name, input values), as ``per_sample`` gives them, or None.
    ``stand``: the exact values' (binary64 stand-ins, tensor_measures.Raws) of
    engine/tensor_measures.stand_ins, when the caller has them (the model run: one pass
    over the exact values per site)."""
    row["samples"] = int(comp.size)
    if comp.dtype != object and comp.dtype.kind in "biu" or not _scalar_exact(exact):
        # Exact comparison; Python ints (object arrays) so uint64 and int64 compare exactly.
        same = np.asarray(comp).astype(object) == np.asarray(exact).astype(object)
        row["mismatches"] = int(comp.size - np.count_nonzero(same))
        return None
    floats = None if stand is None else _clamped_stand_ins(comp, *stand, fmt)
    if floats is not None:
        clamped, exact = exact, floats     # _exact_zeros never meets a clamped value
    else:
        clamped = clamp_exact(exact, fmt)
        exact = _exact_values(comp, clamped, fmt)
    # stand's copies (a row's subsets of 38 M elements) are not needed past this point.
    stand = None
    # The absolute errors are read only against absolute bounds (_check).
    m = metrics.measure(comp, exact, fmt, absolute=apriori is not None or interval is not None)
    m = m._replace(ulp=_exact_zeros(m.ulp, comp, clamped, exact, fmt))
    stats = metrics.summary(m.ulp)
    bits = error_bits(m, fmt)
    row.update({k: v for k, v in statistics(m.ulp, bits, m.codes, stats).items()
                if k != "samples"})
    row.update(min_signed_ulp=stats["min_signed"], max_signed_ulp=stats["max_signed"],
               histogram=stats["histogram"]["counts"])
    # max |rel| over the non-NaN errors, without a copy: fmax and fmin skip NaN (+ 0.0:
    # |-0| is +0).
    rel = m.rel.reshape(-1)
    top = max(np.fmax.reduce(rel), -np.fmin.reduce(rel)) if rel.size else math.nan
    row["max_rel"] = None if math.isnan(top) else float(top) + 0.0
    row["by_magnitude"] = by_magnitude(m.ulp, exact, fmt)
    if kinds is not None:
        row["by_kind"] = {k: statistics(m.ulp[kinds == k], None if bits is None else
                                        bits[kinds == k], m.codes[kinds == k])
                          for k in dict.fromkeys(kinds.tolist())}
    row["inside"] = inside(m.ulp, m.codes, kinds, inputs)
    row["by_input"] = by_input(m.ulp, kinds, inputs)
    if apriori is not None:
        _check(row, "", apriori, m, exact, fmt)
    elif bound is not None:
        row["bound"] = bound
        a = np.abs(m.ulp[~np.isnan(m.ulp)])
        row["violations"] = int((a > bound).sum())
        top = stats["max"]
        if top is not None:
            row["bound_ratio"] = top / bound if bound > 0 else (0.0 if top == 0 else np.inf)
    if interval is not None:
        _check(row, "interval_", interval, m, exact, fmt)
        row["violations"] = (row["violations"] or 0) + row.pop("interval_violations")
    return m.ulp


# ----- statistics of a set of samples ----------------------------------------------------------

def error_bits(m, fmt):
    """Bits of error of each sample (engine/rows.py: log2(1 + |ord(computed) -
    ord(RN(exact))|), numerics.metrics.error_bits) capped at the format's width; NaN where
    the error is not a number; None for formats beyond binary64 (no ordinals).  For formats
    of at most 26 bits RN rounds the exact value's binary64 stand-in (_exact_values), which
    can only pick the other neighbour for exact values within 2**-53 relative of a
    midpoint."""
    if m.bits is None:
        return None
    return np.minimum(np.asarray(m.bits, dtype=np.float64).reshape(-1), float(fmt.bits))


def buckets(ulp) -> list:
    """Counts of samples by |error| (rows.BUCKET_LABELS): exactly 0, then in (0, 0.5],
    (0.5, 1], (1, 2], (2, 4], (4, 16], (16, 256], above 256 ulp, and NaN errors last."""
    flat = np.asarray(ulp, dtype=np.float64).reshape(-1)
    upper = np.array(rows.BUCKET_EDGES[1:])
    inner, zeros, nans = np.zeros(upper.size + 1, dtype=np.int64), 0, 0
    for i in range(0, flat.size, metrics.MEASURE_BLOCK):      # a block's temporaries
        a = np.abs(flat[i:i + metrics.MEASURE_BLOCK])
        nan = np.isnan(a)
        a = a[~nan]
        # searchsorted "left": edges[i-1] < a <= edges[i]; past the last edge: "> 256".
        inner += np.bincount(np.searchsorted(upper, a[a > 0], side="left"),
                             minlength=upper.size + 1)
        zeros, nans = zeros + int((a == 0).sum()), nans + int(nan.sum())
    return [zeros] + [int(n) for n in inner] + [nans]


def statistics(ulp, bits, codes, summary=None) -> dict:
    """rows.KIND_STATS of one set of samples: their count, max, p99 and mean |error| in ulp
    (numerics.metrics.summary, or ``summary`` of these errors when given), max and mean bits
    of error (None without measurable errors or ordinals), NaN errors, exceptional outcomes
    by class and ``buckets``."""
    s = metrics.summary(ulp) if summary is None else summary
    b = np.zeros(0) if bits is None else bits[~np.isnan(bits)]
    return {"samples": int(np.asarray(ulp).size), "max_ulp": s["max"], "p99_ulp": s["p99"],
            "mean_ulp": s["mean"], "max_bits": float(b.max()) if b.size else None,
            "mean_bits": float(b.mean()) if b.size else None, "unmeasured": s["nan_count"],
            "exceptional": {k: n for k, n in metrics.summarize_classes(codes).items()
                            if k != "ok" and n},
            "buckets": buckets(ulp)}


# Exceptional outcomes by what went wrong inside a route (numerics.metrics.CLASSES).
INSIDE = (("overflow", ("overflow_to_inf", "overflow_to_nan", "overflow_to_max")),
          ("underflow", ("underflow_to_zero",)), ("nan", ("nan_from_finite",)))


def inside(ulp, codes, kinds, inputs) -> dict:
    """{what: {"samples", "kinds": {kind: samples}, and for a unary elementwise operator
    "input", "min_abs_input", "max_abs_input"}} of the exceptional outcomes (INSIDE) whose
    error is >= 1 ulp or NaN: not even a faithful rounding of the exact value, so the
    overflow, underflow or NaN happened inside the route (exp's gradient overflowing where
    exp(x) * cotangent is finite), not in the rounding of a result beyond the range."""
    a = np.abs(np.asarray(ulp, dtype=np.float64).reshape(-1))
    codes = np.asarray(codes).reshape(-1)
    out = {}
    for what, classes in INSIDE:
        hit = np.isin(codes, [metrics.CLASSES.index(c) for c in classes]) & ~(a < 1)
        if not hit.any():
            continue
        entry = {"samples": int(hit.sum())}
        if kinds is not None:
            entry["kinds"] = {k: int((kinds[hit] == k).sum())
                              for k in dict.fromkeys(kinds[hit].tolist())}
        if inputs is not None:
            ax = np.abs(inputs[1][hit])
            ax = ax[~np.isnan(ax)]
            if ax.size:
                entry.update(input=inputs[0], min_abs_input=float(ax.min()),
                             max_abs_input=float(ax.max()))
        out[what] = entry
    return out


def by_input(ulp, kinds, inputs) -> dict | None:
    """{"input": name, "kinds": [kind names], "points": [[x, ulp error, kind index], ...]}
    of a unary elementwise operator (None for others): every sample with a measurable
    error and a number as input, by increasing x; beyond rows.POINTS_MAX samples (an
    enumerated format), the inputs in increasing order are cut into POINTS_MAX runs and
    the largest |error| of each run is kept."""
    if inputs is None:
        return None
    name, x = inputs
    err = np.asarray(ulp, dtype=np.float64).reshape(-1)
    keep = np.flatnonzero(~np.isnan(err) & ~np.isnan(x))
    keep = keep[np.argsort(x[keep], kind="stable")]
    if keep.size > rows.POINTS_MAX:
        keep = np.array([run[int(np.argmax(np.abs(err[run])))]
                         for run in np.array_split(keep, rows.POINTS_MAX)])
    names = list(dict.fromkeys(kinds.tolist())) if kinds is not None else []
    index = {k: i for i, k in enumerate(names)}
    return {"input": name, "kinds": names,
            "points": [[float(x[i]), float(err[i]),
                        index[kinds[i]] if kinds is not None else 0] for i in keep]}


def per_sample(d, where):
    """(kinds, inputs) of the measured elements ``where`` ([(draw, element)], as concat_draws
    lists them): the sample kind of each (an object array), and for a unary elementwise
    operator -- one value input whose element i goes with element i of the port -- (the
    input's name, its float64 value at each element); inputs None for other operators."""
    draw = np.fromiter((k for k, _ in where), dtype=np.int64, count=len(where))
    elem = np.fromiter((j for _, j in where), dtype=np.int64, count=len(where))
    kinds = np.asarray(d.kinds, dtype=object)[draw] if len(where) else np.zeros(0, object)
    values = [i for i, p in enumerate(d.op.inputs) if p.differentiable]
    if not d.elementwise or len(values) != 1 or not len(where):
        return kinds, None
    i = values[0]
    x = np.empty(len(where))
    for k in np.unique(draw):
        xs = np.asarray(d.inputs[k][i])
        sel = draw == k
        if xs.dtype.kind != "f" or xs.size != sel.sum():
            return kinds, None                        # not one input element per element
        x[sel] = np.asarray(xs, dtype=np.float64).reshape(-1)[elem[sel]]
    return kinds, (d.op.input_names[i], x)


def _check(row, prefix, b, m, exact, fmt):
    """Measured errors against absolute bounds ``b``: the largest bound in ulps of the exact
    value (``bound``), the largest measured / bound (``bound_ratio``), the samples above their
    bound (``violations``) and those without a finite bound (``unbounded``)."""
    a = np.abs(np.asarray(m.abs, dtype=np.float64).reshape(-1))
    ok = np.isfinite(b) & ~np.isnan(a)
    # The measured error carries the exact value's own stand-ins: rounded to binary64
    # (_exact_values: 2**-53 relative) and clamped below 2**(qmin-64) (clamp_exact).
    mag = np.abs(np.asarray(exact, dtype=np.float64).reshape(-1))
    b = b + np.where(np.isfinite(mag), mag, 0.0) * 2.0 ** -50 + 2.0 ** (fmt.qmin - 62)
    row[prefix + "unbounded"] = int(b.size - ok.sum())
    row[prefix + "violations"] = int((a[ok] > b[ok]).sum())
    if not ok.any():
        return
    ulp = _ulps(exact, fmt)[ok]
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        # A bound beyond binary64's range in ulps of a tiny exact value: inf, as meant.
        row[prefix + "bound"] = float((b[ok] / ulp).max())
        ratio = np.where(b[ok] > 0, a[ok] / b[ok], np.where(a[ok] > 0, np.inf, 0.0))
    row[prefix + "bound_ratio"] = float(ratio.max())


def _binades(exact, missing) -> np.ndarray:
    """floor(log2 |x|) of each exact value (float64 or mpmath), ``missing`` for zeros and
    non-finite values."""
    flat = np.asarray(exact).reshape(-1)
    e = np.full(flat.size, missing, dtype=np.int64)
    if flat.dtype == np.float64:
        fin = np.isfinite(flat) & (flat != 0)
        e[fin] = np.frexp(np.abs(flat[fin]))[1].astype(np.int64) - 1
    else:
        for i, v in enumerate(flat):
            mpf = getattr(v, "_mpf_", None)
            if mpf is not None and mpf[1]:
                e[i] = mpf[2] + mpf[3] - 1                  # exponent + bit count - 1
    return e


def _ulps(exact, fmt) -> np.ndarray:
    """ulp(x) of each exact value in ``fmt`` (numerics.metrics' ulp: the exponent stops at
    the top binade and at qmin; 2**qmin for zeros and non-finite values)."""
    e = _binades(exact, fmt.qmin + fmt.precision - 1)
    q = np.maximum(np.minimum(e, fmt.emax) - fmt.precision + 1, fmt.qmin)
    return np.ldexp(1.0, q.astype(np.int32))


def by_magnitude(ulp, exact, fmt) -> list:
    """[[binade, count, max |ulp error|], ...] of the measurable errors by the binade
    floor(log2 |exact|) of their exact value, clamped to [qmin - 1, emax + 1] (below the
    subnormals, beyond the range); exact zeros and non-finite values are left out.  The
    error against input magnitude for elementwise operators, against the result's for
    the others."""
    ulp, exact = np.asarray(ulp).reshape(-1), np.asarray(exact).reshape(-1)
    found = {}                                    # binade: [count, max |ulp error|]
    for i in range(0, ulp.size, metrics.MEASURE_BLOCK):       # a block's temporaries
        e = _binades(exact[i:i + metrics.MEASURE_BLOCK], np.iinfo(np.int64).min)
        a = np.abs(ulp[i:i + metrics.MEASURE_BLOCK])
        keep = (e != np.iinfo(np.int64).min) & ~np.isnan(a)
        if not keep.any():
            continue
        e = np.clip(e[keep], fmt.qmin - 1, fmt.emax + 1)
        a = a[keep]
        for b in np.unique(e).tolist():
            sel = a[e == b]
            count, top = found.get(b, (0, -math.inf))
            found[b] = (count + int(sel.size), max(top, float(sel.max())))
    return [[int(b), n, top] for b, (n, top) in sorted(found.items())]


def _exact_values(comp, exact, fmt):
    """Exact values as metrics reads them.  For formats of at most 26 bits of precision each
    is rounded to the nearest binary64 (the float64 path of numerics.metrics is ~10x faster
    than the rational one): rounding is monotone, so no error crosses a half-ulp boundary or
    a bound it did not cross, and the ulp error moves by at most 2**(p - 53) <= 2**-27 ulp.
    An exact zero carries no sign (mpmath has one zero): it takes the computed zero's sign,
    as the rational path ignores the sign of unsigned zeros."""
    if fmt.precision > 26 or comp.dtype != np.float64:
        return exact
    flat = np.asarray(exact, dtype=object).reshape(-1)
    out = np.empty(flat.size, dtype=np.float64)
    for i, v in enumerate(flat):
        m = getattr(v, "_mpf_", None)
        out[i] = libmp.to_float(m, rnd=libmp.round_nearest) if m is not None else float(v)
    return _signed_zeros(out.reshape(np.shape(exact)), comp)


def _signed_zeros(out, comp):
    """``out`` (binary64 stand-ins of exact values) with each zero given the computed
    zero's sign (mpmath has one zero; the rational path ignores the sign of zeros)."""
    zero = out == 0
    if zero.any():
        out[zero] = np.copysign(0.0, np.where(np.isnan(comp[zero]), 1.0, comp[zero]))
    return out


def _clamped_stand_ins(comp, y, mpfs, fmt):
    """What ``_exact_values(comp, clamp_exact(exact))`` gives, from the exact values' binary64
    stand-ins ``y`` (rounded to nearest, as _exact_values rounds) and their
    tensor_measures.Raws ``mpfs``: clamping commutes with the monotone rounding (a value
    rounding to 2**top or 2**tiny is one clamped or not; a nonzero one below binary64's
    range has the stand-in 0, its raw mpf says it is not 0).  None where _exact_values
    keeps the exact values (precision over 26 bits) or the clamps leave binary64's range
    (the path with the exact values decides)."""
    top, tiny = fmt.emax + 2, fmt.qmin - 64
    if fmt.precision > 26 or comp.dtype != np.float64 or top > 1023 or tiny < -1074:
        return None
    out = np.array(y, dtype=np.float64, copy=True).reshape(-1)
    a = np.abs(out)
    # clamp_exact clamps mpf entries only (a binary64 entry stays as it is); an entry whose
    # rest is known (tensor_measures.Raws.lo) and whose stand-in is 0 is an exact 0.
    big, small = a >= math.ldexp(1.0, top), a < math.ldexp(1.0, tiny)
    zero = (out == 0) & ~np.isnan(mpfs.lo)
    for i in np.flatnonzero((big | small) & ~zero):
        m = mpfs[i]
        if m is None or not m[1]:                # binary64, or an mpf zero, inf or NaN
            continue
        out[i] = math.ldexp(-1.0 if m[0] else 1.0, top if big[i] else tiny)
    return _signed_zeros(out.reshape(np.shape(comp)), comp)


def _exact_zeros(ulp, comp, exact, standin, fmt):
    """``ulp`` with its zeros made exact: where the binary64 stand-in of _exact_values hit
    the computed value but is not the exact value itself (exp(2**-126) is 1 + 2**-126), the
    error is recomputed from the exact value (a few elements, the rational path), so an
    error of 0 ulp (``buckets``) means computed = exact."""
    if standin is exact:
        return ulp
    zeros = np.flatnonzero(np.asarray(ulp).reshape(-1) == 0)
    if isinstance(exact, LazyExact):
        # hi + lo, hi the nearest binary64: not a binary64 number exactly where lo != 0.
        flat = exact.reshape(-1)
        moved = zeros[flat.compact.lo[zeros] != 0].tolist()
    else:
        flat = np.asarray(exact, dtype=object).reshape(-1)
        moved = []
        for i in zeros:
            m = getattr(flat[i], "_mpf_", None)
            # (sign, man, exp, bits): a binary64 holds it exactly when its significand has
            # at most 53 bits and it is not below the normal range; zero, inf, NaN: man 0.
            if m is not None and m[1] and (m[3] > 53 or m[2] + m[3] - 1 < -1022):
                moved.append(i)
    if not moved:
        return ulp
    out = np.array(ulp, dtype=np.float64, copy=True).reshape(-1)
    out[moved] = metrics.ulp_error(np.asarray(comp).reshape(-1)[moved], flat[moved], fmt)
    return out.reshape(np.shape(ulp))


def _scalar_exact(exact) -> bool:
    # A LazyExact says its dtype (object) without making its values.
    dtype = exact.dtype if isinstance(exact, LazyExact) else np.asarray(exact).dtype
    return dtype == object or dtype.kind == "f"


def _bits(x, fmt, port):
    """A reproducer's view of an input array: hex bit patterns at scalar ports, the values
    at the others (lists nest as the array does)."""
    a = np.asarray(x)
    if port is not None and port.scalar:
        width = (fmt.bits + 3) // 4
        pats = formats.encode(np.asarray(a, dtype=np.float64) if fmt.fits_binary64 else a, fmt)
        return np.vectorize(lambda b: f"0x{int(b):0{width}x}", otypes=[object])(pats).tolist() \
            if pats.ndim else f"0x{int(pats):0{width}x}"
    return a.tolist()


def _piece(x, port, elem, elementwise, fmt, out_size):
    """The part of input ``x`` a reproducer keeps: element ``elem`` for elementwise
    operators, the whole array up to REPRO_MAX_ELEMENTS, else a note."""
    a = np.asarray(x)
    if elementwise and a.ndim and a.size == out_size:
        return _bits(a.reshape(-1)[elem], fmt, port)
    if a.size <= REPRO_MAX_ELEMENTS:
        return _bits(a, fmt, port)
    return (f"{a.size} elements, shape {list(a.shape)}: regenerate them with "
            f"reports.reproduce(results_file, row)")


def worst_case(d, ulp, where, comp, exact, route, fmt, out_size) -> dict | None:
    """The reproducer of the largest |ulp error| (None when no error is measurable)."""
    j = rows.worst_index(ulp)
    if j is None:
        return None
    k, elem = where[j]
    o = d.op
    out = {"kind": d.kinds[k], "draw": k, "element": elem, "ulp": float(ulp[j]),
           "computed": rows.decimal_text(comp[j]),
           "exact": rows.decimal_text(np.asarray(exact).reshape(-1)[j]),
           "inputs": {n: _piece(x, p, elem, d.elementwise, fmt, out_size)
                      for n, p, x in zip(o.input_names, o.inputs, d.inputs[k])}}
    if route == "tangent":
        out["tangents"] = {n: _piece(t, p, elem, d.elementwise, fmt, out_size)
                           for n, p, t in zip(o.input_names, o.inputs, d.tangents[k])
                           if t is not None}
    if route == "gradient":
        out["cotangents"] = {n: _piece(c, p, elem, d.elementwise, fmt, out_size)
                             for n, p, c in zip(o.output_names, o.outputs, d.cotangents[k])
                             if c is not None}
    return out


def interval_bounds(task, d, fmt, wanted) -> dict:
    """{route: per draw, a tuple of absolute error bounds per measured port} from the rule
    evaluated under numerics.bounding (enclosures of the exact and of every computed value),
    for the emulated implementation; a draw whose evaluation took a comparison the
    enclosures could not decide gets infinite bounds (no claim)."""
    if task.implementation != "emulated" or not hasattr(numerics, "bounding"):
        return {}
    try:
        bk = numerics.bounding(fmt, task.mode, task.accumulation)
        rule = subject_rule(d.op, bk)
    except Exception:                                       # noqa: BLE001 (no bound)
        return {}
    if rule is None:
        return {}
    ports = {r: [i for i, _, _ in route_ports(d.op, r)] for r in wanted}
    out = {r: [] for r in wanted}
    for k in range(len(d.inputs)):
        # Every route of a draw in one evaluation (one forward pass); only when a comparison
        # came out undecided are the routes redone one by one, so that the undecided one
        # does not take the others' bounds with it.
        bk.reset()
        got = run_routes(rule, d.subset([k]), [r for r in wanted if out[r] is not None])
        split = bk.undecided
        for r in wanted:
            if out[r] is None:
                continue
            ys, bad = got[r], False
            if split:
                bk.reset()
                ys = run_routes(rule, d.subset([k]), [r])[r]
                bad = bk.undecided
            if isinstance(ys, Exception):
                out[r] = None
                continue
            try:
                out[r].append(tuple(_enclosure_bound(ys[0][i], bad) for i in ports[r]))
            except Exception:                               # noqa: BLE001 (no bound)
                out[r] = None
    return {r: v for r, v in out.items() if v is not None}


def _enclosure_bound(y, undecided):
    """Absolute error bounds of one output of the bounding backend (inf: no claim -- an
    undecided comparison, or an output that carries no enclosure, such as words)."""
    a = np.asarray(y)
    if undecided or a.dtype.names is None:
        return np.full(a.shape, np.inf)
    return np.asarray(numerics.BoundingBackend.error_bound(a), dtype=np.float64)


# ----- scaled formats --------------------------------------------------------------------------

# What a scaled row's ulp fields count (the rows' ``error_unit``, the module docstring).
SCALED_UNIT = "ulp of {element} at the exact value's block scale"


def recipe_unit(storage, forward, gradient, route) -> str:
    """What a recipe product's row counts (numerics.policy.RECIPES): its stored outputs
    measured in ulps of the storage format, its operands quantized into the scheme
    ``forward`` inside the route (and, on the gradient route, the cotangents into
    ``gradient``)."""
    told = f"operands quantized into {forward.label}"
    if route == "gradient" and gradient != forward:
        told += f", cotangents into {gradient.label}"
    return f"ulp of {storage.label} at the exact value ({told})"


def _kinds_of(flat):
    """(float64 stand-ins, exact NaN mask, exact infinity mask) of exact values (mpmath or
    float64): the nearest binary64 of each, so that a finite value beyond binary64's range is
    +-inf in the stand-in but not an infinity of the exact value."""
    x = np.empty(flat.size, dtype=np.float64)
    nan = np.zeros(flat.size, dtype=bool)
    inf = np.zeros(flat.size, dtype=bool)
    for i, v in enumerate(flat):
        m = getattr(v, "_mpf_", None)
        if m is None:
            x[i] = float(v)
            nan[i], inf[i] = x[i] != x[i], np.isinf(x[i])
        else:
            nan[i], inf[i] = m == libmp.fnan, m in (libmp.finf, libmp.fninf)
            x[i] = libmp.to_float(m, rnd=libmp.round_nearest)
    return x, nan, inf


def scaled_errors(comp, exact, scale, grid, top):
    """(ulp, rel, codes) of computed scaled-format values ``comp`` (float64) against
    ``exact`` (mpmath values or float64), ``scale`` the exact value's block scale D of each
    (float64; NaN where the exact block holds an Inf or NaN); ``grid`` the element grid
    (its precision p and qmin), ``top`` the element format's emax (module docstring).
    Special values: an exact NaN, or a finite exact value in a NaN block, against a
    computed NaN (the scheme's image of that block) is 0 ulp, else NaN (``missed_nan``); an
    exact infinity against a computed NaN is 0 (``nan_from_inf``: scaled formats store no
    infinities); a computed NaN against a finite exact value in a finite block is NaN
    (``nan_from_finite``); a computed infinity (``nosat`` elements) NaN (``overflow_to_inf``).
    The exact value is read as its nearest binary64 (p <= 8 here: the error moves by at most
    2**(p - 53) ulp), except where that stand-in equals the computed value: there the error
    is recomputed from the exact value, so 0 ulp means computed = exact."""
    code = {name: i for i, name in enumerate(metrics.CLASSES)}
    c = np.asarray(comp, dtype=np.float64).reshape(-1)
    d = np.asarray(scale, dtype=np.float64).reshape(-1)
    flat = np.asarray(exact, dtype=object).reshape(-1)
    x, xnan, xinf = _kinds_of(flat)
    n = c.size
    ulp, rel = np.full(n, np.nan), np.full(n, np.nan)
    codes = np.zeros(n, dtype=np.int8)
    cnan, cinf = np.isnan(c), np.isinf(c)
    dok = np.isfinite(d) & (d > 0)
    xfin = ~xnan & ~xinf
    ulp[(xnan | (xfin & ~dok)) & cnan] = 0.0
    codes[(xnan | (xfin & ~dok)) & ~cnan] = code["missed_nan"]
    ulp[xinf & cnan] = 0.0
    codes[xinf & cnan] = code["nan_from_inf"]
    codes[xinf & ~cnan] = code["missed_inf"]
    live = xfin & dok
    codes[live & cnan] = code["nan_from_finite"]
    codes[live & cinf] = code["overflow_to_inf"]
    m = live & ~cnan & ~cinf & np.isfinite(x)
    codes[m & (c == 0) & (x != 0)] = code["underflow_to_zero"]
    if m.any():
        xm, cm, dm = x[m], c[m], d[m]
        v = np.abs(xm) / dm
        e = np.frexp(v)[1].astype(np.int64) - 1
        q = np.where(v == 0, grid.qmin, np.maximum(np.minimum(e, top) - grid.precision + 1,
                                                   grid.qmin))
        unit = np.ldexp(dm, q.astype(np.int32))
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            ulp[m] = (cm - xm) / unit + 0.0
            rel[m] = np.where(xm != 0, (cm - xm) / np.where(xm == 0, 1.0, xm),
                              np.where(cm == 0, 0.0, np.copysign(np.inf, cm)))
        _exact_where_equal(ulp, rel, m, c, flat, x, unit)
    return ulp, rel, codes


def _exact_where_equal(ulp, rel, m, c, flat, x, unit):
    """Where the binary64 stand-in of the exact value equals the computed value but the exact
    value is not that binary64 number, the errors from the exact value (rationals)."""
    from fractions import Fraction
    where = np.flatnonzero(m)
    for j, i in enumerate(where):
        if ulp[i] != 0:
            continue
        mpf = getattr(flat[i], "_mpf_", None)
        if mpf is None or not mpf[1]:
            continue
        sign, man, exp, _ = mpf
        exact = Fraction(-man if sign else man) * (Fraction(2) ** exp)
        if exact == Fraction(x[i]):
            continue
        diff = Fraction(c[i]) - exact
        ulp[i] = float(diff / Fraction(unit[j]))
        rel[i] = float(diff / exact)


def measure_scaled_port(row, comp, exact, scale, scheme, fmt, kinds=None, inputs=None):
    """Fill ``row``'s metrics from one port's computed values after quantization
    (``comp``, float64), exact values and the exact values' block scales (``scale``), in
    ulps of ``scheme``'s element format at that scale (scaled_errors); ``fmt`` the compute
    format (the binades of ``by_magnitude``); ``kinds``, ``inputs`` as measure_port takes
    them.  Returns the ulp errors."""
    ulp, rel, codes = scaled_errors(comp, exact, scale, scheme.element_grid, scheme.emax_elem)
    stats = metrics.summary(ulp)
    row["samples"] = int(ulp.size)
    row.update({k: v for k, v in statistics(ulp, None, codes, stats).items()
                if k != "samples"})
    row.update(min_signed_ulp=stats["min_signed"], max_signed_ulp=stats["max_signed"],
               histogram=stats["histogram"]["counts"],
               error_unit=SCALED_UNIT.format(element=scheme.element.label))
    r = np.abs(rel[~np.isnan(rel)])
    row["max_rel"] = float(r.max()) if r.size else None
    row["by_magnitude"] = by_magnitude(ulp, exact, fmt)
    if kinds is not None:
        row["by_kind"] = {k: statistics(ulp[kinds == k], None, codes[kinds == k])
                          for k in dict.fromkeys(kinds.tolist())}
    row["inside"] = inside(ulp, codes, kinds, inputs)
    row["by_input"] = by_input(ulp, kinds, inputs)
    return ulp
