"""Registry-wide properties: one short test per property, parametrized over every registered
operator and the example attributes its entry declares (a new operator gets them for free).
Test ids join keys with '-': ``exp-forward``, ``add-int8-forward``, ``exp-gradient-exact``.

Oracles are independent of the rules: mpmath at 300 bits through the entry's ``oracle``,
256-bit central differences, exact rationals, and the real value (the rule at 200 bits) for
numpy's binary64.  Known failures are data in the entries (KnownFailure), turned into strict
xfails here.  The instance list and the mpmath helpers are tests/conftest.py's.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import json
import zlib
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roundoff_coverage import formats
from roundoff_coverage import numerics
from roundoff_coverage import routes
from roundoff_coverage.routes.errors import RouteError
from roundoff_coverage.routes.registry import DERIVED_KINDS, declaration
from roundoff_coverage.routes.vocabulary import spec_row
from conftest import CTX, INSTANCES, central_difference, mp, pairing, to_mp

KINDS = ("ordinary", "edges", "special")


def cases(route, where=lambda op: True, instances=None):
    """pytest params '<id>-<route>' over INSTANCES passing ``where``; an entry's
    KnownFailure for this route (and example) becomes a strict xfail."""
    params = []
    for ident, o in INSTANCES if instances is None else instances:
        if not where(o):
            continue
        marks = [pytest.mark.xfail(strict=True, reason=kf.reason)
                 for kf in o.decl.known_failures
                 if kf.route == route and kf.example in (None, ident)]
        params.append(pytest.param(o, id=f"{ident}-{route}", marks=marks))
    return params


def any_rule(o):
    """The rule under numpy binary64, or at 64 bits under numerics.reference where numpy lacks
    the capability (erf): for the tests that need some rule to run, not a particular one."""
    return o.rule(numerics.native("float64")) or o.rule(numerics.reference(64))


def has_values(o):
    return any(p.differentiable for p in o.inputs)


def has_tangents(o):
    """Value inputs and a forward mode at the instance's attributes (custom's pullback is a
    policy without one; scatter has none at max and min)."""
    return has_values(o) and o.has_jvp


def all_scalar(o):
    return all(p.scalar for p in o.inputs + o.outputs)


def rng_for(o, salt=0):
    return np.random.default_rng(zlib.crc32(repr((o.name, o.attrs, salt)).encode()))


def all_samples(o, fmt=None, kinds=KINDS, draws=2):
    rng = rng_for(o)
    return [o.samples(rng, fmt, k) for k in kinds if k in o.decl.samples for _ in range(draws)]


def linear_args(rng, ports):
    """Random dyadic tangents/cotangents at value ports (None elsewhere)."""
    return tuple(rng.integers(-8, 9, p.shape) / 8.0 if p.differentiable else None
                 for p in ports)


def close(a, b, bits):
    """a and b agree to ``bits`` relative bits (NaN with NaN, inf with the same inf)."""
    a, b = mp(a), mp(b)
    if CTX.isnan(a) or CTX.isnan(b):
        return CTX.isnan(a) and CTX.isnan(b)
    if CTX.isinf(a) or CTX.isinf(b):
        return a == b
    return abs(a - b) <= CTX.ldexp(1, -bits) * max(abs(a), abs(b))


# ----- the table ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", routes.names())
def test_registered_operator_is_in_the_spec_vocabulary(name):
    row = spec_row(name)
    assert row is not None, f"{name} is not an operator of the spec"
    family, _, needs = row[:3]
    decl = declaration(name)
    assert decl.family == family
    need = routes.op(name).need
    if "at some attributes" not in needs and "from its node" not in needs:
        assert (need or "every scalar") == needs.split(";")[0]


def test_the_table_is_exactly_the_specs_154_operators():
    from roundoff_coverage.routes.vocabulary import VOCABULARY
    assert routes.names() == tuple(row[1] for row in VOCABULARY) and len(VOCABULARY) == 154


@pytest.mark.parametrize("name", routes.names())
def test_forward_mode_is_the_specs(name):
    """A forward-mode rule exactly where the spec's Gradient column says "forward mode" (at
    some attributes: at the default ones or not)."""
    gradient = spec_row(name)[4]
    if "at some attributes" in gradient:
        return
    assert (declaration(name).jvp is not None) == ("forward mode" in gradient), gradient


@pytest.mark.parametrize("o", cases("ports"))
def test_outputs_fit_the_ports(o):
    rule = any_rule(o)
    for xs in all_samples(o):
        ys = rule.forward(xs)
        assert len(ys) == len(o.outputs)
        for y, port in zip(ys, o.outputs):
            assert port.mismatch(y) is None, (port, y)


@pytest.mark.parametrize("fmt", [None, "bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("o", cases("samples"))
def test_samples_fit_the_ports_and_the_format(o, fmt):
    assert "ordinary" in o.decl.samples
    rule = any_rule(o)
    derived = list(DERIVED_KINDS) if any(p.differentiable for p in o.inputs) else []
    for kind in dict.fromkeys(list(o.decl.samples) + derived):
        xs = o.samples(rng_for(o, 1), fmt, kind)          # Op.samples checks the ports
        rule.validate(xs)                                  # samples are valid inputs
        for x, p in zip(xs, o.inputs):
            if p.scalar and fmt is not None:
                assert np.array_equal(formats.round_to(x, formats.get(fmt)), x, equal_nan=True)
            if p.scalar and kind == "ordinary":
                assert np.isfinite(x).all()
            if p.differentiable and kind == "magnitudes":   # nonzero values of the range
                f = formats.get(fmt or "binary64")
                a = np.abs(x)
                assert np.all((a >= float(f.min_subnormal)) & (a <= float(f.max_finite)))


def test_known_failures_become_strict_xfails():
    from roundoff_coverage.routes.registry import KnownFailure
    o = routes.op("exp")
    fake = type("Fake", (), {"name": "exp", "attrs": o.attrs,
                             "decl": type("D", (), {"known_failures": (
                                 KnownFailure("forward-float64", "numpy's exp is 1 ulp off"),
                                 KnownFailure("tangent", "scoped", example="exp-2x3"))})()})()
    got = {p.id: p.marks for p in cases("forward-float64", instances=[("exp", fake)])}
    (mark,) = got["exp-forward-float64"]
    assert mark.name == "xfail" and mark.kwargs == {"strict": True,
                                                    "reason": "numpy's exp is 1 ulp off"}
    scoped = {p.id: p.marks for p in cases("tangent", instances=[("exp", fake),
                                                                 ("exp-2x3", fake)])}
    assert not scoped["exp-tangent"] and scoped["exp-2x3-tangent"][0].name == "xfail"


BACKENDS = {"emulated-bfloat16": lambda: numerics.emulated("bfloat16"),
            "emulated-binary128": lambda: numerics.emulated("binary128"),
            "emulated-e4m3fn-toward_zero": lambda: numerics.emulated("float8_e4m3fn",
                                                                     "toward_zero"),
            "native-float32": lambda: numerics.native("float32"),
            "native-bfloat16": lambda: numerics.native("bfloat16"),
            "reference-64": lambda: numerics.reference(64)}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("o", cases("backends"))
def test_rule_runs_unchanged_under_every_backend(o, backend):
    xp = BACKENDS[backend]()
    rule = o.rule(xp)
    if rule is None:
        pytest.skip(f"{xp.name} lacks {o.need}")
    numbers = np.asarray(xp.constant(1)).dtype
    for xs in all_samples(o, draws=1):
        ts = linear_args(rng_for(o, 7), o.inputs)
        cs = linear_args(rng_for(o, 8), o.outputs)
        results = [rule.forward(xs), rule.jvp(xs, ts) if rule.has_jvp else None,
                   rule.backward(xs, cs)]
        for k, (ys, ports) in enumerate(zip(results, (o.outputs, o.outputs, o.inputs))):
            for y, p in zip(ys or (), ports):
                # Values at every output; tangents and gradients exactly at value ports.
                assert (y is None) == (k > 0 and not p.differentiable)
                if y is None:
                    continue
                assert p.mismatch(y) is None
                if p.scalar:                  # stays in the backend's numbers
                    # (the reference's entries may be exact Python floats: one taken out
                    # of an array is a bare float, read back by its asarray)
                    got = np.asarray(y).dtype
                    assert got == numbers or (numbers == object and np.ndim(y) == 0 and
                                              isinstance(np.asarray(y).item(), float)), (p, got)


@pytest.mark.parametrize("name", routes.names())
def test_entry_states_its_conventions_and_evidence(name):
    decl = declaration(name)
    assert decl.notes and all(isinstance(n, str) and n for n in decl.notes)
    assert routes.certificates(name)


# ----- forward against mpmath ------------------------------------------------------------------
@pytest.mark.parametrize("o", cases("forward", lambda o: o.decl.oracle is not None))
def test_forward_matches_oracle(o):
    rule = o.rule(numerics.reference(256))    # 66 bits beyond the 190 compared: cancellation
    for xs in all_samples(o):
        got = rule.forward(xs)
        args = [to_mp(x) if p.scalar else x for x, p in zip(xs, o.inputs)]
        want = o.decl.oracle(CTX, o.attrs, *args)
        for g, w, p in zip(got, want, o.outputs):
            g, w = np.asarray(g).reshape(-1), np.asarray(w).reshape(-1)
            if p.scalar:
                bad = [(a, b) for a, b in zip(g, w) if not close(a, b, 190)]
            else:
                bad = [(a, b) for a, b in zip(g.tolist(), w.tolist()) if a != b]
            assert not bad, f"inputs {xs}: {bad[:3]}"


# ----- tangents: central differences at 256 bits -------------------------------------------------
@pytest.mark.parametrize("o", cases("tangent", has_tangents))
def test_jvp_matches_central_difference(o):
    xp = numerics.reference(256)
    rule = o.rule(xp)
    for xs in all_samples(o, kinds=("ordinary",), draws=3):
        ts = linear_args(rng_for(o, 2), o.inputs)
        jv = rule.jvp(xs, ts)
        for j, (p, cd) in enumerate(zip(o.outputs, central_difference(rule, xp, xs, ts))):
            if not p.differentiable:
                continue
            for a, d in zip(np.ravel(jv[j]), cd):
                # Truncation error h**2 |f'''| / 6 and rounding 2**-256 / h: far below 2**-100.
                assert abs(mp(a) - d) <= CTX.ldexp(1, -100) * (1 + abs(d)), (xs, ts, a, d)


# ----- gradients: the adjoint identity --------------------------------------------------------
def called_functions(f) -> set:
    """The Python functions ``f`` calls by name: those it closes over and the module-level
    ones it names."""
    named = [f.__globals__.get(n) for n in f.__code__.co_names]
    for cell in f.__closure__ or ():
        with contextlib.suppress(ValueError):             # a cell not yet filled
            named.append(cell.cell_contents)
    return {g for g in named if inspect.isfunction(g)}


def shares_derivative(o, rule, xs):
    """Whether the pullback and the tangent apply one derivative function: the entry's
    ``backward`` and ``jvp`` call the same functions (routes.helpers' unary_elementwise and
    binary_elementwise hand one ``d``, or ``dx`` and ``dy``, to both), and at ``xs`` the
    pullback is that map itself (cumsum's shared scan runs backwards in its pullback)."""
    shared = called_functions(o.decl.backward)
    return bool(shared) and shared == called_functions(o.decl.jvp) and \
        pullback_is_tangent_map(o, rule, xs)


def pullback_is_tangent_map(o, rule, xs):
    """Whether the pullback at ``xs`` is the tangent map itself: one value output, every value
    input of its shape, and for a dyadic v the gradient at each value input k equals, bit for
    bit, the output tangent of v at input k alone."""
    outs = [j for j, p in enumerate(o.outputs) if p.differentiable]
    ins = [k for k, p in enumerate(o.inputs) if p.differentiable]
    if len(outs) != 1 or any(o.inputs[k].shape != o.outputs[outs[0]].shape for k in ins):
        return False
    (j,) = outs
    v = linear_args(rng_for(o, 9), o.outputs)[j]
    grads = rule.backward(xs, [v if i == j else None for i in range(len(o.outputs))])
    return all(np.array_equal(grads[k], rule.jvp(xs, [v if i == k else None
                                                      for i in range(len(o.inputs))])[j])
               for k in ins)


@pytest.mark.parametrize("o", cases("gradient", has_tangents))
def test_backward_is_adjoint_of_jvp(o):
    """<J t, c> = <t, J^T c> at 256 bits: the pullback is the adjoint of the tangent map.

    Where the pullback and the tangent share one derivative function (``shares_derivative``:
    every elementwise operator declared with routes.helpers, clamp, dropout, softmax), the
    pullback is the tangent map d itself and <d t, c> = <t, d c> only restates that d is
    symmetric, which the diagonal Jacobian of an elementwise operator is by construction:
    against the rule's own tangent map this test could not fail.  There the pullback is
    compared with a 256-bit central difference of the forward map instead,
    <c, (F(x + h t) - F(x - h t)) / 2h> = <t, backward(c)>, as
    test_jvp_matches_central_difference checks the tangent: it fails when d is not the
    derivative.  Where the pullback and the tangent are written separately, the rule's
    tangent map is the reference, as the identity says."""
    xp = numerics.reference(256)
    rule = o.rule(xp)
    for xs in all_samples(o, kinds=("ordinary",), draws=3):
        rng = rng_for(o, 3)
        ts, cs = linear_args(rng, o.inputs), linear_args(rng, o.outputs)
        rhs, s2 = pairing(ts, rule.backward(xs, cs))
        if shares_derivative(o, rule, xs):
            # Each difference is within 2**-100 (1 + |cd|) of the derivative (see
            # test_jvp_matches_central_difference) and each |c| <= 1.
            lhs, s1 = pairing(central_difference(rule, xp, xs, ts), cs)
            count = sum(np.size(c) for c in cs if c is not None)
            tolerance = CTX.ldexp(1, -100) * (count + s1 + s2)
        else:
            lhs, s1 = pairing(rule.jvp(xs, ts), cs)
            tolerance = CTX.ldexp(1, -180) * (s1 + s2)
        assert abs(lhs - rhs) <= tolerance, (xs, lhs, rhs)


def _exact_pairing(us, vs):
    """sum of u * v over ports and elements as an exact Fraction (None: skipped)."""
    to_q = numerics.exact().asarray
    return sum(sum(np.ravel(to_q(u) * to_q(v)).tolist(), Fraction(0))
               for u, v in zip(us, vs) if u is not None and v is not None)


@pytest.mark.parametrize("o", cases("gradient-exact", has_tangents))
def test_backward_is_adjoint_of_jvp_exactly(o):
    rule = o.rule(numerics.exact())
    if rule is None:
        pytest.skip(f"{o.name}: no rule over the rationals (capability {o.need})")
    for xs in all_samples(o, kinds=("ordinary", "edges")):
        if not all(np.isfinite(x).all() for x, p in zip(xs, o.inputs) if p.scalar):
            continue
        rng = rng_for(o, 4)
        ts, cs = linear_args(rng, o.inputs), linear_args(rng, o.outputs)
        try:
            jv, grads = rule.jvp(xs, ts), rule.backward(xs, cs)
            shared = shares_derivative(o, rule, xs)
        except numerics.ExactnessError as exc:
            pytest.skip(f"{o.name} is not rational: {exc}")
        if shared:
            pytest.skip(f"{o.name}: pullback and tangent share one derivative function, so the "
                        f"identity holds by construction (test_backward_is_adjoint_of_jvp "
                        f"checks this pullback against central differences)")
        lhs = _exact_pairing(jv, cs)
        assert lhs == _exact_pairing(ts, grads)


# ----- prepare ----------------------------------------------------------------------------------
def _same(a, b):
    if a is None or b is None:
        return a is None and b is None
    return np.array_equal(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64),
                          equal_nan=True)


