"""Roundoff over a domain: a bound on a route's error under a format, mode and policy for
EVERY input in a box, not only at samples.

``domain_bound(op, lows, highs, fmt, mode, policy, route, budget, tangents, cotangents,
elementwise) -> DomainBound``.  The domain is every input whose scalar entries are values
of ``fmt`` inside the boxes (one box per input, as ``routes.bounds.ibp`` takes them; the
exact array twice at an index, bool or integer port): the coverage run's inputs are format
values too, so computed and exact values start equal.  Each box is first shrunk to the
format values it holds (lo rounded up, hi down into the format).  The tangents (one per
input) and cotangents (one per output) of the tangent and gradient routes are fixed
arrays, the same at every point.

A piece of the box is run through the route's rule on routes.bounds.tracking's backend,
which encloses, at every point x of the piece, the exact value e(x), the computed value
c(x) of numerics.emulated(fmt, mode, policy) and c(x) - e(x).  For the forward route the
exact enclosure is also intersected with the operator's IBP box (routes.bounds.ibp, where
the operator has an arm: softmax's and layerNorm's arms are tighter than their rules'
evaluation).  A piece's bound of one output element, in ulps, the smaller of

    max |c(x) - e(x)| / ulp(min |E|)                 over x in the piece, and
    max |r(x)| * min(2**p, max |E| / ulp(min |E|))   r = (c - e) / e, where E excludes 0,

ulp(m) = 2**max(min(floor(log2 m), emax) - p + 1, qmin), numerics.metrics' ulp at the
exact value (its exponent stops at the top binade).  Both bound |c(x) - e(x)| / ulp(e(x)),
the measured ulp error, at every x of the piece: ulp is nondecreasing in |e|, and
|e| / ulp(e) < 2**p below 2**(emax+1).  Where E holds 0, ulp(0) = 2**qmin, the format's
least subnormal spacing, and the bound is huge unless the error is 0: near an exact zero
an error of any fixed absolute size is a large error in ulps (a symmetric box around 0 for
a sum or a matmul has such points, and so do the tangents and gradients of most operators
with cotangents of both signs).  Where an enclosure is unbounded (an overflow, a box
leaving the operator's domain, a comparison of the rule that the piece cannot decide) the
bound is inf.

Subdivision: the piece whose bound is worst is bisected along its widest input entry at a
format value m (left [lo, m], right [next_up(m), hi]: no format value is lost or counted
twice; m is 0 where the entry's interval holds it, else the midpoint -- or a power of two
near the geometric middle, where the entry spans many binades of one sign and that split
gives the better worse half) while the partition holds fewer than ``budget`` pieces; a
piece that is one point is not split.  A child's bound is the minimum of its own and its
parent's (the parent's holds on the child's points too), so a larger budget never loosens
the bound.  The result is the maximum over the final partition, element by element.  The
relative errors are a worst-case sum of each step's rounding, the same on any piece whose
values keep their binades, so pieces tighten the part of a bound that comes from the
width of the piece (the spread of the exact values, the slopes of the functions), not that
one (softmax's forward bound stays about 2.5 times the largest error measured).

``elementwise=True`` (the caller's word that element i of every output depends on element
i of the inputs only: the coverage run's batchable operators) with one box for every
element: the pieces are boxes of one element's inputs, all evaluated at once for every
element on a longer instance of the operator (``op.replace(shape=...)``), so a budget of N
pieces splits every element's box N ways instead of the product box; comparisons left
undecided count per element.  Otherwise the pieces are boxes of the whole input.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from roundoff_coverage import formats
from roundoff_coverage.numerics.bounding import interval

from ..errors import RouteError
from .boxes import read_boxes
from .ibp import IBP_ARMS, ibp
from .tracking import TrackingBackend

ROUTES = ("forward", "tangent", "gradient")
# A piece of one sign spanning more than this many binades is split near its geometric
# middle rather than its arithmetic one.
SPREAD = 2


@dataclass(frozen=True)
class DomainBound:
    """A route's bound over a box: per measured port (``ports``, names), ``ulps`` and
    ``absolute`` (arrays of the port's shape: the bound in ulps as the module docstring
    defines it, and on |computed - exact|; inf where none holds); ``lows``/``highs`` the
    boxes shrunk to format values (one per input); ``pieces`` of the final partition,
    ``evaluations`` of the rule, ``unbounded`` pieces of the partition where some element
    has no finite bound (an overflow, a comparison the piece cannot decide, a box leaving
    the domain); ``elementwise`` whether pieces were per element."""

    route: str
    ports: tuple
    ulps: tuple
    absolute: tuple
    lows: tuple
    highs: tuple
    pieces: int
    evaluations: int
    unbounded: int
    elementwise: bool

    def worst(self) -> float:
        """The largest bound in ulps over every port and element (0 with no element)."""
        return max((float(np.max(u)) for u in self.ulps if np.size(u)), default=0.0)


def route_ports(o, route) -> list:
    """[(index, name, port)] a route bounds: every scalar output (forward), the value
    outputs (tangent), the value inputs (gradient)."""
    if route == "forward":
        return [(i, n, p) for i, (n, p) in enumerate(zip(o.output_names, o.outputs))
                if p.scalar]
    if route == "tangent":
        return [(i, n, p) for i, (n, p) in enumerate(zip(o.output_names, o.outputs))
                if p.differentiable]
    if route == "gradient":
        return [(i, n, p) for i, (n, p) in enumerate(zip(o.input_names, o.inputs))
                if p.differentiable]
    raise RouteError(f"domain bound: unknown route {route!r} (forward, tangent or gradient)")


def ulps(e, d, fmt, r=None) -> np.ndarray:
    """The bound in ulps per element (the module docstring), rounded up; inf where an
    enclosure is unknown.  ``e``, ``d`` and optionally ``r`` (the relative error's
    enclosure, NaN where unknown): (lo, hi) pairs of float64 arrays.

    Two bounds, the smaller taken: max |d| / ulp(min |E|), and max |r| times the largest
    |e| / ulp(e) over E -- below 2**p (p the precision: |e| < 2**(k+1) in a binade of ulp
    2**(k+1-p); below 2**(p-1) for subnormal e) and below max |E| / ulp(min |E|) -- where
    E excludes 0 and lies below 2**(emax+1), where the ulp stops growing."""
    fmt = formats.get(fmt)
    lo, hi = e
    with np.errstate(all="ignore"):
        m = np.where((lo <= 0) & (hi >= 0), 0.0, np.minimum(np.abs(lo), np.abs(hi)))
        u = _ulp(m, fmt)
        out = _over(absolute(d), u)
        if r is not None:
            top = np.maximum(np.abs(lo), np.abs(hi))
            span = np.minimum(2.0 ** fmt.precision, _over(top, u))
            rel = _up(absolute(r) * span)
            ok = (m > 0) & (top < 2.0 ** (fmt.emax + 1)) & np.isfinite(rel)
            out = np.where(ok, np.minimum(out, rel), out)
    return np.where(np.isfinite(out) & np.isfinite(m), out, np.inf)


def _ulp(m, fmt):
    """numerics.metrics' ulp at |x| = m: 2**max(min(floor(log2 m), emax) - p + 1, qmin)."""
    _, ex = np.frexp(np.where(np.isfinite(m), m, 0.0))
    q = np.maximum(np.minimum(ex - 1, fmt.emax) - fmt.precision + 1, fmt.qmin)
    return np.ldexp(1.0, np.where(m == 0, fmt.qmin, q))


