"""Registry-wide properties: one short test per property, parametrized over every registered
operator and the example attributes its entry declares (a new operator gets them for free).
Test ids join keys with '-': ``exp-forward``, ``add-int8-forward``, ``exp-gradient-exact``.

Oracles are independent of the rules: mpmath at 300 bits through the entry's ``oracle``,
256-bit central differences, exact rationals, and the entry's own numpy binary64 code.
Known failures are data in the entries (KnownFailure), turned into strict xfails here.
"""

from __future__ import annotations

import itertools
import json
import zlib
from fractions import Fraction

import mpmath
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

KINDS = ("ordinary", "edges", "special")


def _instances():
    """(id, op) for every operator at each example of its entry ('' is the defaults)."""
    out = []
    for name in routes.names():
        for label, attrs in declaration(name).examples.items():
            out.append((f"{name}-{label}" if label else name, routes.op(name, **attrs)))
    return out


INSTANCES = _instances()


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


# ----- mpmath helpers (a local context: never mpmath.mp) ----------------------------------------
CTX = mpmath.MPContext()
CTX.prec = 300


def mp(v):
    """An mpf of the local context holding ``v`` exactly (floats, mpf, Fractions)."""
    if hasattr(v, "_mpf_"):
        return CTX.make_mpf(v._mpf_)
    if hasattr(v, "numerator") and not isinstance(v, (float, np.floating)):
        return CTX.mpf(v.numerator) / v.denominator
    return CTX.mpf(float(v))


def to_mp(x) -> np.ndarray:
    """An object array of exact mpf values of a float64 array."""
    with np.errstate(all="ignore"):
        return np.asarray(np.frompyfunc(mp, 1, 1)(np.asarray(x, dtype=np.float64)), dtype=object)


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
                    assert np.asarray(y).dtype == numbers, (p, np.asarray(y).dtype)


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
    h = xp.constant(2.0 ** -64)
    for xs in all_samples(o, kinds=("ordinary",), draws=3):
        ts = linear_args(rng_for(o, 2), o.inputs)
        moved = [[xp.add(xp.asarray(x), xp.multiply(xp.multiply(s, h), xp.asarray(t)))
                  if t is not None else x for x, t in zip(xs, ts)]
                 for s in (xp.constant(1), xp.constant(-1))]
        plus, minus = rule.forward(moved[0]), rule.forward(moved[1])
        jv = rule.jvp(xs, ts)
        for j, p in enumerate(o.outputs):
            if not p.differentiable:
                continue
            for a, b, c in zip(np.ravel(jv[j]), np.ravel(plus[j]), np.ravel(minus[j])):
                cd = (mp(b) - mp(c)) / (2 * mp(h[()]))
                # Truncation error h**2 |f'''| / 6 and rounding 2**-256 / h: far below 2**-100.
                assert abs(mp(a) - cd) <= CTX.ldexp(1, -100) * (1 + abs(cd)), (xs, ts, a, cd)


# ----- gradients: the adjoint identity --------------------------------------------------------
def _pairing(us, vs):
    """sum over ports and elements of u * v, exactly in the local context (None: skipped)."""
    total, scale = CTX.mpf(0), CTX.mpf(0)
    for u, v in zip(us, vs):
        if u is None or v is None:
            continue
        for a, b in zip(np.ravel(u), np.ravel(v)):
            term = mp(a) * mp(b)
            total, scale = total + term, scale + abs(term)
    return total, scale


@pytest.mark.parametrize("o", cases("gradient", has_tangents))
def test_backward_is_adjoint_of_jvp(o):
    rule = o.rule(numerics.reference(200))
    for xs in all_samples(o, kinds=("ordinary",), draws=3):
        rng = rng_for(o, 3)
        ts, cs = linear_args(rng, o.inputs), linear_args(rng, o.outputs)
        lhs, s1 = _pairing(rule.jvp(xs, ts), cs)
        rhs, s2 = _pairing(ts, rule.backward(xs, cs))
        assert abs(lhs - rhs) <= CTX.ldexp(1, -180) * (s1 + s2), (xs, lhs, rhs)


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
        except numerics.ExactnessError as exc:
            pytest.skip(f"{o.name} is not rational: {exc}")
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


# ----- binary64: the rule under native numpy against the entry's own numpy code -----------------
def _agree(a, b, ulps):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if ulps == 0:
        return np.array_equal(a, b, equal_nan=True)
    with np.errstate(invalid="ignore"):
        ok = (a == b) | (np.isnan(a) & np.isnan(b)) | \
            (np.abs(a - b) <= ulps * np.abs(np.spacing(b)))      # spacing(b) < 0 for b < 0
    return bool(ok.all())


@pytest.mark.parametrize("o", cases("forward-float64",
                                    lambda o: o.decl.float64 is not None and all_scalar(o)))
def test_native_float64_forward_matches_numpy(o):
    rule, ref = o.rule(numerics.native("float64")), o.decl.float64
    for xs in all_samples(o):
        with np.errstate(all="ignore"):
            want = ref.forward(o.attrs, *xs)
        want = want if isinstance(want, tuple) else (want,)
        assert all(_agree(g, w, ref.ulps) for g, w in zip(rule.forward(xs), want)), xs


@pytest.mark.parametrize("o", cases("gradient-float64", lambda o: o.decl.float64 is not None
                                    and o.decl.float64.backward is not None and all_scalar(o)))
def test_native_float64_gradient_matches_numpy(o):
    rule, ref = o.rule(numerics.native("float64")), o.decl.float64
    for xs in all_samples(o):
        cs = linear_args(rng_for(o, 6), o.outputs)
        with np.errstate(all="ignore"):
            want = ref.backward(o.attrs, xs, cs)
        for g, w in zip(rule.backward(xs, cs), want):
            assert (g is None and w is None) or _agree(g, w, ref.ulps), (xs, g, w)


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