@pytest.mark.parametrize("o", cases("prepared"))
def test_prepare_matches_backward(o):
    rule = any_rule(o)
    values = [i for i, p in enumerate(o.inputs) if p.differentiable]
    for xs in all_samples(o):
        cs = linear_args(rng_for(o, 5), o.outputs)
        dense = rule.backward(xs, cs)
        for bits in itertools.product((False, True), repeat=len(values)):
            flags = [False] * len(xs)
            for i, bit in zip(values, bits):
                flags[i] = bit
            ys, pullback = rule.prepare(xs, flags)
            assert all(_same(a, b) for a, b in zip(ys, rule.forward(xs)))
            grads = pullback(cs)
            for i, g in enumerate(grads):
                assert _same(g, dense[i] if flags[i] else None), (i, flags)


# ----- binary64: the rule under native numpy against the real value -----------------------------
# The oracle is the real value: the same rule under numerics.reference(200) (its forward map is
# the entry's mpmath oracle to 190 bits: test_forward_matches_oracle), independent of numpy.
# The native value must lie within  LIBM_ULPS * max(1, d)  binary64 ulps of it, per element:
# - d: the largest error, in binary64 ulps, of SR_RUNS evaluations of the same rule in
#   binary64 with stochastic rounding (numerics.emulated("binary64", "stochastic", seed=k)),
#   whose every primitive lands within one ulp of its exact result.  d measures how much the
#   formula amplifies one-ulp errors at this sample (Monte Carlo arithmetic: Parker, Pierce
#   and Eggert 2000): at most 1 where it is well conditioned, far more where it cancels
#   (1 - y for y near 1 in the derivatives of sigmoid and tanh, 1 - cos for nearly parallel
#   vectors in cosineLoss, distill's divergence near its minimum, randn's Box-Muller cosine
#   near a zero).  It is computed only where the native value is off by more than LIBM_ULPS.
# - LIBM_ULPS = 4: + - * / sqrt are correctly rounded, numpy's binary64 libm functions and
#   SIMD loops "within a few ulps" (numerics/native.py), taken as 4: native may err up to
#   4 times what a one-ulp perturbation of each primitive does.
# The real value NaN wants NaN; one that rounds to an infinity wants that infinity.  Where a
# stochastic evaluation is itself NaN or infinite against a finite real value, or finite
# against an infinite one (an intermediate leaving binary64's range: cumprod's product that
# underflows to 0 before it meets an infinity), d is infinite: no claim there ("open"), on at
# most OPEN_LIMIT of an instance's elements.
LIBM_ULPS, SR_RUNS, OPEN_LIMIT = 4, 8, 0.25
REAL = numerics.reference(200)


