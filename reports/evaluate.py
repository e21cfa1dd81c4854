"""One task of the coverage run, evaluated and measured: ``evaluate(task) -> (rows, phases)``.

A task is one operator instance under one (format, mode, policy, implementation) with the
routes asked for; it yields one row per (route, port) (shared/ARCHITECTURE.md row fields).
The routes of a task share their sample inputs, so forward, tangent and gradient errors of a
row set are measured on the same points.

Steps, each timed into a phase (``sampling``, ``evaluation``, ``reference``, ``bounds``,
``measurement``):

1. Inputs: the declaration's samplers, one RNG per sample kind seeded from (seed, operator,
   attributes, format, kind) -- not from the mode, policy or implementation, so those compare
   on the same points -- ``draws`` draws per kind, already rounded into the format at scalar
   ports (routes/samples.py).  Elementwise instances draw once per kind at ``draws`` times
   their size (same distribution, one evaluation).  Exhaustive tasks (the first example of
   an operator; runner.plan) feed every finite value of the format to the one value input
   instead.  Tangents and cotangents: standard normal
   values rounded once (nearest even) into the format, from RNGs of their own.
2. The route under the implementation: ``numerics.emulated(format, mode, policy)``,
   ``numerics.native(dtype)``, or the operator's CUDA kernel (``cuda``: reports/cuda.py,
   which also checks the kernel's contract).
3. The reference: the same rule under ``numerics.reference(p + 64)`` on the same rounded
   inputs, tangents and cotangents (p the format's precision).  Escalation, once: the
   points whose measurement could depend on the reference's own error -- the largest error
   when it exceeds 1 ulp (cancellation inside the rule at p + 64 bits is the usual suspect),
   errors within 2**-40 ulp of a half-integer (an exact value on a rounding boundary), errors
   above the certified bound -- are recomputed at p + 192 bits (only those elements for
   elementwise operators, their whole draws otherwise) and replace the p + 64 values; when
   that moves any error by more than 2**-20 of itself, every draw is recomputed at p + 192.
   ``ref_prec`` is the precision of the bulk of the reference (p + 64, or p + 192 after a
   full recomputation).
4. Metrics: numerics.metrics on the exact (mpmath) values, clamped into [2**(qmin-64),
   2**(emax+2)] in magnitude (exp(1e38) has an exponent no rational can hold; the clamped
   value rounds alike, measures alike above, and within 2**-64 ulp below).  Non-scalar outputs (index, Boolean, integer) are
   compared exactly (``mismatches``).
5. Bounds (emulated implementation): every sample's error against (a) the operator's
   roundoff certificate -- a fixed number of ulps, or an a priori formula of the inputs
   (routes.apriori) under the task's declared policy: ``bound`` (the largest, in ulps),
   ``bound_ratio`` (the largest measured / bound), and (b) the rigorous bound of the same
   rule evaluated under numerics.bounding (enclosures of the exact value and of every value
   the model allows the implementation to compute): ``interval_bound``,
   ``interval_bound_ratio``.  A sample above either bound is a violation (``violations``);
   samples without a finite bound (overflow, NaN, an undecided comparison) are counted in
   ``unbounded`` / ``interval_unbounded``.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass

import numpy as np
from mpmath import libmp

from roundoff_coverage import formats
from roundoff_coverage import numerics
from roundoff_coverage import routes
from roundoff_coverage.numerics import metrics
from roundoff_coverage.numerics.metrics import clamp_exact

from .rows import empty as empty_row

REF_EXTRA, REF_ESCALATED = 64, 192
ROUTES = ("forward", "tangent", "gradient")
# Families whose operators act element by element on ports of one shape (draws batch).
BATCH_FAMILIES = ("elementwise", "transcendental", "rounding", "extrema", "activation", "logic")
# Families whose one-value-input operators are enumerated exhaustively in small formats.
EXHAUSTIVE_FAMILIES = ("elementwise", "transcendental", "rounding", "activation")
EXHAUSTIVE_MAX_BITS = 16
REPRO_MAX_ELEMENTS = 256       # full input arrays in a reproducer up to this many elements
PHASES = ("sampling", "evaluation", "reference", "bounds", "measurement")


@dataclass(frozen=True)
class Task:
    """One operator instance under one format, mode, policy and implementation; ``routes``
    the route kinds to measure; ``draws`` sampler draws per sample kind."""

    op: str
    instance: str
    attrs: tuple                  # ((name, value), ...) in declaration order
    format: str
    mode: str
    policy: str
    implementation: str
    routes: tuple
    draws: int
    seed: int
    exhaustive: bool = False
    kinds: tuple = ()             # sample kinds drawn (empty: every kind, evaluate.sample_kinds)

    @property
    def key(self) -> str:
        """The task's identity in checkpoints (the routes are part of the run's fingerprint)."""
        return "|".join((self.op, attrs_text(self.attrs), self.format, self.mode, self.policy,
                         self.implementation, "exhaustive" if self.exhaustive else "sampled"))

    def build(self):
        return routes.op(self.op, **dict(self.attrs))


def attrs_text(attrs) -> str:
    """Attributes as a short canonical text (``shape=[2, 3],axes=[1]``)."""
    return ",".join(f"{k}={list(v) if isinstance(v, tuple) else v!r}" for k, v in attrs)


def jsonable(v):
    """An attribute value as JSON data (tuples become lists)."""
    if isinstance(v, tuple):
        return [jsonable(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


def rng_for(seed: int, *parts) -> np.random.Generator:
    """A generator seeded from ``seed`` and a CRC-32 of ``parts``: the same stream in any
    process, whatever order tasks run in."""
    return np.random.default_rng([seed, zlib.crc32(repr(parts).encode())])


class _Timer:
    def __init__(self):
        self.t = dict.fromkeys(PHASES, 0.0)

    def __call__(self, phase):
        timer = self

        class _Span:
            def __enter__(self):
                self.t0 = time.perf_counter()

            def __exit__(self, *exc):
                timer.t[phase] += time.perf_counter() - self.t0
        return _Span()


# ----- which evaluation a task gets ------------------------------------------------------------

def batchable(o) -> bool:
    """Whether draws of ``o`` can be made as one draw of a longer vector: an elementwise
    family, a ``shape`` attribute, every port of that shape or rank 0."""
    if o.family not in BATCH_FAMILIES or "shape" not in o.attrs:
        return False
    shape = tuple(o.attrs["shape"])
    ports = o.inputs + o.outputs
    return all(p.shape in (shape, ()) for p in ports) and any(p.shape == shape for p in ports)


def exhaustible(o, fmt) -> bool:
    """Whether ``--exhaustive`` enumerates ``o`` in ``fmt``: one value input, an elementwise
    family, a ``shape`` attribute, a format of at most 16 bits."""
    values = [p for p in o.inputs if p.differentiable]
    return (o.family in EXHAUSTIVE_FAMILIES and len(values) == 1 and "shape" in o.attrs
            and batchable(o) and formats.get(fmt).bits <= EXHAUSTIVE_MAX_BITS)


def implementation(task: Task, fmt):
    """(backend, None) or (None, (status, reason, need)) for the task's implementation."""
    if task.implementation == "emulated":
        seed = zlib.crc32(task.key.encode())
        return numerics.emulated(fmt, task.mode, numerics.preset(task.policy, fmt), seed), None
    if task.implementation == "native":
        if task.mode != "nearest_even":
            return None, ("no_rule", f"numpy rounds to nearest even only (mode {task.mode})",
                          f"mode {task.mode}")
        try:
            return numerics.native(fmt.name), None
        except (TypeError, ValueError, LookupError) as exc:
            return None, ("error", f"native: no numpy dtype for {fmt.label} ({one_line(exc)})",
                          None)
    return None, ("error", f"unknown implementation {task.implementation!r}", None)


