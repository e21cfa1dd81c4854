"""The primitives a kernel's rule calls: what the kernel's contract is computed from.

Every kernel reproduces its operator's rule primitive by primitive (kernels/elementwise.py
and the other kernel modules spell the rule with the device primitives), so the rule's trace
under numerics.recording -- binary32, the strict policy, the ordinary samples of every
example the kernel serves -- names the kernel's primitives.  The simulator tests check the
kernel against the same rule bit for bit (tests/kernels/test_kernels*.py).

``primitives(name, route, accepts)``: the union over those examples of the primitives of the
route (a gradient's trace includes its forward pass, which the pullback reads);
``rounds_once(name, accepts)``: whether the forward route rounds at most once per element
(one primitive that is not exact: the claim of a data-independent ulp bound,
kernels/contract.py).
"""

from __future__ import annotations

import functools

import numpy as np

from roundoff_coverage import routes
from roundoff_coverage.numerics import primitives as P
from roundoff_coverage.numerics.recording import RecordingBackend

# Primitives the model evaluates through another one the device table names: reciprocal is
# divide(1, x) (numerics.emulated), as the kernels spell it.
AS_DEVICE = {"reciprocal": "divide"}


def _instances(name, accepts):
    decl = routes.declaration(name)
    out = [routes.op(name, **attrs) for attrs in decl.examples.values()]
    return [o for o in out if accepts(o.attrs)]


def _trace(o, route) -> list:
    """The primitive calls of ``route`` of instance ``o`` on its ordinary samples."""
    bk = RecordingBackend("binary32", policy="strict")
    rule = o.rule(bk)
    if rule is None:
        return []
    xs = o.samples(np.random.default_rng(0), "binary32", "ordinary")
    cs = tuple(np.ones(p.shape) if p.differentiable else None for p in o.outputs)
    got = rule.routes(xs, [route], None, cs)[route]
    if isinstance(got, Exception):
        raise got
    return [AS_DEVICE.get(n, n) for n in bk.trace]


@functools.lru_cache(maxsize=None)
def primitives(name, route, accepts) -> frozenset:
    return frozenset(n for o in _instances(name, accepts) for n in _trace(o, route))


@functools.lru_cache(maxsize=None)
def rounds_once(name, accepts) -> bool:
    return all(sum(P.PRIMITIVES[n].kind != P.EXACT for n in _trace(o, "forward")) <= 1
               for o in _instances(name, accepts))