def _route_values(o, xp, route, xs, cs):
    """The route's values under ``xp``, each port flat (float64; object arrays of mpf for
    REAL), None at the ports without one; None when ``xp`` has no rule."""
    rule = o.rule(xp)
    if rule is None:
        return None
    with np.errstate(all="ignore"):
        ys = rule.forward(xs) if route == "forward" else rule.backward(xs, cs)
    return [None if y is None else np.ravel(y if xp is REAL else xp.to_float64(y))
            for y in ys]


def _ulps(v, real, rounded):
    """|v - real| in binary64 ulps of the real value (subnormal spacing below 2**-1022);
    0 or inf where the real value is NaN or rounds to an infinity; inf where only v is."""
    if CTX.isnan(real):
        return 0 if np.isnan(v) else CTX.inf
    if not np.isfinite(rounded):
        return 0 if v == rounded else CTX.inf
    if not np.isfinite(v):
        return CTX.inf
    _, e = CTX.frexp(real)                                  # real = m 2**e, 1/2 <= |m| < 1
    return abs(mp(v) - real) / CTX.ldexp(1, max(int(e) - 1, -1022) - 52 if real else -1074)


def binary64_misses(o, route, xp, first=False):
    """(misses, open, elements) of the route under ``xp`` (a binary64 backend) against the
    real value over the instance's samples: a miss is (sample, port, element, value, real,
    ulps, allowed ulps); ``first``: stop at the first miss."""
    misses, opened, elements = [], 0, 0
    for n, xs in enumerate(all_samples(o)):
        cs = linear_args(rng_for(o, 6), o.outputs) if route == "gradient" else None
        got, real = _route_values(o, xp, route, xs, cs), _route_values(o, REAL, route, xs, cs)
        runs = None
        for j, (g, e) in enumerate(zip(got, real)):
            if e is None:
                continue
            rounded = REAL.to_float64(e)
            for i in range(e.size):
                elements += 1
                ulps = _ulps(g[i], mp(e[i]), rounded[i])
                if ulps <= LIBM_ULPS:
                    continue
                runs = runs or [_route_values(o, numerics.emulated("binary64", "stochastic",
                                                                   seed=k), route, xs, cs)
                                for k in range(SR_RUNS)]
                d = max(_ulps(r[j][i], mp(e[i]), rounded[i]) for r in runs)
                if not CTX.isfinite(d):
                    opened += 1
                elif ulps > LIBM_ULPS * max(1, d):
                    misses.append((n, j, i, g[i], e[i], float(ulps), LIBM_ULPS * max(1, float(d))))
                    if first:
                        return misses, opened, elements
    return misses, opened, elements