def one_line(exc, limit: int = 300) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ----- ports of a route ------------------------------------------------------------------------

def route_ports(o, route):
    """[(index, name, port)] a route measures: every output (forward), the value outputs
    (tangent), the value inputs (gradient)."""
    if route == "forward":
        return list(zip(range(len(o.outputs)), o.output_names, o.outputs))
    if route == "tangent":
        return [(i, n, p) for i, (n, p) in enumerate(zip(o.output_names, o.outputs))
                if p.differentiable]
    return [(i, n, p) for i, (n, p) in enumerate(zip(o.input_names, o.inputs))
            if p.differentiable]


def _status_rows(task, o, route, status, reason, need=None):
    ports = route_ports(o, route) if o is not None else []
    if status == "not_differentiable" or not ports:
        names = ([n for n in (o.output_names if route != "gradient" else o.input_names)]
                 if o is not None else [])
        ports = [(None, n, None) for n in names] or [(None, "-", None)]
    return [base_row(task, route, name, status, reason, need) for _, name, _ in ports]


def base_row(task, route, port, status, reason=None, need=None) -> dict:
    """A row with every field (reports/rows.py), the metrics empty (``exhaustive`` false:
    nothing enumerated; ``_rows`` marks the rows whose draws were every finite value of the
    format)."""
    return empty_row(op=task.op, instance=task.instance,
                     attrs={k: jsonable(v) for k, v in task.attrs}, route=route, port=port,
                     format=task.format, mode=task.mode, policy=task.policy,
                     implementation=task.implementation, status=status, reason=reason,
                     need=need)


