"""numerics.settle: the precision loop of the coverage run's reference, against exact
rationals (the oracle) on evaluations with and without cancellation."""

from fractions import Fraction

import mpmath
import numpy as np
import pytest

from roundoff_coverage import formats, numerics


def _fraction(v):
    """An mpf as a Fraction, exactly (mpmath 1.3 has no as_integer_ratio)."""
    sign, man, exp, _ = v._mpf_
    f = Fraction(int(man)) * Fraction(2) ** exp
    return -f if sign else f


def _cancelling(calls):
    """Item k: (1 + 2**-e_k) - 1 computed at the given precision; exact value 2**-e_k, which
    a precision below e_k + 1 bits loses entirely."""
    exps = [10, 100, 140, 200]

    def fn(prec, items):
        calls.append((prec, list(items)))
        bk = numerics.reference(prec)
        out = []
        for k in items:
            one = bk.asarray(np.array([1.0]))
            tiny = bk.asarray(np.array([mpmath.ldexp(1, -exps[k])], dtype=object))
            out.append((bk.subtract(bk.add(one, tiny), one),))
        return out
    return fn, exps


def test_settle_doubles_only_the_items_that_move_and_reaches_the_exact_values():
    calls = []
    fn, exps = _cancelling(calls)
    s = numerics.settle(fn, len(exps), "binary64", start_prec=72, max_prec=4096)
    got = [_fraction(s.values[k][0][0]) for k in range(len(exps))]
    # 2**-10 is exact at 72 bits: settled by the 144-bit evaluation.  2**-100 and 2**-140
    # need 101 and 141 bits: lost at 72, found at 144, confirmed at 288.
    assert got[:3] == [Fraction(1, 2 ** e) for e in exps[:3]]
    assert s.precs[:3] == [144, 288, 288] and all(s.settled)
    assert calls[0] == (72, [0, 1, 2, 3]) and calls[1] == (144, [0, 1, 2, 3])
    assert calls[2] == (288, [1, 2])
    # The stated limit: agreement is evidence, not proof.  2**-200 is lost at both 72 and
    # 144 bits; the two agree on 0 and settle stops there (numerics.resolve's interval
    # certification would not; the coverage run does not pay for intervals).
    assert got[3] == 0 and s.precs[3] == 144


def test_settle_within_the_formats_tolerance_is_settled():
    # The same cancellation measured for bfloat16: 2**-200 is far below 2**-32 of the
    # least bfloat16 ulp (2**-133), so 0 is the exact value to within the tolerance.
    fn, exps = _cancelling([])
    s = numerics.settle(fn, len(exps), "bfloat16", start_prec=72)
    assert s.precs == [144, 288, 288, 144]


def test_settle_tolerance_is_in_ulps_of_the_format():
    # A value near 1 that moves by 2**-40 between precisions: 2**-33 ulp of bfloat16
    # (ulp(1) = 2**-7), settled; 2**12 ulps of binary64 (ulp(1) = 2**-52), not settled.
    moves = {72: Fraction(1) + Fraction(1, 2 ** 40), 144: Fraction(1)}

    def fn(prec, items):
        v = moves.get(prec, Fraction(1))
        return [(np.array([mpmath.mpf(v.numerator) / v.denominator], dtype=object),)
                for _ in items]
    with mpmath.workprec(200):
        narrow = numerics.settle(fn, 1, "bfloat16", 72)
        wide = numerics.settle(fn, 1, "binary64", 72)
    assert narrow.precs == [144] and narrow.settled == [True]
    assert wide.precs == [288] and wide.settled == [True]


def test_settle_compares_integers_nan_and_infinities_exactly():
    seq = {72: [np.array([1, 2]), mpmath.mpf("nan"), mpmath.inf],
           144: [np.array([1, 3]), mpmath.mpf("nan"), mpmath.inf]}

    def fn(prec, items):
        v = seq.get(prec, seq[144])
        return [(v[0], np.array([v[1], v[2]], dtype=object))]
    s = numerics.settle(fn, 1, "binary32", 72)
    assert s.precs == [288] and s.settled == [True]


def test_settle_gives_up_at_max_prec_and_says_so():
    def fn(prec, items):
        return [(np.array([mpmath.mpf(prec)], dtype=object),) for _ in items]
    s = numerics.settle(fn, 2, "bfloat16", 72, max_prec=300)
    assert s.precs == [300, 300] and s.settled == [False, False]
    with pytest.raises(ValueError, match="start_prec"):
        numerics.settle(fn, 1, "bfloat16", 1)


def _bf16(hexes):
    return [float(formats.decode(np.array([int(h, 16)], dtype=np.uint64), "bfloat16")[0])
            for h in hexes]