def _check_binary64(o, route):
    if o.rule(REAL) is None:
        pytest.skip(f"{o.name}: no rule over the reals (needs {o.need}): no real value")
    misses, opened, elements = binary64_misses(o, route, numerics.native("float64"))
    assert not misses, misses[:3]
    assert opened <= OPEN_LIMIT * elements, f"no claim on {opened} of {elements} elements"


@pytest.mark.parametrize("o", cases("forward-float64",
                                    lambda o: o.decl.float64 is not None and all_scalar(o)))
def test_native_float64_forward_is_near_the_real_value(o):
    _check_binary64(o, "forward")


@pytest.mark.parametrize("o", cases("gradient-float64", lambda o: o.decl.float64 is not None
                                    and has_values(o) and all_scalar(o)))
def test_native_float64_gradient_is_near_the_real_value(o):
    _check_binary64(o, "gradient")


def test_the_binary64_check_fails_an_exp_off_by_hundreds_of_ulps():
    """The check can fail: numpy's binary64 with exp made 2**-44 relative too large (256 to
    512 ulps) misses on exp's forward map and on its gradient (exp(x) times the cotangent)."""
    class OffExp(type(numerics.native("float64"))):
        def exp(self, x):
            return super().exp(x) * (1 + 2.0 ** -44)

    o = routes.op("exp")
    for route in ("forward", "gradient"):
        assert binary64_misses(o, route, numerics.native("float64"))[0] == []
        assert binary64_misses(o, route, OffExp("float64"), first=True)[0], route


