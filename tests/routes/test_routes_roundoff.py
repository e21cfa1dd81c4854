"""Roundoff certificates (routes.certs.roundoff) are measured, not asserted: the forward route
under numerics.emulated(format, mode) stays within the certified number of ulps of the exact
value on every sample kind.  The exact value is the entry's mpmath oracle at 300 bits
(independent of the rule); ulps are numerics.metrics' (the extended-format convention at
overflow)."""

from __future__ import annotations

import numpy as np
import pytest

from roundoff_coverage import formats
from roundoff_coverage import numerics
from roundoff_coverage import routes
from roundoff_coverage.numerics import metrics
from conftest import CTX, to_mp


def _cases():
    params = []
    for name in routes.names():
        for cert in routes.certificates(name):
            if cert.kind != "roundoff" or "ulps" not in cert.bound:
                continue                     # formulas: tests/routes/test_routes_apriori.py
            for fmt in cert.bound["formats"]:
                for mode in cert.bound["modes"]:
                    params.append(pytest.param(name, fmt, mode, cert.bound["ulps"],
                                               id=f"{name}-forward-{fmt}-{mode}"))
    return params


def _clamped(e, fmt):
    """Exact values far outside the format replaced by ones that round and measure alike:
    |x| >= 2**(emax+2) by 2**(emax+2), 0 < |x| < 2**(qmin-2) by 2**(qmin-2) (exp(+-3e38)
    has an exponent numerics.metrics cannot hold)."""
    f = formats.get(fmt)
    top, tiny = CTX.ldexp(1, f.emax + 2), CTX.ldexp(1, f.qmin - 2)

    def one(v):
        if CTX.isnan(v) or CTX.isinf(v) or v == 0:
            return v
        return CTX.sign(v) * min(max(abs(v), tiny), top)
    return np.asarray(np.frompyfunc(one, 1, 1)(e), dtype=object)


@pytest.mark.parametrize("name,fmt,mode,ulps", _cases())
def test_forward_within_certified_bound(name, fmt, mode, ulps):
    o = routes.op(name)
    if "shape" in o.attrs:
        o = o.replace(shape=(64,))
    assert o.decl.oracle is not None, f"{name}: a roundoff certificate needs an oracle"
    rule = o.rule(numerics.emulated(fmt, mode))
    rng = np.random.default_rng(7)
    worst = 0.0
    for kind in o.decl.samples:
        for _ in range(3):
            xs = o.samples(rng, fmt, kind)
            got = rule.forward(xs)
            exact = o.decl.oracle(CTX, o.attrs, *[to_mp(x) if p.scalar else x
                                                  for x, p in zip(xs, o.inputs)])
            for g, e in zip(got, exact):
                err = metrics.ulp_error(np.asarray(g, dtype=np.float64), _clamped(e, fmt), fmt)
                assert not np.isnan(err).any(), (kind, xs, g, e)
                worst = max(worst, float(np.abs(err).max(initial=0.0)))
    assert worst <= ulps, f"{name} in {fmt}/{mode}: {worst} ulp > certified {ulps}"