def _layer_norm_grad_x(x, w, eps, dy, j):
    """d(loss)/dx_j of layerNorm over one row, loss = <dy, y>, by the textbook formula
    (Ba, Kiros, Hinton 2016) in mpmath at 3000 bits: with g = dy * w, x_hat = (x - mu) r,
    r = 1 / sqrt(var + eps), dx = r (g - mean(g) - x_hat mean(g x_hat))."""
    with mpmath.workprec(3000):
        x, w, dy = ([mpmath.mpf(v) for v in vs] for vs in (x, w, dy))
        n = len(x)
        mu = mpmath.fsum(x) / n
        r = 1 / mpmath.sqrt(mpmath.fsum((v - mu) ** 2 for v in x) / n + mpmath.mpf(eps))
        xh = [(v - mu) * r for v in x]
        g = [a * b for a, b in zip(dy, w)]
        mg, mgx = mpmath.fsum(g) / n, mpmath.fsum(a * b for a, b in zip(g, xh)) / n
        return +(r * (g[j] - mg - xh[j] * mgx))


def test_coverage_rows_record_the_precision_their_reference_needed():
    # layerNorm's gradient cancels inside the rule at some draws (a result ~1e-73 from
    # terms ~1e0): the exact value the row records is checked against the textbook formula
    # at 3000 bits, and the row says how many bits the reference needed to get there.
    from roundoff_coverage.engine.evaluate import Task, evaluate
    rows, _ = evaluate(Task("layerNorm", "default", (("shape", (2, 3)),), "bfloat16",
                            "toward_zero", "strict", "emulated", ("gradient",), 2, 0))
    row = next(r for r in rows if r["port"] == "x")
    assert row["status"] == "ok" and row["ref_prec"] > 72
    worst = row["worst"]
    ins, k = worst["inputs"], worst["element"]
    i, j = divmod(k, 3)
    x = _bf16(ins["x"][i])
    want = _layer_norm_grad_x(x, _bf16(ins["weight"]), _bf16([ins["eps"]])[0],
                              _bf16(worst["cotangents"]["y"][i]), j)
    got = mpmath.mpf(worst["exact"])
    assert abs(got / want - 1) < mpmath.mpf(2) ** -50, (got, want)


@pytest.mark.parametrize("fmt", ["bfloat16", "binary32", "binary64"])
def test_compact_copies_agree_exactly_where_the_exact_values_do(fmt):
    # Pairs of values (144 bits) apart by tol * ulp * (1 +- 2**-20) and by 0: settle's test
    # on the compact copies (two binary64 pieces) decides as exact rationals decide.
    from roundoff_coverage.numerics.resolve import SETTLE_ULPS, agree, compact
    f = formats.get(fmt)
    bk = numerics.reference(144)
    rng = np.random.default_rng(5)
    third = bk.divide(bk.asarray(rng.uniform(1, 2, 200) * 2.0 ** rng.integers(-60, 60, 200)),
                      bk.asarray(np.full(200, 3.0)))
    for scale, want in ((1 - 2.0 ** -20, True), (1 + 2.0 ** -20, False), (0.0, True)):
        for k in range(0, 200, 20):
            # settle's tolerance at v: SETTLE_ULPS * |v| * 2**(1 - p) (numerics.resolve._close)
            x = _fraction(third[k])
            step = Fraction(SETTLE_ULPS) * abs(x) * Fraction(2) ** (1 - f.precision) * \
                Fraction(scale)
            other = third.copy()
            other[k] = _shifted(bk, third[k], step)
            assert agree(compact(third), compact(other), f) is want, (scale, k)
            assert agree(third, other, f) is want, (scale, k)
    inf = third.copy()
    inf[3] = bk.asarray(np.array([np.inf]))[0]
    assert not agree(compact(third), compact(inf), f)
    assert agree(compact(inf), inf, f)


def _shifted(bk, v, step):
    """v + step exactly (an mpf of enough bits)."""
    x = _fraction(v) + step
    with mpmath.workprec(2000):
        return bk.ctx.make_mpf(mpmath.libmp.from_rational(x.numerator, x.denominator, 2000,
                                                            mpmath.libmp.round_nearest))


def test_a_compact_copy_against_values_without_binary64_pieces():
    # 2**-1000 / 3 at 144 bits has bits below 2**-1074: no Compact; its binary64 rounding
    # has one.  Compared exactly: within bfloat16's tolerance (2**-39 of the value), not
    # within binary64's (2**-84).
    from roundoff_coverage.numerics.resolve import Compact, agree, compact
    bk = numerics.reference(144)
    tiny = bk.divide(bk.asarray(np.array([2.0 ** -1000, 1.0])), bk.asarray(np.full(2, 3.0)))
    assert not isinstance(compact(tiny), Compact)
    near = compact(bk.asarray(bk.to_float64(tiny)))
    assert isinstance(near, Compact)
    assert agree(near, tiny, "bfloat16") and agree(tiny, near, "bfloat16")
    assert not agree(near, tiny, "binary64")