# ----- sampling --------------------------------------------------------------------------------

class Draws:
    """The sample inputs of a task: ``inputs`` (one tuple per draw), ``kinds`` (the sample
    kind of each draw), ``tangents``/``cotangents`` per draw, ``elementwise`` (one element of
    an input at position i goes with element i of the outputs)."""

    def __init__(self, o, inputs, kinds, elementwise, fmt, task):
        self.op, self.inputs, self.kinds, self.elementwise = o, inputs, kinds, elementwise
        trng, crng = (rng_for(task.seed, task.op, task.attrs, task.format, r)
                      for r in ("tangent", "gradient"))
        self.tangents = [_linear(trng, o.inputs, fmt) for _ in inputs]
        self.cotangents = [_linear(crng, o.outputs, fmt) for _ in inputs]


def _subset(self, keep):
    """The same draws restricted to the indices ``keep`` (for reference spot checks)."""
    sub = object.__new__(Draws)
    sub.op, sub.elementwise = self.op, self.elementwise
    sub.inputs = [self.inputs[k] for k in keep]
    sub.kinds = [self.kinds[k] for k in keep]
    sub.tangents = [self.tangents[k] for k in keep]
    sub.cotangents = [self.cotangents[k] for k in keep]
    return sub


Draws.subset = _subset


def _elements(self, k, idx):
    """Draw ``k`` restricted to the flat elements ``idx`` (batchable operators only: every
    port has the instance's shape or rank 0), as one draw of an instance of that length."""
    sub = object.__new__(Draws)
    sub.op = self.op.replace(shape=(len(idx),))
    sub.elementwise = True

    def cut(vs):
        return tuple(None if v is None else
                     (np.asarray(v) if np.ndim(v) == 0 else np.asarray(v).reshape(-1)[idx])
                     for v in vs)
    sub.inputs, sub.kinds = [cut(self.inputs[k])], [self.kinds[k]]
    sub.tangents, sub.cotangents = [cut(self.tangents[k])], [cut(self.cotangents[k])]
    return sub


Draws.elements = _elements


