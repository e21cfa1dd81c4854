"""The spectral family: rfft of known vectors (exact rationals and an mpmath DFT), irfft as its
inverse at high precision, the twiddle construction's accuracy and exact quarter turns, the
ignored imaginary ends of irfft, and the selective scan's recurrence by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from roundoff_coverage import numerics
from roundoff_coverage import routes
from roundoff_coverage.routes.families.spectral import PI, twiddles
from conftest import CTX, mp, mp_context


def test_pi_literal_is_pi_to_its_digits():
    ctx = mp_context(2300)
    assert abs(ctx.mpf(PI.numerator) / PI.denominator - ctx.pi) < ctx.mpf(10) ** -649


def test_rfft_of_a_known_vector_exactly():
    # x = [1, 2, 3, 4]: X0 = 10, X1 = -2 + 2i, X2 = -2 (by hand).
    rule = routes.op("rfft", shape=(4,)).rule(numerics.exact())
    re, im = rule.forward(([1.0, 2.0, 3.0, 4.0],))
    assert list(re) == [10, -2, -2] and list(im) == [0, 2, 0]


def test_rfft_of_an_impulse_matches_the_mpmath_dft():
    # x = e_1 of length 5: X_k = exp(-2 pi i k / 5).
    rule = routes.op("rfft", shape=(5,)).rule(numerics.reference(256))
    re, im = rule.forward(([0.0, 1.0, 0.0, 0.0, 0.0],))
    for k in range(3):
        assert abs(mp(re[k]) - CTX.cospi(CTX.mpf(2 * k) / 5)) < CTX.ldexp(1, -250)
        assert abs(mp(im[k]) + CTX.sinpi(CTX.mpf(2 * k) / 5)) < CTX.ldexp(1, -250)


@pytest.mark.parametrize("n", [1, 2, 5, 6, 7])
def test_irfft_inverts_rfft_at_high_precision(n):
    xp = numerics.reference(256)
    x = np.random.default_rng(n).uniform(-4, 4, n)
    re, im = routes.op("rfft", shape=(n,)).rule(xp).forward((x,))
    (y,) = routes.op("irfft", shape=(n // 2 + 1,), length=n).rule(xp).forward((re, im))
    for a, b in zip(y, x):
        assert abs(mp(a) - CTX.mpf(b)) <= CTX.ldexp(1, -245) * 8


def test_twiddles_are_exact_at_quarter_turns():
    xp = numerics.exact()
    cos, sin = twiddles(xp, np.arange(8), 4)
    assert list(cos) == [1, 0, -1, 0] * 2 and list(sin) == [0, 1, 0, -1] * 2
    cos, sin = twiddles(numerics.reference(128), np.array([0, 2, 4, 6]), 8)
    assert [mp(c) for c in cos] == [1, 0, -1, 0] and [mp(s) for s in sin] == [0, 1, 0, -1]


@pytest.mark.parametrize("prec", [53, 256, 1000])
def test_twiddles_are_accurate_to_the_working_precision(prec):
    ctx = mp_context(prec + 100)
    cos, sin = twiddles(numerics.reference(prec), np.arange(14), 14)
    for m in range(14):
        c, s = ctx.cospi(ctx.mpf(2 * m) / 14), ctx.sinpi(ctx.mpf(2 * m) / 14)
        # A few units in the last place of the working precision, in absolute terms (|c| <= 1).
        assert abs(ctx.mpf(cos[m]) - c) <= ctx.ldexp(4, -prec)
        assert abs(ctx.mpf(sin[m]) - s) <= ctx.ldexp(4, -prec)


def test_irfft_ignores_the_imaginary_ends():
    for xp in (numerics.reference(64), numerics.native("float64")):
        rule = routes.op("irfft", shape=(3,), length=4).rule(xp)
        xs = ([1.0, 0.0, 0.0], [math.nan, 0.0, math.inf])
        (y,) = rule.forward(xs)
        assert xp.to_float64(y).tolist() == [0.25] * 4
        g_re, g_im = rule.backward(xs, ([1.0, 0.0, 0.0, 0.0],))
        assert xp.to_float64(g_re).tolist() == [0.25, 0.5, 0.25]
        assert xp.to_float64(g_im).tolist() == [0.0, 0.0, 0.0]


def test_irfft_known_answer_exactly():
    # n = 4, X = [4, 0 + 2i, 0]: y_t = (4 + 2 * Re(2i e^{i pi t / 2})) / 4 = 1 - sin(pi t / 2).
    (y,) = routes.op("irfft", shape=(3,), length=4).rule(numerics.exact()).forward(
        ([4.0, 0.0, 0.0], [0.0, 2.0, 0.0]))
    assert list(y) == [1, 0, 1, 2]


def test_selective_scan_matches_its_recurrence():
    xp = numerics.reference(256)
    o = routes.op("selectiveScan", length=2, channels=1, state=1)
    x, d, A, B, C = [[0.5], [-1.5]], [[0.25], [0.75]], [[-1.25]], [[2.0], [0.5]], [[1.5], [-3.0]]
    (y,) = o.rule(xp).forward(tuple(np.array(v) for v in (x, d, A, B, C)))
    h0 = CTX.mpf(0.25) * 2 * CTX.mpf(0.5)
    h1 = CTX.exp(CTX.mpf(0.75) * CTX.mpf(-1.25)) * h0 + CTX.mpf(0.75) * CTX.mpf(0.5) * -1.5
    want = [CTX.mpf(1.5) * h0, -3 * h1]
    for g, w in zip(np.ravel(y), want):
        assert abs(mp(g) - w) <= CTX.ldexp(1, -250)