def _over(a, u):
    """a / u rounded up (u a power of two: exact unless it leaves the normal range)."""
    with np.errstate(all="ignore"):
        q = a / u
        return np.where(q * u < a, np.nextafter(q, np.inf), q)


def _up(x):
    """A product rounded to nearest, moved one binary64 ulp up (0 stays 0)."""
    return np.where(x == 0, x, np.nextafter(x, np.inf))


def absolute(d) -> np.ndarray:
    """max |d| per element of a (lo, hi) pair; inf where unknown."""
    a = np.maximum(np.abs(d[0]), np.abs(d[1]))
    return np.where(np.isfinite(a), a, np.inf)


def snap(lo, hi, fmt) -> tuple:
    """The box [lo, hi] shrunk to the values of ``fmt`` it holds: lo rounded up, hi down."""
    with np.errstate(all="ignore"):
        return (formats.round_to(np.asarray(lo, dtype=np.float64), fmt, "upward"),
                formats.round_to(np.asarray(hi, dtype=np.float64), fmt, "downward"))


# ----- the driver -------------------------------------------------------------------------------
def domain_bound(op, lows, highs, fmt, mode: str = "nearest_even", policy=None,
                 route: str = "forward", budget: int = 1, tangents=None, cotangents=None,
                 elementwise: bool = False) -> DomainBound:
    """The bound of ``route`` of operator ``op`` over the boxes (the module docstring);
    RouteError (one line) on a bad box, a box holding no format value, a missing tangent
    or cotangent, or an operator without a rule on the tracking backend."""
    op.check()
    fmt = formats.get(fmt)
    who = f"domain bound: {op.name}"
    if not isinstance(budget, int) or budget < 1:
        raise RouteError(f"{who}: budget must be a positive number of pieces (got {budget!r})")
    boxes = read_boxes(who, op.input_names, op.inputs, lows, highs)
    for k, (name, port) in enumerate(zip(op.input_names, op.inputs)):
        if port.scalar:
            lo, hi = snap(*boxes[k], fmt)
            if (lo > hi).any() or not (np.isfinite(lo).all() and np.isfinite(hi).all()):
                raise RouteError(f"{who}: the box of input {name} holds no finite value of "
                                 f"{fmt.label} at some entry")
            boxes[k] = (lo, hi)
    ports = route_ports(op, route)
    if route == "tangent" and tangents is None:
        raise RouteError(f"{who}: the tangent route needs tangents (one per input)")
    if route == "gradient" and cotangents is None:
        raise RouteError(f"{who}: the gradient route needs cotangents (one per output)")
    bk = TrackingBackend(fmt, mode, policy)
    if op.rule(bk) is None:
        raise RouteError(f"{who}: no rule under {bk.name} (it needs {op.need})")
    job = _Job(op, boxes, bk, route, ports, tangents, cotangents)
    if elementwise and _separable(op, boxes):
        return job.elementwise(budget)
    return job.whole(budget)