# ----- failures: every check and validate message is reached ------------------------------------
def _failure_cases():
    params = []
    for name in routes.names():
        decl = declaration(name)
        params += [pytest.param(name, "check", attrs, None, text, id=f"{name}-check-{i}")
                   for i, (attrs, text) in enumerate(decl.bad_attributes)]
        params += [pytest.param(name, "validate", attrs, inputs, text,
                                id=f"{name}-validate-{i}")
                   for i, (attrs, inputs, text) in enumerate(decl.bad_inputs)]
    return params


@pytest.mark.parametrize("name,stage,attrs,inputs,text", _failure_cases())
def test_failure_example_gives_its_message(name, stage, attrs, inputs, text):
    if stage == "check":
        with pytest.raises(RouteError) as err:
            routes.op(name, **attrs).check()
    else:
        o = routes.op(name, **attrs)
        # Scalar ports read float64; index, integer and bool ports keep their numpy type.
        arrays = [np.asarray(x, dtype=np.float64) if p.scalar else np.asarray(x)
                  for x, p in zip(inputs, o.inputs)]
        with pytest.raises(RouteError) as err:
            any_rule(o).validate(arrays)
        assert text in str(err.value)
        with pytest.raises(RouteError) as err:
            routes.invoke(o, arrays, numerics.native("float64"))
    assert text in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", routes.names())