def test_a_floor_settles_a_cancelled_zero_but_not_a_value_at_scale():
    # Item 0: [3, r] where r = 2**-prec / 3 is the residue of an exact 0 (it shrinks with
    # every doubling); item 1: [3, 1 + 2**-(prec / 8)], an entry at the array's scale that
    # moves by 2**-9, 2**-18 (far beyond 2**-32 ulp) at every doubling.  Without a floor
    # item 0 never agrees in r's own ulps (the floor is 2**qmin); with floor 2**-8
    # (bfloat16's p) r is compared in ulps at 3 * 2**-8: 2**-72 / 3 apart at 72 and 144
    # bits, within 2**-32 * 3 * 2**-15.  Item 1 never settles either way.
    from roundoff_coverage.numerics.resolve import compact
    fmt = formats.get("bfloat16")

    def fn(prec, items):
        bk = numerics.reference(prec)
        out = []
        for k in items:
            third = bk.divide(bk.asarray(np.array([1.0])), bk.asarray(np.array([3.0])))[0]
            moving = mpmath.ldexp(third, -prec) if k == 0 else \
                1 + mpmath.ldexp(1, -(prec // 8))
            a = np.array([mpmath.mpf(3), moving], dtype=object)
            out.append((compact(a),))
        return out
    plain = numerics.settle(fn, 2, fmt, 72, 288)
    floored = numerics.settle(fn, 2, fmt, 72, 288, floor=2.0 ** -fmt.precision)
    assert plain.precs == [288, 288] and plain.settled == [False, False]
    assert floored.precs == [144, 288] and floored.settled == [True, False]
    # the floor is the share the model run's reference uses: the tensor measures' threshold
    from roundoff_coverage.engine import reference
    assert reference.floor(fmt) == 2.0 ** -8


def test_a_compact_copy_is_the_nearest_binary64_and_the_rest_rounded_to_nearest():
    # Against exact rationals (Python's float(Fraction) rounds to nearest, ties to even):
    # hi = RN(x), lo = RN(x - hi), on ties and their neighbours at 2**-60 .. 2**-100 of the
    # value, wide exponents, the edges of binary64's range; a value whose hi or lo would
    # need bits below 2**-1074, or at 2**1023 and beyond, has no Compact form.
    from roundoff_coverage.numerics.resolve import Compact, compact
    rng = np.random.default_rng(7)
    ctx = mpmath.MPContext()
    ctx.prec = 300
    values = []
    for _ in range(400):
        top = int(rng.integers(2 ** 52, 2 ** 53))
        e = int(rng.integers(-1000, 960))
        for step in (Fraction(1, 2), Fraction(1, 2) + Fraction(1, 2 ** 40),
                     Fraction(1, 2) - Fraction(1, 2 ** 47), Fraction(1, 3)):
            x = (Fraction(top) + step) * Fraction(2) ** e * (-1 if rng.random() < 0.5 else 1)
            values.append(x)
    values += [Fraction(2) ** -1074 * 3, Fraction(2) ** 1022 * (2 - Fraction(1, 2 ** 52))]
    for x in values:
        v = ctx.make_mpf(mpmath.libmp.from_rational(x.numerator, x.denominator, 300, "n"))
        c = compact(np.array([v], dtype=object))
        assert isinstance(c, Compact), x
        want_hi = float(_fraction(v))
        assert c.hi[0] == want_hi and c.lo[0] == float(_fraction(v) - Fraction(want_hi))
    for bad in (Fraction(2) ** 1023, Fraction(2) ** -1074 * Fraction(3, 2),
                (Fraction(2) ** 52 + Fraction(1, 3)) * Fraction(2) ** -1060):
        v = ctx.make_mpf(mpmath.libmp.from_rational(bad.numerator, bad.denominator, 300, "n"))
        assert not isinstance(compact(np.array([v], dtype=object)), Compact)



def test_settle_follows_a_ladder_of_precisions():
    # ladder [106, 144]: after 72 bits, 106 then 144 instead of doubling.  2**-10 settles at
    # 106 (exact at 72); 2**-100 is found at 106 (lost at 72) and confirmed at 144; 2**-140
    # is lost at both 72 and 106, which agree on 0 (evidence, not proof, as above).
    calls = []
    fn, exps = _cancelling(calls)
    s = numerics.settle(fn, 3, "binary64", start_prec=72, ladder=[106, 144])
    assert [c[0] for c in calls] == [72, 106, 144] and calls[2] == (144, [1])
    assert s.precs == [106, 144, 106] and all(s.settled)
    assert [_fraction(s.values[k][0][0]) for k in range(3)] == [Fraction(1, 2 ** 10),
                                                                Fraction(1, 2 ** 100), 0]
    for bad in ([72, 144], [144, 106], [106, 106]):
        with pytest.raises(ValueError, match="the ladder must increase"):
            numerics.settle(fn, 3, "binary64", start_prec=72, ladder=bad)