def _varying(op, boxes, shape) -> list:
    """The inputs whose per-element pieces are split: scalar inputs of ``shape`` that are
    not one point."""
    return [k for k, (p, (lo, hi)) in enumerate(zip(op.inputs, boxes))
            if p.scalar and p.shape == shape and not np.array_equal(lo, hi)]


def _separable(op, boxes) -> bool:
    """Whether per-element pieces apply: a ``shape`` attribute, every input of that shape
    or rank 0 and every output of that shape, a rank-0 scalar input a point, and one box
    for every element of the inputs that are not points."""
    shape = tuple(op.attrs["shape"]) if "shape" in op.attrs else ()
    if not shape:
        return False
    if any(p.shape not in (shape, ()) for p in op.inputs) or \
            any(p.shape != shape for p in op.outputs):
        return False
    for port, (lo, hi) in zip(op.inputs, boxes):
        if port.scalar and port.shape == () and not np.array_equal(lo, hi):
            return False
    for k in _varying(op, boxes, shape):
        lo, hi = boxes[k]
        if not ((lo == lo.flat[0]).all() and (hi == hi.flat[0]).all()):
            return False
    return True


class _Job:
    """One route of one operator over its boxes, on the tracking backend."""

    def __init__(self, op, boxes, bk, route, ports, tangents, cotangents):
        self.op, self.boxes, self.bk, self.route, self.ports = op, boxes, bk, route, ports
        self.tangents, self.cotangents = tangents, cotangents
        self.scalar = [k for k, p in enumerate(op.inputs) if p.scalar]
        self.evaluations = 0
        self.use_ibp = route == "forward" and op.name in IBP_ARMS

    # ----- one evaluation ------------------------------------------------------------------
    def _evaluate(self, o, boxes, tangents, cotangents, batch=None):
        """(ulps, absolute) per measured port, flattened, of the rule of ``o`` on ``boxes``;
        ``batch`` the batch shape whose undecided comparisons count per element."""
        self.evaluations += 1
        bk = self.bk
        bk.track(batch)
        xs = tuple(TrackingBackend.box(*boxes[k]) if p.scalar else boxes[k][0]
                   for k, p in enumerate(o.inputs))
        got = o.rule(bk).routes(xs, [self.route], tangents, cotangents)[self.route]
        if isinstance(got, Exception):
            raise got
        outer = None
        if self.use_ibp:
            try:
                outer = ibp(o, [b[0] for b in boxes], [b[1] for b in boxes])
            except RouteError:
                outer = None
        out_u, out_a = [], []
        for i, _, _ in self.ports:
            e, c, d, r = TrackingBackend.parts(got[i])
            if outer is not None:
                e = (np.maximum(e[0], outer[0][i]), np.minimum(e[1], outer[1][i]))
                cut = interval("subtract", c, e)
                d = (np.maximum(d[0], cut[0]), np.minimum(d[1], cut[1]))
                rd = interval("divide", d, e)
                known = np.isfinite(rd[0]) & np.isfinite(rd[1])
                r = (np.where(known, np.fmax(r[0], rd[0]), r[0]),
                     np.where(known, np.fmin(r[1], rd[1]), r[1]))
            u, a = ulps(e, d, bk.fmt, r).reshape(-1), absolute(d).reshape(-1)
            if bk.undecided:
                u, a = np.full(u.shape, np.inf), np.full(a.shape, np.inf)
            elif bk.undecided_at is not None:
                bad = np.asarray(bk.undecided_at).reshape(-1)
                u, a = np.where(bad, np.inf, u), np.where(bad, np.inf, a)
            out_u.append(u)
            out_a.append(a)
        return out_u, out_a

    def _result(self, ulps_, abs_, boxes, pieces, unbounded, elementwise):
        shaped = [(np.reshape(u, p.shape), np.reshape(a, p.shape))
                  for u, a, (_, _, p) in zip(ulps_, abs_, self.ports)]
        return DomainBound(self.route, tuple(n for _, n, _ in self.ports),
                           tuple(u for u, _ in shaped), tuple(a for _, a in shaped),
                           tuple(b[0] for b in boxes), tuple(b[1] for b in boxes),
                           pieces, self.evaluations, unbounded, elementwise)

    # ----- pieces of the whole box -----------------------------------------------------------
    def whole(self, budget) -> DomainBound:
        root = [tuple(np.array(x) for x in b) for b in self.boxes]
        u, a = self._evaluate(self.op, root, self.tangents, self.cotangents)

        def children(piece):
            splits = self._split(piece)
            return None if splits is None else [
                [(half, *self._evaluate(self.op, half, self.tangents, self.cotangents))
                 for half in halves] for halves in splits]
        return self._refine(root, u, a, budget, children, False)

    def _refine(self, root, u, a, budget, children, elementwise) -> DomainBound:
        """Worst-first bisection (the module docstring): ``children(piece)`` gives, per
        candidate split, [(half, ulps, absolute)] of both halves (None for a point); the
        candidate whose worse half is better is kept."""
        heap, done, tick = [(-_score(u), 0, root, u, a)], [], 0
        while heap and len(heap) + len(done) < budget:
            score, _, piece, u, a = heapq.heappop(heap)
            options = None if -score == 0 else children(piece)
            if options is None:
                done.append((piece, u, a))
                if -score == 0:
                    break
                continue
            kept = []
            for option in options:
                halves = [(half, [np.minimum(x, y) for x, y in zip(cu, u)],
                           [np.minimum(x, y) for x, y in zip(ca, a)])
                          for half, cu, ca in option]
                kept.append((max(_score(cu) for _, cu, _ in halves), len(kept), halves))
            for half, cu, ca in min(kept)[2]:
                tick += 1
                heapq.heappush(heap, (-_score(cu), tick, half, cu, ca))
        final = done + [(p, u, a) for _, _, p, u, a in heap]
        return self._combine(final, elementwise)

    def _combine(self, final, elementwise):
        n = len(self.ports)
        ulps_ = [np.maximum.reduce([f[1][j] for f in final]) for j in range(n)]
        abs_ = [np.maximum.reduce([f[2][j] for f in final]) for j in range(n)]
        unbounded = sum(1 for f in final if any(np.isinf(x).any() for x in f[1]))
        return self._result(ulps_, abs_, self.boxes, len(final), unbounded, elementwise)

    def _split(self, piece):
        """The candidate splits of ``piece`` along its widest scalar entry (_halves), each
        two halves, or None for a point."""
        best, width = None, 0.0
        for k in self.scalar:
            lo, hi = piece[k]
            if not lo.size:
                continue
            with np.errstate(over="ignore"):
                w = (hi - lo).reshape(-1)
            j = int(np.argmax(w))
            if w[j] > width:
                best, width = (k, j), float(w[j])
        if best is None:
            return None
        k, j = best
        lo, hi = piece[k]
        out = []
        for m, m_up in _halves(lo.flat[j], hi.flat[j], self.bk.fmt):
            left, right = list(piece), list(piece)
            lhi, rlo = hi.copy(), lo.copy()
            lhi.flat[j], rlo.flat[j] = m, m_up
            left[k], right[k] = (lo, lhi), (rlo, hi)
            out.append((left, right))
        return out

    # ----- per-element pieces ----------------------------------------------------------------
    def elementwise(self, budget) -> DomainBound:
        """Pieces of one element's inputs, evaluated for every element at once."""
        shape = tuple(self.op.attrs["shape"])
        n = int(np.prod(shape, dtype=np.int64))
        keys = _varying(self.op, self.boxes, shape)
        root = [(np.array(self.boxes[k][0].flat[0]), np.array(self.boxes[k][1].flat[0]))
                for k in keys]
        (u, a), = self._batch([root], keys, shape, n)

        def children(piece):
            splits = _split_element(piece, self.bk.fmt)
            if splits is None:
                return None
            halves = [h for pair in splits for h in pair]
            got = self._batch(halves, keys, shape, n)
            flat = [(h, cu, ca) for h, (cu, ca) in zip(halves, got)]
            return [flat[i:i + 2] for i in range(0, len(flat), 2)]
        return self._refine(root, u, a, budget, children, True)

    def _batch(self, pieces, keys, shape, n):
        """[(ulps, absolute) per port, each (n,)] of every piece, from one evaluation of
        the operator on len(pieces) * n elements (piece-major)."""
        P = len(pieces)
        big = self.op.replace(shape=(P * n,))
        boxes = []
        for k, (port, box) in enumerate(zip(self.op.inputs, self.boxes)):
            if k in keys:
                j = keys.index(k)
                lo = np.repeat(np.array([float(p[j][0]) for p in pieces]), n)
                hi = np.repeat(np.array([float(p[j][1]) for p in pieces]), n)
                boxes.append((lo, hi))
            elif port.shape == shape:
                x = np.tile(np.asarray(box[0]).reshape(-1), P)
                boxes.append((x, x))
            else:
                boxes.append(box)
        ts = None if self.tangents is None else tuple(_tile(t, p, shape, P) for t, p in
                                                      zip(self.tangents, self.op.inputs))
        cs = None if self.cotangents is None else tuple(_tile(c, p, shape, P) for c, p in
                                                        zip(self.cotangents, self.op.outputs))
        u, a = self._evaluate(big, boxes, ts, cs, batch=(P * n,))
        return [([x.reshape(P, n)[i] for x in u], [x.reshape(P, n)[i] for x in a])
                for i in range(P)]