def _linear(rng, ports, fmt):
    """Standard normal values rounded once into ``fmt`` at value ports, None elsewhere."""
    out = []
    for p in ports:
        if not p.differentiable:
            out.append(None)
            continue
        x = rng.standard_normal(p.shape)
        out.append(np.asarray(formats.round_to(x, fmt) if fmt.fits_binary64 else x))
    return tuple(out)


def draw(task: Task, o, fmt) -> Draws:
    """The task's sample inputs (see the module docstring)."""
    if task.exhaustive and exhaustible(o, fmt):
        values = formats.values(fmt)
        big = o.replace(shape=(values.size,))
        base = big.samples(rng_for(task.seed, task.op, task.attrs, task.format, "ordinary"),
                           fmt.name, "ordinary")
        xs = tuple(values if p.differentiable else x for x, p in zip(base, big.inputs))
        return Draws(big, [xs], ["exhaustive"], True, fmt, task)
    kinds = [k for k in sample_kinds(o) if not task.kinds or k in task.kinds] or ["ordinary"]
    size = int(np.prod(o.attrs["shape"], dtype=np.int64)) if "shape" in o.attrs else 0
    if batchable(o) and size > 0 and task.draws > 1:
        big = o.replace(shape=(size * task.draws,))
        inputs = [big.samples(rng_for(task.seed, task.op, task.attrs, task.format, k),
                              _fmt_name(fmt), k) for k in kinds]
        return Draws(big, inputs, kinds, True, fmt, task)
    inputs, labels = [], []
    for k in kinds:
        rng = rng_for(task.seed, task.op, task.attrs, task.format, k)
        for _ in range(task.draws):
            inputs.append(o.samples(rng, _fmt_name(fmt), k))
            labels.append(k)
    return Draws(o, inputs, labels, batchable(o), fmt, task)


def sample_kinds(o) -> list:
    """The sample kinds a task of ``o`` draws: the declared ones, then the derived
    ``magnitudes`` (log-uniform across the format's range) where ``o`` has value inputs."""
    reg = routes.registry
    derived = "ordinary" in o.decl.samples and any(p.differentiable for p in o.inputs)
    return [k for k in reg.SAMPLE_KINDS
            if k in o.decl.samples or (derived and k in reg.DERIVED_KINDS)]


def _fmt_name(fmt):
    return fmt if fmt.name not in formats.CATALOG else fmt.name


# ----- evaluating routes -----------------------------------------------------------------------

def run_routes(rule, d: Draws, wanted, flags=None) -> dict:
    """{route: [per-draw outputs] or Exception}: forward values, output tangents, input
    gradients (each a tuple per port) of every draw under ``rule``.  One forward evaluation
    per draw serves the three routes (Rule.prepare and Rule.linearize would each run one).

    ``flags``, a dict, receives {route: IEEE flags raised} when the backend keeps sticky
    flags (``track_flags``): the OR over every draw of the flags of the route's whole
    evaluation -- the forward pass's for every route, plus the pullback's or the tangent
    map's own (IEEE 754-2019 7.1 status flags, cleared before each draw)."""
    out = {r: [] for r in wanted}
    xp = rule.xp
    sticky = flags is not None and hasattr(xp, "track_flags")
    if sticky:
        xp.track_flags()
        flags.update(dict.fromkeys(wanted, 0))
    needs = tuple(p.differentiable for p in d.op.inputs)
    for xs, ts, cs in zip(d.inputs, d.tangents, d.cotangents):
        try:
            xs_read = rule._read(xs)
            ys = rule._forward(xs_read)
        except Exception as exc:                          # noqa: BLE001 (recorded as data)
            return {r: exc for r in wanted}
        base = xp.raised() if sticky else 0
        for route in wanted:
            if isinstance(out[route], Exception):
                continue
            if sticky:
                xp.clear_flags()
            try:
                if route == "forward":
                    out[route].append(tuple(ys))
                elif route == "gradient":
                    out[route].append(rule._pull(xs_read, ys, cs, needs))
                else:
                    out[route].append(_tangents(rule, xs_read, ys, ts))
            except Exception as exc:                      # noqa: BLE001
                out[route] = exc
            if sticky:
                flags[route] |= base | xp.raised()
        if sticky:
            xp.clear_flags()
    return out


