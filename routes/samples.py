"""Sample inputs for the registry's tests and the coverage runner: domain-aware draws.

A sampler is ``sampler(rng, fmt, op) -> inputs`` (one array per input port, at the port's
shape): float64 arrays holding values of ``fmt`` (binary64 when None) at scalar ports, numpy
words or Booleans at the others.  Declarations give one sampler per kind:

- ``ordinary``: finite values in the smooth part of the domain, away from kinks (where the
  derivative tests run);
- ``edges``: values near the edges of the domain: overflow and underflow thresholds, ties,
  the kink itself;
- ``special``: zeros of both signs, infinities, NaN, the extremes of the format, mixed with
  ordinary values.

One kind is derived for every operator with value inputs unless it declares its own:

- ``magnitudes``: the ``ordinary`` draw with the magnitude of every scalar element of a value
  input replaced by 2**e, e uniform over [log2 of the least subnormal, log2 of the largest
  finite value] of the format (log-uniform across its whole range), the sign kept: the
  domain's sign pattern survives (log's inputs stay positive) while every binade, the
  subnormals and the overflow threshold get their share.  Operators whose domain is bounded
  in magnitude (probabilities in [0, 1]) declare a ``magnitudes`` sampler of their own.

Elementwise operators describe their domain per element with a ``Domain`` of draws
``draw(rng, fmt, n) -> tuple of float64 arrays`` (one per scalar input, n entries each):
``uniform``, ``pick``, ``special`` below, or a function of their own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from roundoff_coverage import formats

from . import words

SPECIALS = (0.0, -0.0, math.inf, -math.inf, math.nan)


def target(fmt) -> formats.BinaryFormat:
    """The format samples are drawn in (binary64 when ``fmt`` is None)."""
    return formats.get("binary64") if fmt is None else formats.get(fmt)


def into(x, fmt) -> np.ndarray:
    """Float64 values rounded once (nearest even) into ``fmt``; unchanged for None."""
    x = np.asarray(x, dtype=np.float64)
    return x if fmt is None else formats.round_to(x, formats.get(fmt))


def extremes(fmt) -> tuple:
    """The format's largest finite, least normal and least subnormal values, both signs."""
    f = target(fmt)
    vals = (float(f.max_finite), float(f.min_normal), float(f.min_subnormal))
    return vals + tuple(-v for v in vals)


def log_uniform(rng, fmt, like, top: float | None = None) -> np.ndarray:
    """Values of ``fmt`` with the signs of ``like`` (+ for zeros and NaN) and magnitudes
    2**e, e uniform on [log2 min_subnormal, log2 max_finite] (max_finite lowered to ``top``
    for a bounded domain): every binade of the format, subnormals included, equally likely.
    Rounding is monotone, so no draw passes the upper end."""
    f = target(fmt)
    like = np.asarray(like, dtype=np.float64)
    cap = float(f.max_finite) if top is None else min(float(top), float(f.max_finite))
    mag = np.exp2(rng.uniform(math.log2(f.min_subnormal), math.log2(cap), like.shape))
    sign = np.where(np.signbit(like) & ~np.isnan(like), -1.0, 1.0)
    return into(np.minimum(mag, cap) * sign, fmt)


def magnitudes(rng, fmt, op, ordinary) -> tuple:
    """The ``magnitudes`` kind (module docstring) from an ``ordinary`` draw of ``op``."""
    return tuple(log_uniform(rng, fmt, x).reshape(np.shape(x)) if p.differentiable else x
                 for p, x in zip(op.inputs, ordinary))


def uniform(lo: float, hi: float, arity: int = 1) -> Callable:
    """A draw: each input uniform in [lo, hi]."""
    def draw(rng, fmt, n):
        return tuple(rng.uniform(lo, hi, n) for _ in range(arity))
    return draw


def pick(values, arity: int = 1) -> Callable:
    """A draw: each input picks from ``values`` (a sequence, or a function of the target
    format returning one) independently."""
    def draw(rng, fmt, n):
        vals = np.asarray(values(target(fmt)) if callable(values) else values, dtype=np.float64)
        return tuple(vals[rng.integers(0, len(vals), n)] for _ in range(arity))
    return draw


def special(base: Callable, arity: int = 1, share: float = 0.6) -> Callable:
    """A draw: each entry is a special value (SPECIALS and the format's extremes) with
    probability ``share``, else drawn by ``base``."""
    def draw(rng, fmt, n):
        vals = np.asarray(SPECIALS + extremes(fmt), dtype=np.float64)
        out = []
        for x in base(rng, fmt, n):
            hit = rng.random(n) < share
            out.append(np.where(hit, vals[rng.integers(0, len(vals), n)], x))
        return tuple(out)
    return draw


@dataclass(frozen=True)
class Domain:
    """Draws of an elementwise operator's scalar inputs by kind; ``kinks(*xs) -> mask`` marks
    the points where the operator is not differentiable, redrawn in ``ordinary`` samples
    (float64 numpy on sample values: data, not a rule)."""

    ordinary: Callable
    edges: Callable | None = None
    special: Callable | None = None
    kinks: Callable | None = None

    def samplers(self) -> dict:
        """{kind: sampler} for the kinds this domain draws."""
        out = {"ordinary": _elementwise(self.ordinary, self.kinks)}
        if self.edges is not None:
            out["edges"] = _elementwise(self.edges, None)
        out["special"] = _elementwise(self.special or special(self.ordinary,
                                                                _arity(self.ordinary)), None)
        return out


def _arity(draw) -> int:
    return len(draw(np.random.default_rng(0), None, 1))


def _elementwise(draw: Callable, kinks: Callable | None) -> Callable:
    """A sampler for operators whose scalar inputs share one shape: ``draw`` fills them
    element by element; word and Boolean ports get words.sample."""
    def sampler(rng, fmt, op):
        scalar = [p for p in op.inputs if p.scalar]
        shape = scalar[0].shape if scalar else ()
        n = int(np.prod(shape, dtype=np.int64))
        xs = [into(x, fmt) for x in draw(rng, fmt, n)]
        for _ in range(100):
            bad = np.zeros(n, bool) if kinks is None else np.asarray(kinks(*xs), bool)
            if not bad.any():
                break
            fresh = [into(x, fmt) for x in draw(rng, fmt, n)]
            xs = [np.where(bad, f, x) for f, x in zip(fresh, xs)]
        else:
            raise RuntimeError(f"{op.name}: ordinary samples keep landing on kinks in {fmt}")
        it = iter(xs)
        return tuple(next(it).reshape(p.shape) if p.scalar else words.sample(rng, p)
                     for p in op.inputs)
    return sampler


def unsigned_zeros(draw: Callable) -> Callable:
    """``draw`` with every -0 replaced by +0: for operators whose result's sign depends on a
    zero's sign (1/-0 = -inf) the mpmath oracle, which has one unsigned zero, cannot judge
    it; those signs are conventions pinned by tests of their own."""
    def unsigned(rng, fmt, n):
        return tuple(np.where(x == 0, 0.0, x) for x in draw(rng, fmt, n))
    return unsigned