def _tile(v, port, shape, P):
    if v is None or port.shape != shape:
        return v
    return np.tile(np.asarray(v).reshape(-1), P)


def _score(u) -> float:
    """A piece's priority: its worst bound in ulps over every port and element."""
    return max((float(np.max(x)) for x in u if x.size), default=0.0)


def _halves(lo, hi, fmt) -> list:
    """Candidate splits [(m, next_up(m)), ...] of [lo, hi], lo < hi format values, each with
    lo <= m < next_up(m) <= hi: at 0 where the interval holds it (0 alone split off where it
    is an end); else at the format value at or below the midpoint, and, where the interval
    spans more than SPREAD binades of one sign, also at a power of two near its geometric
    middle (near 0 the ulp, hence the bound in ulps, changes with every binade)."""
    lo, hi = float(lo), float(hi)
    if lo < 0 < hi or lo == 0:
        return [_cut(0.0, lo, hi, fmt)]
    if hi == 0:
        return [_cut(float(formats.next_down(np.array([0.0]), fmt)[0]), lo, hi, fmt)]
    mid = lo * 0.5 + hi * 0.5
    out = [_cut(float(formats.round_to(np.array([mid]), fmt, "downward")[0]), lo, hi, fmt)]
    if hi / lo > 2.0 ** SPREAD or lo / hi > 2.0 ** SPREAD:
        k = (math.frexp(abs(lo))[1] + math.frexp(abs(hi))[1]) // 2
        m = math.copysign(math.ldexp(1.0, k), hi)
        if hi < 0:                        # -2**k is the right half's lower end
            m = float(formats.next_down(np.array([m]), fmt)[0])
        cut = _cut(m, lo, hi, fmt)
        if cut not in out:
            out.append(cut)
    return out


def _cut(m, lo, hi, fmt) -> tuple:
    """(m, next_up(m)) with m clamped into [lo, next_down(hi)]."""
    m = min(max(m, lo), float(formats.next_down(np.array([hi]), fmt)[0]))
    return m, float(formats.next_up(np.array([m]), fmt)[0])


def _split_element(piece, fmt):
    """The candidate splits of a per-element piece along its widest input (pairs of
    halves), or None for a point."""
    widths = [float(hi) - float(lo) for lo, hi in piece]
    if not widths or max(widths) <= 0:
        return None
    k = int(np.argmax(widths))
    lo, hi = piece[k]
    out = []
    for m, m_up in _halves(lo, hi, fmt):
        left, right = list(piece), list(piece)
        left[k], right[k] = (lo, np.array(m)), (np.array(m_up), hi)
        out.append((left, right))
    return out