def _tangents(rule, xs, ys, ts):
    """Rule.linearize's output tangents from forward values already computed."""
    o, xp = rule.op, rule.xp
    if o.decl.jvp is None:
        raise routes.RouteError(f"{o.name}: no forward-mode rule is registered")
    ts = rule._linear(ts, o.inputs, xs, "tangents")
    out = o.decl.jvp(xp, o.attrs, xs, ys, ts)
    out = out if isinstance(out, tuple) else (out,)
    if len(out) != len(ys):
        raise RuntimeError(f"{o.name}: jvp returned {len(out)} tangents for {len(ys)} outputs")
    return tuple((xp.zeros_like(y) if t is None else t) if p.differentiable else None
                 for t, y, p in zip(out, ys, o.outputs))


def _computed(y, fmt, backend):
    """Computed values as float64 (object arrays for formats wider than binary64)."""
    a = np.asarray(y)
    if a.dtype.kind in "biu" and not fmt.fits_binary64:
        return a
    if fmt.fits_binary64:
        return np.asarray(a, dtype=np.float64) if a.dtype != object else \
            np.asarray(backend.to_float64(a), dtype=np.float64)
    return a


# ----- measuring -------------------------------------------------------------------------------

def _bound(task, route):
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
        and joined over draws as _concat joins values (None where absent)."""
        def joined(per_draw):
            if per_draw is None:
                return None
            return np.concatenate([np.ravel(np.asarray(b[j], dtype=np.float64))
                                   for b in per_draw])
        return joined(self.apriori), joined(self.interval)


def _apriori(task, d, fmt):
    """Per draw, the forward output's a priori bound (routes.apriori) under the task's
    declared policy, or None (no formula, another implementation, not applicable)."""
    if task.implementation != "emulated" or task.op not in routes.apriori.FORMULAS:
        return None
    # numerics.policy.preset, not numerics.preset: the bound is the declared policy's even
    # when an implementation under test is patched to do something else.
    policy = numerics.policy.preset(task.policy, fmt)
    out = []
    for xs in d.inputs:
        b = routes.apriori.bound(d.op, xs, fmt, task.mode, policy)
        if b is None:
            return None
        out.append((b,))
    return out


def _concat(per_draw, i, fmt, backend, scalar=True):
    """Port ``i`` of every draw, flattened and joined; with (draw, element) of each entry.
    Computed values (``backend`` given) at scalar ports as _computed gives them; words,
    indices and Booleans unchanged (a uint64 word does not survive float64)."""
    parts, where = [], []
    for k, ys in enumerate(per_draw):
        a = _computed(ys[i], fmt, backend) if backend is not None and scalar else \
            np.asarray(ys[i], dtype=object) if _is_objects(ys[i]) else np.asarray(ys[i])
        parts.append(np.asarray(a).reshape(-1))
        where += [(k, j) for j in range(parts[-1].size)]
    if not parts:
        return np.zeros(0), []
    return np.concatenate(parts), where


def _is_objects(a):
    return np.asarray(a).dtype == object


def measure_port(row, comp, exact, fmt, bound, apriori=None, interval=None):
    """Fill ``row``'s metrics from computed values and exact values of one port; returns the
    ulp errors (None for non-scalar ports).  ``bound``: a fixed bound in ulps; ``apriori``,
    ``interval``: absolute bounds per element (routes.apriori, numerics.bounding)."""
    row["samples"] = int(comp.size)
    if comp.dtype != object and comp.dtype.kind in "biu" or not _scalar_exact(exact):
        # Exact comparison; Python ints (object arrays) so uint64 and int64 compare exactly.
        same = np.asarray(comp).astype(object) == np.asarray(exact).astype(object)
        row["mismatches"] = int(comp.size - np.count_nonzero(same))
        return None
    exact = _exact_values(comp, clamp_exact(exact, fmt), fmt)
    m = metrics.measure(comp, exact, fmt)
    stats = metrics.summary(m.ulp)
    row.update(max_ulp=stats["max"], p99_ulp=stats["p99"], mean_ulp=stats["mean"],
               min_signed_ulp=stats["min_signed"], max_signed_ulp=stats["max_signed"],
               unmeasured=stats["nan_count"], histogram=stats["histogram"]["counts"])
    rel = np.abs(m.rel[~np.isnan(m.rel)])
    row["max_rel"] = float(rel.max()) if rel.size else None
    row["exceptional"] = {k: n for k, n in metrics.summarize_classes(m.codes).items()
                          if k != "ok" and n}
    row["by_magnitude"] = by_magnitude(m.ulp, exact, fmt)
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
    e = _binades(exact, np.iinfo(np.int64).min)
    a = np.abs(np.asarray(ulp).reshape(-1))
    keep = (e != np.iinfo(np.int64).min) & ~np.isnan(a)
    if not keep.any():
        return []
    e = np.clip(e[keep], fmt.qmin - 1, fmt.emax + 1)
    a = a[keep]
    out = []
    for b in np.unique(e):
        sel = a[e == b]
        out.append([int(b), int(sel.size), float(sel.max())])
    return out


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
    out = out.reshape(np.shape(exact))
    zero = out == 0
    if zero.any():
        out[zero] = np.copysign(0.0, np.where(np.isnan(comp[zero]), 1.0, comp[zero]))
    return out


def _scalar_exact(exact) -> bool:
    a = np.asarray(exact)
    return a.dtype == object or a.dtype.kind == "f"


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
    a = np.abs(ulp)
    if not a.size or np.isnan(a).all():
        return None
    j = int(np.nanargmax(a))
    k, elem = where[j]
    o = d.op
    out = {"kind": d.kinds[k], "draw": k, "element": elem, "ulp": float(ulp[j]),
           "computed": _decimal(comp[j]), "exact": _decimal(np.asarray(exact).reshape(-1)[j]),
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


def _decimal(v) -> str:
    """A number as a decimal string: repr for binary64, 20 significant digits for mpmath."""
    m = getattr(v, "_mpf_", None)
    if m is not None:
        return libmp.to_str(m, 20)
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    return str(v)


# ----- the task --------------------------------------------------------------------------------

def evaluate(task: Task):
    """(rows, phase seconds) of one task; every failure becomes a row, never an exception."""
    timer = _Timer()
    try:
        o = task.build()
        o.check()
        fmt = formats.get(task.format)
    except Exception as exc:                                  # noqa: BLE001
        return [r for route in task.routes
                for r in _status_rows(task, None, route, "error", one_line(exc))], timer.t
    rows, pending = [], []
    values_in = any(p.differentiable for p in o.inputs)
    for route in task.routes:
        if route != "forward" and not values_in:
            rows += _status_rows(task, o, route, "not_differentiable", "no value input")
        elif route == "tangent" and o.decl.jvp is None:
            rows += _status_rows(task, o, route, "not_differentiable",
                                 "no forward-mode rule is registered")
        elif route == "gradient" and o.decl.backward is None:
            rows += _status_rows(task, o, route, "not_differentiable", "no pullback")
        elif not route_ports(o, route):
            rows += _status_rows(task, o, route, "not_differentiable", "no value output")
        else:
            pending.append(route)
    if not pending:
        return rows, timer.t
    if task.implementation == "cuda":
        from . import cuda
        return rows + cuda.measure(task, o, fmt, pending, timer), timer.t
    try:
        backend, problem = implementation(task, fmt)
    except Exception as exc:                                  # noqa: BLE001
        backend, problem = None, ("error", one_line(exc), None)
    if problem is None and o.rule(backend) is None:
        reason = (o.decl.no_rule(o.attrs) if o.decl.no_rule else None) or \
            f"{backend.name} lacks capability {o.need}"
        problem = ("no_rule", reason, o.need)
    ref_prec = fmt.precision + REF_EXTRA
    if problem is None and o.rule(numerics.reference(ref_prec)) is None:
        problem = ("no_rule", f"the reference lacks capability {o.need}: no exact value to "
                   f"measure against", o.need)
    if problem is not None:
        for route in pending:
            rows += _status_rows(task, o, route, *problem)
        return rows, timer.t
    try:
        with timer("sampling"):
            d = draw(task, o, fmt)
    except Exception as exc:                                  # noqa: BLE001
        for route in pending:
            rows += _status_rows(task, o, route, "error", f"sampling: {one_line(exc)}")
        return rows, timer.t
    rows += _measure_routes(task, d, fmt, backend, pending, ref_prec, timer)
    return rows, timer.t


def _measure_routes(task, d, fmt, backend, pending, ref_prec, timer):
    rows = []
    raised = {}
    with timer("evaluation"):
        got = run_routes(d.op.rule(backend), d, pending, raised)
    ok = [r for r in pending if not isinstance(got[r], Exception)]
    with timer("reference"):
        ref = run_routes(d.op.rule(numerics.reference(ref_prec)), d, ok)
    with timer("bounds"):
        interval = interval_bounds(task, d, fmt, ok)
    for route in pending:
        if isinstance(got[route], Exception):
            rows += _status_rows(task, d.op, route, "error", one_line(got[route]))
            continue
        if isinstance(ref[route], Exception):
            rows += _status_rows(task, d.op, route, "error",
                                 f"reference: {one_line(ref[route])}")
            continue
        b = Bounds(_bound(task, route), _apriori(task, d, fmt) if route == "forward" else None,
                   interval.get(route))
        measured = _measure_route(task, d, fmt, backend, route, got[route], ref[route],
                                  ref_prec, timer, b)
        if route in raised:
            for row in measured:
                row["flags"] = formats.flag_names(raised[route])
        rows += measured
    return rows


def interval_bounds(task, d, fmt, wanted) -> dict:
    """{route: per draw, a tuple of absolute error bounds per measured port} from the rule
    evaluated under numerics.bounding (enclosures of the exact and of every computed value),
    for the emulated implementation; a draw whose evaluation took a comparison the
    enclosures could not decide gets infinite bounds (no claim)."""
    if task.implementation != "emulated" or not hasattr(numerics, "bounding"):
        return {}
    try:
        bk = numerics.bounding(fmt, task.mode, numerics.policy.preset(task.policy, fmt))
        rule = d.op.rule(bk)
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


def _measure_route(task, d, fmt, backend, route, got, ref, prec, timer, bounds):
    """Rows of one route; the reference spot-checked at p + 192 bits on the draws that hold a
    suspicious error, and recomputed at p + 192 on every draw when the check moves an error
    by more than 2**-20 of itself (module docstring)."""
    bound = bounds.ulps
    with timer("measurement"):
        out, ulps = _rows(task, d, fmt, backend, route, got, ref, prec, bounds)
    hits = {}
    for ulp, where in ulps:
        for k, j in _suspicious(ulp, where, bound):
            hits.setdefault(k, set()).add(j)
    if not hits:
        return out
    hi = fmt.precision + REF_ESCALATED
    check = sorted(hits)
    ref = list(ref)
    with timer("reference"):
        if batchable(d.op):
            # Elementwise: recompute only the suspicious elements.
            for k in check:
                idx = np.array(sorted(hits[k]), dtype=np.int64)
                sub = d.elements(k, idx)            # an instance of len(idx) elements
                again = run_routes(sub.op.rule(numerics.reference(hi)), sub, [route])[route]
                if isinstance(again, Exception):
                    return out
                ref[k] = tuple(_put(a, idx, b) for a, b in zip(ref[k], again[0]))
        else:
            again = run_routes(d.op.rule(numerics.reference(hi)), d.subset(check),
                               [route])[route]
            if isinstance(again, Exception):
                return out
            for k, ys in zip(check, again):
                ref[k] = ys
    with timer("measurement"):
        out2, ulps2 = _rows(task, d, fmt, backend, route, got, ref, prec, bounds)
    moved = any(_moved(a[0], b[0]) for a, b in zip(ulps, ulps2))
    if not moved:
        return out2
    rest = [k for k in range(len(d.inputs)) if k not in check]
    with timer("reference"):
        more = run_routes(d.op.rule(numerics.reference(hi)), d.subset(rest), [route])[route] \
            if rest else []
    if isinstance(more, Exception):
        return out2
    for k, ys in zip(rest, more):
        ref[k] = ys
    with timer("measurement"):
        return _rows(task, d, fmt, backend, route, got, ref, hi, bounds)[0]


def _rows(task, d, fmt, backend, route, got, ref, prec, bounds):
    out, ulps = [], []
    for j, (i, name, port) in enumerate(route_ports(d.op, route)):
        row = base_row(task, route, name, "ok")
        row["ref_prec"] = prec
        # True only where ``draw`` enumerated the format (Task.exhaustive asks for it, but
        # only `exhaustible` operators and formats are enumerated; the rest are sampled).
        row["exhaustive"] = d.kinds == ["exhaustive"]
        comp, where = _concat(got, i, fmt, backend, port.scalar)
        exact, _ = _concat(ref, i, fmt, None)
        ulp = measure_port(row, comp, exact, fmt, bounds.ulps, *bounds.port(j))
        if ulp is not None:
            ulps.append((ulp, where))
            size = int(np.prod(port.shape, dtype=np.int64)) if port.shape else 1
            row["worst"] = worst_case(d, ulp, where, comp, exact, route, fmt, size)
        out.append(row)
    return out, ulps


def _suspicious(ulp, where, bound) -> list:
    """(draw, element) of the errors that may depend on the reference's own error: the
    largest when it exceeds 1 ulp, those within 2**-40 ulp of a half-integer, those above the
    bound."""
    a = np.abs(ulp)
    ok = ~np.isnan(a)
    if not ok.any():
        return []
    hits = np.zeros(a.shape, bool)
    top = np.nanmax(a)
    if top > 1:
        hits |= ok & (a == top)
    with np.errstate(invalid="ignore"):
        fin = ok & np.isfinite(a)
        hits |= fin & (np.abs(a - (np.floor(a) + 0.5)) < 2.0 ** -40)
        if bound is not None:
            hits |= ok & (a > bound)
    return [where[j] for j in np.flatnonzero(hits)]


def _put(a, idx, b):
    """A copy of ``a`` (None stays None) with flat positions ``idx`` set from ``b``."""
    if a is None or b is None:
        return a
    out = np.array(a, copy=True)
    if out.ndim == 0:
        return np.asarray(b, dtype=out.dtype).reshape(())
    flat = out.reshape(-1)
    flat[idx] = np.asarray(b, dtype=out.dtype).reshape(-1)
    return flat.reshape(out.shape)


def _moved(a, b) -> bool:
    """Whether two measurements of the same points differ by more than 2**-20 of the error
    (NaN pattern changes count)."""
    na, nb = np.isnan(a), np.isnan(b)
    if not np.array_equal(na, nb):
        return True
    x, y = a[~na], b[~nb]
    with np.errstate(invalid="ignore"):
        same = (x == y) | (np.abs(x - y) <= 2.0 ** -20 * np.maximum(1.0, np.abs(x)))
    return not bool(same.all())