def test_every_check_and_validate_has_a_failure_example(name):
    decl = declaration(name)
    if decl.check is not None:
        assert any(routes.op(name, **attrs).problem() for attrs, _ in decl.bad_attributes)
    if decl.validate is not None:
        assert decl.bad_inputs


# ----- the wire codec over attribute ranges -----------------------------------------------------
def attribute_strategy(at):
    """Hypothesis values over an attribute's range (attributes.Attr.gen)."""
    if at.wire == "shape" or at.wire == "nats":
        top, extent = at.gen
        return st.lists(st.integers(0, extent), max_size=top).map(tuple)
    if at.wire == "shapes":
        top, rank, extent = at.gen
        return st.lists(st.lists(st.integers(0, extent), max_size=rank).map(tuple),
                        max_size=top).map(tuple)
    if at.wire == "text":
        return st.from_regex(r"[A-Za-z_][A-Za-z0-9_.-]{0,12}", fullmatch=True)
    if at.wire == "bool":
        return st.booleans()
    if at.wire == "enum":
        return st.sampled_from(at.choices)
    lo, hi = at.gen
    return st.integers(max(lo, at.lo) if at.lo is not None else lo,
                       min(hi, at.hi) if at.hi is not None else hi)


@pytest.mark.parametrize("name", [pytest.param(n, id=f"{n}-codec") for n in routes.names()])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_decode_inverts_encode(name, data):
    decl = declaration(name)
    attrs = {at.name: data.draw(attribute_strategy(at), label=at.name)
             for at in decl.attributes}
    o = routes.op(name, **attrs)
    record = json.loads(json.dumps(routes.encode(o)))          # survives JSON
    if o.proof_problem():                    # the proof attributes: decode refuses
        with pytest.raises(routes.DecodeError, match="decode: "):
            routes.decode(record)
        return
    back = routes.decode(record)             # decode does not run Op.check
    assert back == o and hash(back) == hash(o)
    if o.problem():
        assert back.problem() == o.problem()
        return
    assert back.inputs == o.inputs and back.outputs == o.outputs
